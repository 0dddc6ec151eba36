"""Horovod's torch collectives on libhvd (horovod.torch.mpi_ops is this module).

Every op is a named libhvd op submitted by pointer: a tensor's memory goes to libhvd as it is (a
contiguous CPU tensor is never copied), and the tensors stay referenced in the handle map until
synchronize() returns. Unnamed ops are named as Horovod names them ("allreduce.noname.<handle>",
handles counted per process from 1), so every rank must make its unnamed calls in one order.
Outputs whose size libhvd learns during the op (allgather, reducescatter, alltoall) are libhvd's
own buffers, wrapped as tensors without a copy.

Process sets (process_set=) and join() are libhvd's: each set negotiates and runs on connections of
its own. Not yet here: Adasum.
"""
import itertools
import warnings

import torch

from hvd import _native
from hvd.common import errors
from hvd.common.basics import (ProcessSet, add_process_set, backend_name, build_report,
                               ccl_built, check_process_set, cross_rank, cross_size, cuda_built,
                               ddl_built, global_process_set, gloo_built, gloo_enabled, init,
                               is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                               mpi_enabled, mpi_threads_supported, nccl_built, rank,
                               remove_process_set, rocm_built, shutdown, size, start_timeline,
                               stop_timeline)
from hvd.common.exceptions import HorovodInternalError
from hvd.torch.compression import Compression

__all__ = [
    'Average', 'Sum', 'Adasum', 'Min', 'Max', 'Product', 'HorovodInternalError', 'ProcessSet',
    'global_process_set', 'add_process_set', 'remove_process_set', 'init', 'shutdown',
    'is_initialized', 'size', 'local_size', 'cross_size', 'rank', 'local_rank', 'cross_rank',
    'is_homogeneous', 'mpi_built', 'gloo_built', 'nccl_built', 'ddl_built', 'ccl_built',
    'cuda_built', 'rocm_built', 'mpi_enabled', 'gloo_enabled', 'mpi_threads_supported',
    'backend_name', 'build_report', 'allreduce', 'allreduce_', 'allreduce_async',
    'allreduce_async_', 'grouped_allreduce', 'grouped_allreduce_', 'grouped_allreduce_async',
    'grouped_allreduce_async_', 'sparse_allreduce_async', 'allgather', 'allgather_async',
    'grouped_allgather', 'grouped_allgather_async', 'broadcast', 'broadcast_', 'broadcast_async',
    'broadcast_async_', 'alltoall', 'alltoall_async', 'reducescatter', 'reducescatter_async',
    'grouped_reducescatter', 'grouped_reducescatter_async', 'poll', 'synchronize', 'join',
    'barrier', 'start_timeline', 'stop_timeline',
]

# Horovod's reduction ops (the same values).
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

def _set_size(ps_id):
    """The size of the process set with id `ps_id` (check_process_set's result)."""
    return size() if ps_id == 0 else _native.process_set_size(ps_id)


def _set_rank(process_set):
    """This rank's position in `process_set` (the order of an allgather's output)."""
    ps_id = check_process_set(process_set)
    return rank() if ps_id == 0 else _native.process_set_rank(ps_id)


_OPS = {Average: _native.OPS['average'], Sum: _native.OPS['sum'], Min: _native.OPS['min'],
        Max: _native.OPS['max'], Product: _native.OPS['product']}

_DTYPES = {torch.uint8: _native.DTYPES['uint8'], torch.int8: _native.DTYPES['int8'],
           torch.int16: _native.DTYPES['int16'], torch.int32: _native.DTYPES['int32'],
           torch.int64: _native.DTYPES['int64'], torch.float16: _native.DTYPES['float16'],
           torch.bfloat16: _native.DTYPES['bfloat16'], torch.float32: _native.DTYPES['float32'],
           torch.float64: _native.DTYPES['float64']}
_DTYPE_NAMES = 'uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64'

# handle -> (native handles, finish(natives, keep) -> result, keep: the tensors the op uses).
_handle_map = {}
_handles = itertools.count(1)


def _op_name(prefix, name, handle):
    return f'{prefix}.{name}' if name else f'{prefix}.noname.{handle}'


