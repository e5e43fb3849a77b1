"""What a task hands the trainer: vocabulary, examples per split, and a collator to padded batches."""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import torch

PAD = "<pad>"


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """What a model builder needs to know about the task."""

    vocab_size: int
    num_classes: int
    kind: str  # "classify" | "pair" | "lm"
    pad_id: int = 0


@dataclasses.dataclass
class TaskData:
    vocab: list[str]
    num_classes: int
    kind: str
    train: Sequence  # examples, see collate_*
    eval_splits: dict[str, Sequence]  # name -> examples, in the papers' column order; "dev" first
    collate: Callable[[Sequence], dict]

    @property
    def info(self) -> TaskInfo:
        return TaskInfo(len(self.vocab), self.num_classes, self.kind)


def pad(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad token id lists: returns tokens (N, S) long and mask (N, S) bool."""
    n, s = len(seqs), max(1, max(len(x) for x in seqs))
    tokens = torch.zeros(n, s, dtype=torch.long)  # (N, S)
    for i, x in enumerate(seqs):
        tokens[i, : len(x)] = torch.as_tensor(x, dtype=torch.long)
    lengths = torch.tensor([len(x) for x in seqs])
    mask = torch.arange(s)[None, :] < lengths[:, None]  # (N, S)
    return tokens, mask


def collate_classify(batch: Sequence[tuple[list[int], int]]) -> dict:
    """Examples are (token_ids, label)."""
    tokens, mask = pad([x for x, _ in batch])
    return {"tokens": tokens, "mask": mask, "labels": torch.tensor([y for _, y in batch])}


def collate_pair(batch: Sequence[tuple[list[int], list[int], int]]) -> dict:
    """Examples are (premise_ids, hypothesis_ids, label)."""
    t1, m1 = pad([a for a, _, _ in batch])
    t2, m2 = pad([b for _, b, _ in batch])
    return {"tokens": t1, "mask": m1, "tokens2": t2, "mask2": m2, "labels": torch.tensor([y for *_, y in batch])}


def split_validator(task: str, eval_splits, all_splits):
    """Pydantic validator for a task config's ``eval_splits`` and ``imported`` lists: names must be known."""
    from pydantic import field_validator

    def known(cls, v, info):
        allowed = eval_splits if info.field_name == "eval_splits" else all_splits
        bad = [s for s in v if s not in allowed]
        if bad:
            raise ValueError(f"unknown {task} split {bad[0]!r}; choose from {', '.join(allowed)}")
        return v

    return field_validator("eval_splits", "imported")(classmethod(known))
