"""The collectives of hvd.torch: every op, dtype and reduction, Horovod's argument forms, the
names, the autograd functions. Values depend on the rank, so a wrong reduction shows."""
import pytest
import torch

import hvd.torch as hvd

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def rank_tensor(dtype, shape=(3, 5), rank=None):
    rank = hvd.rank() if rank is None else rank
    base = torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64).reshape(shape) % 7
    return (base + rank + 1).to(dtype)


def expected(op, dtype, shape=(3, 5)):
    parts = [rank_tensor(torch.float64, shape, r) for r in range(hvd.size())]
    stacked = torch.stack(parts)
    if op == hvd.Sum:
        out = stacked.sum(0)
    elif op == hvd.Average:
        out = stacked.sum(0) / hvd.size()
        if not dtype.is_floating_point:
            out = out.trunc()
    elif op == hvd.Min:
        out = stacked.min(0).values
    elif op == hvd.Max:
        out = stacked.max(0).values
    else:
        out = stacked.prod(0)
    return out.to(dtype)


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
@pytest.mark.parametrize('op', [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product],
                         ids=['sum', 'average', 'min', 'max', 'product'])
def test_allreduce_every_dtype_and_op(dtype, op):
    t = rank_tensor(dtype)
    out = hvd.allreduce(t, op=op)
    assert out.dtype == dtype and out.shape == t.shape
    tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 0
    assert torch.allclose(out.double(), expected(op, dtype).double(), rtol=tol, atol=tol), out
    assert torch.equal(t, rank_tensor(dtype)), 'the out-of-place form changed its input'


def test_allreduce_in_place_keeps_the_memory():
    t = rank_tensor(torch.float32)
    ptr = t.data_ptr()
    assert hvd.allreduce_(t, op=hvd.Sum) is t
    assert t.data_ptr() == ptr
    assert torch.equal(t, expected(hvd.Sum, torch.float32))


def test_horovods_positional_order_with_the_deprecated_average():
    t = rank_tensor(torch.float32)
    hvd.allreduce_(t, None, 'positional', hvd.Sum)  # tensor, average, name, op
    assert torch.equal(t, expected(hvd.Sum, torch.float32))
    t = rank_tensor(torch.float64)
    with pytest.warns(DeprecationWarning):
        out = hvd.allreduce(t, False)  # average=False: a sum
    assert torch.equal(out, expected(hvd.Sum, torch.float64))
    with pytest.raises(ValueError, match='supersedes'):
        hvd.allreduce(t, True, op=hvd.Sum)


def test_prescale_and_postscale():
    t = rank_tensor(torch.float64)
    out = hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(out, expected(hvd.Sum, torch.float64) * 1.5)


def test_async_named_ops_in_any_order_and_poll():
    tensors = [rank_tensor(torch.float32, (4,)) * (i + 1) for i in range(20)]
    order = range(20) if hvd.rank() % 2 == 0 else reversed(range(20))
    handles = {i: hvd.allreduce_async(tensors[i], name=f'async.{i}', op=hvd.Sum) for i in order}
    for i, h in handles.items():
        out = hvd.synchronize(h)
        assert torch.equal(out, expected(hvd.Sum, torch.float32, (4,)) * (i + 1))
    with pytest.raises(ValueError):
        hvd.poll(handles[0])  # cleared by synchronize


def test_grouped_allreduce():
    tensors = [rank_tensor(torch.float32, (i + 1, 3)) for i in range(3)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum, name='grouped')
    for i, out in enumerate(outs):
        assert torch.equal(out, expected(hvd.Sum, torch.float32, (i + 1, 3)))
    hvd.grouped_allreduce_(tensors, op=hvd.Max)
    for i, t in enumerate(tensors):
        assert torch.equal(t, expected(hvd.Max, torch.float32, (i + 1, 3)))


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_allgather_ragged_first_dimension(dtype):
    r = hvd.rank()
    t = torch.full((r + 1, 2), r + 1).to(dtype)
    out = hvd.allgather(t)
    rows = [torch.full((q + 1, 2), q + 1).to(dtype) for q in range(hvd.size())]
    assert out.dtype == dtype
    assert torch.equal(out, torch.cat(rows))


def test_grouped_allgather():
    r = hvd.rank()
    outs = hvd.grouped_allgather([torch.full((r + 1,), float(r)), torch.full((1, 2), r)])
    assert torch.equal(outs[0], torch.cat([torch.full((q + 1,), float(q))
                                           for q in range(hvd.size())]))
    assert torch.equal(outs[1], torch.cat([torch.full((1, 2), q) for q in range(hvd.size())]))


@pytest.mark.parametrize('dtype', DTYPES, ids=str)
def test_broadcast_forms(dtype):
    root = hvd.size() - 1
    t = rank_tensor(dtype)
    out = hvd.broadcast(t, root)
    assert torch.equal(out, rank_tensor(dtype, rank=root))
    assert torch.equal(t, rank_tensor(dtype))
    hvd.broadcast_(t, root, name='bcast.inplace')
    assert torch.equal(t, rank_tensor(dtype, rank=root))
    t2 = rank_tensor(dtype)
    assert torch.equal(hvd.synchronize(hvd.broadcast_async(t2, 0)), rank_tensor(dtype, rank=0))
    hvd.synchronize(hvd.broadcast_async_(t2, 0))
    assert torch.equal(t2, rank_tensor(dtype, rank=0))


