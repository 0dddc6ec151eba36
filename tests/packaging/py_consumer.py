"""A horovod.torch script for the package check (deb_check.sh): two ranks under the installed
hvdrun, the installed python3-hvd. Each rank allreduces (rank + 1) and checks the sum."""
import torch

import horovod.torch as hvd

hvd.init()
total = hvd.allreduce(torch.full((4,), float(hvd.rank() + 1)), op=hvd.Sum, name='consumer.sum')
expected = hvd.size() * (hvd.size() + 1) / 2
assert total.tolist() == [expected] * 4, f'rank {hvd.rank()}: {total.tolist()} != {expected}'
print(f'py_consumer: rank {hvd.rank()} of {hvd.size()} sum OK {hvd.__file__}', flush=True)
hvd.shutdown()
