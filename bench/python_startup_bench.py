"""Start-up and memory of horovod.torch on hvdrun against PyTorch's own Gloo process group, in one
rank program with two modes (run each under hvdrun at 2 ranks; bench/python_startup_bench.sh
alternates them and prints the table):

  --mode hvd   `import horovod.torch as hvd; hvd.init()`: the seconds each takes, the rank's RSS
               after them, the mean cost of a `shutdown(); init()` round (ROUNDS rounds), and the
               RSS after 100 and after 1,000 steps of hvd.DistributedOptimizer on
               examples/pytorch's CNN (random batches of 64, so no data loading is measured).
  --mode ddp   `import torch.distributed; init_process_group("gloo")` (env://): its seconds and
               the RSS after it.

`import torch` is timed first in both and reported on its own. Rank 0 prints one line of
key=value pairs (seconds, MiB).
"""
import argparse
import os
import sys
import time

t0 = time.perf_counter()
import torch  # noqa: E402
t_torch = time.perf_counter() - t0


def rss_mib():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    return float('nan')


p = argparse.ArgumentParser()
p.add_argument('--mode', choices=('hvd', 'ddp'), required=True)
p.add_argument('--rounds', type=int, default=20)
p.add_argument('--steps', type=int, default=1000)
args = p.parse_args()
out = {'import_torch_s': t_torch}

if args.mode == 'ddp':
    t0 = time.perf_counter()
    import torch.distributed as dist
    dist.init_process_group('gloo')
    out['init_s'] = time.perf_counter() - t0
    out['rss_after_init_mib'] = rss_mib()
    rank = dist.get_rank()
    dist.destroy_process_group()
else:
    t0 = time.perf_counter()
    import horovod.torch as hvd
    out['import_s'] = time.perf_counter() - t0
    t0 = time.perf_counter()
    hvd.init()
    out['init_s'] = time.perf_counter() - t0
    out['rss_after_init_mib'] = rss_mib()
    rank = hvd.rank()
    t0 = time.perf_counter()
    for _ in range(args.rounds):
        hvd.shutdown()
        hvd.init()
    out['reinit_round_s'] = (time.perf_counter() - t0) / max(args.rounds, 1)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'examples',
                                    'pytorch'))
    import fashion_mnist
    torch.manual_seed(0)
    model = fashion_mnist.Net()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    for step in range(1, args.steps + 1):
        optimizer.zero_grad()
        torch.nn.functional.nll_loss(model(x), y).backward()
        optimizer.step()
        if step == 100:
            out['rss_step100_mib'] = rss_mib()
    out['rss_step%d_mib' % args.steps] = rss_mib()
    hvd.shutdown()
if rank == 0:
    print(args.mode, ' '.join(f'{k}={v:.3f}' for k, v in out.items()), flush=True)
