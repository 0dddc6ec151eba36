"""Bad input is a Python exception of Horovod's type with a clear message, never a crash."""
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

import hvd.torch as hvd


@pytest.mark.parametrize('dtype', [torch.bool, torch.complex64, torch.complex128], ids=str)
def test_an_unsupported_dtype_is_a_value_error(dtype):
    with pytest.raises(ValueError, match='not supported.*int8, int16, int32'):
        hvd.allreduce(torch.zeros(3, dtype=dtype))


def test_a_sparse_tensor_is_a_value_error_naming_the_way_out():
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
    with pytest.raises(ValueError, match='sparse_allreduce_async'):
        hvd.allreduce(sparse)


def test_a_non_contiguous_tensor_in_place_is_a_value_error():
    t = torch.zeros(4, 6).t()
    with pytest.raises(ValueError, match='not contiguous'):
        hvd.allreduce_(t)
    out = hvd.allreduce(t, op=hvd.Sum)  # the out-of-place form takes a contiguous copy
    assert out.shape == (6, 4) and out.is_contiguous()


def test_adasum_says_what_is_missing():
    with pytest.raises(NotImplementedError, match='Adasum'):
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)
    with pytest.raises(RuntimeError, match='Adasum'):  # Horovod's tests catch RuntimeError
        hvd.reducescatter(torch.ones(2), op=hvd.Adasum)


def test_an_unregistered_process_set_is_a_value_error():
    with pytest.raises(ValueError, match='not registered'):
        hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0]))


def test_a_duplicate_in_flight_name_is_a_value_error():
    # A name stays in flight until the engine finishes the op, not until synchronize().
    t = torch.ones(5)
    if hvd.size() == 1:
        # Alone, the first op can finish before the second call arrives (a loaded machine), so
        # submit again until a submission meets the one before it still in flight.
        handles, error = [], None
        for _ in range(100):
            try:
                handles.append(hvd.allreduce_async(t, name='twice'))
            except ValueError as e:
                error = e
                break
        for h in handles:
            assert torch.equal(hvd.synchronize(h), torch.ones(5))
        assert error is not None, 'a second op under an in-flight name was never refused'
        assert 'already in flight' in str(error)
        return
    # With peers, the first op cannot finish before every rank has submitted it and a cycle ran.
    h = hvd.allreduce_async(t, name='twice')
    with pytest.raises(ValueError, match='already in flight'):
        hvd.allreduce_async(t, name='twice')
    assert torch.equal(hvd.synchronize(h), torch.ones(5))


def test_alltoall_splits_and_reducescatter_scalars_are_checked():
    size = hvd.size()
    with pytest.raises(ValueError, match='splits'):
        hvd.alltoall(torch.zeros(size + 2), torch.ones(size + 1, dtype=torch.int32))
    with pytest.raises(ValueError, match='integers'):
        hvd.alltoall(torch.zeros(size), torch.ones(size, dtype=torch.float32))
    with pytest.raises(ValueError, match='do not fit'):
        hvd.alltoall(torch.zeros(size - 1 if size > 1 else 0),
                     torch.ones(size, dtype=torch.int32))
    with pytest.raises(ValueError, match='scalar'):
        hvd.reducescatter(torch.tensor(1.0))


def test_different_shapes_under_one_name_fail_on_every_rank_and_the_next_op_works():
    if hvd.size() < 2:
        pytest.skip('needs 2 ranks')
    t = torch.ones(3 + hvd.rank())
    with pytest.raises(hvd.HorovodInternalError) as info:
        hvd.allreduce(t, name='mismatch')
    assert 'mismatch' in str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))


def test_ctrl_c_while_waiting_raises_keyboard_interrupt_within_the_signal_check():
    if hvd.size() < 2:
        pytest.skip('needs 2 ranks: rank 0 waits for rank 1')
    t = torch.ones(4)
    handle = None
    if hvd.rank() == 0:
        handle = hvd.allreduce_async_(t, name='interrupted', op=hvd.Sum)
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            hvd.synchronize(handle)
        assert time.monotonic() - start < 0.3 + 0.5
    hvd.barrier()
    if hvd.rank() != 0:
        handle = hvd.allreduce_async_(t, name='interrupted', op=hvd.Sum)
    assert torch.equal(hvd.synchronize(handle), torch.full((4,), float(hvd.size())))


def test_a_script_started_by_horovods_own_launcher_says_to_use_hvdrun():
    # horovodrun sets HOROVOD_SIZE and friends and runs its own rendezvous, which libhvd does not
    # speak: init() must refuse at once with the way out, not wait for peers that never come.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('HVD_', 'HOROVOD_', 'OMPI_', 'PMIX_', 'SLURM_'))}
    env.update(HOROVOD_SIZE='2', HOROVOD_RANK='1', HOROVOD_LOCAL_RANK='1', HOROVOD_LOCAL_SIZE='2',
               HOROVOD_CROSS_RANK='0', HOROVOD_CROSS_SIZE='1', HOROVOD_CONTROLLER='gloo',
               HOROVOD_GLOO_RENDEZVOUS_ADDR='127.0.0.1', HOROVOD_GLOO_RENDEZVOUS_PORT='9')
    script = ('import horovod.torch as hvd\n'
              'try:\n'
              '    hvd.init()\n'
              'except ValueError as e:\n'
              '    print("ValueError:", e)\n'
              'else:\n'
              '    print("init worked")\n')
    start = time.monotonic()
    run = subprocess.run([sys.executable, '-c', script], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith('ValueError: HOROVOD_SIZE=2 but neither hvdrun'), run.stdout
    assert 'start the program with hvdrun or mpirun' in run.stdout
    assert time.monotonic() - start < 60
