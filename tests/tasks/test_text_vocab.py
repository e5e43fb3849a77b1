"""The text tasks' vocabulary as the authors' public preprocessing builds it (process_SNLI.py and siblings of
JRC1995/BeamRecursionFamily): words of train, dev and test (and the extra test sets their script counts) that have a
GloVe vector, the task's minimum count, lower-cased, and a trainable random <unk> vector (their model code)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rirlab.cli import main
from rirlab.config import build
from rirlab.tasks import registry as tasks

pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test alone


def jsonl(path, pairs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"gold_label": "entailment", "sentence1": a, "sentence2": b}) + "\n"
                            for a, b in pairs))


def snli(root):
    # the second pair is dropped from training (150 tokens) but its words are counted, as the authors'
    jsonl(root / "snli_1.0/snli_1.0_train.jsonl", [("A dog runs .", "A cat sleeps ."), ("cat " * 150, "Cat .")])
    jsonl(root / "snli_1.0/snli_1.0_dev.jsonl", [("A dog sleeps .", "Zorp runs .")])
    jsonl(root / "snli_1.0/snli_1.0_test.jsonl", [("The dog runs .", "A zorp .")])
    jsonl(root / "snli_1.0/snli_1.0_test_hard.jsonl", [("The cat runs .", "Zorp !")])
    jsonl(root / "breaking_nli/dataset.jsonl", [("Blip blip blip .", "Blip .")])  # not counted by the authors
    vectors = ["a", "dog", "runs", ".", "cat", "sleeps", "the", "!", "blip", "Dog"]  # no "zorp"
    (root / "glove.840B.300d.txt").write_text("".join(f"{w}{' 0.1' * 299} 0.{i}\n" for i, w in enumerate(vectors)))


def cfg(root, **kw):
    return build(tasks.get("snli").config, {"data_dir": str(root), "eval_splits": ["test", "break"], **kw}, "snli")


# Worked out from process_SNLI.py: counts over train (the dropped pair too), dev, test and hard (lower-cased), the
# words in first-seen order: a 4, dog 3, runs 4, "." 8, cat 153, sleeps 2, zorp 3 (no vector), the 2 ("!" 1: below
# the minimum, count > 1; "blip" only in break). np.argsort (8 items: numpy's insertion sort, ties in first-seen
# order): sleeps the dog zorp a runs . cat; np.flip: cat . runs a zorp dog the sleeps
AUTHORS_VOCAB = ["<pad>", "<unk>", "cat", ".", "runs", "a", "dog", "the", "sleeps"]
AUTHORS_OOV = {"test": 1 / 7, "break": 4 / 6}  # "a zorp ."; "blip" x4 of 6 tokens


def test_default_vocabulary_is_the_authors(tmp_path):
    snli(tmp_path)
    task = tasks.get("snli")
    data = task.load(cfg(tmp_path))
    assert data.vocab == AUTHORS_VOCAB
    assert task.oov(cfg(tmp_path), ["test", "break"]) == pytest.approx(AUTHORS_OOV)


def test_training_split_vocabulary_is_an_option(tmp_path):
    snli(tmp_path)
    data = tasks.get("snli").load(cfg(tmp_path, vocab_from="train", lowercase=False))
    assert data.vocab == ["<pad>", "<unk>", ".", "cat", "dog", "runs", "sleeps"]  # "A" has no (cased) vector


def test_authors_minimum_counts_and_vocabulary_splits():
    want = {"sst5": (1, ("train", "dev", "test")), "imdb": (5, ("train", "test")),
            "qqp": (6, ("train", "dev", "test", "paws_qqp", "paws_wiki"))}
    assert {t: (tasks.get(t).min_count, tasks.get(t).vocab_splits) for t in want} == want
    snli, mnli = tasks.get("snli"), tasks.get("mnli")
    assert (snli.min_count, snli.vocab_files) == (2, ("train", "dev", "test", "hard"))
    # preprocess_MNLIdev.py's files in its order: train, the dev sets, ConjNLI, all 20 stress tests of Naik et al.
    names = [mnli.files[k].split("/")[-1].removesuffix(".jsonl").removeprefix("multinli_0.9_") for k in mnli.vocab_files]
    assert mnli.min_count == 4 and names == [
        "multinli_1.0_train", "multinli_1.0_dev_matched", "multinli_1.0_dev_mismatched", "conj_dev.tsv",
        "antonym_matched", "antonym_mismatched", "length_mismatch_matched", "length_mismatch_mismatched",
        "negation_matched", "negation_mismatched", "quant_hard",
        *(f"dev_gram_{k}_{m}" for k in ("contentword_swap_perturbed", "functionword_swap_perturbed", "keyboard", "swap")
          for m in ("matched", "mismatched")), "taut2_matched", "taut2_mismatched"]


def test_unk_is_a_trainable_random_vector(tmp_path):
    snli(tmp_path)
    from rirlab.models import registry as models

    data = tasks.get("snli").load(cfg(tmp_path))
    assert data.info.unk_id == 1
    model = models.get("bbt_grc").build(build(models.get("bbt_grc").config, {"hidden_size": 8}, "m"), data.info)
    unk = model.embed[0].unk
    assert unk.requires_grad and unk.abs().sum() > 0
    batch = data.collate(data.eval_splits["test"])  # "zorp" reads as <unk>
    model(batch).logits.sum().backward()
    assert unk.grad is not None and unk.grad.abs().sum() > 0
    assert model.embed[0].frozen.weight.grad is None
    assert tasks.get("snli").load(cfg(tmp_path, unk_vector="zero")).info.unk_id is None


def test_data_stats_prints_the_oov_rate(tmp_path):
    snli(tmp_path)
    r = CliRunner().invoke(main, ["data", "stats", "snli", "--split", "break", "--set", f"data_dir={tmp_path}",
                                  "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["oov"] == pytest.approx(4 / 6, abs=1e-6)


def test_mnli_missing_vocabulary_file_says_the_way_out(tmp_path):
    from rirlab.errors import UserError
    from rirlab.tasks import standin

    mnli = tasks.get("mnli")
    standin.nli(tmp_path, 0, mnli.files)  # every file, then one stress test read for the vocabulary alone
    gone = mnli.files["antonym_m"]
    (tmp_path / gone).unlink()
    c = build(mnli.config, {"data_dir": str(tmp_path), "embeddings": "random", "eval_splits": ["matched"]}, "mnli")
    with pytest.raises(UserError) as e:
        mnli.load(c)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"mnli: missing {gone}: expected at {tmp_path / gone}")
    assert "put it there" in msg and "--set vocab_from=train" in msg
    c = build(mnli.config, {"data_dir": str(tmp_path), "embeddings": "random", "eval_splits": ["matched"],
                            "vocab_from": "train"}, "mnli")
    assert len(mnli.load(c).vocab) > 2  # the way out works
