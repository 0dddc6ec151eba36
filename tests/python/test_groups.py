"""Grouped collectives as one unit (hvd.grouped_allreduce, grouped_allgather,
grouped_reducescatter; DistributedOptimizer(groups=...)): each group is one response of libhvd's
engine (its `responses` counter), also on a process set; ranks passing different tensors to one
group get an error on every rank, and the job goes on."""
import warnings

import pytest
import torch

import hvd.torch as hvd
from hvd import _native
from hvd.torch import mpi_ops

from test_training import TOL, batch, model, shard, train


def skip_handles(n):
    """Unnamed ops are named by a per-process handle counter, so every rank must make the same
    calls: where a rank made fewer here (an op outside its set, raw native calls), its counter
    catches up with the others' so that later tests' unnamed ops line up."""
    for _ in range(n):
        next(mpi_ops._handles)


def responses(process_set=0):
    return _native.engine_stats(process_set)['responses']


def mixed():
    """Three tensors no fusion puts together (three dtypes)."""
    r = hvd.rank() + 1
    return [torch.full((100,), r, dtype=torch.float32), torch.full((7, 3), r, dtype=torch.float64),
            torch.full((5,), r, dtype=torch.int32)]


def total():
    return sum(range(1, hvd.size() + 1))


def test_grouped_allreduce_is_one_response():
    before = responses()
    outs = hvd.grouped_allreduce(mixed(), op=hvd.Sum, name='one.unit')
    assert responses() - before == 1
    for out, t in zip(outs, mixed()):
        assert out.dtype == t.dtype and torch.equal(out, torch.full_like(t, total()))
    # The control: the same tensors one by one are one response each.
    before = responses()
    handles = [hvd.allreduce_async(t, op=hvd.Sum, name=f'loose.{i}') for i, t in
               enumerate(mixed())]
    for h in handles:
        hvd.synchronize(h)
    assert responses() - before == 3


def test_grouped_allgather_and_reducescatter_are_one_response_each():
    r, n = hvd.rank(), hvd.size()
    before = responses()
    outs = hvd.grouped_allgather([torch.full((r + 1,), float(r)), torch.full((1, 2), r)])
    assert responses() - before == 1
    assert torch.equal(outs[1], torch.cat([torch.full((1, 2), q) for q in range(n)]))
    before = responses()
    blocks = hvd.grouped_reducescatter([torch.ones(2 * n), torch.full((n, 3), float(r))],
                                       op=hvd.Sum)
    assert responses() - before == 1
    assert torch.equal(blocks[0], torch.full((2,), float(n)))
    assert torch.equal(blocks[1], torch.full((1, 3), float(sum(range(n)))))


def test_async_group_handles_and_names():
    tensors = [torch.full((4,), float(hvd.rank())) for _ in range(3)]
    handle = hvd.grouped_allreduce_async_(tensors, name='async.group')
    outs = hvd.synchronize(handle)
    assert [o is t for o, t in zip(outs, tensors)] == [True] * 3
    mean = (hvd.size() - 1) / 2
    assert all(torch.allclose(t, torch.full((4,), mean)) for t in tensors)
    assert hvd.grouped_allreduce([]) == []


@pytest.fixture
def dynamic():
    if hvd.size() < 2:
        pytest.skip('process sets need 2 or more ranks')
    hvd.shutdown()
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()
    hvd.init()


def test_groups_on_a_process_set(dynamic):
    ranks = list(range(0, hvd.size(), 2))
    evens = hvd.add_process_set(ranks)
    if evens.included():
        before = responses(evens.process_set_id)
        outs = hvd.grouped_allreduce(mixed(), op=hvd.Sum, process_set=evens)
        assert responses(evens.process_set_id) - before == 1
        want = sum(r + 1 for r in ranks)
        assert all(torch.equal(o, torch.full_like(o, want)) for o in outs)
        gathered = hvd.grouped_allgather([torch.ones(2), torch.zeros(1, 3)], process_set=evens)
        assert gathered[0].shape == (2 * len(ranks),) and gathered[1].shape == (len(ranks), 3)
    else:
        with pytest.raises(ValueError, match='not in process set'):
            hvd.grouped_allreduce(mixed(), process_set=evens)
        skip_handles(1)  # the included ranks' grouped allgather (the allreduce took one here)
    hvd.remove_process_set(evens)


