"""hvd.elastic.TorchState (Horovod's horovod.torch.elastic.TorchState)."""
import copy

import torch

from hvd.common.basics import rank
from hvd.common.elastic import ObjectState, sync_root
from hvd.torch.elastic.sampler import ElasticSampler
from hvd.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class TorchState(ObjectState):
    """The state of a PyTorch training: models, optimizers and ElasticSamplers (each kept by its
    state_dict()) and any picklable attributes, all given as keyword arguments and reachable as
    attributes (`state.model`, `state.epoch`). Assigning a new model, optimizer or sampler to an
    attribute keeps the new one (and saves it)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(value)
            if handler is not None:
                handlers[name] = handler
            else:
                plain[name] = value
        object.__setattr__(self, '_handlers', handlers)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **plain)

    def save(self):
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self):
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self):
        root = sync_root()
        for handler in self._handlers.values():
            handler.sync(root)
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get('_handlers', {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)


class _Handler:
    """Keeps one object's state_dict() at save() and puts it back at restore()."""

    def __init__(self, value):
        self.value = value
        self.saved = copy.deepcopy(value.state_dict())

    def save(self):
        self.saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self.saved)

    def set_value(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def sync(self, root):
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class _OptimizerHandler(_Handler):
    def sync(self, root):
        broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerHandler(_Handler):
    def sync(self, root):
        # The root's progress in the epoch, dealt out again over this world (load_state_dict
        # re-shards).
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), root_rank=root,
                                                    name='elastic.sampler'))


def _handler_for(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return None
