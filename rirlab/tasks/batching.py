"""Training batches as a pure function of (seed, step): shuffling, length buckets, torch loaders.

Epoch e shuffles the training set with a generator seeded from (seed, e). With
``bucket_factor`` f > 1 the shuffled order is cut into pools of f batches, each
pool is sorted by length and cut into batches (so a batch holds examples of
similar length and little padding). Then, by the training config's ``batch_order``:
"pools" (the RIR/EBT authors' trainer) shuffles each pool's batches and trains a
pool's batches one after another; "shuffled" shuffles all the epoch's batches
together (rirlab before 2026-12-07). The batch at step s is therefore fixed by
(seed, s) alone: a resumed trial sees the same batches, with or without worker
processes.
"""

from __future__ import annotations

import math
from typing import Callable, Literal, Optional, Sequence, get_args

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

# the evaluation batch orders of :func:`eval_batches` (a model config's ``eval_batches``)
EvalOrder = Literal["buckets", "file", "length"]
# the RIR authors' sentence-pair collater: a run whose longest sentence has 70 tokens or more is cut in halves
# ((threshold, divisor), first match wins); a task with another rule states it (``Task.bucket_cuts``: MNLI's)
PAIR_CUTS = ((70, 2),)


def example_length(example) -> int:
    """Tokens of an example; for pairs, the longer of the two sequences."""
    if len(example) == 3:  # (premise, hypothesis, label)
        return max(len(example[0]), len(example[1]))
    return len(example[0])


def pool_length(example) -> int:
    """The RIR authors' sort key in an evaluation pool: len(sequence_vec), for pairs S1 + <SEP> + S2
    (BeamRecursionFamily preprocess/process_SNLI.py, process_QQP.py, process_proplog.py, MNLIdev; AAN without <SEP>),
    which orders pairs as the summed length does."""
    if len(example) == 3:  # (premise, hypothesis, label)
        return len(example[0]) + len(example[1])
    return len(example[0])


