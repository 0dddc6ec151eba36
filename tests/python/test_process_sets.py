"""Process sets from Python (hvd.ProcessSet, init(process_sets=...), add/remove_process_set,
process_set= on the ops, DistributedOptimizer and broadcast_object): values on every rank, and
each bad input a ValueError on the ranks concerned while the job goes on. Alone (size 1) they
skip: a set of rank 0 is the global set there, which cannot be added again."""
import os
import signal
import tempfile
import threading
import time

import pytest
import torch

import hvd.torch as hvd


@pytest.fixture
def dynamic():
    """libhvd restarted with dynamic process sets, and plainly again afterwards."""
    if hvd.size() < 2:
        pytest.skip('process sets need 2 or more ranks')
    hvd.shutdown()
    hvd.init(process_sets='dynamic')
    yield
    hvd.shutdown()
    hvd.init()


def even_ranks():
    return list(range(0, hvd.size(), 2))


def test_add_query_and_remove(dynamic):
    evens = hvd.add_process_set(even_ranks())
    assert evens.process_set_id == 1
    assert evens.ranks == even_ranks()
    assert evens.size() == len(even_ranks())
    assert evens.included() == (hvd.rank() % 2 == 0)
    if evens.included():
        assert evens.rank() == hvd.rank() // 2
    else:
        with pytest.raises(ValueError, match='not in process set'):
            evens.rank()
    assert hvd.global_process_set.ranks == list(range(hvd.size()))
    assert hvd.global_process_set.size() == hvd.size()
    with pytest.raises(ValueError, match='has these ranks already'):
        hvd.add_process_set(hvd.ProcessSet(even_ranks()))
    assert hvd.remove_process_set(hvd.global_process_set) is False
    assert hvd.remove_process_set(evens) is True
    assert evens.process_set_id is None
    assert hvd.remove_process_set(evens) is False  # no longer registered
    with pytest.raises(ValueError, match='not registered'):
        hvd.allreduce(torch.ones(2), process_set=evens)
    again = hvd.add_process_set(even_ranks())
    assert again.process_set_id == 1  # the smallest free id
    hvd.barrier()


def test_bad_rank_lists(dynamic):
    with pytest.raises(ValueError, match='twice'):
        hvd.add_process_set([0, 0])
    with pytest.raises(ValueError, match='out of range'):
        hvd.add_process_set([0, hvd.size()])
    with pytest.raises(ValueError, match='ProcessSet should be initialized'):
        hvd.ProcessSet(['a'])
    if hvd.size() > 1:
        with pytest.raises(ValueError, match='the ranks disagree'):
            hvd.add_process_set([0] if hvd.rank() == 0 else [0, 1])
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == hvd.size()  # the job goes on


def test_collectives_on_a_set(dynamic):
    evens = hvd.add_process_set(even_ranks())
    odds = hvd.add_process_set(list(range(1, hvd.size(), 2))) if hvd.size() > 1 else None
    mine = evens if evens.included() else odds
    ranks = mine.ranks
    x = torch.full((5,), float(hvd.rank() + 1))
    assert hvd.allreduce(x, op=hvd.Sum, process_set=mine).tolist() == \
        [float(sum(r + 1 for r in ranks))] * 5
    assert hvd.allreduce(x, process_set=mine).tolist() == \
        pytest.approx([sum(r + 1 for r in ranks) / len(ranks)] * 5)
    ints = torch.full((3,), hvd.rank() + 1, dtype=torch.int32)
    assert hvd.allreduce(ints, op=hvd.Average, process_set=mine, postscale_factor=2.0).tolist() \
        == [int(sum(r + 1 for r in ranks) / len(ranks) * 2.0)] * 3
    root = ranks[-1]
    assert hvd.broadcast(torch.full((2,), float(hvd.rank())), root, process_set=mine).tolist() \
        == [float(root)] * 2
    gathered = hvd.allgather(torch.full((hvd.rank() + 1, 2), hvd.rank()), process_set=mine)
    assert gathered[:, 0].tolist() == [r for r in ranks for _ in range(r + 1)]
    out, received = hvd.alltoall(torch.arange(len(ranks)) + 10 * hvd.rank(),
                                 splits=[1] * len(ranks), process_set=mine)
    assert out.tolist() == [10 * r + mine.rank() for r in ranks]
    assert received.tolist() == [1] * len(ranks)
    block = hvd.reducescatter(torch.ones(2 * len(ranks)), op=hvd.Sum, process_set=mine)
    assert block.tolist() == [float(len(ranks))] * 2
    grouped = hvd.grouped_allreduce([torch.ones(3), torch.ones(4) * 2], op=hvd.Sum,
                                    process_set=mine)
    assert [g.tolist() for g in grouped] == [[float(len(ranks))] * 3, [2.0 * len(ranks)] * 4]
    assert hvd.broadcast_object({'from': root}, root, process_set=mine) == {'from': root}
    assert hvd.allgather_object(hvd.rank(), process_set=mine) == ranks
    hvd.barrier(process_set=mine)
    if hvd.size() > 1:
        other = odds if mine is evens else evens
        with pytest.raises(ValueError, match='is not in process set'):
            hvd.allreduce(x, process_set=other)
        with pytest.raises(ValueError, match='root rank'):
            hvd.broadcast(x, other.ranks[0], process_set=mine)
    hvd.barrier()