def test_alltoall_with_splits_and_received_splits():
    size, r = hvd.size(), hvd.rank()
    # Rank r sends q + 1 rows, all of value r, to rank q.
    splits = torch.tensor([q + 1 for q in range(size)], dtype=torch.int32)
    t = torch.full((int(splits.sum()), 2), float(r))
    out, received = hvd.alltoall(t, splits)
    assert received.tolist() == [r + 1] * size
    assert torch.equal(out, torch.cat([torch.full((r + 1, 2), float(q)) for q in range(size)]))
    even = torch.arange(size * 2, dtype=torch.float32) + 100 * r
    out = hvd.alltoall(even)
    assert torch.equal(out, torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * q
                                       for q in range(size)]))


def test_reducescatter():
    size, r = hvd.size(), hvd.rank()
    t = torch.arange(size * 2 + 1, dtype=torch.float32).reshape(-1, 1) * (r + 1)
    out = hvd.reducescatter(t, op=hvd.Sum)
    total = torch.arange(size * 2 + 1, dtype=torch.float32).reshape(-1, 1) * \
        sum(q + 1 for q in range(size))
    blocks = torch.tensor_split(total, size)  # the first (rows % size) blocks one row longer
    assert torch.equal(out, blocks[r])
    before = t.clone()
    avg = hvd.reducescatter(t, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.allclose(avg, blocks[r] / size)
    assert torch.equal(t, before)  # libhvd prescales a copy, never the input
    scaled = hvd.reducescatter(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(scaled, blocks[r] * 1.5)
    # Integers are scaled in Python as Horovod does (float64, truncated); a group mixes both.
    ints = torch.full((size, 2), 3, dtype=torch.int32)
    i_out, f_out = hvd.grouped_reducescatter([ints, t], op=hvd.Sum, prescale_factor=2.0,
                                             postscale_factor=0.25)
    want = torch.full((1, 2), int(6 * size * 0.25), dtype=torch.int32)
    assert i_out.dtype == torch.int32 and torch.equal(i_out, want)
    assert torch.allclose(f_out, blocks[r] * 0.5)


def test_int16_wraps_keeps_its_sign_and_moves_through_every_op():
    size, r = hvd.size(), hvd.rank()
    # Sums past 32767 wrap as torch's own int16 arithmetic does; min/max see negative values.
    big = torch.tensor([30000, -30000, -1, 12345], dtype=torch.int16)
    total = torch.zeros(4, dtype=torch.int16)
    for _ in range(size):
        total += big
    assert torch.equal(hvd.allreduce(big, op=hvd.Sum), total)
    mine = torch.tensor([-32768 + r, 32767 - r], dtype=torch.int16)
    assert hvd.allreduce(mine, op=hvd.Min).tolist() == [-32768, 32767 - (size - 1)]
    assert hvd.allreduce(mine, op=hvd.Max).tolist() == [-32768 + size - 1, 32767]
    avg = hvd.allreduce(torch.tensor([-7 * (r + 1)], dtype=torch.int16), op=hvd.Average)
    assert avg.dtype == torch.int16
    assert avg.item() == int(-7 * sum(range(1, size + 1)) / size)  # truncated toward zero
    # Integers are scaled around a sum, in float64 and truncated, as Horovod does.
    scaled = hvd.allreduce(torch.tensor([3], dtype=torch.int16), op=hvd.Sum, prescale_factor=2.0)
    assert scaled.dtype == torch.int16 and scaled.item() == 6 * size
    # Data movement: every rank's negative values arrive exactly.
    rows = torch.full((2, 3), -1000 * (r + 1), dtype=torch.int16)
    assert torch.equal(hvd.allgather(rows),
                       torch.cat([torch.full((2, 3), -1000 * (q + 1), dtype=torch.int16)
                                  for q in range(size)]))
    sent = torch.arange(size, dtype=torch.int16) - 300 * r
    got = hvd.alltoall(sent)
    assert got.dtype == torch.int16
    assert got.tolist() == [r - 300 * q for q in range(size)]
    t = torch.arange(size * 2, dtype=torch.int16).reshape(-1, 1) - 20000
    block = hvd.reducescatter(t, op=hvd.Sum)
    assert block.dtype == torch.int16
    want = torch.zeros_like(t)
    for _ in range(size):
        want += t
    assert torch.equal(block, torch.tensor_split(want, size)[r])


def test_unnamed_ops_are_named_as_horovod_names_them():
    h = hvd.allreduce_async(torch.ones(2))
    native = hvd.mpi_ops._handle_map[h][0][0]
    assert native.name == f'allreduce.noname.{h}'
    hvd.synchronize(h)
    h = hvd.allgather_async(torch.ones(2), name='g')
    assert hvd.mpi_ops._handle_map[h][0][0].name == 'allgather.g'
    hvd.synchronize(h)


def test_gradients():
    size, r = hvd.size(), hvd.rank()
    x = torch.ones(3, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), float(size)))
    x = torch.ones(r + 1, 2, requires_grad=True)
    (hvd.allgather(x) * 2).sum().backward()
    assert torch.equal(x.grad, torch.full((r + 1, 2), 2.0))
    x = torch.ones(3, requires_grad=True)
    hvd.broadcast(x, 0).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 1.0 if r == 0 else 0.0))
    x = torch.ones(size * 2, requires_grad=True)
    out = hvd.alltoall(x)
    (out * (r + 1)).sum().backward()
    assert torch.equal(x.grad, torch.cat([torch.full((2,), float(q + 1)) for q in range(size)]))
    x = torch.ones(size * 2, 1, requires_grad=True)
    hvd.reducescatter(x, op=hvd.Average).sum().backward()
    assert torch.equal(x.grad, torch.ones(size * 2, 1))


def test_compression_fp16():
    t = rank_tensor(torch.float32)
    out = hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    assert torch.allclose(out, expected(hvd.Sum, torch.float32), rtol=1e-3)
