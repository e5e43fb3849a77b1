"""The Task interface every task file implements, and what a task hands the trainer (vocabulary, examples per
split, a collator to padded batches)."""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Callable, ClassVar, Iterator, Optional, Sequence

import pyarrow as pa
import torch

from rirlab.errors import UserError
from rirlab.tasks.batching import PAIR_CUTS

PAD = "<pad>"
# deepest nesting a data file's line may have (ListOps operators, logic formulas): the real data stays below 25
# levels; thousands mean a wrong file, and are refused with file:line instead of failing deep in a recursion
MAX_NESTING = 1000
# the quantiles at which a task states its training sequences' lengths (:meth:`Task.train_lengths`)
LENGTH_Q = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def scaled_lengths(q, factor: float) -> tuple:
    """Length quantiles ``q`` stretched by ``factor`` (at least one token each)."""
    return tuple(max(1.0, v * factor) for v in q)


def clipped_lengths(q, top) -> tuple:
    """Length quantiles ``q`` cut at ``top`` tokens (a task's length limit; None or 0: none)."""
    return tuple(q) if not top else tuple(min(v, top) for v in q)


def constant_lengths(n) -> tuple:
    """The quantiles of sequences that are all ``n`` tokens long."""
    return (float(n),) * len(LENGTH_Q)


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """What a trial's run records about one of its splits (MLflow dataset input): ``name`` ``<task>/<split>``,
    ``source`` the imported Parquet file or ``generated``, ``params`` the import record (source files, their
    SHA-256, the protocol) or the generator parameters (the cache key), ``digest`` the imported rows' content
    digest or the cache key's hash, ``rows`` from the stored file when there is one, else the configured count
    (None when the task does not know it before generating)."""

    name: str
    split: str
    source: str
    params: dict
    digest: str
    rows: Optional[int]
    rows_from: str  # "file" | "config" | "unknown"


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """What a model builder needs to know about the task."""

    vocab_size: int
    num_classes: int
    kind: str  # "classify" | "pair" | "lm"
    pad_id: int = 0
    # frozen pretrained word vectors, (vocab_size, dim) float32 numpy, row = token id (e.g. GloVe; rirlab.tasks.text)
    embeddings: Optional[Any] = dataclasses.field(default=None, compare=False, repr=False)
    unk_id: Optional[int] = None  # with embeddings: this token's vector is trainable (random init), not the row
    # pad_id is a real token (the flip-flop code's padding_idx 0 on "w"): its embedding row is drawn as the others'
    # and frozen (nn.Embedding's padding_idx), not zeroed
    pad_is_token: bool = False


@dataclasses.dataclass
class TaskData:
    vocab: list[str]
    num_classes: int
    kind: str
    train: Sequence  # examples, see collate_*
    eval_splits: dict[str, Sequence]  # name -> examples, in the papers' column order; "dev" first
    collate: Callable[[Sequence], dict]
    embeddings: Optional[Any] = None  # frozen pretrained vectors for the vocabulary (TaskInfo.embeddings)
    unk_id: Optional[int] = None  # TaskInfo.unk_id
    pad_is_token: bool = False  # TaskInfo.pad_is_token

    @property
    def info(self) -> TaskInfo:
        return TaskInfo(len(self.vocab), self.num_classes, self.kind, embeddings=self.embeddings, unk_id=self.unk_id,
                        pad_is_token=self.pad_is_token)


