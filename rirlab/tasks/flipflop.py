"""Flip-flop language modelling (Liu et al., 2023; dynamic-halt paper §6.6).

A sequence of T tokens is T/2 (instruction, bit) pairs: ``w b`` writes bit b,
``r b`` reads (b must equal the last written bit), ``i b`` is a distractor.
Instructions are i with probability p_i and w or r with (1 - p_i)/2 each; the
first instruction is always w and the last always r (so every sequence has a
read and every read has a write before it), bits are uniform in {0, 1}.
Text format: one sequence per line, tokens separated by spaces, ``w 0 i 1 w 1 r 1``.

Language modelling with the loss only on the digit after each read: the label
at a read token's position is the read bit, every other position is -100
("no loss"). Accuracy is the share of read bits predicted.

``read_target`` (a task config value) says what that label is:
- "bit" (default; the dynamic-halt paper's public code, JRC1995/InvestigatingRecurrentTransformers, whose
  flip-flop framework and agent produced its published numbers): the bit itself, 0 or 1, two classes. Under the
  recurrent Transformers' code head that is the code's single output z with a sigmoid: Linear-ReLU-Linear(d, 1),
  BCEWithLogits over the reads, prediction sigmoid(z) >= 0.5 (rirlab.models.heads.CodeHead: logits [0, z]).
- "token": the next token's id over the whole vocabulary (a softmax that can also put mass on the instructions),
  as rirlab did before.

``input_layout`` (a task config value) says what the model reads:
- "code" (default; the dynamic-halt code's flip-flop data and ``flipflop_collater``): the code's vocabulary
  (w 0, i 1, r 2, "0" 3, "1" 4; no padding token), the input shifted right behind a start token, [SOS] + x[:-1]
  with SOS = 1 (the id of "i"), so the label of a read sits at the next position, where the input is the read; the
  batch padded with 1 (the collater's PAD, under the mask); the embedding's ``padding_idx`` 0 (the framework's
  ``pad_id = 0``) falls on "w", a real token: its row is drawn as the others (N(0, 0.02^2) after the framework's
  ``normal_``) and never trained (TaskInfo.pad_is_token).
- "plain" (rirlab before): the stored sequence itself over [<pad>, w, r, i, "0", "1"], the label at the read's own
  position, padding 0 = <pad> (a zero, frozen row).
Either way a read's label sees the read and everything before it, no later token (the models are causal).

Splits: train p_i = 0.8, length 512 (160,000 sequences); test p_i in
{0.1, 0.8, 0.98} x length {512, 1024} (10,000 each); dev mixes 1,000 of each
test setting and 1,000 more of the training setting (7 x 1,000, as the dynamic-halt code's dev: its six test
settings plus 1,000 sequences from the train pool at length 512, p_i = 0.8; ours are drawn from the training
distribution with a seed of their own, so they are disjoint from train in practice), in the code's order: the
training setting's part, then p_i 0.8, 0.1, 0.98 at 512, then at 1024. The order matters to TLB/GUTLB only: they
evaluate consecutive runs of the code's dev_batch_size (16; eval_batches file) and chunk by a batch's padded length,
and in this order no batch of 16 mixes the two lengths (the 512/1024 boundary falls at row 4,000).
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Iterator, Literal, Optional

import numpy as np
import pyarrow as pa
import torch
from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.errors import UserError
from rirlab.tasks import cache, summary
from rirlab.tasks.base import PAD, Task, TaskData, constant_lengths, pad, split_validator
from rirlab.tasks.registry import register

VOCAB = [PAD, "w", "r", "i", "0", "1"]  # the stored ids (cache, data files) and input_layout "plain"
TOKEN_ID = {t: i for i, t in enumerate(VOCAB)}
W, R, I, ZERO = TOKEN_ID["w"], TOKEN_ID["r"], TOKEN_ID["i"], TOKEN_ID["0"]
CODE_VOCAB = ["w", "i", "r", "0", "1"]  # input_layout "code": the dynamic-halt code's vocab2idx
TO_CODE = np.array([-1] + [CODE_VOCAB.index(t) for t in VOCAB[1:]], np.int8)  # stored id -> the code's id
CODE_SOS = CODE_PAD = CODE_VOCAB.index("i")  # the code's collater: SOS = PAD = 1
NO_LOSS = -100
SETTINGS = [(p, n) for n in (512, 1024) for p in (0.1, 0.8, 0.98)]
SPLITS = {f"p{p}_len{n}": f"p_i={p} len {n}" for p, n in SETTINGS}
DEV_ORDER = [(p, n) for n in (512, 1024) for p in (0.8, 0.1, 0.98)]  # the code's dev after its train-pool part
ALL_SPLITS = ("train", "dev", *SPLITS)
DEV_PARTS = len(SETTINGS) + 1  # dev: n_dev of each test setting and of the training setting


def generate(n: int, length: int, p_ignore: float, seed: int) -> np.ndarray:
    """``n`` sequences of ``length`` tokens as token ids, int8 array (n, length)."""
    if length < 4 or length % 2:
        raise UserError(f"flipflop: length {length} must be even and >= 4")
    rng = np.random.default_rng(seed)
    steps = length // 2
    instr = rng.choice(np.array([W, R, I], np.int8), size=(n, steps), p=[(1 - p_ignore) / 2, (1 - p_ignore) / 2, p_ignore])
    instr[:, 0], instr[:, -1] = W, R
    bits = rng.integers(0, 2, size=(n, steps), dtype=np.int8)  # (n, T/2)
    pos = np.where(instr == W, np.arange(steps), -1)
    last_write = np.maximum.accumulate(pos, axis=1)  # (n, T/2) index of the latest write
    read_bits = np.take_along_axis(bits, last_write, axis=1)
    bits = np.where(instr == R, read_bits, bits)
    out = np.empty((n, length), np.int8)
    out[:, 0::2], out[:, 1::2] = instr, bits + ZERO  # (n, T)
    return out


def targets(ids: np.ndarray, read_target: str = "bit") -> np.ndarray:
    """Per-position labels of one or more sequences: at each read token the read bit, as the bit (0/1,
    ``read_target`` "bit") or as its token id ("token"); -100 elsewhere."""
    labels = np.full(ids.shape, NO_LOSS, np.int8)
    nxt = ids[..., 1:] - (ZERO if read_target == "bit" else 0)
    labels[..., :-1] = np.where(ids[..., :-1] == R, nxt, NO_LOSS)
    return labels


def code_inputs(ids: np.ndarray, read_target: str = "bit") -> tuple[np.ndarray, np.ndarray]:
    """``input_layout`` "code": stored ids (T,) -> the code's input [SOS] + x[:-1] in its vocabulary and the labels
    of that input (the read bit, or its token id in the code's vocabulary, where the input is a read)."""
    code = TO_CODE[ids]  # (T,)
    x = np.concatenate([[CODE_SOS], code[:-1]]).astype(np.int8)  # (T,)
    read = x == CODE_VOCAB.index("r")
    label = ids - ZERO if read_target == "bit" else code
    return x, np.where(read, label, NO_LOSS).astype(np.int8)


def check(tokens: list[str]) -> list[tuple[int, int, int]]:
    """Structure errors raise ValueError; returns (token index, expected, found) for every wrong read bit."""
    if len(tokens) % 2:
        raise ValueError(f"odd number of tokens ({len(tokens)}): expected instruction/bit pairs")
    wrong, last = [], None
    for j in range(0, len(tokens), 2):
        ins, bit = tokens[j], tokens[j + 1]
        if ins not in ("w", "r", "i"):
            raise ValueError(f"token {j + 1}: {ins!r} is not an instruction w/r/i")
        if bit not in ("0", "1"):
            raise ValueError(f"token {j + 2}: {bit!r} is not a bit 0/1")
        if ins == "w":
            last = bit
        elif ins == "r":
            if last is None:
                raise ValueError(f"token {j + 1}: read before any write")
            if bit != last:
                wrong.append((j + 1, int(last), int(bit)))
    return wrong


def parse_line(line: str) -> list[str]:
    tokens = line.split()
    if not tokens:
        raise ValueError("empty line")
    check(tokens)
    return tokens


def to_table(ids: np.ndarray | list) -> pa.Table:
    if isinstance(ids, np.ndarray):
        offsets = np.arange(0, ids.size + 1, ids.shape[1], dtype=np.int32)
        col = pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids.reshape(-1)))
    else:
        col = pa.array(ids, pa.list_(pa.int8()))
    return pa.table({"ids": col})