def bucket_batches(examples: Sequence, batch_size: int, bucket_factor: int,
                   cuts: Optional[Sequence[tuple[int, int]]] = None) -> list[list[int]]:
    """The RIR authors' dev/test batches (BeamRecursionFamily): train.py's ``load_dataloaders`` reads the split in
    order (``shuffle=False``) in pools of ``dev_batch_size * bucket_size_factor``; the collater
    (collaters/classifier_collater.py, sentence_pair_collater.py) sorts a pool by :func:`pool_length`
    (``np.argsort(lengths)``; here a stable sort: numpy's quicksort orders ties as it likes) and cuts it into runs of
    ``inr = batch_size`` (the pool's rest last); for pairs it cuts a run further:

        if self.config["dataset"] == "MNLIdev":
            if max_len1 >= 100 or max_len2 >= 100:
                inr_ = min(batch_size // 4, inr)
            elif max_len1 >= 70 or max_len2 >= 70:
                inr_ = min(batch_size // 2, inr)
            else:
                inr_ = inr
        else:
            if max_len1 >= 70 or max_len2 >= 70:
                inr_ = min(batch_size // 2, inr)
            ...
        while j < i + inr:  # batches sequences[j:j + inr_]

    (``max_len1``/``2``: the run's longest premise / hypothesis). ``cuts`` is that rule as (threshold, divisor)
    pairs, the first that applies: the task's (``Task.bucket_cuts``; MNLI's ``((100, 4), (70, 2))``), default the
    other datasets' PAIR_CUTS. The classifier collater never cuts a run; a cut of an odd ``batch_size`` reaches into
    the next run, as theirs (a cut below one example, where theirs loops for ever, is one). Batch order does not
    matter (the code shuffles the pool's batches)."""
    pair = bool(examples) and len(examples[0]) == 3
    cuts = PAIR_CUTS if cuts is None else tuple(cuts)
    batches = []
    for start in range(0, len(examples), batch_size * bucket_factor):
        pool = list(range(start, min(start + batch_size * bucket_factor, len(examples))))
        pool.sort(key=lambda i: pool_length(examples[i]))
        for i in range(0, len(pool), batch_size):
            inr = min(batch_size, len(pool) - i)
            longest = max(example_length(examples[k]) for k in pool[i : i + inr])
            inr_ = next((max(1, min(batch_size // d, inr)) for t, d in cuts if pair and longest >= t), inr)
            batches += [pool[j : j + inr_] for j in range(i, i + inr, inr_)]
    return batches


def eval_batches(examples: Sequence, batch_size: int, order: str = "length", bucket_factor: int = 1,
                 cuts: Optional[Sequence[tuple[int, int]]] = None) -> list[list[int]]:
    """The evaluation batches of a split, as lists of example indices. "length": sorted by
    :func:`example_length` (for pairs the longer sentence, the batch's padded length under joint pair batching) so
    padding stays small; "file": consecutive runs of ``batch_size`` in the split's order, as the dynamic-halt code's
    dev/test loaders (shuffle off; its collater only reorders within a batch); "buckets": the RIR authors' loader,
    pools of ``bucket_factor`` batches in the split's order, each sorted by length, long pair runs cut by the task's
    ``cuts`` (:func:`bucket_batches`). The
    metric depends on the order only for a model whose output depends on the batch's padded length (TLB/GUTLB's
    torch chunking, the RIR models' chunk_by batch)."""
    if order == "buckets":
        return bucket_batches(examples, batch_size, bucket_factor, cuts)
    idx = list(range(len(examples)))
    if order == "length":
        idx.sort(key=lambda i: example_length(examples[i]))
    elif order != "file":
        raise ValueError(f"eval batch order {order!r}: 'buckets', 'file' or 'length'")
    return [idx[s : s + batch_size] for s in range(0, len(idx), batch_size)]


# the training batch orders of :class:`BatchPlan` (the training config's ``batch_order``)
TrainOrder = Literal["pools", "shuffled"]


class BatchPlan:
    """Which training examples form the batch at each step.

    With ``bucket_factor`` f > 1 an epoch's shuffled rows are cut into pools of f batches, each sorted by length
    and cut into batches. ``order`` "pools" is the RIR/EBT authors' trainer (BeamRecursionFamily): its loader
    draws shuffled pools of ``train_batch_size * bucket_size_factor`` rows, the collater
    (collaters/classifier_collater.py, sentence_pair2_collater.py) sorts a pool, cuts it into batches and
    shuffles them (``random.shuffle(meta_batches)``), and the trainer steps through a pool's batches before the
    next pool's; so every f consecutive steps (from the epoch's start) hold one pool's batches in a random order.
    "shuffled" shuffles all the epoch's batches together: the same batches in distribution, another order. The
    authors' pair collater also cuts a batch whose longest sentence has 70 tokens or more in halves, which their
    trainer accumulates into one step (each half's loss divided by 2): the whole batch's gradient, less padding;
    here the batch runs whole (``micro_batch_size`` cuts it where memory asks)."""

    def __init__(self, lengths: Sequence[int], batch_size: int, seed: int, bucket_factor: int = 1,
                 order: TrainOrder = "shuffled"):
        if order not in get_args(TrainOrder):
            raise ValueError(f"training batch order {order!r}: one of {get_args(TrainOrder)}")
        self.lengths = np.asarray(lengths)
        self.n, self.batch_size, self.seed, self.bucket_factor = len(lengths), batch_size, seed, bucket_factor
        self.order = order
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
            runs = [chunk[i : i + bs].tolist() for i in range(0, len(chunk), bs)]
            if self.order == "pools":  # the pool's batches in a random order, one after another
                runs = [runs[i] for i in torch.randperm(len(runs), generator=g).tolist()]
            batches += runs
        if self.order == "pools":
            return batches
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
