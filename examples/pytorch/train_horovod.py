"""Data-parallel training of a small CNN on Fashion-MNIST with Horovod's PyTorch API on hvdrun.

    hvdrun -np 2 /usr/bin/python3 examples/pytorch/train_horovod.py --epochs 2

(with PYTHONPATH=build/python in a build tree; the python3-hvd package needs nothing). A script
written as for Horovod: `import horovod.torch as hvd` is hvdrun's hvd.torch. Each rank trains on
its shard of the training set (DistributedSampler), rank 0's initial weights and optimizer state
are broadcast, gradients are averaged by hvd.DistributedOptimizer as the backward pass produces
them, and the metrics are averaged over the ranks. Rank 0 prints each epoch's loss, test accuracy,
training steps per second and the parameter checksum, which every rank must share (checked).
"""
import argparse
import os
import sys

import torch

import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402  (beside this script)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    fashion_mnist.add_training_args(p)
    p.add_argument('--fp16-allreduce', action='store_true', help='compress gradients to fp16')
    return p.parse_args()


def average(value, name):
    """The mean over the ranks of a Python number."""
    return hvd.allreduce(torch.tensor(value, dtype=torch.float64), name=name, op=hvd.Average).item()


def main():
    args = parse_args()
    fashion_mnist.apply_backend_args(args)
    hvd.init()
    torch.manual_seed(args.seed)

    train_x, train_y = fashion_mnist.load(args.data, 'train', args.limit)
    test_x, test_y = fashion_mnist.load(args.data, 't10k')
    train_set = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=hvd.size(), rank=hvd.rank(), seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    # Each rank scores its slice of the test set; the accuracies are averaged (equal slices).
    test_x, test_y = test_x[hvd.rank()::hvd.size()], test_y[hvd.rank()::hvd.size()]

    model = fashion_mnist.Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(),
                                momentum=args.momentum)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none,
        op=hvd.Average)

    if hvd.rank() == 0:
        print(f'fashion-mnist (PyTorch {torch.__version__}, horovod.torch on hvdrun): '
              f'{hvd.size()} ranks, batch {args.batch_size} per rank, {len(train_set)} training '
              f'examples, {torch.get_num_threads()} torch threads per rank', flush=True)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        steps, mean_loss, seconds = fashion_mnist.train_epoch(model, loader, optimizer)
        accuracy = fashion_mnist.accuracy(model, test_x, test_y)
        loss = average(mean_loss, 'metric.loss')
        accuracy = average(accuracy, 'metric.accuracy')
        steps_per_s = average(steps / seconds, 'metric.steps_per_s')
        sums = hvd.allgather_object(fashion_mnist.checksum(model))
        if len(set(sums)) != 1:
            raise SystemExit(f'rank {hvd.rank()}: the ranks hold different parameters after '
                             f'epoch {epoch}: checksums {sums}')
        if hvd.rank() == 0:
            print(f'epoch {epoch}: loss {loss:.4f} test accuracy {accuracy:.4f} '
                  f'{steps_per_s:.1f} steps/s ({seconds:.2f} s) checksum {sums[0]:.6f}',
                  flush=True)
    hvd.shutdown()


if __name__ == '__main__':
    main()