def to_lines(table: pa.Table) -> Iterator[str]:
    for row in cache.id_lists(table.column("ids")):
        yield " ".join(VOCAB[t] for t in row)


def collate_lm(batch, pad_id: int = 0) -> dict:
    """Examples are (token_ids, labels); tokens are padded with ``pad_id`` (under the mask), labels with -100."""
    tokens, mask = pad([x for x, _ in batch])
    tokens[~mask] = pad_id
    labels = torch.full(tokens.shape, NO_LOSS, dtype=torch.long)  # (N, S)
    for i, (_, y) in enumerate(batch):
        labels[i, : len(y)] = torch.as_tensor(y, dtype=torch.long)
    return {"tokens": tokens, "mask": mask, "labels": labels}


@dataclass(config=STRICT)
class FlipFlopConfig:
    """Flip-flop settings (dynamic-halt paper §6.6): train p_i = 0.8 at length 512."""

    n_train: int = Field(160000, ge=1)
    n_dev: int = Field(1000, ge=1)  # per dev part: each test setting and the training setting (7 parts)
    n_eval: int = Field(10000, ge=1)  # per test split
    train_len: int = Field(512, ge=4)
    train_p_ignore: float = Field(0.8, ge=0, lt=1)
    data_seed: int = Field(1234, ge=0)
    eval_splits: list[str] = Field(default_factory=lambda: list(SPLITS))
    imported: list[str] = Field(default_factory=list)
    cache_dir: Optional[str] = None
    # the label of a read: the bit, two classes (the dynamic-halt code's sigmoid head), or the token id over the
    # vocabulary (rirlab before); module doc
    read_target: Literal["bit", "token"] = "bit"
    # what the model reads: the code's vocabulary and start token, padding_idx on "w" (default), or the stored
    # sequence (rirlab before); module doc
    input_layout: Literal["code", "plain"] = "code"

    _known = split_validator("flipflop", SPLITS, ALL_SPLITS)


