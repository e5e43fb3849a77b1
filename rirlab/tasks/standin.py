"""Generated stand-in corpora for the user-file text tasks (``generated: true``): a few hundred rows of a tiny
made-up language, written in each publisher's file format under the cache, so that quick runs and CI exercise
the whole path (readers, protocol, vocabulary, GloVe, training) without the real data. The folder holds a
README saying so, and the tasks record such splits as "generated stand-in text". The numbers a model reaches
on them mean nothing about the papers' tasks.

The language: sentences of filler words with a few sentiment words (sentiment tasks: the label follows their
balance), premise/hypothesis pairs where entailment keeps a part of the premise, contradiction negates it and
neutral is another sentence (NLI), and question pairs that are a reordering of each other or unrelated (QQP).
A stand-in ``glove.840B.300d.txt`` gives every word a random 300-d vector.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np

NOTE = ("This folder is a GENERATED STAND-IN for the {task} data, written by rirlab (generated: true) so that quick "
        "runs and tests exercise the whole path. It is not the real dataset: its text is a tiny made-up language "
        "and the accuracy a model reaches on it says nothing about the published results.\n")
FILLER = "the a movie film plot story actor scene night city dog man woman child house car street".split()
GOOD = "good great fine lovely superb".split()
BAD = "bad awful dull poor boring".split()
TRAIN, EVAL = 300, 60


def _sentence(rng: random.Random, n: int = 8) -> list[str]:
    return [rng.choice(FILLER) for _ in range(rng.randint(3, n))]


def _sentiment(rng: random.Random, score: int) -> list[str]:
    """A sentence whose sentiment words balance to ``score`` (-2..2)."""
    words = _sentence(rng)
    extra = [rng.choice(GOOD if score > 0 else BAD) for _ in range(abs(score))] or [rng.choice(FILLER)]
    for w in extra:
        words.insert(rng.randrange(len(words) + 1), w)
    return words


def _glove(root: Path, seed: int, words) -> None:
    rng = np.random.default_rng(seed)
    with open(root / "glove.840B.300d.txt", "w") as f:
        for w in sorted(set(words)):
            f.write(w + " " + " ".join(f"{x:.4f}" for x in rng.normal(0, 0.3, 300)) + "\n")


VOCAB = FILLER + GOOD + BAD + ["not", "is", "it", "true", "that", "?", ".", "and"]


def write_all(task, root: Path, seed: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    task.standin(root, seed)
    _glove(root, seed, VOCAB)


def _n(key: str) -> int:
    return TRAIN if key == "train" else EVAL


def sst(root: Path, seed: int, files: dict) -> None:
    rng = random.Random(seed)

    def tree(words, label):
        if len(words) == 1:
            return f"({label} {words[0]})"
        return f"({label} (2 {words[0]}) {tree(words[1:], label)})"

    for key, rel in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for _ in range(_n(key)):
                label = rng.randint(0, 4)
                f.write(tree(_sentiment(rng, label - 2) + ["."], label) + "\n")


def imdb(root: Path, seed: int, files: dict) -> None:
    rng = random.Random(seed)
    for key in ("train", "test"):
        for i in range(_n(key)):
            y = i % 2
            d = root / files[key] / ("pos" if y else "neg")
            d.mkdir(parents=True, exist_ok=True)
            text = " ".join(_sentiment(rng, 2 if y else -2)) + " .<br /><br />" + " ".join(_sentence(rng)) + " ."
            (d / f"{i}_{rng.randint(7, 10) if y else rng.randint(1, 4)}.txt").write_text(text)
    for key in ("contrast", "contrast_dev", "counterfactual", "dev_original"):
        if key not in files:
            continue
        path = root / files[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.writer(f, delimiter="\t", lineterminator="\n")
            w.writerow(["Sentiment", "Text"])
            for i in range(EVAL):
                y = i % 2
                w.writerow(["Positive" if y else "Negative", " ".join(_sentiment(rng, 2 if y else -2)) + ' "quoted" .'])


def _nli_pair(rng: random.Random) -> tuple[str, list[str], list[str]]:
    p = _sentence(rng, 10)
    kind = rng.randrange(3)
    if kind == 0:
        return "entailment", p, p[: max(2, len(p) - 2)]
    if kind == 1:
        return "neutral", p, _sentence(rng)
    return "contradiction", p, ["it", "is", "not", "true", "that"] + p


def nli(root: Path, seed: int, files: dict) -> None:
    rng = random.Random(seed)
    for key, rel in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [_nli_pair(rng) for _ in range(_n(key))]
        with open(path, "w", newline="") as f:
            if rel.endswith(".jsonl"):
                for i, (y, p, h) in enumerate(rows):
                    gold = "-" if i % 50 == 7 else y  # no majority label: skipped by the reader, as in SNLI
                    f.write(json.dumps({"gold_label": gold, "sentence1": " ".join(p), "sentence2": " ".join(h)}) + "\n")
            else:
                w = csv.writer(f, delimiter="\t", lineterminator="\n")
                w.writerow(["sentence1", "sentence2", "gold_label"])
                w.writerows([" ".join(p), " ".join(h), y] for y, p, h in rows)


def _qqp_pair(rng: random.Random) -> tuple[int, str, str]:
    q = _sentence(rng) + ["?"]
    if rng.random() < 0.5:
        r = q[:-1]
        rng.shuffle(r)
        return 1, " ".join(q), " ".join(r + ["?"])
    return 0, " ".join(q), " ".join(_sentence(rng) + ["?"])


def qqp(root: Path, seed: int, files: dict) -> None:
    rng = random.Random(seed)
    with open(root / files["train"], "w", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
        for i in range(TRAIN + 2 * EVAL):
            y, a, b = _qqp_pair(rng)
            w.writerow([i, 2 * i + 1, 2 * i + 2, a, b, y])
    for key in ("paws_qqp", "paws_wiki"):
        path = root / files[key]
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            f.write("id\tsentence1\tsentence2\tlabel\n")
            for i in range(EVAL):
                y, a, b = _qqp_pair(rng)
                if key == "paws_qqp":  # the PAWS-QQP script writes bytes literals
                    a, b = repr(a.encode()), repr(b.encode())
                f.write(f"{i}\t{a}\t{b}\t{y}\n")


def lra_listops(root: Path, seed: int, files: dict) -> None:
    from rirlab.tasks import listops

    for i, (key, rel) in enumerate(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = listops.generate(_n(key), seed + i, max_args=5, max_depth=4)
        with open(path, "w") as f:
            f.write("Source\tTarget\n")
            f.writelines(f"{text}\t{label}\n" for text, label in rows)


def lra_retrieval(root: Path, seed: int, files: dict) -> None:
    rng = random.Random(seed)
    for key, rel in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w") as f:
            for i in range(_n(key)):
                a = " ".join(_sentence(rng, 30))
                y = i % 2
                b = " ".join(a.split()[::-1]) if y else " ".join(_sentence(rng, 30))
                f.write(f"{y}\tdoc{2 * i}\tdoc{2 * i + 1}\t{a}\t{b}\n")


def cifar(root: Path, seed: int, files: dict) -> None:
    import pickle

    rng = np.random.default_rng(seed)
    for key, rel in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        n = 12 if key.startswith("data_batch") else EVAL
        labels = [int(x) for x in rng.integers(0, 10, n)]
        data = np.stack([np.full(3072, 20 * y, np.uint8) + rng.integers(0, 20, 3072).astype(np.uint8) for y in labels])
        with open(path, "wb") as f:
            pickle.dump({b"batch_label": b"stand-in", b"labels": labels, b"data": data}, f)
