"""The NaN of "NaN on torch 2.6" (docs/pytorch.md) under hvd; a diagnostic, not a test.
(onednn_nan.py beside it shows the same NaN with torch alone: a oneDNN 3.7 bug.)

    bash tests/distro/debian13.sh exec bash -c 'for i in 1 2 3 4; do \
      PYTHONPATH=build-d13/python build-d13/cli/hvdrun -np 2 /usr/bin/python3 \
      tests/distro/nan_repro.py; done'

One epoch of examples/pytorch/train_horovod.py's CNN with hvd.DistributedOptimizer; after each
backward() it checks every gradient and the gradients of the first layers' activations, and
stops at the first non-finite one, saying where it appeared. Each gradient is also copied as it
is submitted (which says whether it was already non-finite before the allreduce): with those
copies, 3 of 5 runs stop on Debian 13 (SET_TO_NONE=0), in the gradient of the second
convolution's input, 4096 values of one channel; without them, none of 8 did. Switches, as
environment variables forwarded with -x NAME:
  ONEDNN=0   torch.backends.mkldnn.enabled = False (no NaN seen so)
  CLONE=1    libhvd reduces copies of the gradients, not the gradients (no NaN seen so)
  SET_TO_NONE=0  optimizer.zero_grad(set_to_none=False): NaN seen more often so
"""
import os
import sys

import torch
import torch.nn.functional as F

import horovod.torch as hvd
import hvd.torch.optimizer as hvd_optimizer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'examples',
                                'pytorch'))
import fashion_mnist  # noqa: E402

hvd.init()
if os.environ.get('ONEDNN') == '0':
    torch.backends.mkldnn.enabled = False
torch.manual_seed(42)
events = []   # what the activation-gradient hooks saw in this step
copies = []   # CLONE=1: the copies in flight


def watch(t, what):
    def hook(g):
        bad = ~torch.isfinite(g)
        if bad.any():
            channels = sorted(set(bad.nonzero()[:, 1].tolist()))
            events.append(f'gradient of {what} {tuple(g.shape)}: {int(bad.sum())} non-finite, '
                          f'channels {channels}')
    t.register_hook(hook)
    return t


class Net(fashion_mnist.Net):
    def forward(self, x):
        x = F.relu(watch(F.max_pool2d(watch(self.conv1(x), 'conv1 out'), 2), 'pool1 out'))
        x = watch(self.conv2(watch(x, 'relu1 out')), 'conv2 out')
        x = F.relu(F.max_pool2d(x, 2))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.log_softmax(self.fc2(x), dim=1)


submitted = {}  # each gradient as it was submitted (a copy), by name: NaN is far more frequent so
submit = hvd_optimizer.mpi_ops.allreduce_async_


def submit_recorded(tensor, name=None, **kw):
    submitted[name] = tensor.clone()
    if os.environ.get('CLONE') == '1':
        copies.append(tensor.clone())
        tensor = copies[-1]
    return submit(tensor, name=name, **kw)


hvd_optimizer.mpi_ops.allreduce_async_ = submit_recorded

x_all, y_all = fashion_mnist.load(fashion_mnist.DEFAULT_DATA, 'train')
data = torch.utils.data.TensorDataset(x_all, y_all)
sampler = torch.utils.data.distributed.DistributedSampler(
    data, num_replicas=hvd.size(), rank=hvd.rank(), seed=42)
loader = torch.utils.data.DataLoader(data, batch_size=64, sampler=sampler)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
model.train()
for step, (x, y) in enumerate(loader):
    optimizer.zero_grad(set_to_none=os.environ.get('SET_TO_NONE') != '0')
    events.clear()
    loss = F.nll_loss(model(x), y)
    loss.backward()
    optimizer.synchronize()
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p.grad).all()]
    if bad or events:
        local = [n for n, t in submitted.items() if not torch.isfinite(t).all()]
        print(f'rank {hvd.rank()} step {step}: non-finite gradients {bad} (of which non-finite '
              f'here before the allreduce: {local}); {events}', flush=True)
        break
    copies.clear()
    with optimizer.skip_synchronize():
        optimizer.step()
else:
    print(f'rank {hvd.rank()}: {step + 1} steps, every gradient finite', flush=True)