def own_set():
    """The even or the odd ranks' set, whichever holds this rank: every rank then makes the same
    calls (unnamed ops are named by a per-process count, so ranks must make as many)."""
    evens = hvd.add_process_set(even_ranks())
    odds = hvd.add_process_set(list(range(1, hvd.size(), 2)))
    return evens if evens.included() else odds


def test_gradients_through_a_set(dynamic):
    mine = own_set()
    t = torch.full((4, 2), float(hvd.rank()), requires_grad=True)
    g = hvd.allgather(t, process_set=mine)
    g.sum().backward()
    assert t.grad.tolist() == [[1.0, 1.0]] * 4
    hvd.barrier()


def test_distributed_optimizer_on_a_set(dynamic):
    mine = own_set()
    torch.manual_seed(hvd.rank())
    model = torch.nn.Linear(3, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=mine.ranks[0], process_set=mine)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), process_set=mine)
    hvd.broadcast_optimizer_state(opt, root_rank=mine.ranks[0], process_set=mine)
    model(torch.full((2, 3), float(hvd.rank()))).sum().backward()
    opt.step()
    weights = hvd.allgather(model.weight.detach(), process_set=mine)
    assert all(torch.equal(weights[0], w) for w in weights)
    hvd.barrier()


def test_static_sets_without_dynamic_mode():
    if hvd.size() < 2:
        pytest.skip('process sets need 2 or more ranks')
    rest = hvd.ProcessSet(range(1, hvd.size()))
    hvd.shutdown()
    first, clone = hvd.ProcessSet([0]), hvd.ProcessSet([0])
    hvd.init(process_sets=[first, clone, rest])
    try:
        assert first.process_set_id == 1 and clone.process_set_id is None
        assert rest.process_set_id == 2
        mine = first if hvd.rank() == 0 else rest  # every rank makes the same calls
        assert hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=mine).tolist() == \
            [float(mine.size())] * 2
        with pytest.raises(ValueError, match='dynamic process sets'):
            hvd.add_process_set([0])
        with pytest.raises(ValueError, match='process_sets='):
            hvd.init(process_sets='sometimes')
    finally:
        hvd.shutdown()
        hvd.init()


@pytest.mark.parametrize('call,interrupted', [('add', 'first'), ('remove', 'last')])
def test_ctrl_c_in_a_process_set_call_raises_and_the_others_are_told(dynamic, call, interrupted):
    """Ctrl-C in a rank that waits in add_process_set / remove_process_set for the others (which
    have not called it yet) raises KeyboardInterrupt there within the signal check; libhvd shuts
    down on that rank (the call cannot be taken back), and the others' same call then fails at
    once naming that rank, instead of waiting for it."""
    victim = 0 if interrupted == 'first' else hvd.size() - 1
    marker = hvd.broadcast_object(tempfile.mktemp(prefix='hvd_interrupted_'), root_rank=0)
    if not all(hvd.allgather_object(os.path.isdir(os.path.dirname(marker)))):
        pytest.skip('the ranks share no folder for the victim to say it gave up in')
    target = hvd.add_process_set([0]) if call == 'remove' else None
    start_call = (lambda: hvd.add_process_set([0])) if call == 'add' else \
        (lambda: hvd.remove_process_set(target))
    if hvd.rank() == victim:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                start_call()
            took = time.monotonic() - start
        finally:  # the others wait for the marker: a failure here must not hold them 60 s
            with open(marker, 'w'):
                pass
        assert took < 0.3 + 5
        assert not hvd.is_initialized()
        return
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):  # the others call only once the victim gave up
        assert time.monotonic() < deadline, 'the interrupted rank never said it gave up'
        time.sleep(0.02)
    start = time.monotonic()
    with pytest.raises(hvd.HorovodInternalError, match=f'rank\\(s\\) {victim} already shut down'):
        start_call()
    assert time.monotonic() - start < 10
    if hvd.rank() == (1 if victim == 0 else 0):
        os.unlink(marker)


def test_after_a_call_only_one_rank_made_init_again_agrees(dynamic):
    """A process-set call that one rank made and gave up (Ctrl-C) while the others never made it
    leaves the ranks' counts of such calls apart; hvd.init() again on every rank starts them
    afresh, so the next add_process_set agrees at once instead of stalling (each rank's own timer
    interrupts it after 10 s, which fails the test)."""
    last = hvd.size() - 1
    marker = hvd.broadcast_object(tempfile.mktemp(prefix='hvd_alone_call_'), root_rank=0)
    if not all(hvd.allgather_object(os.path.isdir(os.path.dirname(marker)))):
        pytest.skip('the ranks share no folder for the last rank to say it gave up in')
    if hvd.rank() == last:
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            with pytest.raises(KeyboardInterrupt):
                hvd.add_process_set([0])  # the others never call it
        finally:
            with open(marker, 'w'):
                pass
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker):
            assert time.monotonic() < deadline, 'the last rank never said it gave up'
            time.sleep(0.02)
    hvd.shutdown()
    hvd.init(process_sets='dynamic')
    guard = threading.Timer(10, os.kill, (os.getpid(), signal.SIGINT))
    guard.start()
    try:
        ps = hvd.add_process_set([0])
    except KeyboardInterrupt:
        pytest.fail('add_process_set after hvd.init() again did not agree within 10 s')
    finally:
        guard.cancel()
    assert ps.ranks == [0]
    hvd.barrier()
    if hvd.rank() == 0:
        os.unlink(marker)
