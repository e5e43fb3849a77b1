"""Natural language inference: SNLI (Bowman et al., EMNLP 2015) and MultiNLI (Williams et al., NAACL 2018), with
the papers' stress and out-of-distribution test sets. 3-way sentence-pair classification.

Files under data_dir, as distributed:

- SNLI: ``snli_1.0/snli_1.0_{train,dev,test}.jsonl``; the hard test set of Gururangan et al. (NAACL 2018)
  ``snli_1.0/snli_1.0_test_hard.jsonl``; Breaking NLI (Glockner et al., ACL 2018) ``breaking_nli/dataset.jsonl``;
  the counterfactual set of Kaushik et al. (ICLR 2020)
  ``counterfactually-augmented-data/NLI/revised_combined/test.tsv`` (header ``sentence1 sentence2 gold_label``).
- MNLI: ``multinli_1.0/multinli_1.0_{train,dev_matched,dev_mismatched}.jsonl``; ConjNLI (Saha et al., EMNLP
  2020) ``ConjNLI/conj_dev.tsv``; the stress tests of Naik et al. (COLING 2018)
  ``Stress_Tests/Negation/multinli_0.9_negation_{matched,mismatched}.jsonl`` and
  ``Stress_Tests/Length_Mismatch/multinli_0.9_length_mismatch_{matched,mismatched}.jsonl``.

A jsonl row gives ``sentence1``, ``sentence2`` and ``gold_label``; a TSV is read by its header (``sentence1`` /
``premise``, ``sentence2`` / ``hypothesis``, ``gold_label`` / ``label``). Rows whose gold label is ``-`` (no
annotator majority) are skipped, as in every use of these sets; any other unknown label is a file:line error.

Protocol (RIR / EBT: "any data with a sequence of length >= 150 is filtered from the training set"):
``max_train_len`` 149 drops training pairs with a sentence of 150 tokens or more. SNLI keeps its dev and test.
MNLI: the matched / mismatched dev sets are test sets; dev is 10,000 pairs of the filtered training set, removed
from train, as the authors' preprocess_MNLIdev.py draws them: the rows shuffled with ``random.Random(data_seed)``,
the first 10,000 in that order (``data_seed`` 101, the authors' seed, gives their dev rows; another seed, other rows).

Vocabulary (``vocab_from: authors``, rirlab.tasks.text): as the authors' process_SNLI.py / preprocess_MNLIdev.py,
the words of whole files (``vocab_files``, in their order): every training pair, the ones the 150-token filter then
drops included; SNLI dev, test and hard; MNLI matched, mismatched, ConjNLI and all 20 stress-test files of Naik et
al., the 13 that are not test splits here (Antonym, Numerical Reasoning, Spelling Error, Word Overlap) included, so
these files must be present (or ``vocab_from: train``).
"""

from __future__ import annotations

import random
from pathlib import Path

from pydantic import Field
from pydantic.dataclasses import dataclass

from rirlab.config import STRICT
from rirlab.tasks.registry import register
from rirlab.tasks.base import clipped_lengths
from rirlab.tasks.text import TextConfig, TextTask, bad, columns, field, jsonl, keep_short, label_of, tsv
from rirlab.tasks.treebank import tokenize

LABELS = ("entailment", "neutral", "contradiction")
NO_LABEL = "-"
MAX_TRAIN_LEN = 149  # sequences of length >= 150 are dropped from training
MNLI_DEV = 10000
AUTHORS_SEED = 101  # preprocess_MNLIdev.py's random.seed


def read_jsonl(path: Path) -> list:
    rows = []
    for no, obj in jsonl(path):
        gold = obj.get("gold_label")
        if not isinstance(gold, str):
            raise bad(path, no, "no gold_label")
        if gold == NO_LABEL:
            continue
        rows.append((label_of(path, no, LABELS, gold), tokenize(field(path, no, obj, "sentence1")),
                     tokenize(field(path, no, obj, "sentence2"))))
    return rows


