"""hvd.elastic (horovod.torch.elastic) under hvdrun's elastic launch: a rank killed, failing by
exception or exiting mid-training; a host added by the discovery script, and removed; the reset
limit; a failed slot back after --blacklist-cooldown-range; the bad input of the
issue (a state that cannot be pickled, a reset callback that raises, commit() outside run, run()
outside an elastic job). The jobs are our own hvdrun runs of tests/python/elastic_check.py on
this machine (127.0.0.1 stands for a second host), so they run only in the size-1 pytest run,
with HVDTEST_HVDRUN set (tests/python/run_pytest.sh BUILD alone)."""
import os
import re
import subprocess
import sys

import pytest

import hvd.torch as hvd

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, 'elastic_check.py')


def _hvdrun():
    hvdrun = os.environ.get('HVDTEST_HVDRUN')
    if hvd.size() != 1 or not hvdrun:
        pytest.skip('runs its own elastic jobs: only in the size-1 run, with HVDTEST_HVDRUN set '
                    '(tests/python/run_pytest.sh BUILD alone)')
    return hvdrun


def _run(args, program, timeout=120):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('HVD_', 'HOROVOD_', 'OMPI_', 'PMIX_', 'SLURM_'))}
    run = subprocess.run([_hvdrun()] + args + ['-x', 'PYTHONPATH', sys.executable] + program,
                         env=env, capture_output=True, text=True, timeout=timeout)
    return run, run.stdout + run.stderr


def _discovery_script(tmp_path, when):
    """A host discovery script that lists localhost:2, and 127.0.0.1:1 (a second host on this
    machine) on the runs where the shell test `when` on its run count $n holds."""
    count = tmp_path / 'count'
    script = tmp_path / 'discover.sh'
    script.write_text('#!/bin/sh\n'
                      f'n=$(cat {count} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {count}\n'
                      'echo localhost:2\n'
                      f'if {when}; then echo 127.0.0.1:1; fi\n')
    script.chmod(0o755)
    return script


def _done(out):
    """{worker: (rank, size, resets, step, weight)} from elastic_check.py's last lines."""
    found = re.findall(r'worker (\d+) done: rank (\d+) size (\d+) resets (\d+) step (\d+) '
                       r'weight ([\d.]+)', out)
    return {int(w): (int(r), int(n), int(k), int(s), float(x)) for w, r, n, k, s, x in found}


@pytest.mark.parametrize('how', ['kill', 'raise', 'exit'])
def test_the_survivors_go_on_from_the_last_commit(how):
    run, out = _run(['-np', '3', '-H', 'localhost:3', '--min-np', '2'],
                    [CHECK, '20', '--die', f'2:7:{how}'])
    assert run.returncode == 0, out
    assert 'elastic: generation 1: 2 ranks on 1 host' in out, out
    # Every one of the 20 steps ran once: 1 + ... + 20 = 210, on both survivors.
    assert _done(out) == {0: (0, 2, 1, 20, 210.0), 1: (1, 2, 1, 20, 210.0)}, out
    # They went on from the commit of step 6, not from the start.
    assert re.search(r'worker 0: generation 1 rank 0 size 2 from step 6\b', out), out


def test_a_host_the_discovery_script_adds_joins_with_the_state(tmp_path):
    script = _discovery_script(tmp_path, '[ $n -ge 3 ]')
    run, out = _run(['-np', '2', '--min-np', '2', '--host-discovery-script', str(script),
                     '--discovery-interval', '0.5'],
                    [CHECK, '30', '--step-seconds', '0.2'])
    assert run.returncode == 0, out
    assert 'generation 1: 3 ranks on 2 hosts (growing: 127.0.0.1#0 free slot)' in out, out
    done = _done(out)
    assert sorted(done) == [0, 1, 2], out
    for worker, (rank, size, _, step, weight) in done.items():
        assert (size, step, weight) == (3, 30, 465.0), out  # 1 + ... + 30, on every rank
    # The joiner started from the others' state, not from step 0.
    joined = re.search(r'worker 2: generation 0 rank 2 size 3 from step (\d+)', out)
    assert joined and int(joined.group(1)) > 0, out


def test_a_host_added_then_removed_leaves_quietly(tmp_path):
    """Horovod's scenario: a host joins, then the discovery script drops it; its worker leaves
    (a line and exit 0, no traceback) and the others finish every step once."""
    script = _discovery_script(tmp_path, '[ $n -ge 3 ] && [ $n -le 8 ]')
    run, out = _run(['-np', '2', '--min-np', '2', '--host-discovery-script', str(script),
                     '--discovery-interval', '0.5'],
                    [CHECK, '40', '--step-seconds', '0.2'])
    assert run.returncode == 0, out
    assert 'growing: 127.0.0.1#0 free slot' in out, out
    assert '127.0.0.1#0 no longer listed by the host discovery' in out, out
    assert re.search(r'\[1,2\]<stderr>:hvd.elastic: worker 2 is not in generation \d+', out), out
    assert 'Traceback' not in out, out
    done = _done(out)
    assert {w: (n, s, x) for w, (_, n, _, s, x) in done.items()} == \
        {0: (2, 40, 820.0), 1: (2, 40, 820.0)}, out


