"""The baseline of bench/python_train_bench.sh: examples/pytorch/train_horovod.py's model, data
and loop under PyTorch's own DistributedDataParallel (Gloo, env:// rendezvous from the RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT hvdrun sets). Same arguments, same epoch line.

    hvdrun -np 2 /usr/bin/python3 bench/python_train_ddp.py --epochs 2 --limit 12000
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'examples',
                                'pytorch'))
import fashion_mnist  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=64)
    p.add_argument('--lr', type=float, default=0.01)
    p.add_argument('--momentum', type=float, default=0.9)
    p.add_argument('--data', default=fashion_mnist.DEFAULT_DATA)
    p.add_argument('--limit', type=int, default=0)
    p.add_argument('--seed', type=int, default=42)
    args = p.parse_args()

    os.environ.setdefault('USE_LIBUV', '0')  # Debian 13's torch has no libuv (docs/pytorch.md)
    dist.init_process_group('gloo')
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    train_x, train_y = fashion_mnist.load(args.data, 'train', args.limit)
    test_x, test_y = fashion_mnist.load(args.data, 't10k')
    train_set = torch.utils.data.TensorDataset(train_x, train_y)
    sampler = torch.utils.data.distributed.DistributedSampler(
        train_set, num_replicas=size, rank=rank, seed=args.seed)
    loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    test_x, test_y = test_x[rank::size], test_y[rank::size]

    model = DDP(fashion_mnist.Net())  # broadcasts rank 0's parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=args.momentum)

    def average(value):
        t = torch.tensor(value, dtype=torch.float64)
        dist.all_reduce(t)
        return t.item() / size

    if rank == 0:
        print(f'fashion-mnist (PyTorch {torch.__version__}, DDP over Gloo): {size} ranks, batch '
              f'{args.batch_size} per rank, {len(train_set)} training examples, '
              f'{torch.get_num_threads()} torch threads per rank', flush=True)
    for epoch in range(1, args.epochs + 1):
        sampler.set_epoch(epoch)
        steps, mean_loss, seconds = fashion_mnist.train_epoch(model, loader, optimizer)
        accuracy = fashion_mnist.accuracy(model, test_x, test_y)
        loss, accuracy = average(mean_loss), average(accuracy)
        steps_per_s = average(steps / seconds)
        if rank == 0:
            print(f'epoch {epoch}: loss {loss:.4f} test accuracy {accuracy:.4f} '
                  f'{steps_per_s:.1f} steps/s ({seconds:.2f} s) checksum '
                  f'{fashion_mnist.checksum(model.module):.6f}', flush=True)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