def test_ranks_passing_other_tensors_to_a_group_fail_it_everywhere():
    if hvd.size() < 2:
        pytest.skip('a mismatch needs 2 or more ranks')
    tensors = [torch.ones(3) for _ in range(3 if hvd.rank() == 1 else 2)]
    with pytest.raises(hvd.HorovodInternalError,
                       match="grouped allreduce 'grouped_allreduce.count': rank .* submitted "
                             "[23] tensors, rank .* submitted [23]: every rank must pass the "
                             "same tensors to a grouped call"):
        hvd.grouped_allreduce(tensors, name='count')
    # A group's members submitted alone on rank 1 (under the names libhvd gives a group's members).
    two = [torch.ones(3), torch.ones(3)]
    if hvd.rank() == 1:
        natives = [_native.allreduce_async(f'grouped_allreduce.mixed_{i + 1}of2', t.data_ptr(),
                                           t.data_ptr(), _native.DTYPES['float32'], t.shape, -1,
                                           0, _native.OPS['sum'], 1.0, 1.0, 0)
                   for i, t in enumerate(two)]
        for n in natives:
            with pytest.raises(_native.HvdError, match='group mismatch'):
                n.wait()
        skip_handles(1)  # the other ranks' grouped call
    else:
        with pytest.raises(hvd.HorovodInternalError,
                           match="tensor 'grouped_allreduce.mixed_1of2': group mismatch: rank 0 "
                                 "submitted it in a group of 2 tensors"):
            hvd.grouped_allreduce(two, name='mixed')
    # The job goes on. (Named: rank 1 made other calls above, so unnamed ops' counters differ.)
    assert torch.equal(hvd.grouped_allreduce([torch.ones(2)], op=hvd.Sum, name='after')[0],
                       torch.full((2,), float(hvd.size())))


def test_a_name_in_flight_keeps_the_whole_group_out():
    if hvd.size() < 2:
        pytest.skip('alone, the first group may finish before the second is submitted')
    t = torch.ones(2)
    # Rank 0's first group cannot finish before the others submit it, after the barrier.
    if hvd.rank() == 0:
        first = hvd.grouped_allreduce_async([t, t.clone()], name='busy')
        with pytest.raises(ValueError, match="'grouped_allreduce.busy_1of2' is already in flight"):
            hvd.grouped_allreduce_async([t, t.clone()], name='busy')
        hvd.barrier()
    else:
        hvd.barrier()
        first = hvd.grouped_allreduce_async([t, t.clone()], name='busy')
        skip_handles(1)  # rank 0's refused submission
    hvd.synchronize(first)
    hvd.synchronize(hvd.grouped_allreduce_async([t, t.clone()], name='busy'))


def count_grouped_calls(monkeypatch):
    calls = []
    real = mpi_ops.grouped_allreduce_async_

    def counting(tensors, *args, **kwargs):
        calls.append(len(tensors))
        return real(tensors, *args, **kwargs)
    monkeypatch.setattr(mpi_ops, 'grouped_allreduce_async_', counting)
    return calls


@pytest.mark.parametrize('how', ['groups=2', 'num_groups=2', 'groups=list'])
def test_distributed_optimizer_groups(monkeypatch, how):
    calls = count_grouped_calls(monkeypatch)
    x, y = batch()
    reference = model()
    train(torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), reference, x, y)
    net = model()
    params = list(net.parameters())  # w1, b1, w2, b2
    kwargs = {'groups=2': {'groups': 2}, 'num_groups=2': {'num_groups': 2},
              'groups=list': {'groups': [[params[0], params[2]]]}}[how]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                                       named_parameters=net.named_parameters(), **kwargs)
    train(opt, net, shard(x), shard(y))  # 3 steps
    assert calls == ([2, 2] * 3 if how != 'groups=list' else [2] * 3)
    for a, b in zip(net.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=TOL), (a - b).abs().max()


def test_a_group_with_a_gradient_missing_goes_out_whole_at_step(monkeypatch):
    calls = count_grouped_calls(monkeypatch)
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1.0),
                                   named_parameters=net.named_parameters(), groups=1)
    before = [p.detach().clone() for p in net.parameters()]
    opt.zero_grad()
    if hvd.rank() == 0:  # the other ranks have no gradient at all: zeros, in the same group
        net(torch.ones(1, 6)).sum().backward()
    opt.step()
    assert calls == [4]
    reference = model()
    reference(torch.ones(1, 6)).sum().backward()
    for p, b, r in zip(net.parameters(), before, reference.parameters()):
        assert torch.allclose(p, b - r.grad / hvd.size(), atol=TOL)


def test_optimizer_group_arguments():
    net = model()
    with pytest.raises(ValueError, match='only appear once'):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                 groups=[[next(net.parameters())]] * 2)
    with pytest.raises(ValueError, match='non-negative integer'):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), groups=-1)
    with pytest.warns(DeprecationWarning, match='num_groups'):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), num_groups=1)
