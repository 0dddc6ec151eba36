"""hvd.SyncBatchNorm: batch normalization whose statistics cover the whole batch across ranks
(Horovod's horovod.torch.SyncBatchNorm, torch.nn.SyncBatchNorm's semantics).

In training, every rank computes its batch's per-channel count, mean and variance; one allgather
gives every rank all of them, combined into the global mean and (biased) variance, which
normalize the input and update the running statistics (unbiased variance, as BatchNorm does).
The backward pass allreduces the per-channel sums of the output gradient and of its product with
the normalized input, so the input's gradient is the one BatchNorm computes on the whole batch;
the weight's and bias's gradients stay this rank's share (DistributedOptimizer reduces them like
any parameter's). Ranks may hold batches of different sizes. In eval mode, or in a world of one
rank, it is plain batch normalization with no communication.
"""
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from hvd.common.basics import global_process_set, size
from hvd.torch.mpi_ops import Sum, allgather, allreduce

__all__ = ['SyncBatchNorm']


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm1d/2d/3d (inputs of 2 to 5 dimensions, channels in
    dimension 1). Every rank of `process_set` must call forward (and backward) in the same order,
    as with any collective."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f'SyncBatchNorm: expected an input of at least 2 dimensions (batch, '
                             f'channels, ...), got {input.dim()}')
        if input.size(1) != self.num_features:
            raise ValueError(f'SyncBatchNorm: the input has {input.size(1)} channels (dimension '
                             f'1), the layer was made for {self.num_features}')

    def _world_size(self):
        ps = self.process_set
        return size() if ps is None or ps is global_process_set else ps.size()

    def forward(self, input):
        self._check_input_dim(input)
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        if not self.training or self._world_size() == 1:
            use_batch_stats = self.training or not self.track_running_stats
            return torch.nn.functional.batch_norm(
                input, self.running_mean if not self.training or self.track_running_stats
                else None,
                self.running_var if not self.training or self.track_running_stats else None,
                self.weight, self.bias, use_batch_stats, factor, self.eps)
        return _SyncBatchNorm.apply(input, self.weight, self.bias, self.running_mean,
                                    self.running_var, self.eps, factor, self.process_set)


def _channel_view(t, dims):
    """A (C,) tensor shaped to broadcast against an input of `dims` dimensions."""
    return t.view([1, -1] + [1] * (dims - 2))


class _SyncBatchNorm(torch.autograd.Function):

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, factor, process_set):
        # Statistics in float32 at least (float16 sums lose too much), output in the input's dtype.
        work = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        channels = input.size(1)
        reduce_dims = [0] + list(range(2, input.dim()))
        count = input.numel() // channels
        if count > 0:
            mean = work.mean(reduce_dims)
            var = work.var(reduce_dims, unbiased=False)
        else:  # an empty batch on this rank: it adds nothing to the others' statistics
            mean = torch.zeros(channels, dtype=work.dtype)
            var = torch.zeros(channels, dtype=work.dtype)
        mine = torch.cat([torch.tensor([float(count)], dtype=work.dtype), mean, var])
        every = allgather(mine.unsqueeze(0), process_set=process_set)  # (ranks, 1 + 2C)
        counts = every[:, :1]
        means, variances = every[:, 1:1 + channels], every[:, 1 + channels:]
        total = counts.sum()
        if total.item() == 0:
            raise ValueError('SyncBatchNorm: every rank\'s batch is empty')
        global_mean = (counts * means).sum(0) / total
        # Chan et al.'s combination: each rank's variance plus its mean's distance to the whole.
        global_var = (counts * (variances + (means - global_mean) ** 2)).sum(0) / total
        invstd = torch.rsqrt(global_var + eps)
        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1 - factor).add_(factor * global_mean.to(running_mean.dtype))
                unbiased = global_var * (total / (total - 1) if total.item() > 1 else 1.0)
                running_var.mul_(1 - factor).add_(factor * unbiased.to(running_var.dtype))
        xhat = (work - _channel_view(global_mean, input.dim())) * _channel_view(invstd,
                                                                                input.dim())
        out = xhat
        if weight is not None:
            out = out * _channel_view(weight.to(work.dtype), input.dim())
        if bias is not None:
            out = out + _channel_view(bias.to(work.dtype), input.dim())
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.total = total
        ctx.process_set = process_set
        ctx.has_bias = bias is not None
        return out.to(input.dtype)

    @staticmethod
    def backward(ctx, grad_output):
        xhat, invstd, weight = ctx.saved_tensors
        dims = xhat.dim()
        reduce_dims = [0] + list(range(2, dims))
        dy = grad_output.to(xhat.dtype)
        sum_dy = dy.sum(reduce_dims)
        sum_dy_xhat = (dy * xhat).sum(reduce_dims)
        # This rank's share of the affine parameters' gradients (as BatchNorm's on its batch).
        grad_weight = sum_dy_xhat.to(weight.dtype) if weight is not None else None
        grad_bias = sum_dy.to(weight.dtype if weight is not None else dy.dtype) \
            if ctx.has_bias else None
        grad_input = None
        if ctx.needs_input_grad[0]:
            both = allreduce(torch.cat([sum_dy, sum_dy_xhat]), op=Sum,
                             process_set=ctx.process_set)
            channels = sum_dy.numel()
            mean_dy = both[:channels] / ctx.total
            mean_dy_xhat = both[channels:] / ctx.total
            scale = invstd if weight is None else invstd * weight.to(xhat.dtype)
            grad_input = ((dy - _channel_view(mean_dy, dims)
                           - xhat * _channel_view(mean_dy_xhat, dims))
                          * _channel_view(scale, dims)).to(grad_output.dtype)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