def read_tsv(path: Path) -> list:
    rows, cols = [], None
    for no, fields in tsv(path):
        if cols is None:
            cols = columns(path, fields, {"p": ("sentence1", "premise"), "h": ("sentence2", "hypothesis"),
                                          "y": ("gold_label", "label")}, no)
            continue
        if len(fields) <= max(cols.values()):
            raise bad(path, no, f"{len(fields)} columns; the header has {max(cols.values()) + 1} or more")
        if fields[cols["y"]].strip() == NO_LABEL:
            continue
        rows.append((label_of(path, no, LABELS, fields[cols["y"]]), tokenize(fields[cols["p"]]),
                     tokenize(fields[cols["h"]])))
    if cols is None:
        raise bad(path, 1, "empty file; expected a header (sentence1, sentence2, gold_label)")
    return rows


def read_any(path: Path) -> list:
    return read_jsonl(path) if path.name.endswith(".jsonl") else read_tsv(path)


SNLI_SPLITS = {"test": "IID", "hard": "Hard", "break": "Break", "counterfactual": "Count."}
MNLI_SPLITS = {"matched": "Match", "mismatched": "MM", "conjnli": "ConjNLI", "negm": "NegM", "negmm": "NegMM",
               "lenm": "LenM", "lenmm": "LenMM"}


@dataclass(config=STRICT)
class NLIConfig(TextConfig):
    """What SNLI and MNLI share: training pairs with a sentence of 150 tokens or more are dropped."""

    max_train_len: int = Field(MAX_TRAIN_LEN, ge=1)


@dataclass(config=STRICT)
class SNLIConfig(NLIConfig, task="snli", splits=SNLI_SPLITS):
    """SNLI with the hard, Breaking-NLI and counterfactual test sets (RIR Table 7, EBT Table 3)."""


# the stress tests of Naik et al. that only the authors' vocabulary reads (under Stress_Tests/)
STRESS_VOCAB = {"antonym_m": "Antonym/multinli_0.9_antonym_matched",
                "antonym_mm": "Antonym/multinli_0.9_antonym_mismatched",
                "numerical": "Numerical_Reasoning/multinli_0.9_quant_hard",
                **{f"{name}_{m}": f"Spelling_Error/multinli_0.9_dev_gram_{rel}_{dev}"
                   for name, rel in (("content_swap", "contentword_swap_perturbed"),
                                     ("function_swap", "functionword_swap_perturbed"), ("keyboard", "keyboard"),
                                     ("swap", "swap"))
                   for m, dev in (("m", "matched"), ("mm", "mismatched"))},
                "overlap_m": "Word_Overlap/multinli_0.9_taut2_matched",
                "overlap_mm": "Word_Overlap/multinli_0.9_taut2_mismatched"}


@dataclass(config=STRICT)
class MNLIConfig(NLIConfig, task="mnli", splits=MNLI_SPLITS):
    """MultiNLI with matched/mismatched dev as tests, ConjNLI and the stress tests (RIR Table 7, EBT Table 3)."""

    data_seed: int = Field(AUTHORS_SEED, ge=0)  # 101: the authors' dev rows


class NLITask(TextTask):
    version = 2  # 2: word_tokenize's rules (rirlab.tasks.treebank)
    kind = "pair"
    labels = LABELS
    vocab_files: tuple[str, ...] = ()  # file keys whose words the authors' vocabulary counts, in their order
    # training lengths (Task.train_lengths; no data here to measure): rough quantiles at LENGTH_Q of premise and
    # hypothesis after the published statistics, before max_train_len clips them
    TRAIN_LENGTHS: tuple[tuple, tuple] = ((), ())

    def train_lengths(self, cfg) -> tuple:
        return tuple(clipped_lengths(q, cfg.max_train_len) for q in self.TRAIN_LENGTHS)

    def vocab_tables(self, cfg, train):
        if getattr(cfg, "vocab_from", "train") != "authors":
            return [train]
        return [self.file_table(cfg, key) for key in self.vocab_files]

    def read_file(self, root: Path, key: str) -> list:
        return read_any(root / self.files[key])

    def protocol(self, cfg, split: str) -> dict:
        return {"max_train_len": cfg.max_train_len} if split == "train" else {}

    def standin(self, root: Path, seed: int) -> None:
        from rirlab.tasks import standin

        standin.nli(root, seed, self.files)