def _reduce_op(op, what):
    code = _OPS.get(op)
    if code is not None:
        return code
    if op == Adasum:
        raise NotImplementedError(f'{what}: op=hvd.Adasum is not supported by hvdrun\'s libhvd; '
                                  f'use hvd.Average or hvd.Sum')
    raise ValueError(f'{what}: unknown op {op!r}: use hvd.Average, hvd.Sum, hvd.Min, hvd.Max or '
                     f'hvd.Product')


def handle_average_backwards_compatibility(op, average):
    """Horovod's rule for the deprecated `average` argument: op wins; both is an error."""
    if op is not None:
        if average is not None:
            raise ValueError('The op parameter supersedes average. Please provide only one of '
                             'them.')
        return op
    if average is not None:
        warnings.warn('Parameter `average` has been replaced with `op` and will be removed in '
                      'v1.0', DeprecationWarning)
        return Average if average else Sum
    return Average


def _bad_tensor(tensor, what):
    if tensor.layout != torch.strided:
        raise ValueError(f'{what}: a {tensor.layout} tensor cannot be reduced as it is: use '
                         f'hvd.sparse_allreduce_async(), or DistributedOptimizer(..., '
                         f'sparse_as_dense=True), or tensor.to_dense()')
    raise ValueError(f'{what}: tensor type {tensor.type()} ({tensor.dtype}) is not supported by '
                     f'hvdrun\'s libhvd: use one of {_DTYPE_NAMES}')


def _view(tensor, what):
    """(data pointer, libhvd dtype, shape, device, stream) of a tensor libhvd can take."""
    code = _DTYPES.get(tensor.dtype)
    if code is None or tensor.layout != torch.strided:
        _bad_tensor(tensor, what)
    device = tensor.device
    if device.type == 'cpu':
        return tensor.data_ptr(), code, tensor.shape, -1, 0
    if device.type == 'cuda':
        stream = torch.cuda.current_stream(device).cuda_stream
        return tensor.data_ptr(), code, tensor.shape, device.index, stream
    raise ValueError(f'{what}: a tensor on {device} is not supported: libhvd takes CPU tensors, '
                     f'and CUDA tensors where its NCCL plugin is built')


def _dense(tensor, what):
    """The tensor itself when libhvd can read it in place; else a contiguous copy (out-of-place
    ops only)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f'{what}: expected a torch.Tensor, got {type(tensor).__name__}')
    if tensor.layout != torch.strided:
        _bad_tensor(tensor, what)
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _in_place(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f'{what}: expected a torch.Tensor, got {type(tensor).__name__}')
    if tensor.layout == torch.strided and not tensor.is_contiguous():
        raise ValueError(f'{what}: the tensor is not contiguous (strides {tensor.stride()}), so '
                         f'it cannot be updated in place: pass tensor.contiguous() and use the '
                         f'result, or call the out-of-place form')
    return tensor


def _submit(submit, *args):
    try:
        return submit(*args)
    except errors.HvdError as e:
        raise errors.submit_error(e) from None


def _register(handle, natives, finish, keep):
    _handle_map[handle] = (natives, finish, keep)
    return handle


def _finish_output(natives, keep):
    return keep[-1]


def _finish_outputs(natives, keep):
    return list(keep[-1])


def _from_buffer(buffer, dtype, device):
    """libhvd's output Buffer as a tensor, without a copy: the tensor keeps the Buffer alive."""
    shape = buffer.shape
    if buffer.nbytes == 0:
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.frombuffer(buffer, dtype=dtype).view(shape)


def _finish_gathered(natives, keep):
    tensor = keep[0]
    return _from_buffer(natives[0].take_output(), tensor.dtype, tensor.device)


def _finish_gathered_group(natives, keep):
    return [_from_buffer(n.take_output(), t.dtype, t.device) for n, t in zip(natives, keep[0])]


def poll(handle):
    """True once the op of `handle` finished; synchronize() then returns without waiting."""
    entry = _handle_map.get(handle)
    if entry is None:
        raise ValueError(f'Handle {handle} was not created or has been cleared.')
    return all(n.poll() for n in entry[0])


