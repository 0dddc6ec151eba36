"""Lifecycle, topology and build facts: Horovod's horovod.common.basics over libhvd."""
import functools
import json
import os

from hvd import _native
from hvd.common import errors, stacks

stacks.install()  # before init(): a rank stuck before it is read too


class ProcessSet:
    """Horovod's process set: a sorted list of ranks that run collectives among themselves
    (libhvd's hvd::ProcessSet). Pass it to hvd.init(process_sets=[...]) or hvd.add_process_set();
    once registered, process_set_id is its id (the global set's is 0)."""

    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError('ProcessSet should be initialized with a list of process ranks; '
                             'hvdrun\'s libhvd does not take an MPI communicator') from None
        if any(not isinstance(r, int) for r in ranks):
            raise ValueError('ProcessSet should be initialized with a list of process ranks or an '
                             'mpi4py Comm object')
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The set's size, or None when it is not registered."""
        if self.process_set_id is None:
            return None
        return _set_query(_native.process_set_size, self.process_set_id)

    def rank(self):
        """This process's rank inside the set (None when not registered; ValueError when this
        process is not in it). Ops still take global ranks (a broadcast's root)."""
        if self.process_set_id is None:
            return None
        return _set_query(_native.process_set_rank, self.process_set_id)

    def included(self):
        """Whether this process is in the set (None when its ranks are not known)."""
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __str__(self):
        return f'ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, ' \
               f'mpi_comm={self.mpi_comm})'

    __repr__ = __str__


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _set_query(fn, *args):
    try:
        return fn(*args)
    except errors.HvdError as e:
        raise errors.submit_error(e) from None


def check_process_set(process_set):
    """The id libhvd knows `process_set` by; ValueError when it is not registered (never added,
    or removed)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f'process_set must be an hvd.ProcessSet, not {type(process_set).__name__}')
    if process_set.process_set_id is None:
        raise ValueError(f'{process_set} is not registered: pass it to hvd.init(process_sets=...) '
                         f'or hvd.add_process_set() first (or it was removed)')
    return process_set.process_set_id


def _init_process_sets(process_sets):
    """After init: the ids of the sets passed to init (a list met twice gets the id once: the
    later objects are invalidated, as Horovod does), and the global set's ranks."""
    ids = _native.process_set_ids()
    by_ranks = {tuple(_native.process_set_ranks(i)): i for i in ids}
    seen = {0}
    for ps in process_sets:
        ps.process_set_id = by_ranks.get(tuple(ps.ranks))
        if ps.process_set_id in seen:
            ps._invalidate()
        else:
            seen.add(ps.process_set_id)
    global_process_set.ranks = list(range(size()))


def add_process_set(process_set):
    """Adds a process set after init and returns it, registered (collective over every rank, in
    the same order with the same ranks). Needs hvd.init(process_sets="dynamic") or
    HOROVOD_DYNAMIC_PROCESS_SETS=1; a set with the same ranks may not exist already."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    try:
        process_set.process_set_id = _native.add_process_set(list(process_set.ranks))
    except errors.HvdError as e:
        raise errors.submit_error(e) from None
    return process_set


def remove_process_set(process_set):
    """Removes a process set (collective over every rank); False when it is not registered or is
    the global set, True once removed (the object is then invalidated)."""
    ps_id = process_set.process_set_id
    if ps_id is None or ps_id == 0:
        return False
    process_set._invalidate()
    try:
        _native.remove_process_set(ps_id)
    except errors.HvdError as e:
        if 'does not exist' in str(e):
            return False
        raise errors.submit_error(e) from None
    return True


def init(comm=None, process_sets=None):
    """Starts libhvd from hvdrun's or mpirun's environment (size 1 when started alone). Safe to
    call again. `process_sets`: a list of ProcessSet (or rank lists) made at init, or "dynamic"
    to allow add_process_set/remove_process_set later. `comm` (an MPI communicator) is not
    supported."""
    if comm is not None:
        raise NotImplementedError('hvd.init(comm=...): libhvd uses MPI_COMM_WORLD under mpirun; '
                                  'sub-communicators are not supported: use process_sets=')
    dynamic = isinstance(process_sets, str)
    if dynamic and process_sets != 'dynamic':
        raise ValueError(f'hvd.init(process_sets={process_sets!r}): pass a list of ProcessSet or '
                         f'"dynamic"')
    static = [] if dynamic or process_sets is None else \
        [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]
    try:
        _native.init([list(ps.ranks) for ps in static], dynamic)
        _init_process_sets(static)
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
