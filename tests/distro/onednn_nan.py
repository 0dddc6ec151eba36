"""torch alone (no hvd): the NaN of docs/pytorch.md's "NaN on torch 2.6" (a diagnostic, not a test).

    bash tests/distro/debian13.sh exec env ONEDNN_PRIMITIVE_CACHE_CAPACITY=0 \
      python3 tests/distro/onednn_nan.py

examples/pytorch/train_horovod.py's CNN, one process, one thread, plain SGD on Fashion-MNIST;
exits 1 at the first step whose gradients are not finite. On Debian 13 (torch 2.6, libdnnl
3.7.2+ds-2) with oneDNN's primitive cache off it stops within the first ten steps; with the
cache on (the default) it ran clean here, while hvd's DistributedOptimizer runs beside it
brought the same NaN in about half of the epochs.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'examples',
                                'pytorch'))
import fashion_mnist  # noqa: E402

torch.set_num_threads(1)
torch.manual_seed(42)
x_all, y_all = fashion_mnist.load(fashion_mnist.DEFAULT_DATA, 'train')
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_all, y_all), batch_size=64)
model = fashion_mnist.Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
for step, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    F.nll_loss(model(x), y).backward()
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p.grad).all()]
    if bad:
        sys.exit(f'step {step}: non-finite gradients {bad} (torch {torch.__version__}, '
                 f'oneDNN on: {torch.backends.mkldnn.is_available()})')
    optimizer.step()
print(f'{step + 1} steps, every gradient finite (torch {torch.__version__})')
