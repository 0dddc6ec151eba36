"""Horovod's elastic state (horovod.common.elastic) over libhvd's elastic world.

A State holds what a training step needs; `commit()` keeps a copy and asks every rank whether
hvdrun announced a new world (HostsUpdatedInterrupt on all of them at once); `restore()` goes
back to the copy; `sync()` copies the state of the rank that has it (libhvd's sync root: a rank
of the previous world, never a newcomer) to every rank. hvd.elastic.run (hvd.torch.elastic)
drives them through libhvd's loop (hvd::elastic::run): after a lost peer, restore, move to the
next world, on_reset (the state's reset() and the registered callbacks), sync, call again.
"""
import pickle

from hvd import _native

_running = 0  # how many hvd.elastic.run loops are active in this process (nesting counts)


def elastic_job():
    """True in a rank of an elastic hvdrun job (after init())."""
    return _native.elastic_world()['enabled']


def sync_root():
    """The rank whose state sync() copies: libhvd's sync root in an elastic job, else 0."""
    world = _native.elastic_world()
    return world['sync_root'] if world['enabled'] else 0


class State:
    """Horovod's State: subclasses implement save, restore, sync and (optionally) reset."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after each reset to a new world, before the state is
        synchronised, e.g. to scale the learning rate with the new size."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            try:
                callback()
            except Exception as e:
                raise RuntimeError(f'hvd.elastic: the reset callback {callback!r} raised '
                                   f'{type(e).__name__}: {e}; the training cannot go on in the '
                                   f'new world') from e

    def commit(self):
        """save(), then check_host_updates(). In an elastic job, only inside hvd.elastic.run."""
        if _running == 0 and elastic_job():
            raise ValueError('State.commit() outside hvd.elastic.run in an elastic job: a host '
                             'update found here would have no loop to reset; commit inside the '
                             'function that hvd.elastic.run decorates')
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """A collective: raises HostsUpdatedInterrupt on every rank when any of them has heard of
        a newer world from hvdrun. Outside an elastic job the world never changes."""
        _native.elastic_check_host_updates()

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset to a new world, before sync(); nothing by default."""


def _check_picklable(name, value):
    try:
        pickle.dumps(value)
    except Exception as e:  # pickle raises several types (TypeError, PicklingError, ...)
        raise TypeError(f'hvd.elastic: the state attribute {name!r} ({type(value).__name__}) '
                        f'cannot be pickled ({e}), so it cannot be sent to the other ranks: keep '
                        f'only picklable values in the state') from e


class ObjectState(State):
    """Horovod's ObjectState: keyword arguments become attributes; save() keeps each value
    (the object itself, as Horovod does: for numbers, strings and tuples; replace a list rather
    than change it in place), sync() broadcasts them from the sync root."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            for name, value in self._saved_state.items():
                _check_picklable(name, value)
            self._saved_state = self._bcast_object(self._saved_state, root_rank=sync_root())
            self._set_attrs()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)