class Task(abc.ABC):
    """One task family: its config, its splits, its trial data and its data files.

    A task file defines one subclass and registers it with ``@rirlab.tasks.registry.register``. Trials use
    :meth:`load`; ``rirlab data generate|verify|stats|import`` use the rest, for every task alike. A data file
    is text, one example per line (the task's standard format); a *row* is one parsed line; a *table* is the
    Arrow table a split is stored as in the cache.
    """

    name: ClassVar[str]  # registry name, e.g. "listops"
    config: ClassVar[type]  # the task's config dataclass (its fields are flat trial keys)
    kind: ClassVar[str]  # "classify" | "pair" | "lm": which models can run it
    vocab: ClassVar[list]  # token strings; index = token id, 0 = padding
    num_classes: ClassVar[int]  # output classes (lm: the vocabulary size)
    collate: ClassVar[Callable]  # examples -> padded batch dict (collate_classify, collate_pair, ...)
    quick: ClassVar[tuple] = ()  # (key, value) pairs of a small, fast setting used by `rirlab train --quick`
    splits: ClassVar[tuple] = ()  # (split name, paper column label) of the test splits, in the papers' order
    # How the RIR authors' dev/test loader cuts a run of pair examples whose longest sentence is long:
    # (threshold in tokens, divisor), the first that applies (rirlab.tasks.batching.bucket_batches). A fact of the
    # authors' per-dataset collater, so the task states it (MNLI has its own); classify tasks' runs are never cut.
    bucket_cuts: ClassVar[tuple] = PAIR_CUTS

    def preflight(self, cfg) -> None:
        """Cheap checks of a trial's task config before its run is recorded (e.g. a file it needs exists);
        UserError in one line. Default: none."""

    def preflight_all(self, cfgs: list) -> None:
        """Every check of the user's input that can come before the first trial, for the distinct task configs
        of a sweep's trials (or the one of `rirlab train`), each input read once for all of them; UserError in one
        line. Default: :meth:`preflight` of each."""
        for cfg in cfgs:
            self.preflight(cfg)

    def trial_params(self, cfg, splits) -> dict[str, str]:
        """Facts of a trial's data, known once it is loaded, that its run records as params (text tasks: the OOV
        rate of each split, ``contract.OOV_PARAM``). Default: none."""
        return {}

    # --- facts of a trial's task config every task answers (the sweep side asks these, never the config) ---

    def eval_split_names(self, cfg) -> tuple[str, ...]:
        """The test splits a trial of ``cfg`` evaluates besides dev (its ``eval_splits``), in the config's order:
        what it reports ``<split>/accuracy`` for. Default: the config's ``eval_splits`` field, () without one."""
        return tuple(getattr(cfg, "eval_splits", ()) or ())

    def imported_splits(self, cfg) -> tuple[str, ...]:
        """The splits a trial of ``cfg`` reads from files imported with ``rirlab data import`` (its ``imported``
        field; () for a task without one)."""
        return tuple(getattr(cfg, "imported", ()) or ())

    def cache_dir(self, cfg) -> Optional[str]:
        """The data cache root a trial of ``cfg`` writes (its ``cache_dir`` field), None for the default one
        ($RIRLAB_CACHE, else ~/.cache/rirlab; ``rirlab.tasks.cache.cache_root``) or a task that caches nothing."""
        return getattr(cfg, "cache_dir", None)

    def max_train_len(self, cfg) -> int:
        """The longest training sequence of a trial of ``cfg`` that the sweep's memory check assumes, in tokens:
        the config's ``max_train_len``, 100 without one."""
        return int(getattr(cfg, "max_train_len", 100) or 100)

    def planned_vocab(self, cfg) -> tuple[int, bool]:
        """(vocabulary size, whether it uses frozen GloVe vectors) of a trial of ``cfg`` as known before its data
        is read (the dry run's step shape): a text task keeps at most ``max_vocab`` words plus padding and unknown;
        other tasks have a fixed vocabulary."""
        if getattr(cfg, "max_vocab", None):
            return cfg.max_vocab + 2, getattr(cfg, "embeddings", None) == "glove"
        return len(self.vocab), False

    def generated_corpus(self, cfg) -> bool:
        """Whether a trial of ``cfg`` trains on a generated stand-in for a corpus the user did not give (written by
        the first trial, so its size is unknown to a dry run): the config's ``generated`` flag."""
        return bool(getattr(cfg, "generated", False))

    def train_lengths(self, cfg) -> tuple:
        """How long the training sequences of a trial of ``cfg`` are, in tokens as the model reads them: their
        quantiles at LENGTH_Q, one tuple per sequence of an example (two for a pair task). The dry run times a
        training step on a batch drawn from it (``rirlab.sweeps.plan.dryrun.padded_batch``), since step time grows with a
        batch's padded length. A task states its own from its data; this default, for a task that does not, takes
        every sequence as its ``train_len`` when the config has one, else half its ``max_train_len`` /
        ``max_len`` (50 tokens when it has neither)."""
        if getattr(cfg, "train_len", None):
            q = constant_lengths(cfg.train_len)
        else:
            top = getattr(cfg, "max_train_len", None) or getattr(cfg, "max_len", None) or 100
            q = constant_lengths(max(1, int(top) // 2))
        return (q,) * (2 if self.kind == "pair" else 1)

    @property
    def doc(self) -> str:
        """The class docstring: its first line is the task's one-line description (`rirlab tasks`)."""
        return (type(self).__doc__ or "").strip()

    @property
    def all_splits(self) -> tuple[str, ...]:
        """Every split name: "train", "dev", then the test splits."""
        return ("train", "dev", *(split for split, _ in self.splits))

    def models_ok(self, model_entry) -> set[str]:
        return {model_entry.name} if self.kind in model_entry.kinds else set()

    # --- trials ---

    def load(self, cfg) -> TaskData:
        """Everything a trial needs: train split, dev + ``cfg.eval_splits``, vocabulary, collator."""

        def split(name: str) -> list:
            return self.examples(cfg, self.split_table(cfg, name))

        data = TaskData(vocab=self.vocab, num_classes=self.num_classes, kind=self.kind, train=split("train"),
                        eval_splits={s: split(s) for s in ("dev", *self.eval_split_names(cfg))},
                        collate=self.collate)
        empty = [name for name, rows in (("train", data.train), *data.eval_splits.items()) if len(rows) == 0]
        if empty:  # an empty split would train on nothing or be recorded as accuracy 0 and loss 0
            raise UserError(f"{self.name}: split '{empty[0]}' has no examples (a file with only a header, or whose "
                            f"labels are all unusable); give it a file with examples or leave it out of eval_splits")
        return data

    @abc.abstractmethod
    def split_table(self, cfg, split: str) -> pa.Table:
        """One split as a table, generated (and cached) or imported; UserError for an unknown split."""

    @abc.abstractmethod
    def examples(self, cfg, table: pa.Table) -> list:
        """A split's table as model examples (token ids and labels; see the collate_* functions)."""

    # --- data files ---

    @abc.abstractmethod
    def parse_line(self, line: str) -> Any:
        """One line of a data file -> a row; ValueError saying why when the line is malformed."""

    def is_header(self, line: str) -> bool:
        """Whether the first line of a file is a header to skip."""
        return False

    @abc.abstractmethod
    def to_lines(self, table: pa.Table) -> Iterator[str]:
        """The lines of a data file holding ``table``."""

    @abc.abstractmethod
    def to_table(self, rows: Sequence) -> pa.Table:
        """The table of generated rows (what :meth:`split_table` stores)."""

    def import_rows(self, rows: Sequence) -> pa.Table:
        """The table of rows parsed from files (by default the same as generated rows)."""
        return self.to_table(rows)

    @abc.abstractmethod
    def verify(self, row) -> list[str]:
        """Check a row's label with the task's own solver/labeler: one line per wrong label, [] when right."""

    @abc.abstractmethod
    def stats(self, rows: Sequence) -> dict:
        """A summary of parsed rows: count, length distribution, the task's own counts, label shares."""

    def import_protocol(self, split: str, rows: list) -> tuple[str, dict[str, list]]:
        """How ``rirlab data import`` stores files given as ``split`` without ``--as-is``: (a one-line
        description of the protocol, {split name: rows}). ``rows`` are (file, line number, row) triples;
        UserError naming file:line for a row the protocol refuses. Default: the files as they are."""
        return "as-is", {split: rows}

    # --- provenance ---

    def split_params(self, cfg, split: str) -> dict:
        """The generator parameters a generated split's content depends on: the ``params`` the task's
        :meth:`split_table` passes to ``cache.load_split`` (a task that caches splits overrides this with its own
        function; the default, every config field but the evaluation list and the cache location, suits a task
        that caches nothing)."""
        skip = ("eval_splits", "imported", "cache_dir")
        return {"split": split, **{k: v for k, v in dataclasses.asdict(cfg).items() if k not in skip}}

    def split_rows(self, cfg, split: str) -> Optional[int]:
        """How many rows the config asks of a generated split (None: not known before generating)."""
        return None

    def datasets(self, cfg) -> list[DatasetInfo]:
        """The splits a trial of ``cfg`` uses (train, dev, ``cfg.eval_splits``), described without loading rows:
        imported splits from their Parquet footer, generated ones from their cache key (and cached file)."""
        import pyarrow.parquet as pq

        from rirlab.tasks import cache

        root, imported = self.cache_dir(cfg), list(self.imported_splits(cfg))
        out = []
        for split in ("train", "dev", *self.eval_split_names(cfg)):
            if split in imported:
                rec = cache.imported_record(self.name, split, root)
                params = {k: v for k, v in rec.items() if k not in ("path", "digest", "rows")}
                out.append(DatasetInfo(f"{self.name}/{split}", split, rec["path"], params, rec["digest"],
                                       rec["rows"], "file"))
                continue
            key = cache.key_params(self.name, self.split_params(cfg, split), imported, root)
            path = cache.split_path(self.name, split, key, root)
            if path.exists():
                rows, rows_from = pq.read_metadata(path).num_rows, "file"
            else:
                rows = self.split_rows(cfg, split)
                rows_from = "unknown" if rows is None else "config"
            digest = path.stem.split("-")[-1]  # the cache file's key: finds the file
            out.append(DatasetInfo(f"{self.name}/{split}", split, "generated", {"generator": self.name, **key},
                                   digest, rows, rows_from))
        return out


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
