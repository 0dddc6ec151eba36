"""Lifecycle, topology and build facts: Horovod's horovod.common.basics over libhvd."""
import functools
import json
import os

from hvd import _native
from hvd.common import errors


class ProcessSet:
    """Horovod's process set. Only the global one exists until libhvd has process sets (a
    later step of issue 49): passing any other raises NotImplementedError."""

    def __init__(self, ranks_or_comm=None):
        self.ranks = ranks_or_comm
        self.process_set_id = 0 if ranks_or_comm is None else None

    def size(self):
        return size()

    def rank(self):
        return rank()

    def included(self):
        return True

    def __repr__(self):
        return 'ProcessSet(process_set_id=0, ranks=all)' if self.ranks is None else \
            f'ProcessSet(ranks={self.ranks})'


global_process_set = ProcessSet()


def check_process_set(process_set):
    if process_set is not global_process_set and process_set is not None:
        raise NotImplementedError(
            'process sets are not supported yet by hvdrun\'s libhvd (only the global process set '
            'exists): call the op without process_set=')


def add_process_set(process_set):
    raise NotImplementedError('hvd.add_process_set: process sets are not supported yet by '
                              'hvdrun\'s libhvd; only the global process set exists')


def remove_process_set(process_set):
    raise NotImplementedError('hvd.remove_process_set: process sets are not supported yet by '
                              'hvdrun\'s libhvd; only the global process set exists')


def init(comm=None, process_sets=None):
    """Starts libhvd from hvdrun's or mpirun's environment (size 1 when started alone). Safe to
    call again; `comm` (an MPI communicator) and process sets are not supported."""
    if comm is not None:
        raise NotImplementedError('hvd.init(comm=...): libhvd uses MPI_COMM_WORLD under mpirun; '
                                  'sub-communicators are not supported')
    if process_sets:
        raise NotImplementedError('hvd.init(process_sets=...): process sets are not supported '
                                  'yet by hvdrun\'s libhvd')
    try:
        _native.init()
    except errors.HvdError as e:
        raise errors.submit_error(e) from None


def shutdown():
    """Stops libhvd on this rank; ops still in flight fail. init() may be called again."""
    _native.shutdown()


def is_initialized():
    return _native.is_initialized()


def start_timeline(file_path, mark_cycles=False):
    """Rank 0 records a timeline (a Chrome trace with Horovod's names) into `file_path` until
    stop_timeline(); `mark_cycles` marks each negotiation cycle (CYCLE_START). Not collective: the
    other ranks' calls return at once. A start while recording into another file closes that one
    first. Raises ValueError before init() or when rank 0 cannot write the file."""
    try:
        _native.start_timeline(os.fspath(file_path), bool(mark_cycles))
    except errors.HvdError as e:
        raise errors.submit_error(e) from None


def stop_timeline():
    """Stops the timeline; on rank 0 the file is complete (valid JSON) when this returns. Does
    nothing when no timeline records. Raises ValueError before init()."""
    try:
        _native.stop_timeline()
    except errors.HvdError as e:
        raise errors.submit_error(e) from None


def _query(fn):
    @functools.wraps(fn)
    def wrapper():
        try:
            return fn()
        except errors.HvdError as e:
            raise errors.submit_error(e) from None
    return wrapper


size = _query(_native.size)
rank = _query(_native.rank)
local_size = _query(_native.local_size)
local_rank = _query(_native.local_rank)
cross_size = _query(_native.cross_size)
cross_rank = _query(_native.cross_rank)
backend_name = _query(_native.backend_name)


def is_homogeneous():
    """True when every host runs the same number of ranks (judged from this rank's local and
    cross sizes)."""
    return local_size() * cross_size() == size()


@functools.lru_cache(maxsize=None)
def build_report():
    """What this libhvd was built with and what loads here (hvdrun --check-build's libhvd part)."""
    return json.loads(_native.build_report())


def _engine(name):
    return build_report().get('engines', {}).get(name, {})


def mpi_built(verbose=False):
    return bool(_engine('mpi').get('built'))


def gloo_built(verbose=False):
    return bool(_engine('gloo').get('built'))


def nccl_built(verbose=False):
    """NCCL's version as Horovod gives it (2.18.3: 21803): that of the NCCL libhvd's plugin
    loads in this process; 0 without the plugin, or when it cannot load here (no libnccl)."""
    nccl = _engine('nccl')
    if not nccl.get('built') or not nccl.get('loaded'):
        return 0
    parts = str(nccl.get('version', '')).split('.')
    try:
        major, minor, patch = (int(p) for p in (parts + ['0', '0'])[:3])
    except ValueError:
        return 0
    return major * 10000 + minor * 100 + patch


def ddl_built(verbose=False):
    return False


def ccl_built(verbose=False):
    return False


def cuda_built(verbose=False):
    return bool(_engine('nccl').get('built'))


def rocm_built(verbose=False):
    return False


def mpi_enabled():
    """True when this run's collectives go through MPI (under mpirun or hvdrun --mpi)."""
    return _native.is_initialized() and _native.backend_name() == 'mpi'


def gloo_enabled():
    """True when this run's collectives go through Gloo (hvdrun's native mode, or alone)."""
    return _native.is_initialized() and _native.backend_name() == 'gloo'


def mpi_threads_supported():
    """libhvd asks MPI for MPI_THREAD_MULTIPLE; raises ValueError when MPI is not in use."""
    if not _native.is_initialized():
        raise ValueError(errors.NOT_INITIALIZED)
    if not mpi_enabled():
        raise ValueError('Horovod MPI is not enabled in this run (hvdrun --mpi or mpirun '
                         'enables it)')
    return True
