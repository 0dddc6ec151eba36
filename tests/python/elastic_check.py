"""A rank program for hvd.elastic tests (tests/python/test_elastic.py): STEPS training steps of
a one-weight model under hvd.DistributedOptimizer in hvd.elastic.run, committed after each step.
Step s adds s to the weight (SGD, lr 1, gradient -s averaged over the ranks), so the weight ends
at STEPS * (STEPS + 1) / 2 only when every step ran exactly once, whatever the world did.

    elastic_check.py STEPS [--step-seconds S] [--die WORKER:STEP:HOW[,...]] [--timestamps]

HOW: kill (SIGKILL itself), raise (an uncaught exception), exit (exit code 3). A worker is its
rank at the start (HOROVOD_RANK of generation 0); a joiner's is its first rank. Prints, per
worker: `worker W: generation G rank R size N` at each (re)start of the loop and `worker W done:
rank R size N resets K step S weight X` at the end.
"""
import argparse
import os
import signal
import sys
import time

import torch

import horovod.torch as hvd

parser = argparse.ArgumentParser()
parser.add_argument('steps', type=int)
parser.add_argument('--step-seconds', type=float, default=0.0)
parser.add_argument('--die', default='')
parser.add_argument('--timestamps', action='store_true', help='a line per step (the bench)')
args = parser.parse_args()

hvd.init()
worker = int(os.environ.get('HOROVOD_RANK', '0'))
# {(worker, step): how}: each listed worker dies when it is about to run that step.
deaths = {(int(w), int(s)): how for w, s, how in
          (item.split(':') for item in args.die.split(',') if item)}

model = torch.nn.Linear(1, 1, bias=False)
with torch.no_grad():
    model.weight.zero_()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(hvd.size())])


def train(state):
    print(f'worker {worker}: generation {len(resets)} rank {hvd.rank()} size {hvd.size()} '
          f'from step {state.step}', flush=True)
    while state.step < args.steps:
        step = state.step + 1
        how = deaths.get((worker, step))
        if how:
            print(f'worker {worker}: dying at step {step} ({how}) t={time.time():.4f}',
                  flush=True)
            if how == 'kill':
                os.kill(os.getpid(), signal.SIGKILL)
            if how == 'raise':
                raise RuntimeError(f'worker {worker} fails at step {step}')
            sys.exit(3)
        time.sleep(args.step_seconds)
        optimizer.zero_grad()
        loss = -(step * model.weight).sum()
        loss.backward()
        optimizer.step()
        state.step = step
        state.commit()
        if args.timestamps:
            print(f'worker {worker}: step {step} done in generation {len(resets)} '
                  f't={time.time():.4f}', flush=True)
    return model.weight.item()


# hvdrun sets HOROVOD_ELASTIC=1 in an elastic job's ranks; without it (the restart bench's
# plain job) the loop runs as it is: hvd.elastic.run refuses a job that is not elastic.
if os.environ.get('HOROVOD_ELASTIC') == '1':
    train = hvd.elastic.run(train)
weight = train(state)
print(f'worker {worker} done: rank {hvd.rank()} size {hvd.size()} resets {len(resets)} '
      f'step {state.step} weight {weight:.1f}', flush=True)
