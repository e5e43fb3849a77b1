"""Tasks read from the user's own files (the RIR / EBT papers' natural-language tasks): where the files are,
reading them in their publishers' formats, tokenisation, the training-split vocabulary, frozen GloVe.

Nothing is downloaded: a task reads files the user already has, under ``data_dir`` (task config value, else
``$RIRLAB_DATA``, else ``./data``), laid out as their publishers' archives unpack (each task's ``files``;
``rirlab tasks`` lists them). A missing file is one line naming it and where it is expected; a malformed line
(missing column, unknown label, not UTF-8) is one ``file:line: reason`` line; both exit 2.

Choices where the papers (*Recursion in Recursion*, NeurIPS 2023, arXiv:2311.04449; *Efficient Beam Tree
Recursion*, NeurIPS 2023, arXiv:2307.10779, and its supplement) are silent:

- Tokenisation (:func:`rirlab.tasks.treebank.tokenize`): NLTK's ``word_tokenize`` as the authors' preprocessing
  (JRC1995/BeamRecursionFamily) calls it for SNLI, MNLI and IMDB, without NLTK: its Penn Treebank word rules, and
  its Punkt sentence model (which cannot be downloaded at run time) replaced by rules, which differ only where the
  model alone knows (rare abbreviations, collocations). SST keeps its trees' leaves; QQP splits on white space (sst.py, qqp.py).
- Case (``lowercase``, default true): tokens are lower-cased, as the authors' preprocessing does for every text
  task (it produced the published numbers; GloVe 840B is cased, so this changes which words have vectors);
  ``lowercase: false`` keeps the case.
- Vocabulary (``vocab_from``, default ``authors``): as the authors' preprocessing builds it, the words of the
  task's ``vocab_splits`` (train, dev, test and the extra test sets where their script counts them: SST train,
  dev, test; SNLI train, dev, test, hard; MNLI train and every test set; IMDB train and the IID test; QQP the
  whole Quora file and both PAWS sets) seen at least ``min_count`` times (their per-task minimum: SST 1, SNLI 2,
  MNLI 4, IMDB 5, QQP 6), most frequent first, at most ``max_vocab``; SNLI and MNLI count whole files as their
  scripts do (rirlab.tasks.nli). Equal counts keep the authors' order, ``np.flip(np.argsort(counts))`` over the
  words in first-seen order (:func:`authors_order`; this decides which words make the 50,000 cut; SNLI and MNLI
  read in their order, the other tasks in the order of rirlab's splits). ``vocab_from: train`` counts the training
  split alone (``min_count`` 1 unless set). Ids 0 ``<pad>``, 1 ``<unk>``. With frozen GloVe (``embeddings:
  glove``) a word without a GloVe vector is left out (it reads as ``<unk>``); ``<pad>`` is a zero vector and
  ``<unk>`` (``unk_vector``, default ``trainable``) a trainable random vector, as the authors' model code
  (``zero``: a frozen zero vector). ``rirlab data stats --split S`` prints the share of S's tokens that read as
  ``<unk>`` (``oov``).
- The frozen 300-d vectors reach the model through a trainable linear map to its width (rirlab.models.heads).
"""

from __future__ import annotations

import csv
import functools
import json
import os
from collections import Counter
from pathlib import Path
from typing import ClassVar, Literal, Iterator, Optional, Sequence

import pyarrow as pa
from pydantic import Field, field_validator
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.contract import OOV_PARAM
from rirlab.errors import UserError
from rirlab.tasks import cache, summary
from rirlab.tasks.base import PAD, DatasetInfo, Task, TaskData, collate_classify, collate_pair

UNK = "<unk>"
DATA_ENV = "RIRLAB_DATA"
GLOVE_FILE = "glove.840B.300d.txt"
# a file read for the authors' vocabulary alone (file_table): what to do when it is absent
VOCAB_WAY_OUT = (", read for the authors' vocabulary (vocab_from: authors): put it there, or --set vocab_from=train "
                 "to count the training files only")


