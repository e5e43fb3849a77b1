"""Training batches as a pure function of (seed, step): shuffling, length buckets, torch loaders.

Epoch e shuffles the training set with a generator seeded from (seed, e). With
``bucket_factor`` f > 1 the shuffled order is cut into pools of f batches, each
pool is sorted by length and cut into batches (so a batch holds examples of
similar length and little padding), and the batches of the epoch are shuffled
again. The batch at step s is therefore fixed by (seed, s) alone: a resumed
trial sees the same batches, with or without worker processes.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def example_length(example) -> int:
    """Tokens of an example; for pairs, the longer of the two sequences."""
    if len(example) == 3:  # (premise, hypothesis, label)
        return max(len(example[0]), len(example[1]))
    return len(example[0])


def eval_batches(examples: Sequence, batch_size: int, order: str = "length") -> list[list[int]]:
    """The evaluation batches of a split, as lists of example indices. "length": sorted by
    :func:`example_length` (for pairs the longer sentence, the batch's padded length under joint pair batching) so
    padding stays small; "file": consecutive runs of ``batch_size`` in the split's order, as the dynamic-halt code's
    dev/test loaders (shuffle off; its collater only reorders within a batch). The metric depends on the order only
    for a model whose output depends on the batch's padded length (TLB/GUTLB's torch chunking)."""
    idx = list(range(len(examples)))
    if order == "length":
        idx.sort(key=lambda i: example_length(examples[i]))
    elif order != "file":
        raise ValueError(f"eval batch order {order!r}: 'file' or 'length'")
    return [idx[s : s + batch_size] for s in range(0, len(idx), batch_size)]


class BatchPlan:
    """Which training examples form the batch at each step."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, bucket_factor: int = 1):
        self.lengths = np.asarray(lengths)
        self.n, self.batch_size, self.seed, self.bucket_factor = len(lengths), batch_size, seed, bucket_factor
        self.batches_per_epoch = max(1, math.ceil(self.n / batch_size))
        self._epoch, self._batches = -1, []

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(self.n, generator=g).numpy()
        bs = self.batch_size
        if self.bucket_factor <= 1:
            return [order[i : i + bs].tolist() for i in range(0, self.n, bs)]
        batches = []
        pool = bs * self.bucket_factor
        for start in range(0, self.n, pool):
            chunk = order[start : start + pool]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i : i + bs].tolist() for i in range(0, len(chunk), bs)]
        perm = torch.randperm(len(batches), generator=g).tolist()
        return [batches[i] for i in perm]

    def indices(self, step: int) -> list[int]:
        epoch, i = divmod(step, self.batches_per_epoch)
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, self.epoch_batches(epoch)
        return self._batches[i]


class StepBatches(Dataset):
    """Map-style dataset whose item ``step`` is the collated batch of that step, or with ``micro`` the list of its
    micro-batches of ``micro`` examples (in the batch's order), each collated (padded) on its own."""

    def __init__(self, examples: Sequence, collate: Callable, plan: BatchPlan, micro: Optional[int] = None):
        self.examples, self.collate, self.plan, self.micro = examples, collate, plan, micro

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, step: int):
        idx = self.plan.indices(step)
        if self.micro is None:
            return self.collate([self.examples[j] for j in idx])
        parts = [idx[i : i + self.micro] for i in range(0, len(idx), self.micro)]
        return [self.collate([self.examples[j] for j in part]) for part in parts]


def loader(examples: Sequence, collate: Callable, plan: BatchPlan, start: int, stop: int,
           num_workers: int = 0, micro: Optional[int] = None) -> DataLoader:
    """Batches of steps start..stop-1 in order (``micro``: each as its list of micro-batches, StepBatches);
    ``num_workers`` > 0 collates them in worker processes."""
    # an own generator: creating the iterator must not draw from the global torch RNG (dropout), or a trial
    # resumed from a checkpoint would diverge from the uninterrupted one
    return DataLoader(StepBatches(examples, collate, plan, micro), batch_size=None, sampler=range(start, stop),
                      num_workers=num_workers, persistent_workers=False,
                      generator=torch.Generator().manual_seed(plan.seed),
                      prefetch_factor=4 if num_workers else None)