@register
class SNLI(NLITask):
    """SNLI: 3-way inference between two sentences, with hard/break/counterfactual sets (the user's snli_1.0 files)"""

    name, config = "snli", SNLIConfig
    files = {"train": "snli_1.0/snli_1.0_train.jsonl", "dev": "snli_1.0/snli_1.0_dev.jsonl",
             "test": "snli_1.0/snli_1.0_test.jsonl", "hard": "snli_1.0/snli_1.0_test_hard.jsonl",
             "break": "breaking_nli/dataset.jsonl",
             "counterfactual": "counterfactually-augmented-data/NLI/revised_combined/test.tsv"}
    needs = {s: (s,) for s in files}
    vocab_files, min_count = ("train", "dev", "test", "hard"), 2  # the authors' vocabulary (module doc)
    TRAIN_LENGTHS = ((2, 7, 10, 13, 17, 22, 26, 36, 82), (1, 5, 6, 7, 10, 12, 14, 19, 62))  # mean 14.1, 8.3

    def read_split(self, cfg, root: Path, split: str) -> list:
        rows = read_any(root / self.files[split])
        return keep_short(rows, cfg.max_train_len) if split == "train" else rows


@register
class MNLI(NLITask):
    """MNLI: 3-way inference, matched/mismatched, ConjNLI and stress tests (the user's multinli_1.0 files)"""

    name, config = "mnli", MNLIConfig
    version = 3  # 2: dev drawn as the authors' shuffle; 3: word_tokenize's rules (rirlab.tasks.treebank)
    files = {"train": "multinli_1.0/multinli_1.0_train.jsonl",
             "matched": "multinli_1.0/multinli_1.0_dev_matched.jsonl",
             "mismatched": "multinli_1.0/multinli_1.0_dev_mismatched.jsonl",
             "conjnli": "ConjNLI/conj_dev.tsv",
             "negm": "Stress_Tests/Negation/multinli_0.9_negation_matched.jsonl",
             "negmm": "Stress_Tests/Negation/multinli_0.9_negation_mismatched.jsonl",
             "lenm": "Stress_Tests/Length_Mismatch/multinli_0.9_length_mismatch_matched.jsonl",
             "lenmm": "Stress_Tests/Length_Mismatch/multinli_0.9_length_mismatch_mismatched.jsonl",
             **{key: f"Stress_Tests/{rel}.jsonl" for key, rel in STRESS_VOCAB.items()}}
    needs = {"dev": ("train",), **{s: (s,) for s in ("train", *MNLI_SPLITS)}}
    vocab_files = ("train", "matched", "mismatched", "conjnli", "antonym_m", "antonym_mm", "lenm", "lenmm", "negm",
                   "negmm", "numerical", *list(STRESS_VOCAB)[3:])  # the authors' vocabulary, their order (module doc)
    min_count = 4
    TRAIN_LENGTHS = ((1, 8, 12, 19, 29, 40, 48, 70, 200), (1, 5, 7, 10, 13, 17, 20, 28, 70))  # mean 22, 11
    # the authors' dev/test loader cuts MNLIdev's long pair runs in quarters from 100 tokens, halves from 70
    # (their sentence_pair_collater.py's ``if self.config["dataset"] == "MNLIdev"``; rirlab.tasks.batching)
    bucket_cuts = ((100, 4), (70, 2))

    def protocol(self, cfg, split: str) -> dict:
        if split in ("train", "dev"):
            return {"max_train_len": cfg.max_train_len, "data_seed": cfg.data_seed, "dev_size": MNLI_DEV}
        return {}

    def read_split(self, cfg, root: Path, split: str) -> list:
        if split not in ("train", "dev"):
            return read_any(root / self.files[split])
        rows = keep_short(read_any(root / self.files["train"]), cfg.max_train_len)
        n = min(MNLI_DEV, len(rows) // 10 or 1)  # a tenth of a small (stand-in) file
        order = list(range(len(rows)))
        random.Random(cfg.data_seed).shuffle(order)  # the authors' random.seed(101); random.shuffle
        if split == "dev":
            return [rows[i] for i in order[:n]]  # in the shuffled order, as theirs
        pick = set(order[:n])
        return [r for i, r in enumerate(rows) if i not in pick]
