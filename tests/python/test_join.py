"""hvd.join() with uneven data: the joined ranks add zeros to the others' allreduces (Average
divides by the full size), join returns the last rank to join on every rank, and an allgather
while a rank has joined raises on the ranks that submitted it while the job goes on."""
import pytest
import torch

import hvd.torch as hvd


def skip_handles(count):
    """Unnamed ops are named by this process's op handle count (Horovod's rule): after uneven
    work, a rank that used fewer handles skips as many as the others used more, so that later
    unnamed names still match (Horovod's own join tests balance them over their loops)."""
    for _ in range(count):
        next(hvd.mpi_ops._handles)


def test_uneven_steps_then_join():
    steps = 2 + hvd.rank()
    for k in range(steps):
        inside = [r for r in range(hvd.size()) if 2 + r > k]
        x = torch.full((3,), float(hvd.rank() + 1))
        total = hvd.allreduce(x, name='uneven.sum', op=hvd.Sum)
        mean = hvd.allreduce(x, name='uneven.avg')
        assert total.tolist() == [float(sum(r + 1 for r in inside))] * 3
        assert mean.tolist() == pytest.approx([sum(r + 1 for r in inside) / hvd.size()] * 3)
    last = hvd.join()
    skip_handles(2 * (hvd.size() - 1 - hvd.rank()))
    assert last == hvd.size() - 1
    assert hvd.allgather_object(last, name='join.last') == [last] * hvd.size()


def test_other_collectives_raise_while_a_rank_has_joined():
    if hvd.size() < 2:
        pytest.skip('needs a rank that has joined and one that has not')
    if hvd.rank() == 0:
        last = hvd.join()
        skip_handles(2)  # the others' two failed ops
    else:
        with pytest.raises(RuntimeError, match='called hvd::join'):
            hvd.allgather(torch.ones(2), name='while.joined')
        with pytest.raises(RuntimeError, match='called hvd::join'):
            hvd.broadcast(torch.ones(2), 1, name='while.joined.b')
        last = hvd.join()
    assert last != 0
    hvd.barrier()