def synchronize(handle):
    """Waits for the op of `handle` and returns its result (a tensor, a list of tensors for the
    grouped ops, (output, received_splits) for alltoall). Raises HorovodInternalError when the
    op failed. The wait releases the GIL; Ctrl-C raises KeyboardInterrupt (the op stays in
    flight, its tensors referenced)."""
    if callable(handle):  # sparse_allreduce_async's handle
        return handle()
    entry = _handle_map.get(handle)
    if entry is None:
        return None
    natives, finish, keep = entry
    try:
        for n in natives:
            n.wait()
    except errors.HvdError as e:
        del _handle_map[handle]
        raise errors.wait_error(e) from None
    del _handle_map[handle]
    return finish(natives, keep)


# ---- allreduce ----

def _finish_output_scaled(natives, keep):
    output = keep[-1]
    output.copy_(_scaled(output, keep[1]))
    return output


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    ps = check_process_set(process_set)
    code = _reduce_op(op, 'allreduce')
    scale_after = 1.0
    if (prescale_factor != 1.0 or postscale_factor != 1.0) and tensor.dtype in _DTYPES and \
            not tensor.dtype.is_floating_point:
        # libhvd scales floating-point data only: integers are scaled here as Horovod does (in
        # float64, truncated), around a sum.
        if output is tensor:
            tensor.copy_(_scaled(tensor, prescale_factor))
        else:
            tensor = _scaled(tensor, prescale_factor)
        scale_after = postscale_factor / _set_size(ps) if op == Average else postscale_factor
        code = _OPS[Sum] if op == Average else code
        prescale_factor = postscale_factor = 1.0
    ptr, dtype, shape, device, stream = _view(tensor, 'allreduce')
    handle = next(_handles)
    native = _submit(_native.allreduce_async, _op_name('allreduce', name, handle), ptr,
                     output.data_ptr(), dtype, shape, device, stream, code,
                     float(prescale_factor), float(postscale_factor), ps)
    if scale_after != 1.0:
        return _register(handle, (native,), _finish_output_scaled, (tensor, scale_after, output))
    return _register(handle, (native,), _finish_output, (tensor, output))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts an allreduce of `tensor` into a new tensor; returns a handle for synchronize()."""
    op = handle_average_backwards_compatibility(op, average)
    tensor = _dense(tensor, 'allreduce')
    output = torch.empty_like(tensor, memory_format=torch.contiguous_format)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts an in-place allreduce of `tensor`; returns a handle for synchronize()."""
    op = handle_average_backwards_compatibility(op, average)
    tensor = _in_place(tensor, 'allreduce_')
    return _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                            process_set)