def split_params(cfg: FlipFlopConfig, split: str) -> dict:
    if split == "train":
        return {"n": cfg.n_train, "len": cfg.train_len, "p": cfg.train_p_ignore, "seed": cfg.data_seed, "v": 1}
    if split == "dev":
        return {"n": cfg.n_dev, "len": cfg.train_len, "p": cfg.train_p_ignore, "seed": cfg.data_seed, "v": 3}
    return {"n": cfg.n_eval, "seed": cfg.data_seed, "v": 1}


def split_table(cfg: FlipFlopConfig, split: str) -> pa.Table:
    if split not in ALL_SPLITS:
        raise UserError(f"flipflop: unknown split '{split}'; choose from {', '.join(ALL_SPLITS)}")

    def build() -> pa.Table:
        if split == "train":
            return to_table(generate(cfg.n_train, cfg.train_len, cfg.train_p_ignore, cfg.data_seed))
        if split == "dev":
            parts = {(p, n): generate(cfg.n_dev, n, p, cfg.data_seed + 100 + k) for k, (p, n) in enumerate(SETTINGS)}
            train = generate(cfg.n_dev, cfg.train_len, cfg.train_p_ignore, cfg.data_seed + 100 + len(SETTINGS))
            return to_table(train.tolist() + [row for s in DEV_ORDER for row in parts[s].tolist()])
        k = list(SPLITS).index(split)
        p, n = SETTINGS[k]
        return to_table(generate(cfg.n_eval, n, p, cfg.data_seed + 200 + k))

    return cache.load_split("flipflop", split, split_params(cfg, split), build, cfg.imported, cfg.cache_dir)