def data_root(data_dir: Optional[str]) -> Path:
    """Where the user's files are: ``data_dir``, else ``$RIRLAB_DATA``, else ``./data``."""
    return Path(data_dir or os.environ.get(DATA_ENV) or "data").expanduser().absolute()


def expect(task: str, root: Path, rel: str, way_out: str = "") -> Path:
    """``root / rel``; UserError in one line naming the file, where it is expected and ``way_out`` (what else the
    user may do) when it is absent."""
    path = root / rel
    if not path.exists():
        raise UserError(f"{task}: missing {rel}: expected at {path}{way_out} (data_dir {root}; set it with "
                        f"--set data_dir=DIR or ${DATA_ENV})")
    return path


def bad(path, no, why: str) -> UserError:
    return UserError(f"{path}:{no}: {why}")


def clip(value: str, n: int = 60) -> str:
    """``repr`` of a value read from a data row, cut to about ``n`` characters (an error line stays readable)."""
    return repr(value) if len(value) <= n else f"{value[:n]!r}... ({len(value)} characters)"


def read_lines(path) -> Iterator[tuple[int, str]]:
    """(line number, text without its newline) of a UTF-8 file; UserError file:line where a line is not UTF-8."""
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            if no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                yield no, raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise bad(path, no, f"not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1})") from None


def read_text(path) -> str:
    """A whole small file (one IMDB review) as UTF-8; UserError file:line when it is not."""
    return "\n".join(line for _, line in read_lines(path))


FIELD_LIMIT = 64 * 2**20  # a field of a data file may be this long (LRA Retrieval rows hold whole papers)


def tsv(path, quoted: bool = True, strict: bool = True) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) of a tab-separated file. ``quoted``: fields may be double-quoted (with ``""`` for a
    quote and newlines inside, as pandas / csv write them); else quotes are plain characters. ``strict`` False:
    csv.reader's default (text after a closing quote is kept, a quote left open runs to the end of the file)."""
    it = (line + "\n" for _, line in read_lines(path))
    csv.field_size_limit(max(csv.field_size_limit(), FIELD_LIMIT))  # csv's default 131,072 bytes: an AAN paper is more
    reader = csv.reader(it, delimiter="\t", quoting=csv.QUOTE_MINIMAL if quoted else csv.QUOTE_NONE,
                        strict=strict)
    while True:
        start = reader.line_num + 1  # the line the next row begins on
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            if "unexpected end of data" in str(err):  # a quote opened on ``start`` never closes
                raise bad(path, start, "unterminated quote: the quoted field that starts on this line runs to the "
                                       "end of the file; close it or double the quote (\"\")") from None
            raise bad(path, reader.line_num, f"malformed TSV ({err})") from None
        if fields:
            yield reader.line_num, fields


def columns(path, header: list[str], wanted: dict[str, tuple[str, ...]], no: int = 1) -> dict[str, int]:
    """Column index of each wanted field, found in ``header`` by any of its names; file:line error naming it."""
    names = [h.strip().lower() for h in header]
    out = {}
    for key, aliases in wanted.items():
        hit = next((names.index(a) for a in aliases if a in names), None)
        if hit is None:
            raise bad(path, no, f"no column {' / '.join(aliases)} in the header ({clip(', '.join(header), 100)})")
        out[key] = hit
    return out


