"""A PyTorch rank program for tests/e2e/test_pytorch.cpp: real torch, real DDP, under hvdrun.

    ddp_check.py grads   DDP over init_process_group("gloo") (env://: the RANK, WORLD_SIZE,
                         MASTER_ADDR and MASTER_PORT hvdrun sets): each rank feeds its own batch;
                         after backward every rank must hold the mean of the gradients each rank
                         computes locally without DDP (gathered separately). Exit 1 otherwise.
    ddp_check.py sleep   prints a line, then sleeps 5 s (the line must reach hvdrun at once)
    ddp_check.py kill    rank 1 prints a line, then SIGKILLs itself (the line must not be lost)
    ddp_check.py raise   rank 1 raises ValueError (hvdrun must report its last line)

Run it with /usr/bin/python3: Debian's python3-torch lives there.
"""
import os
import signal
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "grads"


def say(line):
    """One write per line. print() makes two (the text, then the newline) on the unbuffered stdout
    hvdrun gives Python ranks, and Open MPI 5's --tag-output tags by stream, not by rank: a piece
    of one rank's line then carries another rank's tag (docs/cli.md, MPI mode)."""
    sys.stdout.write(line + "\n")
rank = int(os.environ.get("RANK", "-1"))

if mode == "sleep":
    say(f"rank {rank}: before the sleep at {time.time():.3f}")
    time.sleep(5)
    say(f"rank {rank}: after the sleep")
    sys.exit(0)
if mode == "kill":
    if rank == 1:
        say(f"rank {rank}: last words before SIGKILL")
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)  # hvdrun stops it after rank 1's death
    sys.exit(0)
if mode == "raise":
    if rank == 1:
        raise ValueError("ddp_check: rank 1 cannot read its shard")
    time.sleep(30)  # hvdrun stops it after rank 1's failure
    sys.exit(0)

import torch  # noqa: E402  (after the modes that do not need it: they start faster)
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

# Debian 13's torch 2.6 is built without libuv, but torch 2.4 and later ask for it in env://'s
# store by default ("use_libuv was requested but PyTorch was build without libuv support"): the
# plain TCP store, as a user of that torch must ask (docs/pytorch.md). torch 1.13 ignores it.
os.environ.setdefault("USE_LIBUV", "0")
dist.init_process_group("gloo")  # env://
world = dist.get_world_size()
assert dist.get_rank() == rank, (dist.get_rank(), rank)
say(f"rank {rank} of {world}: local rank {os.environ['LOCAL_RANK']}, master "
      f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, torch {torch.__version__}")


def model():
    torch.manual_seed(0)  # the same initial weights on every rank
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


torch.manual_seed(100 + rank)  # each rank its own data
x, y = torch.randn(32, 8), torch.randn(32, 1)

# Local gradients, no DDP; every rank's gathered, to know the mean independently of DDP.
local = model()
torch.nn.functional.mse_loss(local(x), y).backward()
mine = torch.cat([p.grad.flatten() for p in local.parameters()])
gathered = [torch.zeros_like(mine) for _ in range(world)]
dist.all_gather(gathered, mine)
expected = torch.stack(gathered).mean(dim=0)

ddp = DDP(model())
torch.nn.functional.mse_loss(ddp(x), y).backward()
got = torch.cat([p.grad.flatten() for p in ddp.module.parameters()])
diff = (got - expected).abs().max().item()
spread = (torch.stack(gathered) - expected).abs().max().item()
ok = diff < 1e-5 and spread > 1e-3  # equal to the mean, and the ranks' own gradients differed
say(f"rank {rank}: DDP gradients {'equal' if ok else 'DIFFER FROM'} the mean of {world} ranks' "
      f"local gradients (max difference {diff:.2e}; local gradients differ by up to {spread:.2e})")
dist.destroy_process_group()
sys.exit(0 if ok else 1)
