"""A rank that dies during a collective: the other raises HorovodInternalError naming it, within
HOROVOD_GLOO_TIMEOUT_SECONDS, not a hang. Runs its own 2-rank hvdrun job (so only in the size-1
run, with the built hvdrun that run_pytest.sh names in HVDTEST_HVDRUN)."""
import os
import subprocess
import sys

import pytest

import hvd.torch as hvd

# Rank 1 dies while rank 0 waits in an allreduce that rank 1 never submits. Rank 0 keeps its
# SIGTERM (hvdrun stops the job once a rank fails: --grace 20 leaves rank 0 the time to say what
# it saw) and prints what its wait ended with, and after how long.
RANK_PROGRAM = r'''
import os, signal, sys, time
import torch
import horovod.torch as hvd
hvd.init()
hvd.barrier()
if hvd.rank() == 1:
    time.sleep(0.5)  # rank 0 is waiting by then
    if sys.argv[1] == 'kill':
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)  # gone without shutdown(): as a crash looks to the others
signal.signal(signal.SIGTERM, lambda *_: None)
start = time.monotonic()
try:
    hvd.allreduce(torch.ones(4), name='never.completed')
    print('allreduce completed', flush=True)
except hvd.HorovodInternalError as e:
    print(f'HorovodInternalError after {time.monotonic() - start:.1f} s: {e}', flush=True)
'''


@pytest.mark.parametrize('how', ['kill', 'exit'])
def test_a_rank_dying_during_a_collective_fails_the_others_wait(how):
    hvdrun = os.environ.get('HVDTEST_HVDRUN')
    if hvd.size() != 1 or not hvdrun:
        pytest.skip('runs its own 2-rank job: only in the size-1 run, with HVDTEST_HVDRUN set '
                    '(tests/python/run_pytest.sh BUILD alone)')
    gloo_timeout = 30
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('HVD_', 'HOROVOD_', 'OMPI_', 'PMIX_', 'SLURM_'))}
    run = subprocess.run([hvdrun, '-np', '2', '-H', 'localhost:2', '--grace', '20',
                          '-x', 'PYTHONPATH', '-x', f'HOROVOD_GLOO_TIMEOUT_SECONDS={gloo_timeout}',
                          sys.executable, '-c', RANK_PROGRAM, how],
                         env=env, capture_output=True, text=True, timeout=120)
    out = run.stdout + run.stderr
    lines = [line for line in out.splitlines() if 'HorovodInternalError after' in line]
    assert len(lines) == 1, out
    assert lines[0].startswith('[1,0]<stdout>:'), out
    seconds = float(lines[0].split('after ')[1].split(' s:')[0])
    assert seconds < gloo_timeout, out
    assert 'rank 1' in lines[0], out  # names the rank that went away
    assert 'allreduce completed' not in out
    assert run.returncode == (137 if how == 'kill' else 0), out
