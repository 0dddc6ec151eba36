"""hvd.elastic.ElasticSampler (Horovod's horovod.torch.elastic.ElasticSampler)."""
import math
import random

import torch.utils.data

from hvd.common.basics import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler, and what is left of an epoch is re-sharded over a new world.

    The epoch's order is one permutation of the dataset (the same on every rank: `seed` plus the
    epoch); each step every rank takes its strided share of the next indices, so after k recorded
    batches of `batch_size` the first k * batch_size * size indices of the permutation are done,
    whichever ranks did them. `processed_num` counts them; after a reset the rest is dealt out
    over the new world. Put the sampler in the TorchState, call `record_batch` after each batch
    and `set_epoch` at the end of each epoch (not the start: a resumed epoch keeps its progress).
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` with nothing processed (its own order when shuffling)."""
        self.epoch = epoch
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed one more batch of `batch_size` samples."""
        self.processed_num += batch_size * self.num_replicas

    def state_dict(self):
        return {'epoch': self.epoch, 'processed_num': self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict['epoch']
        self.processed_num = state_dict['processed_num']
        self.reset()

    def reset(self):
        """Deals what is left of the epoch out over the current world (size and rank now)."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        padded = list(self.remaining_indices)
        # Every rank gets as many samples: the first ones again fill the last step.
        while len(padded) < self.total_size:
            padded += padded[:self.total_size - len(padded)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
