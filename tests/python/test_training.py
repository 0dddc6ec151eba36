"""DistributedOptimizer and the broadcasts, against a single process on the whole batch."""
import warnings

import pytest
import torch

import hvd.torch as hvd

TOL = 1e-5  # float32 sums in another order


def model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def batch(n=8):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n * hvd.size(), 6, generator=g), torch.randn(n * hvd.size(), 2, generator=g)


def shard(t):
    n = t.shape[0] // hvd.size()
    return t[hvd.rank() * n:(hvd.rank() + 1) * n]


def train(opt, net, x, y, steps=3, passes=1):
    for _ in range(steps):
        opt.zero_grad()
        for i in range(passes):
            xs, ys = x.chunk(passes)[i], y.chunk(passes)[i]
            (torch.nn.functional.mse_loss(net(xs), ys) / passes).backward()
        opt.step()


def test_distributed_optimizer_matches_one_process_on_the_whole_batch():
    x, y = batch()
    reference = model()
    train(torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9), reference, x, y)
    net = model(seed=hvd.rank())  # different start on each rank: the broadcast fixes it
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model().state_dict(), root_rank=0)  # a no-op state: exercises dicts
    if hvd.rank() == 0:
        net.load_state_dict(model().state_dict())
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=net.named_parameters())
    assert isinstance(opt, torch.optim.SGD)
    train(opt, net, shard(x), shard(y))
    for a, b in zip(net.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=TOL), (a - b).abs().max()


def test_fp16_compression_and_backward_passes_per_step():
    x, y = batch()
    reference = model()
    train(torch.optim.SGD(reference.parameters(), lr=0.1), reference, x, y, steps=2)
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                   named_parameters=net.named_parameters(),
                                   compression=hvd.Compression.fp16, backward_passes_per_step=2)
    train(opt, net, shard(x), shard(y), steps=2, passes=2)
    for a, b in zip(net.parameters(), reference.parameters()):
        assert torch.allclose(a, b, atol=2e-3), (a - b).abs().max()


def test_a_parameter_without_gradient_on_one_rank_is_allreduced_as_zeros():
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1.0),
                                   named_parameters=net.named_parameters())
    before = [p.detach().clone() for p in net.parameters()]
    opt.zero_grad()
    if hvd.rank() == 0:
        net(torch.ones(1, 6)).sum().backward()
    opt.step()
    reference = model()
    reference(torch.ones(1, 6)).sum().backward()
    for p, b, r in zip(net.parameters(), before, reference.parameters()):
        assert torch.allclose(p, b - r.grad / hvd.size(), atol=TOL)


def test_optimizer_guards():
    net = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                   named_parameters=net.named_parameters())
    net(torch.ones(1, 6)).sum().backward()
    with pytest.raises(AssertionError, match='zero_grad'):
        opt.zero_grad()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        opt.step()
    assert any('skip_synchronize' in str(w.message) for w in caught)
    net(torch.ones(1, 6)).sum().backward()
    opt.synchronize()
    with opt.skip_synchronize(), warnings.catch_warnings():
        warnings.simplefilter('error')
        opt.step()
    with pytest.raises(ValueError, match='unique'):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                 named_parameters=[('same', p) for p in net.parameters()])
    with pytest.raises(ValueError, match='not named'):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                 named_parameters=list(net.named_parameters())[:1])


def test_broadcast_optimizer_state_and_objects():
    net = model()
    opt = torch.optim.Adam(net.parameters(), lr=0.01 * (hvd.rank() + 1))
    before = [p.detach().clone() for p in net.parameters()]
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]['lr'] == pytest.approx(0.01)
    assert all('exp_avg' in opt.state[p] for p in net.parameters())
    assert all(torch.equal(p, b) for p, b in zip(net.parameters(), before))
    obj = hvd.broadcast_object({'rank': hvd.rank(), 'f': [1, 2]}, root_rank=0)
    assert obj == {'rank': 0, 'f': [1, 2]}
    assert hvd.allgather_object(('r', hvd.rank())) == [('r', r) for r in range(hvd.size())]
