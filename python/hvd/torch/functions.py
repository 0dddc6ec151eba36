"""Broadcasts of a model's and an optimizer's state, and of Python objects
(horovod.torch.functions is this module)."""
import io
import pickle

import torch

try:
    import cloudpickle as _pickler  # what Horovod uses: lambdas and local classes pickle too
except ImportError:  # pragma: no cover: python3-cloudpickle is optional
    _pickler = pickle

from hvd.common.basics import check_process_set, global_process_set
from hvd.torch import mpi_ops


def _pairs(params, what):
    if isinstance(params, dict):
        return sorted(params.items())
    if isinstance(params, (list, tuple)) or hasattr(params, '__iter__'):
        return [p if isinstance(p, tuple) else (None, p) for p in params]
    raise ValueError(f'{what}: invalid params of type {type(params).__name__}: pass a '
                     f'state_dict(), named_parameters() or a list of tensors')


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites every tensor of `params` (a state_dict(), a list of (name, tensor) pairs such
    as named_parameters(), or a list of tensors) with root_rank's, in place. Every rank passes
    the same names in any order; each travels as the op 'broadcast.<name>'."""
    check_process_set(process_set)
    pending = []
    for name, p in _pairs(params, 'broadcast_parameters'):
        if p is None:
            continue
        if p.is_contiguous():
            pending.append((mpi_ops.broadcast_async_(p, root_rank, name, process_set), None))
        else:  # e.g. a transposed view in a state_dict: broadcast a copy, then write it back
            pending.append((mpi_ops.broadcast_async(p, root_rank, name, process_set), p))
    for handle, target in pending:
        out = mpi_ops.synchronize(handle)
        if target is not None:
            with torch.no_grad():
                target.copy_(out)


def _ensure_state(optimizer):
    """A new optimizer has no state until its first step: take one step with zero gradients (the
    base class's step, not DistributedOptimizer's allreduce), then put the parameters back, so
    every rank has the state tensors that root_rank's values go into. The zero gradients stay,
    as Horovod leaves them."""
    params = [p for group in optimizer.param_groups for p in group['params'] if p.requires_grad]
    saved = [(p, p.detach().clone()) for p in params]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    step = getattr(optimizer, '_hvd_base_step', None) or optimizer.step
    step()
    with torch.no_grad():
        for p, data in saved:
            p.copy_(data)


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state (tensors, scalar state, param_groups' options such as
    the learning rate) equal to root_rank's. Works for torch optimizers and DistributedOptimizer
    alike; LBFGS keeps state this cannot reach."""
    check_process_set(process_set)
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError('broadcast_optimizer_state: torch.optim.LBFGS keeps its state outside '
                         'state_dict() tensors: it cannot be broadcast')
    if not optimizer.state_dict()['state']:
        _ensure_state(optimizer)
    state = optimizer.state_dict()
    # Options and scalar state go as one object; tensors in place, each under its own name.
    options = [{k: v for k, v in group.items() if k != 'params'} for group in state['param_groups']]
    scalars = {}
    tensors = []
    for group in state['param_groups']:
        for pid in group['params']:
            for key, value in sorted(state['state'].get(pid, {}).items(), key=lambda kv: str(kv[0])):
                if torch.is_tensor(value):
                    tensors.append((f'optimizer_state.{pid}.{key}', value))
                else:
                    scalars[(pid, key)] = value
    options, scalars = broadcast_object((options, scalars), root_rank,
                                        name='optimizer_state.options', process_set=process_set)
    for group, values in zip(optimizer.param_groups, options):
        group.update(values)
    for (pid, key), value in scalars.items():
        state['state'][pid][key] = value  # the optimizer's own per-parameter dict
    broadcast_parameters(tensors, root_rank, process_set)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """root_rank's `obj` on every rank (pickled with cloudpickle where it is installed)."""
    check_process_set(process_set)
    name = name or type(obj).__name__
    if mpi_ops.rank() == root_rank:
        data = _pickler.dumps(obj)
        length = torch.tensor([len(data)], dtype=torch.int64)
        mpi_ops.broadcast_(length, root_rank, name=f'{name}.sz', process_set=process_set)
        payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        mpi_ops.broadcast_(payload, root_rank, name=f'{name}.t', process_set=process_set)
        return obj
    length = torch.zeros(1, dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, name=f'{name}.sz', process_set=process_set)
    payload = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, name=f'{name}.t', process_set=process_set)
    return _pickler.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Every rank's `obj`, as a list in rank order."""
    check_process_set(process_set)
    name = name or type(obj).__name__
    data = torch.frombuffer(bytearray(_pickler.dumps(obj)), dtype=torch.uint8)
    lengths = mpi_ops.allgather(torch.tensor([data.numel()], dtype=torch.int64),
                                name=f'{name}.sz', process_set=process_set)
    gathered = mpi_ops.allgather(data, name=f'{name}.t', process_set=process_set).numpy().tobytes()
    out, offset = [], 0
    for n in lengths.tolist():
        out.append(_pickler.loads(gathered[offset:offset + n]))
        offset += n
    return out
