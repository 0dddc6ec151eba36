"""hvd.elastic (horovod.torch.elastic): training that survives lost and added hosts under
`hvdrun --min-np/--max-np/--host-discovery-script` (native launch; docs/pytorch.md, "Elastic").

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for batch in ...:
                ...
                state.commit()

    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    train(state)
"""
import functools
import sys

from hvd import _native
from hvd.common import elastic as _common
from hvd.common import errors
from hvd.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.elastic.state import TorchState

_REMOVED = _native.STATUSES['HVD_ERR_REMOVED']

__all__ = ['run', 'TorchState', 'ElasticSampler', 'HorovodInternalError',
           'HostsUpdatedInterrupt']


def run(func):
    """Decorates `func(state, ...)`, the training loop: the state is synchronised from the rank
    that has it, then `func` runs; when a peer is lost (a collective raises HorovodInternalError)
    the state goes back to its last commit, libhvd moves to hvdrun's next world, and `func` runs
    again from there; when hosts are added or removed (HostsUpdatedInterrupt from a commit) the
    same without going back. Returns what `func` returns. Only in an elastic hvdrun job. A worker
    that hvdrun's new world leaves out (its host is gone from the discovery list) says so and
    exits with code 0 (SystemExit)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not _native.is_initialized():
            raise ValueError('hvd.elastic.run: call hvd.init() first')
        if not _common.elastic_job():
            raise ValueError(
                'hvd.elastic.run: this process is not part of an elastic hvdrun job, so no lost '
                'or added host could be recovered from: start it with hvdrun\'s elastic flags '
                '(hvdrun -np N --min-np M --host-discovery-script SCRIPT ..., docs/elastic.md), '
                'or call the training function directly')
        result = []

        def once():
            result.clear()
            result.append(func(state, *args, **kwargs))

        _common._running += 1
        try:
            _native.elastic_run(state, once)
        except errors.HvdError as e:
            if e.status == _REMOVED:
                # Not an error: hvdrun's new world has no place for this worker (its host left
                # the discovery list); it leaves, the job goes on without it.
                print(f'hvd.elastic: {e}', file=sys.stderr, flush=True)
                raise SystemExit(0) from None
            raise errors.submit_error(e) from None  # a reset that could not be done
        finally:
            _common._running -= 1
        return result[0]

    return wrapper
