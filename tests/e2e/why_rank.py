"""The rank program of tests/e2e/test_why.cpp: rank 1 keeps rank 0 waiting for a few seconds in
one of four ways, then catches up, so that every job ends by itself (exit 0) after hvdrun's
stall verdicts (HOROVOD_STALL_CHECK_TIME_SECONDS=2) have named it.

  sleep     rank 1 sleeps in load_batch() before the allreduce
  busy      rank 1 spins in spin() (running, using CPU)
  stop      rank 1 stops itself (SIGSTOP); a child it left behind continues it
  other_op  rank 0 submits 'first' then 'second', rank 1 'second' then 'first'

Or it never catches up, for the verdicts that end the job:

  hang      rank 1 sleeps in load_batch() for HANG seconds before the allreduce
  freeze    rank 1 stops itself for good before the allreduce
  no_init   rank 1 sleeps in load_batch() for HANG seconds before hvd.init()

Or it runs STEPS steps of STEP seconds' work and three (cached) allreduces each, for stragglers:

  straggle  rank 1's steps take 30% longer
  balanced  every rank's steps take as long
"""
import os
import subprocess
import sys
import time

import torch
import horovod.torch as hvd

WAIT = 5.0  # seconds rank 1 keeps the others waiting
HANG = 120.0  # ... when hvdrun is to end the job first
STEPS, STEP = 40, 0.1


def load_batch(seconds=WAIT):
    time.sleep(seconds)


def spin():
    end = time.monotonic() + WAIT
    n = 0
    while time.monotonic() < end:
        n += 1
    return n


def main(mode):
    if mode == 'no_init' and os.environ['HOROVOD_RANK'] == '1':
        load_batch(HANG)
    hvd.init()
    if mode in ('straggle', 'balanced'):
        work = STEP * (1.3 if mode == 'straggle' and hvd.rank() == 1 else 1.0)
        for step in range(STEPS):  # a training loop's gradients: cached after the first step
            time.sleep(work)
            for grad in range(3):
                hvd.allreduce(torch.ones(2), name=f'grad.{grad}')
    elif mode == 'other_op':
        # Each rank's first op waits for the other's second: both are in flight, each under
        # another name, until rank 1 (after WAIT) and rank 0 submit their second ones.
        names = ['first', 'second'] if hvd.rank() == 0 else ['second', 'first']
        h = hvd.allreduce_async(torch.ones(2), name=names[0])
        if hvd.rank() == 1:
            time.sleep(WAIT)
        else:
            time.sleep(WAIT + 1)
        hvd.allreduce(torch.ones(2), name=names[1])
        hvd.synchronize(h)
    else:
        if hvd.rank() == 1:
            if mode == 'sleep':
                load_batch()
            elif mode == 'busy':
                spin()
            elif mode == 'stop':
                subprocess.Popen(['sh', '-c', f'sleep {WAIT}; kill -CONT {os.getpid()}'])
                os.kill(os.getpid(), 19)  # SIGSTOP
            elif mode == 'hang':
                load_batch(HANG)
            elif mode == 'freeze':
                os.kill(os.getpid(), 19)
        hvd.allreduce(torch.ones(2), name='grad.7')
    print(f'rank {hvd.rank()} done', flush=True)


if __name__ == '__main__':
    main(sys.argv[1])
