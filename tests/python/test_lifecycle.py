"""init() after shutdown(), many times in one process (Horovod's test suite does it after every
test): each round works, and a rank's open descriptors and threads end where they began."""
import os

import torch

import hvd.torch as hvd

ROUNDS = int(os.environ.get('HVDTEST_INIT_ROUNDS', '20'))


def descriptors_and_threads():
    return len(os.listdir('/proc/self/fd')), len(os.listdir('/proc/self/task'))


def test_init_after_shutdown_many_times():
    hvd.shutdown()
    before = descriptors_and_threads()
    for i in range(ROUNDS):
        hvd.init()
        out = hvd.allreduce(torch.full((3,), float(hvd.rank() + i)), op=hvd.Sum, name='round')
        assert out.tolist() == [float(sum(r + i for r in range(hvd.size())))] * 3
        hvd.barrier()
        hvd.shutdown()
        assert not hvd.is_initialized()
    assert descriptors_and_threads() == before
    hvd.init()  # for the tests after this one
    assert hvd.is_initialized()