@pytest.mark.parametrize('limit', [1, 2])
def test_reset_limit(limit):
    """Two failures (worker 3 at step 5, worker 2 at step 10): --reset-limit 2 lives through
    both; --reset-limit 1 ends the job at the second with the rank's code and the reason."""
    run, out = _run(['-np', '4', '-H', 'localhost:4', '--min-np', '1', '--reset-limit',
                     str(limit)], [CHECK, '20', '--die', '3:5:kill,2:10:kill'])
    if limit == 2:
        assert run.returncode == 0, out
        assert _done(out) == {0: (0, 2, 2, 20, 210.0), 1: (1, 2, 2, 20, 210.0)}, out
    else:
        assert run.returncode == 137, out
        assert 'elastic: --reset-limit 1 reached' in out, out
        assert _done(out) == {}, out


def test_a_failed_slot_comes_back_after_its_cooldown():
    """--blacklist-cooldown-range 1 2: worker 2's slot is out after its death, then back; the new
    process there joins with the others' state and every rank finishes every step once."""
    run, out = _run(['-np', '3', '-H', 'localhost:3', '--min-np', '2',
                     '--blacklist-cooldown-range', '1', '2'],
                    [CHECK, '40', '--step-seconds', '0.2', '--die', '2:5:kill'])
    assert run.returncode == 0, out
    assert re.search(r'slot localhost#2 cools down for [12]\.\d s', out), out
    assert 'growing: localhost#2 back after its cooldown' in out, out
    done = _done(out)
    assert sorted(done) == [0, 1, 2], out
    assert all((n, s, x) == (3, 40, 820.0) for _, n, _, s, x in done.values()), out
    # Worker 2 started twice: at step 0, then again in its slot after the cooldown, from the
    # others' state.
    starts = re.findall(r'worker 2: generation 0 rank 2 size 3 from step (\d+)', out)
    assert len(starts) == 2 and int(starts[0]) == 0 and int(starts[1]) > 0, out


def test_every_rank_failing_ends_the_job_with_their_code():
    run, out = _run(['-np', '2', '-H', 'localhost:2', '--min-np', '1'],
                    [CHECK, '20', '--die', '0:5:exit,1:5:exit'])
    assert run.returncode == 3, out
    assert _done(out) == {}, out


BAD_STATE = r'''
import threading
import horovod.torch as hvd
hvd.init()
state = hvd.elastic.TorchState(epoch=0, lock=threading.Lock())
@hvd.elastic.run
def train(state):
    return 0
try:
    train(state)
except TypeError as e:
    print('TypeError:', e, flush=True)
'''

COMMIT_OUTSIDE = r'''
import horovod.torch as hvd
hvd.init()
state = hvd.elastic.TorchState(epoch=0)
try:
    state.commit()
except ValueError as e:
    print('ValueError:', e, flush=True)
'''

CALLBACK_RAISES = r'''
import os, signal, time
import torch
import horovod.torch as hvd
hvd.init()
worker = hvd.rank()
state = hvd.elastic.TorchState(step=0)
def callback():
    raise KeyError('no such learning rate')
state.register_reset_callbacks([callback])
@hvd.elastic.run
def train(state):
    while state.step < 20:
        if worker == 2 and state.step == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        hvd.allreduce(torch.ones(1), name='step')
        state.step += 1
        state.commit()
try:
    train(state)
except RuntimeError as e:
    print(f'worker {worker} RuntimeError:', e, flush=True)
'''


def test_a_state_that_cannot_be_pickled_names_the_attribute():
    run, out = _run(['-np', '2', '-H', 'localhost:2', '--min-np', '1'], ['-c', BAD_STATE])
    assert run.returncode == 0, out
    for rank in (0, 1):
        assert re.search(rf'\[1,{rank}\]<stdout>:TypeError: hvd.elastic: the state attribute '
                         r"'lock' \(lock\) cannot be pickled", out), out


def test_commit_outside_run_in_an_elastic_job_is_a_value_error():
    run, out = _run(['-np', '2', '-H', 'localhost:2', '--min-np', '1'], ['-c', COMMIT_OUTSIDE])
    assert run.returncode == 0, out
    assert out.count('ValueError: State.commit() outside hvd.elastic.run') == 2, out


def test_a_reset_callback_that_raises_ends_the_loop_with_its_error():
    run, out = _run(['-np', '3', '-H', 'localhost:3', '--min-np', '2'], ['-c', CALLBACK_RAISES])
    for worker in (0, 1):
        assert (f'worker {worker} RuntimeError: hvd.elastic: the reset callback' in out and
                "raised KeyError: 'no such learning rate'" in out), out


def test_run_outside_an_elastic_job_says_how_to_start_one():
    if hvd.size() != 1:
        pytest.skip('once is enough (size-1 run)')
    state = hvd.elastic.TorchState(epoch=0)

    @hvd.elastic.run
    def train(state):
        return 1

    with pytest.raises(ValueError, match='not part of an elastic hvdrun job'):
        train(state)
    state.commit()  # outside an elastic job: Horovod's single-process use, a plain save
