"""DistributedOptimizer (horovod.torch.optimizer is this module): a torch optimizer whose step()
first averages the gradients over the ranks.

Communication overlaps the backward pass: a hook on each parameter's gradient accumulator
submits that gradient's allreduce (asynchronous, named after the parameter, in place) as soon as
it is ready, and libhvd's engine fuses what arrives together. step() (or synchronize()) waits
for them. A parameter that got no gradient in a step is allreduced as zeros, so every rank
submits the same names.

With groups (groups=N or the older num_groups=N: the parameters that need gradients, in order,
split into N nearly equal consecutive groups; groups=[[p, ...], ...]: those lists, every other
parameter alone), the gradients of a group go out as one grouped allreduce
(hvd.grouped_allreduce_async_), which libhvd negotiates and runs as one unit, once the last of
them is ready; synchronize() submits a group whose gradients did not all arrive (zeros for the
missing ones), so every rank submits every group.
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
        groups = _check_groups(num_groups, groups)
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = backward_passes_per_step
        self._parameter_names = self._names(named_parameters)
        self._delay = {}
        self._handles = {}
        self._grad_groups = _form_groups(groups, [p for p in self._all_params() if p.requires_grad])
        self._p_to_group = {p: gi for gi, group in enumerate(self._grad_groups) for p in group}
        self._group_counts = [0] * len(self._grad_groups)
        self._group_handles = {}  # group index -> (handle, compression contexts)
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
            gi = self._p_to_group.get(p)
            if gi is not None:
                self._group_hook(p, gi)
                return
            if self._handles.get(p, (None, None))[0] is not None and self._delay[p] <= 0:
                raise AssertionError(
                    'Gradients were computed more than backward_passes_per_step times before '
                    'call to step(). Increase backward_passes_per_step to accumulate gradients '
                    'locally.')
            self._delay[p] -= 1
            self._handles[p] = self._allreduce_grad_async(p) if self._delay[p] == 0 else \
                (None, None)
        return hook

    def _group_hook(self, p, gi):
        if self._delay[p] <= 0:
            raise AssertionError(
                'Gradients were computed more than backward_passes_per_step times before '
                'call to step(). Increase backward_passes_per_step to accumulate gradients '
                'locally.')
        self._delay[p] -= 1
        if self._delay[p] == 0:
            self._group_counts[gi] += 1
            if self._group_counts[gi] == len(self._grad_groups[gi]):
                self._group_handles[gi] = self._grouped_allreduce_grad_async(gi)

    def _scale_factors(self):
        if self._op == mpi_ops.Average:
            return 1.0 / self._predivide, self._predivide
        return 1.0, 1.0

    def _grouped_allreduce_grad_async(self, gi):
        group = self._grad_groups[gi]
        tensors, ctxs = [], []
        for p in group:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grad = p.grad
            if grad.is_sparse:
                if not self._sparse_as_dense:
                    raise ValueError(f'DistributedOptimizer: parameter '
                                     f'{self._parameter_names.get(p)} has a sparse gradient, '
                                     f'which a group cannot reduce: pass sparse_as_dense=True, '
                                     f'or leave the parameter out of groups')
                grad = grad.to_dense()
            elif not grad.is_contiguous():
                p.grad = grad = grad.contiguous()
            tensor, ctx = self._compression.compress(grad)
            tensors.append(tensor)
            ctxs.append(ctx)
        prescale, postscale = self._scale_factors()
        handle = mpi_ops.grouped_allreduce_async_(
            tensors, name=f'group.{self._parameter_names.get(group[0])}', op=self._op,
            prescale_factor=prescale, postscale_factor=postscale, process_set=self._process_set)
        return handle, ctxs

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
        prescale, postscale = self._scale_factors()
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
            if p.requires_grad and p not in self._handles and p not in self._p_to_group:
                self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # step() before backward_passes_per_step passes
                self._handles[p] = handle, ctx = self._allreduce_grad_async(p)
        for gi in range(len(self._grad_groups)):
            if gi not in self._group_handles:  # a member's gradient did not arrive
                self._group_handles[gi] = self._grouped_allreduce_grad_async(gi)
        try:
            for gi, (handle, ctxs) in self._group_handles.items():
                outputs = mpi_ops.synchronize(handle)
                for p, output, ctx in zip(self._grad_groups[gi], outputs, ctxs):
                    self._delay[p] = self.backward_passes_per_step
                    result = output if ctx is None else self._compression.decompress(output, ctx)
                    if p.grad.is_sparse:
                        p.grad = result.to_sparse()
                    elif result is not p.grad:
                        p.grad.copy_(result)
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
            self._group_handles.clear()
            self._group_counts = [0] * len(self._grad_groups)
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
        self._group_counts = [0] * len(self._grad_groups)

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
        if self._handles or self._group_handles:
            raise AssertionError('optimizer.zero_grad() was called after loss.backward() but '
                                 'before optimizer.step() or optimizer.synchronize(). This is '
                                 'prohibited as it can cause a race condition.')
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def _check_groups(num_groups, groups):
    """The grouping asked for: None, a positive int, or a list of lists of tensors (num_groups,
    Horovod's older name, stands for groups when groups is not given)."""
    if num_groups:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed '
                      'in v0.23.0.', DeprecationWarning)
        if groups is None:
            groups = num_groups
    if groups is None:
        return None
    if isinstance(groups, int) and not isinstance(groups, bool):
        if groups < 0:
            raise ValueError('groups should be a non-negative integer or a list of lists of '
                             'torch.Tensor.')
        return groups or None
    if not isinstance(groups, list) or any(
            not isinstance(g, list) or any(not isinstance(t, torch.Tensor) for t in g)
            for g in groups):
        raise ValueError('groups should be a non-negative integer or a list of lists of '
                         'torch.Tensor.')
    seen = set()
    for t in (t for g in groups for t in g):
        if id(t) in seen:
            raise ValueError('A parameter can only appear once in groups.')
        seen.add(id(t))
    return groups


def _form_groups(groups, params):
    """The groups of two or more of `params` (the parameters that need gradients, in order) that
    go out as one grouped allreduce; a group of one is an ordinary allreduce."""
    if groups is None or not params:
        return []
    if isinstance(groups, int):
        n = min(groups, len(params))
        size, extra = divmod(len(params), n)
        out, at = [], 0
        for i in range(n):
            take = size + (1 if i < extra else 0)
            out.append(tuple(params[at:at + take]))
            at += take
    else:
        wanted = {id(p) for p in params}
        out = [tuple(p for p in g if id(p) in wanted) for g in groups]
    return [g for g in out if len(g) > 1]


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
