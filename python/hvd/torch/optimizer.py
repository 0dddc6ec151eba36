"""DistributedOptimizer (horovod.torch.optimizer is this module): a torch optimizer whose step()
first averages the gradients over the ranks.

Communication overlaps the backward pass: a hook on each parameter's gradient accumulator
submits that gradient's allreduce (asynchronous, named after the parameter, in place) as soon as
it is ready, and libhvd's engine fuses what arrives together. step() (or synchronize()) waits
for them. A parameter that got no gradient in a step is allreduced as zeros, so every rank
submits the same names.
"""
import contextlib
import warnings

import torch

from hvd.common.basics import check_process_set, global_process_set
from hvd.torch import mpi_ops
from hvd.torch.compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    """Mixed into the wrapped optimizer's own class (see DistributedOptimizer): `super(...)`
    below is that class, whose step() updates the parameters."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=mpi_ops.Average, gradient_predivide_factor=1.0, num_groups=0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        super(self.__class__, self).__init__(params)
        check_process_set(process_set)
        self._process_set = process_set
        if op == mpi_ops.Adasum:
            mpi_ops._reduce_op(op, 'DistributedOptimizer')
        if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
            raise ValueError('gradient_predivide_factor not supported with op != Average')
        _check_groups(num_groups, groups)
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = backward_passes_per_step
        self._parameter_names = self._names(named_parameters)
        self._delay = {}
        self._handles = {}
        self._grad_accs = {}
        self._synchronized = False
        self._should_synchronize = True
        # A rank outside the process set trains on its own, as Horovod's does: no hooks, and
        # synchronize() does nothing.
        self._included = process_set is None or process_set.included() is not False
        for p in self._all_params():
            self._delay[p] = backward_passes_per_step
            if p.requires_grad and self._included:
                self._register_hook(p)

    def _all_params(self):
        return [p for group in self.param_groups for p in group['params']]

    def _names(self, named_parameters):
        all_params = self._all_params()
        if named_parameters is None:
            return {p: f'noname.{i}.{j}' for i, group in enumerate(self.param_groups)
                    for j, p in enumerate(group['params'])}
        named = list(named_parameters)
        if any(not isinstance(pair, tuple) or len(pair) != 2 for pair in named):
            raise ValueError('named_parameters should be a sequence of tuples (name, parameter), '
                             'usually produced by model.named_parameters().')
        names = [name for name, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f'Parameter names in named_parameters must be unique. Found '
                             f'duplicates: {", ".join(duplicates)}')
        by_param = {p: name for name, p in named}
        unnamed = [id(p) for p in all_params if p not in by_param]
        if unnamed:
            raise ValueError(f'named_parameters was specified, but one or more model parameters '
                             f'were not named. Python object ids: {", ".join(map(str, unnamed))}')
        return by_param

    def _register_hook(self, p):
        # The gradient accumulator of `p` (kept referenced: its hook lives as long as it does).
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
        accumulator.register_hook(self._make_hook(p))
        self._grad_accs[p] = accumulator

    def _make_hook(self, p):
        def hook(*unused):
            if self._handles.get(p, (None, None))[0] is not None and self._delay[p] <= 0:
                raise AssertionError(
                    'Gradients were computed more than backward_passes_per_step times before '
                    'call to step(). Increase backward_passes_per_step to accumulate gradients '
                    'locally.')
            self._delay[p] -= 1
            self._handles[p] = self._allreduce_grad_async(p) if self._delay[p] == 0 else \
                (None, None)
        return hook

    def _allreduce_grad_async(self, p):
        name = self._parameter_names.get(p)
        if p.grad is None:
            # No gradient here this step (another rank may have one): zeros, under the same name.
            p.grad = torch.zeros_like(p)
        grad = p.grad
        if grad.is_sparse:
            if not self._sparse_as_dense:
                return mpi_ops.sparse_allreduce_async(grad, name=f'sparse.{name}', op=self._op,
                                                      process_set=self._process_set), None
            grad = grad.to_dense()  # reduced dense; .grad stays sparse (synchronize)
        elif not grad.is_contiguous():
            p.grad = grad = grad.contiguous()
        tensor, ctx = self._compression.compress(grad)
        if self._op == mpi_ops.Average:
            prescale, postscale = 1.0 / self._predivide, self._predivide
        else:
            prescale = postscale = 1.0
        handle = mpi_ops.allreduce_async_(tensor, name=name, op=self._op,
                                          prescale_factor=prescale, postscale_factor=postscale,
                                          process_set=self._process_set)
        return handle, ctx

    def synchronize(self):
        """Waits for every gradient's allreduce (submitting those whose hook did not run) and
        puts the results into the parameters' .grad."""
        if not self._included:
            self._synchronized = True
            return
        for p in self._all_params():
            if p.requires_grad and p not in self._grad_accs:
                self._delay.setdefault(p, self.backward_passes_per_step)
                self._register_hook(p)  # requires_grad was switched on after construction
            if p.requires_grad and p not in self._handles:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step passes
                self._handles[p] = handle, ctx = self._allreduce_grad_async(p)
        try:
            for p, (handle, ctx) in self._handles.items():
                output = mpi_ops.synchronize(handle)
                self._delay[p] = self.backward_passes_per_step
                if p.grad.is_sparse:  # sparse optimizers (SparseAdam) want a sparse .grad
                    result = output if ctx is None else self._compression.decompress(output, ctx)
                    p.grad = result if result.is_sparse else result.to_sparse()
                elif ctx is not None:
                    p.grad.copy_(self._compression.decompress(output, ctx))
        finally:
            self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside it, step() does not synchronize (call synchronize() yourself first, e.g. to
        clip the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def _hvd_base_step(self, closure=None):
        return super(self.__class__, self).step(closure)

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn('optimizer.step() called without '
                              'optimizer.skip_synchronize() context after '
                              'optimizer.synchronize(). This can cause training slowdown. You may '
                              'want to consider using optimizer.skip_synchronize() context if '
                              'you use optimizer.synchronize() in your code.')
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but '
                                 'before optimizer.step() or optimizer.synchronize(). This is '
                                 'prohibited as it can cause a race condition.')
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def _check_groups(num_groups, groups):
    # Grouping only changes how Horovod batches its allreduces; libhvd's engine fuses by itself,
    # so the argument is checked and otherwise has no effect.
    if groups is None:
        return
    if isinstance(groups, int):
        if groups < 0:
            raise ValueError('groups should be a non-negative integer or a list of lists of '
                             'torch.Tensor.')
        return
    if not isinstance(groups, list) or any(
            not isinstance(g, list) or any(not isinstance(t, torch.Tensor) for t in g)
            for g in groups):
        raise ValueError('groups should be a non-negative integer or a list of lists of '
                         'torch.Tensor.')


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=mpi_ops.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps `optimizer` (a torch.optim.Optimizer) so that step() averages (op) the gradients
    over all ranks first. The result is an instance of the optimizer's own class, with
    synchronize(), skip_synchronize() and set_backward_passes_per_step()."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, num_groups, groups, sparse_as_dense, process_set)