class HorovodAllreduce(torch.autograd.Function):
    """allreduce with a gradient: the allreduce (same op and factors) of the output's gradient."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average, ctx.op = average, op
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        ctx.process_set = process_set
        return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                           postscale_factor, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        return (allreduce(grad_output, average=ctx.average, op=ctx.op,
                          prescale_factor=ctx.prescale_factor,
                          postscale_factor=ctx.postscale_factor, process_set=ctx.process_set),
                None, None, None, None, None, None)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction (op, default Average) of `tensor` over all ranks, as a new tensor."""
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodAllreduce.apply(compressed, average, name, op, prescale_factor,
                                     postscale_factor, process_set)
    return compression.decompress(reduced, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """The reduction of `tensor` over all ranks, in place; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


# ---- grouped allreduce: one group, negotiated and run by libhvd as one unit ----

def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    ps = check_process_set(process_set)
    code = _reduce_op(op, 'grouped_allreduce')
    views = [_view(t, 'grouped_allreduce') for t in tensors]
    if len({v[3] for v in views}) > 1:
        raise ValueError('grouped_allreduce: tensors in list must be on same device.')
    handle = next(_handles)
    members = [(ptr, out.data_ptr(), dtype, shape, device, stream)
               for (ptr, dtype, shape, device, stream), out in zip(views, outputs)]
    # Member i is libhvd's op '<name>_<i+1>of<n>'; all or none of the group is submitted.
    natives = _submit(_native.grouped_allreduce_async, _op_name('grouped_allreduce', name, handle),
                      members, code, float(prescale_factor), float(postscale_factor), ps)
    return _register(handle, tuple(natives), _finish_outputs, (list(tensors), list(outputs)))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    op = handle_average_backwards_compatibility(op, average)
    tensors = [_dense(t, 'grouped_allreduce') for t in tensors]
    outputs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    op = handle_average_backwards_compatibility(op, average)
    tensors = [_in_place(t, 'grouped_allreduce_') for t in tensors]
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor,
                                    postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set,
                *tensors):
        ctx.average, ctx.op = average, op
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allreduce_async(
            list(tensors), average, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                  prescale_factor=ctx.prescale_factor,
                                  postscale_factor=ctx.postscale_factor,
                                  process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grads)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedAllreduce.apply(average, name, op, prescale_factor, postscale_factor,
                                            process_set, *[c[0] for c in compressed])
    return [compression.decompress(t, c[1]) for t, c in zip(reduced, compressed)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- sparse allreduce: the indices and values allgathered ----

def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Starts the allreduce of a sparse tensor as two allgathers (indices, values); the handle is
    a callable that synchronize() (or the caller) calls for the summed (or averaged) result."""
    world = _set_size(check_process_set(process_set))
    if op not in (Average, Sum):
        raise ValueError('sparse_allreduce_async: op must be hvd.Average or hvd.Sum')
    sparse = tensor.coalesce() if not tensor.is_coalesced() else tensor
    indices = allgather_async(sparse._indices().t().contiguous(), name=f'{name}.indices',
                              process_set=process_set)
    values = allgather_async(sparse._values().contiguous(), name=f'{name}.values',
                             process_set=process_set)

    def handle():
        all_values = synchronize(values)
        all_indices = synchronize(indices)
        if op == Average:
            all_values = all_values / world
        return torch.sparse_coo_tensor(all_indices.t(), all_values, sparse.size())
    return handle


# ---- allgather ----

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts the concatenation of every rank's `tensor` along the first dimension (which may
    differ between ranks)."""
    ps = check_process_set(process_set)
    tensor = _dense(tensor, 'allgather')
    ptr, dtype, shape, device, stream = _view(tensor, 'allgather')
    if not shape:
        raise ValueError('allgather: a scalar tensor has no first dimension to gather along: '
                         'pass tensor.reshape(1)')
    handle = next(_handles)
    native = _submit(_native.allgather_async, _op_name('allgather', name, handle), ptr, dtype,
                     shape, device, stream, ps)
    return _register(handle, (native,), _finish_gathered, (tensor,))


def _gather_rows_offset(rows, process_set):
    counts = allgather(torch.tensor([rows], dtype=torch.int64), process_set=process_set)
    return int(counts[:_set_rank(process_set)].sum())


class HorovodAllgather(torch.autograd.Function):
    """allgather with a gradient: this rank's rows of the averaged output gradient."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 1
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        offset = _gather_rows_offset(ctx.rows, ctx.process_set)
        return grad.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    return HorovodAllgather.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    ps = check_process_set(process_set)
    tensors = [_dense(t, 'grouped_allgather') for t in tensors]
    views = [_view(t, 'grouped_allgather') for t in tensors]
    handle = next(_handles)
    natives = _submit(_native.grouped_allgather_async, _op_name('grouped_allgather', name, handle),
                      views, ps)
    return _register(handle, tuple(natives), _finish_gathered_group, (tensors,))


class HorovodGroupedAllgather(torch.autograd.Function):

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grads = grouped_allreduce(list(grad_output), op=Average, process_set=ctx.process_set)
        counts = allgather(torch.tensor([ctx.rows], dtype=torch.int64),
                           process_set=ctx.process_set)
        me = _set_rank(ctx.process_set)
        offsets = counts[:me].sum(dim=0) if me else torch.zeros(len(ctx.rows))
        return (None, None, *[g.narrow(0, int(o), r)
                              for g, o, r in zip(grads, offsets, ctx.rows)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))


# ---- broadcast ----

