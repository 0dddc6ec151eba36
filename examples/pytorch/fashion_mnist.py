"""Fashion-MNIST for the PyTorch examples: the data from Debian's dataset-fashion-mnist, and the
small CNN both examples/pytorch/train_horovod.py and bench/python_train_ddp.py train.

The files are the dataset's gzipped IDX files (train-images-idx3-ubyte.gz, ...), read with the
standard library and torch only (no torchvision, no download).
"""
import gzip
import os
import struct
import time

import torch
import torch.nn.functional as F

DEFAULT_DATA = '/usr/share/datasets/fashion-mnist'


def add_training_args(p):
    """The options every training script here shares (an argparse.ArgumentParser)."""
    p.add_argument('--epochs', type=int, default=2)
    p.add_argument('--batch-size', type=int, default=64, help='per rank')
    p.add_argument('--lr', type=float, default=0.01, help='for one rank; scaled by the rank count')
    p.add_argument('--momentum', type=float, default=0.9)
    p.add_argument('--data', default=DEFAULT_DATA,
                   help='the folder of the gzipped IDX files (default: %(default)s)')
    p.add_argument('--limit', type=int, default=0,
                   help='train on the first N examples only (0: all 60,000)')
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--no-onednn', action='store_true',
                   help="run convolutions without oneDNN (torch.backends.mkldnn): on torch 2.6 "
                        "with oneDNN 3.7 (Debian 13) its convolution backward can give NaN "
                        "(docs/pytorch.md)")


def apply_backend_args(args):
    """What add_training_args' options set in torch itself."""
    if args.no_onednn:
        torch.backends.mkldnn.enabled = False


def _read_idx(path):
    if not os.path.exists(path):
        raise SystemExit(f'{path} does not exist: install the Debian package dataset-fashion-mnist '
                         f'(apt-get install dataset-fashion-mnist), or pass --data DIR')
    with gzip.open(path, 'rb') as f:
        data = f.read()
    magic, count = struct.unpack('>II', data[:8])
    dims = magic & 0xff
    shape = (count,) + struct.unpack('>' + 'I' * (dims - 1), data[8:4 * (dims + 1)])
    body = data[4 * (dims + 1):]
    if len(body) != torch.Size(shape).numel():
        raise SystemExit(f'{path}: {len(body)} bytes of data for shape {shape}: truncated?')
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).reshape(shape)


def load(data_dir, split, limit=0):
    """(images, labels) of `split` ('train' or 't10k'): images float32 N x 1 x 28 x 28,
    normalised; labels int64. `limit` > 0 keeps only the first `limit` examples."""
    images = _read_idx(os.path.join(data_dir, f'{split}-images-idx3-ubyte.gz'))
    labels = _read_idx(os.path.join(data_dir, f'{split}-labels-idx1-ubyte.gz'))
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    images = (images.to(torch.float32).unsqueeze(1) / 255.0 - 0.2860) / 0.3530
    return images, labels.to(torch.int64)


class Net(torch.nn.Module):
    """Two convolutions and two linear layers (about 22,000 parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = torch.nn.Conv2d(10, 20, kernel_size=5)
        self.fc1 = torch.nn.Linear(320, 50)
        self.fc2 = torch.nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2(x), 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


def train_epoch(model, loader, optimizer):
    """One pass over `loader`: (steps, mean loss, seconds of training)."""
    model.train()
    start, steps, loss_sum = time.perf_counter(), 0, 0.0
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        steps += 1
        loss_sum += loss.item()
    return steps, loss_sum / max(steps, 1), time.perf_counter() - start


def accuracy(model, x, y):
    """The fraction of `x` the model classifies as `y`."""
    model.eval()
    with torch.no_grad():
        return (model(x).argmax(1) == y).double().mean().item()


def checksum(model):
    """The sum of every parameter, in float64: equal on every rank of a data-parallel job."""
    with torch.no_grad():
        return sum(p.double().sum().item() for p in model.parameters())