def jsonl(path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of a JSON-lines file; file:line error for a line that is not a JSON object."""
    for no, line in read_lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise bad(path, no, f"not a JSON object ({err.msg})") from None
        except RecursionError:  # json's decoder recurses once per level: a wrong or corrupted file
            raise bad(path, no, "JSON nested too deep to read; a line holds one flat object of strings (sentence1, "
                                "sentence2, gold_label): fix or delete the line") from None
        if not isinstance(obj, dict):
            raise bad(path, no, "not a JSON object")
        yield no, obj


def field(path, no, obj: dict, *names: str) -> str:
    for name in names:
        if isinstance(obj.get(name), str):
            return obj[name]
    raise bad(path, no, f"no text field {' / '.join(names)}")


# --- config ---

@dataclass(config=STRICT)
class TextConfig:
    """Settings every user-file text task shares. A task's config names its test splits once, as class keywords:
    ``class SST5Config(TextConfig, task="sst5", splits={"test": "IID"})`` (split -> the papers' column label, in
    the papers' order) gives it the field ``eval_splits`` (default: every one of them, or ``default``), checked to
    name only these splits; the task reads the same table (``TextTask.splits``)."""

    data_dir: Optional[str] = None  # where the user's files are; default $RIRLAB_DATA, else ./data
    generated: bool = False  # true: a small generated stand-in corpus in the publishers' formats (CI, --quick)
    embeddings: Literal["glove", "random"] = "glove"  # frozen GloVe 840B-300d (papers) or trainable random
    lowercase: bool = True  # tokens lower-cased, as the authors' preprocessing of every text task; false keeps case
    glove_path: Optional[str] = None  # default <data_dir>/glove.840B.300d.txt
    max_vocab: int = Field(50000, ge=1)  # most frequent words kept
    vocab_from: Literal["authors", "train"] = "authors"  # the authors' vocabulary splits, or train alone
    min_count: Optional[int] = Field(None, ge=1)  # fewer occurrences: <unk>; default the task's (the authors')
    unk_vector: Literal["trainable", "zero"] = "trainable"  # with glove: <unk> trainable random (authors) or zero
    max_train_len: Optional[int] = Field(None, ge=1)  # training rows with a longer sequence are dropped
    data_seed: int = Field(1234, ge=0)  # sampled splits (dev samples) and the stand-in corpus
    cache_dir: Optional[str] = None  # default $RIRLAB_CACHE, else ~/.cache/rirlab

    task: ClassVar[str] = ""  # the class keywords (class docstring)
    splits: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, task: Optional[str] = None, splits: Optional[dict] = None,
                          default: Optional[Sequence[str]] = None, **kw):
        super().__init_subclass__(**kw)
        if splits is None:
            return
        cls.task, cls.splits = task, dict(splits)
        # eval_splits: the first of the class's own fields, declared before @dataclass reads the class
        cls.__annotations__ = {"eval_splits": "list[str]", **cls.__dict__.get("__annotations__", {})}
        cls.eval_splits = Field(default_factory=lambda: list(default or splits))

    @field_validator("eval_splits", check_fields=False)
    @classmethod
    def _known(cls, v):
        return check_splits(cls.task, cls.splits, v)


def check_splits(task: str, allowed, names: list[str]) -> list[str]:
    """``names`` when each is one of ``allowed`` (the task's test splits), else ValueError naming the first other."""
    wrong = [s for s in names if s not in allowed]
    if wrong:
        raise ValueError(f"unknown {task} split {wrong[0]!r}; choose from {', '.join(allowed)}")
    return names


def known_splits(task: str, allowed):
    """Validator of the ``eval_splits`` of a task config that is not a TextConfig (LRA): names must be the task's
    test splits."""
    return field_validator("eval_splits")(classmethod(lambda cls, v: check_splits(task, allowed, v)))


# --- the task base of every user-file text task ---

class TextTask(Task):
    """A classification or sentence-pair task read from the user's files.

    A subclass sets ``labels`` (class names, index = class id), ``kind``, ``files`` (key -> path under data_dir,
    as the publisher's archive unpacks; ``rirlab tasks`` prints them), ``needs`` (split -> file keys it reads)
    and implements :meth:`read_split` (split -> rows ``(label, tokens)`` or ``(label, tokens1, tokens2)``) and
    :meth:`standin` (writes a small generated corpus in the publishers' formats, for ``generated: true``); its
    ``config`` names the test splits (TextConfig's class keywords), which ``splits`` reads.
    A split's rows are cached as Parquet, keyed by the size and modification time of the files it reads.
    """

    labels: ClassVar[tuple[str, ...]] = ()
    files: ClassVar[dict[str, str]] = {}
    needs: ClassVar[dict[str, tuple[str, ...]]] = {}
    version: ClassVar[int] = 1  # bump when a reader changes what it returns
    vocab_splits: ClassVar[tuple[str, ...]] = ("train",)  # where the authors' vocabulary counts words
    min_count: ClassVar[int] = 1  # the authors' minimum count for a vocabulary word
    quick = {"generated": True}  # `rirlab train --quick`: the stand-in corpus

    @property
    def splits(self) -> tuple:  # type: ignore[override]
        """The test splits the config's class keywords name (TextConfig), as (split, paper column label)."""
        return tuple(self.config.splits.items())

    @property
    def num_classes(self) -> int:  # type: ignore[override]
        return len(self.labels)

    @property
    def collate(self):  # type: ignore[override]
        return collate_pair if self.kind == "pair" else collate_classify

    vocab: ClassVar[list] = [PAD, UNK]  # the real vocabulary is the training split's (load)

    # --- subclass hooks ---

    def read_split(self, cfg, root: Path, split: str) -> list:
        raise NotImplementedError

    def standin(self, root: Path, seed: int) -> None:
        raise NotImplementedError

    def protocol(self, cfg, split: str) -> dict:
        """Config values a split's rows depend on (besides its files); part of its cache key."""
        return {}

    # --- where the files are ---

    def root(self, cfg) -> Path:
        """data_dir, or (``generated: true``) the stand-in corpus under the cache, written on first use."""
        if not getattr(cfg, "generated", False):
            return data_root(cfg.data_dir)
        root = cache.cache_root(cfg.cache_dir) / "standin" / self.name / f"seed{cfg.data_seed}-v{self.version}"
        if not (root / STANDIN_NOTE).exists():
            from rirlab.tasks import standin

            tmp = root.with_name(f".{root.name}.{os.getpid()}.tmp")
            standin.write_all(self, tmp, cfg.data_seed)
            (tmp / STANDIN_NOTE).write_text(standin.NOTE.format(task=self.name))
            try:
                os.replace(tmp, root)
            except OSError:  # another trial wrote it first
                import shutil

                shutil.rmtree(tmp, ignore_errors=True)
        return root

    def split_needs(self, cfg, split: str) -> tuple:
        """The file keys a split reads (``needs``; a task whose protocol option changes them overrides this)."""
        return self.needs.get(split, ())

    def paths(self, cfg, split: str, check: bool = True) -> list[tuple[str, Path]]:
        root = self.root(cfg)
        keys = self.split_needs(cfg, split)
        return [(k, expect(self.name, root, self.files[k]) if check else root / self.files[k]) for k in keys]

    def _check_split(self, split: str) -> None:
        if split not in self.all_splits:
            raise UserError(f"{self.name}: unknown split '{split}'; choose from {', '.join(self.all_splits)}")

    def split_params(self, cfg, split: str) -> dict:
        files = {k: [str(p), file_stamp(p)] for k, p in self.paths(cfg, split, check=False)}
        lower = {"lowercase": cfg.lowercase} if hasattr(cfg, "lowercase") else {}
        return {"split": split, "files": files, "version": self.version, **lower, **self.protocol(cfg, split)}

    def split_table(self, cfg, split: str) -> pa.Table:
        self._check_split(split)
        self.paths(cfg, split)  # one line for the first missing file
        params = self.split_params(cfg, split)
        return cache.cached(self.name, split, params, lambda: self.to_table(self.lowered(cfg, self._nonempty(
            split, self.read_split(cfg, self.root(cfg), split), self.paths(cfg, split)))), cfg.cache_dir)

    def _nonempty(self, split: str, rows: list, paths) -> list:
        """A split with no example (a file with its header only) would score 0.0 on nothing: one line instead."""
        if not rows:
            files = ", ".join(str(p) for _, p in paths)
            raise UserError(f"{self.name}: split '{split}' has no example in {files} (only a header, or no row "
                            f"with a label?); give the complete file")
        return rows

    @staticmethod
    def lowered(cfg, rows: list) -> list:
        """Rows with their tokens lower-cased where ``cfg.lowercase`` (module docstring)."""
        if not getattr(cfg, "lowercase", False):
            return rows
        return [(r[0], *([t.lower() for t in toks] for toks in r[1:])) for r in rows]

    def datasets(self, cfg) -> list[DatasetInfo]:
        """The splits a trial reads, without reading them: source = the user's files (or "generated" for the
        stand-in corpus, whose params say what it is), digest = the split's cache key."""
        import pyarrow.parquet as pq

        out = []
        generated = getattr(cfg, "generated", False)
        for split in ("train", "dev", *cfg.eval_splits):
            params = self.split_params(cfg, split)
            path = cache.split_path(self.name, split, params, cfg.cache_dir)
            rows = pq.read_metadata(path).num_rows if path.exists() else None
            if generated:
                source = "generated"
                params = {"generator": self.name, "stand_in": STANDIN_WHAT, **params}
            else:
                source = ", ".join(p for p, _ in params["files"].values())
            out.append(DatasetInfo(f"{self.name}/{split}", split, source, params, path.stem.split("-")[-1], rows,
                                   "file" if rows is not None else "unknown"))
        return out

    # --- rows, tables, lines ---

    # a row is (label, sequence[, sequence2]); stored as columns label, COLUMNS[0][, COLUMNS[1]] of lists of VALUES
    COLUMNS: ClassVar[tuple[str, str]] = ("text", "text2")  # tokens (LRA tasks: byte or pixel ids)
    VALUES: ClassVar[pa.DataType] = pa.string()

    def to_table(self, rows: Sequence) -> pa.Table:
        cols = {"label": pa.array([r[0] for r in rows], pa.int8()),
                self.COLUMNS[0]: pa.array([list(r[1]) for r in rows], pa.list_(self.VALUES))}
        if self.kind == "pair":
            cols[self.COLUMNS[1]] = pa.array([list(r[2]) for r in rows], pa.list_(self.VALUES))
        return pa.table(cols)

    def rows_of(self, table: pa.Table) -> list:
        cols = [table.column(c).to_pylist() for c in ("label", *self.COLUMNS) if c in table.column_names]
        return list(zip(*cols))

    def to_lines(self, table: pa.Table) -> Iterator[str]:
        """rirlab's own line format of a split: ``LABEL<TAB>tokens`` (``<TAB>tokens2`` for pairs)."""
        for row in self.rows_of(table):
            yield "\t".join([self.labels[row[0]], *(" ".join(t) for t in row[1:])])

    def parse_line(self, line: str) -> tuple:
        cols = line.rstrip("\n").split("\t")
        want = 3 if self.kind == "pair" else 2
        if len(cols) != want:
            raise ValueError(f"expected {want} tab-separated columns (LABEL, {'TEXT1, TEXT2' if want == 3 else 'TEXT'}),"
                             f" got {len(cols)}")
        if cols[0] not in self.labels:
            raise ValueError(f"label {cols[0]!r} is not one of {', '.join(self.labels)}")
        return (self.labels.index(cols[0]), *(c.split() for c in cols[1:]))

    def verify(self, row) -> list[str]:
        return []  # human labels: nothing to recompute (parse_line already refuses unknown labels)

    def stats(self, rows: Sequence) -> dict:
        lengths = [max(len(t) for t in r[1:]) for r in rows]
        return {"count": len(rows), "length": summary.distribution(lengths),
                "labels": summary.shares(Counter(self.labels[r[0]] for r in rows))}

    # --- trial data ---

    def vocab_tables(self, cfg, train: pa.Table) -> list[pa.Table]:
        """The tables whose words the vocabulary counts, in the order the authors' script reads them (module
        docstring): ``train`` and the other ``vocab_splits``, or ``train`` alone (``vocab_from: train``)."""
        if getattr(cfg, "vocab_from", "train") != "authors":
            return [train]
        return [train] + [self.split_table(cfg, s) for s in self.vocab_splits if s != "train"]

    def file_table(self, cfg, key: str) -> pa.Table:
        """Every row of the file ``files[key]`` in file order, as :meth:`read_file` reads it (no split, no filter),
        lower-cased per ``cfg``; cached like a split."""
        root = self.root(cfg)
        path = expect(self.name, root, self.files[key], VOCAB_WAY_OUT)
        params = {"file": key, "files": {key: [str(path), file_stamp(path)]}, "version": self.version,
                  "lowercase": getattr(cfg, "lowercase", False)}
        return cache.cached(self.name, f"file-{key}", params,
                            lambda: self.to_table(self.lowered(cfg, self.read_file(root, key))), cfg.cache_dir)

    def read_file(self, root: Path, key: str) -> list:
        """Rows of one file (:meth:`file_table`); a task whose vocabulary counts whole files implements it."""
        raise NotImplementedError

    def vocabulary_words(self, cfg, train: pa.Table) -> list[str]:
        """The words the vocabulary is drawn from (module docstring), most frequent first: under ``vocab_from``
        authors, equal counts in the authors' order (:func:`authors_order`), else alphabetically."""
        authors = getattr(cfg, "vocab_from", "train") == "authors"
        counts: Counter = Counter()
        for table in self.vocab_tables(cfg, train):  # row by row, each row's sentences in turn, as the scripts
            for row in zip(*(table.column(c).to_pylist() for c in ("text", "text2") if c in table.column_names)):
                for toks in row:
                    counts.update(toks)
        least = getattr(cfg, "min_count", None) or (self.min_count if authors else 1)
        words = [w for w in counts if counts[w] >= least]  # first seen first
        if authors:
            return [words[i] for i in authors_order([counts[w] for w in words])]
        return sorted(words, key=lambda w: (-counts[w], w))

    def vocabulary(self, cfg, train: pa.Table):
        """(tokens, embeddings or None): the vocabulary (module docstring); ``train`` the training split's table."""
        words = self.vocabulary_words(cfg, train)
        if cfg.embeddings == "random":
            return [PAD, UNK, *words[: cfg.max_vocab]], None
        from rirlab.tasks import glove

        vectors = glove.load(self.glove_file(cfg), words, cfg.cache_dir)
        kept = [w for w in words if w in vectors.index][: cfg.max_vocab]
        return [PAD, UNK, *kept], vectors.matrix([PAD, UNK, *kept])

    def oov(self, cfg, splits) -> dict:
        """Share of each split's tokens that read as ``<unk>`` under the trial's vocabulary (0..1)."""
        vocab = set(self.vocabulary(cfg, self.split_table(cfg, "train"))[0][2:])
        out = {}
        for split in splits:
            table = self.split_table(cfg, split)
            toks = [t for c in ("text", "text2") if c in table.column_names for r in table.column(c).to_pylist()
                    for t in r]
            out[split] = sum(t not in vocab for t in toks) / max(1, len(toks))
        return out

    def trial_params(self, cfg, splits) -> dict[str, str]:
        """Each split's OOV rate (:meth:`oov`) as the param ``oov/<split>``."""
        return {OOV_PARAM + split: f"{share:.4f}" for split, share in self.oov(cfg, splits).items()}

    def glove_file(self, cfg) -> Path:
        """The GloVe file a trial reads; UserError in one line when it is absent."""
        path = Path(cfg.glove_path).expanduser() if cfg.glove_path else self.root(cfg) / GLOVE_FILE
        if not path.exists():
            where = "--set glove_path=FILE" if cfg.glove_path else "data_dir, --set glove_path=FILE"
            raise UserError(f"{self.name}: missing {path.name}: expected at {path} (GloVe 840B-300d, frozen, as the "
                            f"papers; put it there or use {where}; --set embeddings=random trains random ones instead)")
        return path

    def preflight(self, cfg) -> None:
        """Cheap checks before a run is recorded: the GloVe file (when used) exists, and its first lines hold
        vectors of the dimension its name says (rirlab.tasks.glove)."""
        if getattr(cfg, "embeddings", None) == "glove":
            from rirlab.tasks import glove

            glove.file_dim(self.glove_file(cfg))

    def preflight_all(self, cfgs: list) -> None:
        """:meth:`preflight` of each config, then the GloVe checks that need the vocabulary (a wanted word's line
        with an extra value or a value that is not finite; no word of the vocabulary with a vector): each GloVe
        file streamed once for the vocabularies of all the configs (``glove.preload``), which leaves every
        vocabulary's vectors cached for its trials."""
        super().preflight_all(cfgs)
        vocabularies: dict[Path, list] = {}
        for cfg in cfgs:
            if getattr(cfg, "embeddings", None) == "glove":
                words = self.vocabulary_words(cfg, self.split_table(cfg, "train"))
                vocabularies.setdefault(self.glove_file(cfg), []).append((words, cfg.cache_dir))
        if vocabularies:
            from rirlab.tasks import glove

            for path, wanted in vocabularies.items():
                glove.preload(path, wanted)

    def encode(self, table: pa.Table, ids: dict) -> list:
        """Examples of a split: (token ids, label) or (ids1, ids2, label); an empty sentence reads as ``<unk>``."""
        rows = self.rows_of(table)
        return [(*([ids.get(t, 1) for t in toks] or [1] for toks in r[1:]), r[0]) for r in rows]

    def examples(self, cfg, table: pa.Table) -> list:
        vocab, _ = self.vocabulary(cfg, self.split_table(cfg, "train"))
        return self.encode(table, {t: i for i, t in enumerate(vocab)})

    def load(self, cfg) -> TaskData:
        train = self.split_table(cfg, "train")
        vocab, vectors = self.vocabulary(cfg, train)
        ids = {t: i for i, t in enumerate(vocab)}
        evals = {s: self.encode(self.split_table(cfg, s), ids) for s in ("dev", *cfg.eval_splits)}
        unk = 1 if vectors is not None and getattr(cfg, "unk_vector", "zero") == "trainable" else None
        return TaskData(vocab=vocab, num_classes=self.num_classes, kind=self.kind, train=self.encode(train, ids),
                        eval_splits=evals, collate=self.collate, embeddings=vectors, unk_id=unk)


def file_stamp(p: Path):
    """A file's [size, modification time] (None when absent), or a folder's :func:`folder_stamp`: part of a cache key."""
    if not p.exists():
        return None
    if p.is_dir():  # a folder of files (aclImdb): every file's size and mtime, so a review rewritten in
        return folder_stamp(p)  # place (the folder's own mtime unchanged) is noticed
    st = p.stat()
    return [st.st_size, st.st_mtime_ns]


def folder_stamp(folder: Path) -> list:
    """[file count, digest of every file's relative path, size and modification time] under ``folder``."""
    import hashlib

    entries = []
    for top, _, names in os.walk(folder):
        for name in names:
            st = os.stat(os.path.join(top, name))
            entries.append(f"{os.path.relpath(os.path.join(top, name), folder)}\0{st.st_size}\0{st.st_mtime_ns}")
    entries.sort()
    return [len(entries), hashlib.sha256("\n".join(entries).encode()).hexdigest()[:16]]


STANDIN_NOTE = "STAND-IN-README.txt"
STANDIN_WHAT = "generated stand-in text in the publishers' formats (rirlab.tasks.standin), not the real data"


SMALL_SORT = 15  # numpy's quicksort: partitions of at most this many + 1 items are insertion-sorted


def authors_order(counts: list[int]) -> list[int]:
    """``np.flip(np.argsort(counts))``, the authors' most-frequent-first order (counts in first-seen order), with
    numpy's classic unstable quicksort argsort (npysort/quicksort.cpp ``aquicksort_``: median-of-3 introsort, insertion
    sort below 17 items), written out because the tie order decides which words make a ``max_vocab`` cut and newer
    numpy builds sort ties otherwise on CPUs with AVX-512 (x86-simd-sort). Its heapsort fallback (recursion deeper
    than 2 log2 n) is replaced by the stable sort, which count lists do not reach."""
    idx = list(range(len(counts)))
    v = counts
    stack = [(0, len(idx) - 1, 2 * max(len(idx).bit_length() - 1, 0))]
    while stack:
        pl, pr, depth = stack.pop()
        if depth < 0:  # numpy: heapsort of this partition
            idx[pl : pr + 1] = sorted(idx[pl : pr + 1], key=lambda i: v[i])
            continue
        while pr - pl > SMALL_SORT:
            pm = pl + ((pr - pl) >> 1)
            if v[idx[pm]] < v[idx[pl]]:
                idx[pm], idx[pl] = idx[pl], idx[pm]
            if v[idx[pr]] < v[idx[pm]]:
                idx[pr], idx[pm] = idx[pm], idx[pr]
            if v[idx[pm]] < v[idx[pl]]:
                idx[pm], idx[pl] = idx[pl], idx[pm]
            vp = v[idx[pm]]
            pi, pj = pl, pr - 1
            idx[pm], idx[pj] = idx[pj], idx[pm]
            while True:
                pi += 1
                while v[idx[pi]] < vp:
                    pi += 1
                pj -= 1
                while vp < v[idx[pj]]:
                    pj -= 1
                if pi >= pj:
                    break
                idx[pi], idx[pj] = idx[pj], idx[pi]
            idx[pi], idx[pr - 1] = idx[pr - 1], idx[pi]
            depth -= 1
            if pi - pl < pr - pi:  # the larger side waits on the stack
                stack.append((pi + 1, pr, depth))
                pr = pi - 1
            else:
                stack.append((pl, pi - 1, depth))
                pl = pi + 1
        for pi in range(pl + 1, pr + 1):  # insertion sort
            vi = idx[pi]
            pj = pi
            while pj > pl and v[vi] < v[idx[pj - 1]]:
                idx[pj] = idx[pj - 1]
                pj -= 1
            idx[pj] = vi
    return idx[::-1]


def keep_short(rows: list, max_len: Optional[int]) -> list:
    """Training filter: drop rows where any sequence has more than ``max_len`` tokens (None keeps all)."""
    if max_len is None:
        return rows
    return [r for r in rows if all(len(t) <= max_len for t in r[1:])]


@functools.lru_cache(maxsize=None)
def _label_index(labels: tuple) -> dict:
    return {name: i for i, name in enumerate(labels)}


def label_of(path, no, labels: tuple, value: str, mapping: Optional[dict] = None) -> int:
    """Class id of a file's label (through ``mapping`` when the file's names differ); file:line error if unknown."""
    name = (mapping or {}).get(value.strip(), value.strip())
    idx = _label_index(labels).get(name)
    if idx is None:
        known = sorted(mapping) if mapping else labels
        raise bad(path, no, f"unknown label {clip(value)}; expected one of {', '.join(known)}")
    return idx


def sample_balanced(rows: list, n: int, rng, labels: Sequence[int]) -> tuple[list, list]:
    """(sample, rest): ``n`` rows, an equal share of each label in ``labels``, drawn with ``rng``; the rest keep
    their order."""
    per = n // len(labels)
    chosen = set()
    for y in labels:
        idx = [i for i, r in enumerate(rows) if r[0] == y]
        if len(idx) < per:
            raise UserError(f"only {len(idx)} rows of label {y} to sample {per} from; is the file complete?")
        chosen.update(rng.sample(idx, per))
    return [rows[i] for i in sorted(chosen)], [r for i, r in enumerate(rows) if i not in chosen]