def _broadcast_async(tensor, root_rank, name, process_set):
    ps = check_process_set(process_set)
    ptr, dtype, shape, device, stream = _view(tensor, 'broadcast')
    handle = next(_handles)
    native = _submit(_native.broadcast_async, _op_name('broadcast', name, handle), ptr, dtype,
                     shape, device, stream, int(root_rank), ps)
    return _register(handle, (native,), _finish_output, (tensor,))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts the broadcast of root_rank's `tensor` into a new tensor on every rank."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f'broadcast: expected a torch.Tensor, got {type(tensor).__name__}')
    output = tensor.clone(memory_format=torch.contiguous_format)
    return _broadcast_async(output, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts the broadcast of root_rank's `tensor` into `tensor` on every rank."""
    return _broadcast_async(_in_place(tensor, 'broadcast_'), root_rank, name, process_set)


class HorovodBroadcast(torch.autograd.Function):
    """broadcast with a gradient: the averaged output gradient on the root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad = grad * 0
        return grad, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    return HorovodBroadcast.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ---- alltoall ----

def _splits_list(tensor, splits, world):
    """The splits as a list of ints, checked here so a mistake is a ValueError on this rank."""
    rows = tensor.shape[0] if tensor.dim() else 0
    if not tensor.dim():
        raise ValueError('alltoall: a scalar tensor has no first dimension to split')
    if splits is None:
        if rows % world:
            raise ValueError(f'alltoall: the first dimension ({rows}) is not a multiple of the '
                             f'number of ranks ({world}): pass splits=')
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError(f'alltoall: splits must hold integers (torch.int32), not '
                             f'{splits.dtype}')
        splits = splits.tolist()
    splits = [int(s) for s in splits]
    if len(splits) != world:
        raise ValueError(f'alltoall: {len(splits)} splits for {world} ranks: give one per rank')
    if any(s < 0 for s in splits) or sum(splits) > rows:
        raise ValueError(f'alltoall: splits {splits} (sum {sum(splits)}) do not fit the first '
                         f'dimension ({rows}): each must be >= 0 and they may not exceed it')
    return splits


def _finish_alltoall(natives, keep):
    native = natives[0]
    output = _from_buffer(native.take_output(), keep[0].dtype, keep[0].device)
    return output, torch.tensor(native.received_splits(), dtype=torch.int32)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rows [offset_i, offset_i + splits[i]) of `tensor` go to rank i (equal
    parts without splits); synchronize() returns (output, received_splits)."""
    ps = check_process_set(process_set)
    tensor = _dense(tensor, 'alltoall')
    split_list = _splits_list(tensor, splits, _set_size(ps))
    ptr, dtype, shape, device, stream = _view(tensor, 'alltoall')
    handle = next(_handles)
    native = _submit(_native.alltoall_async, _op_name('alltoall', name, handle), ptr, dtype,
                     shape, device, stream, split_list, ps)
    return _register(handle, (native,), _finish_alltoall, (tensor,))


class HorovodAlltoall(torch.autograd.Function):
    """alltoall with a gradient: the output gradient sent back by the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, *unused):
        grad, _ = alltoall(grad_output, splits=ctx.received, process_set=ctx.process_set)
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The alltoall's output; with splits, (output, received_splits) as Horovod returns."""
    output, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    return output if splits is None else (output, received)


# ---- reducescatter ----

def _scatter_op(op, what):
    if op == Adasum:
        _reduce_op(op, what)
    if op not in (Average, Sum):
        raise ValueError(f'{what}: op must be hvd.Average or hvd.Sum (got {op!r})')
    return _OPS[op]


def _scaled(tensor, factor):
    """tensor * factor as Horovod scales: integers in float64, 16-bit floats in float32, the
    result in the tensor's own dtype (integers truncated toward zero)."""
    if factor == 1.0:
        return tensor
    if tensor.dtype in (torch.float16, torch.bfloat16):
        return (tensor.float() * factor).to(tensor.dtype)
    if not tensor.dtype.is_floating_point:
        return (tensor.double() * factor).to(tensor.dtype)
    return tensor * factor


def _finish_scattered(natives, keep):
    tensor, postscale = keep[0], keep[1]
    out = _from_buffer(natives[0].take_output(), tensor.dtype, tensor.device)
    if postscale != 1.0:
        out.copy_(_scaled(out, postscale))
    return out


def _finish_scattered_group(natives, keep):
    tensors, postscales = keep[0], keep[1]
    outs = [_from_buffer(n.take_output(), t.dtype, t.device) for n, t in zip(natives, tensors)]
    for o, postscale in zip(outs, postscales):
        if postscale != 1.0:
            o.copy_(_scaled(o, postscale))
    return outs


def _scatter_input(tensor, prescale_factor, postscale_factor, what):
    """(input, libhvd's prescale and postscale, the postscale left for Python). libhvd scales
    floating-point host tensors itself; integer tensors are scaled here as Horovod does (and as
    allreduce does), and so are GPU tensors (libhvd takes no factors on them yet)."""
    tensor = _dense(tensor, what)
    if not tensor.dim():
        raise ValueError(f'{what}: a scalar tensor cannot be scattered: it has no first '
                         f'dimension to split')
    if tensor.dtype.is_floating_point and tensor.device.type == 'cpu':
        return tensor, float(prescale_factor), float(postscale_factor), 1.0
    return _scaled(tensor, prescale_factor), 1.0, 1.0, postscale_factor


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts the reduction (Average or Sum) of every rank's `tensor`, split along the first
    dimension across the ranks (the first dim0 % size ranks one row more)."""
    ps = check_process_set(process_set)
    code = _scatter_op(op, 'reducescatter')
    tensor, prescale, postscale, after = _scatter_input(tensor, prescale_factor, postscale_factor,
                                                        'reducescatter')
    ptr, dtype, shape, device, stream = _view(tensor, 'reducescatter')
    handle = next(_handles)
    native = _submit(_native.reducescatter_async, _op_name('reducescatter', name, handle), ptr,
                     dtype, shape, device, stream, code, prescale, postscale, ps)
    return _register(handle, (native,), _finish_scattered, (tensor, after))


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter with Horovod's gradient: the allgather of the (scaled) output gradient."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        grad = grad_output
        if ctx.op == Sum:
            grad = grad * _set_size(check_process_set(ctx.process_set))
        if ctx.prescale_factor != 1.0:
            grad = grad * ctx.prescale_factor
        if ctx.postscale_factor != 1.0:
            grad = grad * ctx.postscale_factor
        return allgather(grad, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    compressed, ctx = compression.compress(tensor)
    reduced = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    return compression.decompress(reduced, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    ps = check_process_set(process_set)
    code = _scatter_op(op, 'grouped_reducescatter')
    inputs = [_scatter_input(t, prescale_factor, postscale_factor, 'grouped_reducescatter')
              for t in tensors]
    if len({i[1:] for i in inputs}) > 1:
        # libhvd takes one pair of factors per group: with some tensors scaled here (integers,
        # GPU), all are.
        inputs = [(_scaled(_dense(t, 'grouped_reducescatter'), prescale_factor), 1.0, 1.0,
                   postscale_factor) for t in tensors]
    tensors = [i[0] for i in inputs]
    views = [_view(t, 'grouped_reducescatter') for t in tensors]
    prescale, postscale = inputs[0][1:3] if inputs else (1.0, 1.0)
    handle = next(_handles)
    natives = _submit(_native.grouped_reducescatter_async,
                      _op_name('grouped_reducescatter', name, handle), views, code, prescale,
                      postscale, ps)
    return _register(handle, tuple(natives), _finish_scattered_group,
                     (tensors, [i[3] for i in inputs]))


class HorovodGroupedReducescatter(torch.autograd.Function):

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        world = _set_size(check_process_set(ctx.process_set))
        scale = (world if ctx.op == Sum else 1) * ctx.prescale_factor * ctx.postscale_factor
        grads = [g * scale if scale != 1 else g for g in grad_output]
        return (None, None, None, None, None,
                *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    compressed = [compression.compress(t) for t in tensors]
    reduced = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                postscale_factor, *[c[0] for c in compressed])
    return [compression.decompress(t, c[1]) for t, c in zip(reduced, compressed)]


# ---- synchronisation points and what is not there yet ----

def barrier(process_set=global_process_set):
    """Returns once every rank (of `process_set`) called barrier()."""
    _submit(_native.barrier, check_process_set(process_set))


def join(device=-1):
    """This rank has no more data: until every rank joined it adds zeros to the others'
    allreduces (Average still divides by the full size; other collectives submitted meanwhile
    raise on the ranks that submitted them). Returns the last rank to join, the same on every
    rank. `device` is accepted for Horovod's signature (libhvd's join needs no device)."""
    return _submit(_native.join)
