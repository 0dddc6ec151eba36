"""hvd.SyncBatchNorm against torch's BatchNorm on the whole batch in one process: each rank
normalizes its slice of one batch (slices of different sizes), and the outputs, the input's
gradient, the affine gradients summed over the ranks and the running statistics must be those of
BatchNorm over the concatenated batch. float64, so the tolerance (1e-9 relative) is about
rounding, not the method."""
import pytest
import torch

import hvd.torch as hvd

TOL = dict(rtol=1e-9, atol=1e-10)


def _slices(total_ranks):
    """Rank r holds r + 2 samples: unequal batches weigh the statistics by their counts."""
    sizes = [r + 2 for r in range(total_ranks)]
    starts = [sum(sizes[:r]) for r in range(total_ranks)]
    return sizes, starts


def _bn_pair(kind, channels, momentum):
    torch.manual_seed(1)
    ref = kind(channels, momentum=momentum).double()
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    sync = hvd.SyncBatchNorm(channels, momentum=momentum).double()
    sync.load_state_dict(ref.state_dict())
    return ref, sync


@pytest.mark.parametrize('kind,shape', [
    (torch.nn.BatchNorm1d, (3,)),        # (N, C)
    (torch.nn.BatchNorm1d, (3, 5)),      # (N, C, L)
    (torch.nn.BatchNorm2d, (4, 3, 2)),   # (N, C, H, W)
], ids=['1d', '1d-length', '2d'])
@pytest.mark.parametrize('momentum', [0.1, None], ids=['momentum', 'cumulative'])
def test_forward_backward_and_running_stats_equal_batchnorm_on_the_whole_batch(kind, shape,
                                                                               momentum):
    sizes, starts = _slices(hvd.size())
    channels = shape[0]
    ref, sync = _bn_pair(kind, channels, momentum)
    for step in range(2):  # twice: the running statistics move from their first values
        torch.manual_seed(100 + step)  # the same whole batch on every rank
        whole = torch.randn((sum(sizes),) + shape, dtype=torch.float64) * 3 + 1
        probe = torch.randn_like(whole)  # loss = <out, probe>: every output's gradient differs
        x_ref = whole.clone().requires_grad_()
        out_ref = ref(x_ref)
        (out_ref * probe).sum().backward()

        lo, n = starts[hvd.rank()], sizes[hvd.rank()]
        x = whole[lo:lo + n].clone().requires_grad_()
        out = sync(x)
        (out * probe[lo:lo + n]).sum().backward()

        torch.testing.assert_close(out, out_ref[lo:lo + n], **TOL)
        torch.testing.assert_close(x.grad, x_ref.grad[lo:lo + n], **TOL)
        for mine, theirs in ((sync.weight.grad, ref.weight.grad), (sync.bias.grad, ref.bias.grad)):
            summed = hvd.allreduce(mine, op=hvd.Sum)
            torch.testing.assert_close(summed, theirs, **TOL)
        torch.testing.assert_close(sync.running_mean, ref.running_mean, **TOL)
        torch.testing.assert_close(sync.running_var, ref.running_var, **TOL)
        assert sync.num_batches_tracked.item() == ref.num_batches_tracked.item() == step + 1
        for module in (ref, sync):
            module.zero_grad()

    # Eval: the running statistics, no communication; the same on every rank as in one process.
    sync.eval()
    ref.eval()
    torch.manual_seed(7)
    x = torch.randn((2,) + shape, dtype=torch.float64)
    torch.testing.assert_close(sync(x), ref(x), **TOL)


def test_float32_and_a_rank_with_an_empty_batch():
    """A rank may have no samples this step (the end of an epoch): it adds nothing to the others'
    statistics, and its own output is empty."""
    ref, sync = _bn_pair(torch.nn.BatchNorm1d, 4, 0.1)
    ref, sync = ref.float(), sync.float()
    sizes = [0 if r == hvd.size() - 1 and hvd.size() > 1 else 3 for r in range(hvd.size())]
    torch.manual_seed(3)
    whole = torch.randn(sum(sizes), 4)
    lo = sum(sizes[:hvd.rank()])
    x = whole[lo:lo + sizes[hvd.rank()]].clone().requires_grad_()
    out = sync(x)
    out.sum().backward()
    out_ref = ref(whole)
    torch.testing.assert_close(out, out_ref[lo:lo + sizes[hvd.rank()]], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sync.running_mean, ref.running_mean, rtol=1e-5, atol=1e-6)
    assert x.grad.shape == x.shape


def test_bad_input_is_a_value_error():
    sync = hvd.SyncBatchNorm(3)
    with pytest.raises(ValueError, match='at least 2 dimensions'):
        sync(torch.ones(3))
    with pytest.raises(ValueError, match='has 4 channels'):
        sync(torch.ones(2, 4))


def test_the_same_class_under_horovods_name():
    import horovod.torch
    assert horovod.torch.SyncBatchNorm is hvd.SyncBatchNorm
