"""Frozen GloVe vectors (Pennington, Socher & Manning, EMNLP 2014) read from the user's ``glove.840B.300d.txt``.

The RIR and EBT papers train every natural-language task with frozen GloVe 840B-300d vectors. The text file
(one ``word v1 ... v300`` line per word; 2.2M lines, 5.6 GB) is streamed once per vocabulary: only the words
asked for are parsed, and their vectors are cached as one compact float32 array under
``<cache>/glove/<key>.npz`` where the key hashes the file (path, size, modification time) and the sorted word
list. A line is read as the authors' ``load_glove`` (preprocess_tools/process_utils.py of JRC1995/BeamRecursionFamily)
reads it, ``line.strip().split()``: split on any white space (Unicode's too), the word the first field, a vector of
``dim`` values; a line with another count is skipped (the few words of the 840B file with spaces in them, ``. . .``,
no token of ours). A word met on several lines keeps its last vector, as their dict does. ``dim`` is the number of
values most of the file's first lines have; a first line with fewer is an error at line 1 (a truncated or foreign
first line would otherwise make every word ``<unk>``). There is no random fallback: a missing file is an error
(rirlab.tasks.text).

What is refused, in one ``file:line: reason`` line, rather than trained on (each would quietly change results):
a file whose name says its dimension (``glove.840B.300d.txt``, ``glove.6B.50d.txt``) while its lines hold another
(checked on the first lines: :func:`file_dim`); a line of a wanted word with fewer or more values than the file's
vectors, or with a value that is not a finite number (``nan``, ``inf``); a file in which no wanted word has a
vector (the vocabulary would be ``<pad>`` and ``<unk>`` alone). Lines of words no task asks for are not parsed, so
their faults do not matter (a first line of 301 values, or with a value that is not a number, is refused only when
its word is wanted; the authors' script skips the first and fails on the second). All of these come before any run is recorded or any trial starts: the task's preflight
(rirlab.tasks.text) streams the file once for every vocabulary of the sweep (:func:`preload`), which leaves each
vocabulary's vectors in the cache for its trials.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import uuid
from pathlib import Path
from typing import Iterable, Optional

import numpy as np

from rirlab.errors import UserError
from rirlab.tasks import cache


@dataclasses.dataclass
class Vectors:
    words: list[str]
    array: np.ndarray  # (len(words), dim) float32

    @property
    def index(self) -> dict[str, int]:
        if not hasattr(self, "_index"):
            self._index = {w: i for i, w in enumerate(self.words)}
        return self._index

    @property
    def dim(self) -> int:
        return self.array.shape[1]

    def subset(self, words: set[str]) -> "Vectors":
        """The vectors of ``words`` alone, in file order (one vocabulary's share of a pass for several)."""
        keep = [i for i, w in enumerate(self.words) if w in words]
        return Vectors([self.words[i] for i in keep], self.array[keep])

    def matrix(self, vocab: list[str]) -> np.ndarray:
        """(len(vocab), dim) float32: each word's vector, zeros for words without one (``<pad>``, ``<unk>``)."""
        out = np.zeros((len(vocab), self.dim), np.float32)
        for i, w in enumerate(vocab):
            j = self.index.get(w)
            if j is not None:
                out[i] = self.array[j]
        return out


HEAD_LINES = 100  # the first lines whose most common number of values is the file's dimension
NAMED_DIM = re.compile(r"\.(\d+)d\.")  # glove.840B.300d.txt, glove.6B.50d.txt: the dimension the name says
READER = 3  # part of the cache key: vectors cached by an older reader (nan let through; first occurrence) read again
ODD_SPACE = re.compile(rb"[\t\x0b\x0c\x1c-\x1f]")  # ASCII white space other than " " that str.split() splits on


def file_dim(path: Path) -> Optional[int]:
    """The number of values most of the file's first lines have (None for an empty file); UserError at line 1
    when the first line has fewer, or is not ``word v1 ... vD``, or when the file's name says another dimension
    (a 50-d file saved as glove.840B.300d.txt)."""
    counts = []
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            counts.append(raw.rstrip(b" \r\n").count(b" "))
            if no == HEAD_LINES:
                break
    if not counts:
        return None
    dim = max(set(counts), key=lambda c: (counts.count(c), c))  # a tie: the longer
    if counts[0] < 1 or dim < 1:
        raise UserError(f"{path}:1: not a GloVe line (word then its vector, space-separated)")
    if counts[0] < dim:
        raise UserError(f"{path}:1: {counts[0]} values; the file's next lines have {dim} (a truncated first line? "
                        f"fix or delete it)")
    named = NAMED_DIM.search(path.name)
    if named and int(named[1]) != dim:
        raise UserError(f"{path}:1: {dim} values per word, but the file's name says {named[1]}-d vectors; give the "
                        f"{named[1]}-d file (the papers': glove.840B.300d.txt), or these vectors under their own name "
                        f"(--set glove_path=FILE)")
    return dim


def numbers(fields: list[bytes]) -> bool:
    try:
        np.array(fields, dtype=np.float32)
    except ValueError:
        return False
    return True


def stream(path: Path, wanted: Iterable[str]) -> Vectors:
    """The vectors of ``wanted`` words found in a GloVe text file, in file order; file:line errors for a
    malformed line of a wanted word (and for a first line with fewer values than the file's vectors), and an
    error when no wanted word has a vector."""
    wanted = set(wanted)
    vectors = _read(path, wanted)
    _require_some(path, wanted, vectors)
    return vectors


def _require_some(path: Path, wanted: set[str], vectors: Vectors) -> None:
    if wanted and not vectors.words:
        raise UserError(f"{path}: none of the {len(wanted)} words asked for has a vector here (e.g. "
                        f"{', '.join(repr(w) for w in sorted(wanted)[:3])}); give the GloVe file of this text "
                        f"(glove.840B.300d.txt), or --set embeddings=random to train without it")


def _read(path: Path, wanted: set[str]) -> Vectors:
    """:func:`stream` but for its last check (a pass for several vocabularies checks each: :func:`preload`)."""
    want = {w.encode("utf-8") for w in wanted}
    words, rows = [], []
    dim = file_dim(path)
    if dim is None:
        raise UserError(f"{path}: empty file; expected GloVe vectors (glove.840B.300d.txt)")
    found: dict[bytes, np.ndarray] = {}  # a word met again: its last line wins (the authors' dict)
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            plain = raw.isascii() and not ODD_SPACE.search(raw)  # bytes.split() is then str.split()
            text = raw if plain else raw.decode("utf-8", "replace")
            head = text.split(None, 1)  # in C up to the first white space: most lines are skipped unsplit
            if not head:
                continue
            word = head[0] if plain else head[0].encode("utf-8")
            if word not in want:
                continue
            parts = text.split()  # the authors' line.strip().split()
            own = not text[:1].isspace()  # the word opens the line (no white-space word stripped away before it)
            name = word.decode("utf-8", "replace")
            # a word with spaces in it (". . .") ends in dim numbers: a line that does not is its word's, damaged
            if own and len(parts) - 1 > dim and not numbers(parts[-dim:]):
                parts = parts[:1] + [b"x"]  # (refused below: a value that is not a number)
            elif len(parts) - 1 != dim:  # the authors skip the line; one of a wanted word is refused
                if own and (len(parts) - 1 < dim or numbers(parts[1:])):
                    raise UserError(f"{path}:{no}: {len(parts) - 1} values for {name!r}; the file's vectors have {dim} "
                                    f"(fix or delete the line)")
                continue
            try:
                row = np.array(parts[1:], dtype=np.float32)
            except ValueError:
                raise UserError(f"{path}:{no}: a value of {name!r} is not a number (fix or delete the line)") from None
            if not np.isfinite(row).all():  # numpy reads "nan" and "inf": they would surface as a diverged loss
                raise UserError(f"{path}:{no}: the vector of {name!r} holds {row[~np.isfinite(row)][0]}; GloVe values "
                                f"are finite numbers (a damaged file? fix the line or fetch the file again)")
            found.pop(word, None)
            found[word] = row  # file order of the last occurrences
    array = np.stack(list(found.values())) if found else np.zeros((0, dim), np.float32)
    return Vectors([w.decode("utf-8") for w in found], array)


def cache_file(path: Path, wanted: list[str], cache_dir: Optional[str] = None) -> Path:
    """Where the vectors of ``wanted`` from ``path`` are cached (module docstring)."""
    st = path.stat()
    key = hashlib.sha256(json.dumps([str(path.absolute()), st.st_size, st.st_mtime_ns, sorted(wanted), READER])
                         .encode()).hexdigest()[:16]
    return cache.cache_root(cache_dir) / "glove" / f"{key}.npz"


def _save(out: Path, vectors: Vectors) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.{uuid.uuid4().hex}.tmp.npz")  # concurrent trials: own file
    np.savez(tmp, words=np.array(vectors.words, dtype=str), array=vectors.array)
    tmp.replace(out)


def load(path: Path, wanted: list[str], cache_dir: Optional[str] = None) -> Vectors:
    """:func:`stream` through the cache (module docstring)."""
    out = cache_file(path, wanted, cache_dir)
    if out.exists():
        with np.load(out, allow_pickle=False) as z:
            return Vectors([str(w) for w in z["words"]], z["array"])
    vectors = stream(path, wanted)
    _save(out, vectors)
    return vectors


def preload(path: Path, vocabularies: list[tuple[list[str], Optional[str]]]) -> None:
    """Every check of :func:`stream` for several vocabularies (``(words, cache_dir)`` each) in ONE pass over the
    file, before any trial (a sweep's preflight): the file is streamed once for the words of the vocabularies not
    yet cached, each vocabulary is refused as :func:`stream` would refuse it, and its vectors are cached where
    its trials' :func:`load` finds them (so no trial streams the file again). Memory: the vectors of those
    words, never the file."""
    todo = {cache_file(path, words, cache_dir): set(words) for words, cache_dir in vocabularies}
    todo = {out: words for out, words in todo.items() if not out.exists()}
    if not todo:
        return
    found = _read(path, set().union(*todo.values()))
    for out, words in todo.items():
        vectors = found.subset(words)
        _require_some(path, words, vectors)
        _save(out, vectors)
