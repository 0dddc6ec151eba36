"""Horovod's PyTorch API (horovod.torch 0.28) on hvdrun's libhvd.

    import hvd.torch as hvd          # or: import horovod.torch as hvd (the same module)
    hvd.init()
    hvd.allreduce(torch.ones(4), name='x')

See docs/pytorch.md, "Horovod scripts", for what is supported and what is not yet.
"""
import sys as _sys

try:
    import torch as _torch  # noqa: F401  (the ops below need it; say so plainly if it is missing)
except ImportError as _e:
    raise ImportError(f'hvd.torch needs PyTorch in this Python ({_sys.executable}): install '
                      f'Debian\'s python3-torch, or build hvdrun\'s binding for the Python that '
                      f'has torch (cmake -DHVD_PYTHON=...)') from _e

from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from hvd.torch import compression, mpi_ops  # noqa: F401
from hvd.torch.compression import Compression  # noqa: F401
from hvd.torch.mpi_ops import *  # noqa: F401,F403
from hvd.torch.mpi_ops import (handle_average_backwards_compatibility,  # noqa: F401
                               HorovodAllreduce, HorovodAllgather, HorovodBroadcast,
                               HorovodAlltoall, HorovodReducescatter)
from hvd.torch import functions, optimizer  # noqa: F401,E402
from hvd.torch.functions import (allgather_object, broadcast_object,  # noqa: F401,E402
                                 broadcast_optimizer_state, broadcast_parameters)
from hvd.torch.optimizer import DistributedOptimizer  # noqa: F401,E402
from hvd.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401,E402
from hvd.torch import elastic  # noqa: F401,E402