def examples(table: pa.Table, read_target: str = "bit", input_layout: str = "code") -> list:
    rows = cache.id_lists(table.column("ids"))
    if input_layout == "code":
        return [code_inputs(np.asarray(ids, np.int8), read_target) for ids in rows]
    return [(ids, targets(ids, read_target)) for ids in rows]


@register
class FlipFlop(Task):
    """Flip-flop language modelling: predict the bit after each read"""

    name, config, kind = "flipflop", FlipFlopConfig, "lm"
    vocab, num_classes, collate = VOCAB, len(VOCAB), staticmethod(collate_lm)  # input_layout plain, read_target token
    quick = {"n_train": 1000, "n_dev": 20, "n_eval": 50, "train_len": 64, "eval_splits": ["p0.8_len512"]}
    splits = tuple(SPLITS.items())
    split_table = staticmethod(split_table)
    parse_line = staticmethod(parse_line)
    to_lines, to_table = staticmethod(to_lines), staticmethod(to_table)

    def train_lengths(self, cfg: FlipFlopConfig) -> tuple:
        return (constant_lengths(cfg.train_len),)  # every training sequence is train_len long

    def examples(self, cfg: FlipFlopConfig, table: pa.Table) -> list:
        return examples(table, read_target=cfg.read_target, input_layout=cfg.input_layout)

    def load(self, cfg: FlipFlopConfig) -> TaskData:
        """As every task's, with two classes (the bit) under ``read_target`` "bit"; under ``input_layout`` "code" the
        code's vocabulary, padding and embedding padding_idx (module doc)."""
        data = super().load(cfg)
        if cfg.input_layout == "code":
            data.vocab, data.pad_is_token = CODE_VOCAB, True  # padding_idx 0: "w"
            data.collate = functools.partial(collate_lm, pad_id=CODE_PAD)
        data.num_classes = 2 if cfg.read_target == "bit" else len(data.vocab)
        return data

    def import_rows(self, rows: list[list[str]]) -> pa.Table:
        """Parsed lines are token strings; the table stores token ids."""
        return to_table([[TOKEN_ID[t] for t in tokens] for tokens in rows])

    def verify(self, row: list[str]) -> list[str]:
        return [f"token {tok + 1}: read bit {found}, last written bit is {expected}"
                for tok, expected, found in check(row)]

    def stats(self, rows: list[list[str]]) -> dict:
        """Sequence lengths, instruction shares, reads per sequence, shares of the read bits."""
        ins = Counter(t[j] for t in rows for j in range(0, len(t), 2))
        return {"count": len(rows),
                "length": summary.distribution(len(t) for t in rows),
                "instruction_shares": summary.shares(ins),
                "reads_per_sequence": round(ins["r"] / max(1, len(rows)), 2),
                "read_bits": summary.shares(Counter(t[j + 1] for t in rows for j in range(0, len(t), 2)
                                                    if t[j] == "r"))}

    def split_params(self, cfg: FlipFlopConfig, split: str) -> dict:
        return split_params(cfg, split)

    def split_rows(self, cfg: FlipFlopConfig, split: str) -> int:
        if split in ("train", "dev"):
            return cfg.n_train if split == "train" else cfg.n_dev * DEV_PARTS
        return cfg.n_eval


load = FlipFlop().load  # load(cfg) -> TaskData, for callers that hold the module (tests, notebooks)
