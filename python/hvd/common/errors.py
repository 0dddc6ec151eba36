"""libhvd's errors (hvd._native.HvdError, with an hvd_status) as Horovod's exception types."""
from hvd import _native
from hvd.common.exceptions import HorovodInternalError

HvdError = _native.HvdError
_S = _native.STATUSES
_NOT_INITIALIZED = _S['HVD_ERR_NOT_INITIALIZED']
# What a caller got wrong on this rank, found when the op is submitted: ValueError, as Horovod's
# torch binding raises for a bad argument or a duplicate in-flight name.
_CALLER = {_NOT_INITIALIZED, _S['HVD_ERR_INVALID_ARGUMENT'], _S['HVD_ERR_UNSUPPORTED'],
           _S['HVD_ERR_CONFIG']}

NOT_INITIALIZED = 'Horovod has not been initialized; use hvd.init().'


def _internal(error):
    """HorovodInternalError with libhvd's status kept (`hvd_status`): hvd.elastic.run resets
    after HVD_ERR_PEER_LOST only."""
    e = HorovodInternalError(str(error))
    e.hvd_status = error.status
    return e


def submit_error(error):
    """The exception to raise for a libhvd error at submission (or a query)."""
    if error.status == _NOT_INITIALIZED:
        return ValueError(f'{NOT_INITIALIZED} ({error})')
    if error.status in _CALLER:
        return ValueError(str(error))
    return _internal(error)


def wait_error(error):
    """The exception to raise for a failed op (at synchronize): always HorovodInternalError, as
    Horovod's synchronize raises."""
    return _internal(error)
