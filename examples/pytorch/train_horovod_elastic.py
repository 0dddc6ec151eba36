"""Elastic data-parallel training of the small Fashion-MNIST CNN with Horovod's PyTorch API on
hvdrun: the job goes on when a rank is lost and grows when the discovery script lists a new host.

    hvdrun -np 2 --min-np 1 --host-discovery-script ./discover.sh \\
        /usr/bin/python3 examples/pytorch/train_horovod_elastic.py --epochs 2

(with PYTHONPATH=build/python in a build tree). The training state (model, optimizer, the
sampler's progress through the epoch, the epoch and batch counters) lives in an
hvd.elastic.TorchState, committed every --commit-every batches. When a rank dies the others go
back to the last commit, continue in the smaller world and take up the dead rank's share of the
epoch (hvd.elastic.ElasticSampler); a rank on a new host starts from the state the others
hold. The learning rate follows the world's size (a reset callback). Rank 0 prints each epoch's
loss, test accuracy, world size and parameter checksum, which every rank must share (checked).

--kill WORKER:BATCH (a demonstration) SIGKILLs worker WORKER (its rank at the start) when the
job reaches global batch BATCH, once, to watch the others recover.
"""
import argparse
import os
import signal
import sys

import torch
import torch.nn.functional as F

import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402  (beside this script)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    fashion_mnist.add_training_args(p)
    p.add_argument('--commit-every', type=int, default=10, help='batches between commits')
    p.add_argument('--kill', default='', metavar='WORKER:BATCH',
                   help='demonstration: SIGKILL this worker at that global batch')
    return p.parse_args()


def main():
    args = parse_args()
    fashion_mnist.apply_backend_args(args)
    hvd.init()
    torch.manual_seed(args.seed)
    worker = int(os.environ.get('HOROVOD_RANK', '0'))  # this process's rank at its start
    kill_worker, kill_batch = (int(v) for v in args.kill.split(':')) if args.kill else (-1, -1)

    train_x, train_y = fashion_mnist.load(args.data, 'train', args.limit)
    test_x, test_y = fashion_mnist.load(args.data, 't10k')
    train_set = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = hvd.elastic.ElasticSampler(train_set, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = fashion_mnist.Net()
    base = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=args.momentum)
    optimizer = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                         op=hvd.Average)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=1, batch=0)

    def on_reset():
        for group in optimizer.param_groups:
            group['lr'] = args.lr * hvd.size()
        if hvd.rank() == 0:
            print(f'reset: {hvd.size()} ranks now', flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.epoch <= args.epochs:
            model.train()
            for x, y in loader:
                if worker == kill_worker and state.batch == kill_batch:
                    print(f'worker {worker}: killed at batch {state.batch} (--kill)', flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
                optimizer.zero_grad()
                F.nll_loss(model(x), y).backward()
                optimizer.step()
                sampler.record_batch(0, args.batch_size)
                state.batch += 1
                if state.batch % args.commit_every == 0:
                    state.commit()
            # The epoch's end: score it, then start the next one with nothing processed.
            mine = test_x[hvd.rank()::hvd.size()], test_y[hvd.rank()::hvd.size()]
            accuracy = hvd.allreduce(torch.tensor(fashion_mnist.accuracy(model, *mine),
                                                  dtype=torch.float64),
                                     name='metric.accuracy', op=hvd.Average).item()
            sums = hvd.allgather_object(fashion_mnist.checksum(model))
            if len(set(sums)) != 1:
                raise SystemExit(f'rank {hvd.rank()}: the ranks hold different parameters after '
                                 f'epoch {state.epoch}: checksums {sums}')
            if hvd.rank() == 0:
                print(f'epoch {state.epoch}: test accuracy {accuracy:.4f} on {hvd.size()} ranks '
                      f'after {state.batch} batches, checksum {sums[0]:.6f}', flush=True)
            state.epoch += 1
            sampler.set_epoch(state.epoch)
            state.commit()

    if hvd.rank() == 0:
        print(f'fashion-mnist elastic (PyTorch {torch.__version__}, horovod.torch on hvdrun): '
              f'{hvd.size()} ranks, batch {args.batch_size} per rank, {len(train_set)} training '
              f'examples', flush=True)
    train(state)
    hvd.shutdown()


if __name__ == '__main__':
    main()
