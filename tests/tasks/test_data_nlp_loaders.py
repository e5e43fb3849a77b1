"""The user-file text tasks (SST5, IMDB, SNLI, MNLI, QQP) and GloVe, on small fixture files written here in
their publishers' exact formats, awkward cases included (quoting in TSVs, SNLI's '-' label, IMDB's <br />)."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
from click.testing import CliRunner

from rirlab.cli import main
from rirlab.config import build
from rirlab.errors import UserError
from rirlab.tasks import glove
from rirlab.tasks import registry as tasks


pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test its own: tests/conftest.py


def cfg(task: str, root, **kw):
    # the simpler choices (case kept, SST sentences); the authors' defaults are pinned in tests/tasks/test_text_*.py
    simple = {"lowercase": False, "vocab_from": "train", "unk_vector": "zero",
              **({"train_phrases": False, "brackets": "restore"} if task == "sst5" else {}),
              **({"length_protocol": "full", "html_breaks": "space"} if task == "imdb" else {}),
              **({"tokenizer": "ptb", "max_question_len": None, "paws_format": "decoded"} if task == "qqp" else {})}
    return build(tasks.get(task).config, {"data_dir": str(root), "embeddings": "random", **simple, **kw}, task)


def table_rows(task: str, c, split: str) -> list:
    t = tasks.get(task)
    return [(t.labels[r[0]], *(" ".join(x) for x in r[1:])) for r in t.rows_of(t.split_table(c, split))]


def write(path, text: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


# --- SST5 ---

def test_sst5_reads_root_labels_and_leaves(tmp_path):
    write(tmp_path / "trees/test.txt", "(3 (2 It) (4 (2 -LRB-) (3 (4 great) (2 -RRB-))))\n"
                                      "(0 (0 awful) (2 .))\n")
    assert table_rows("sst5", cfg("sst5", tmp_path), "test") == [("3", "It ( great )"), ("0", "awful .")]


@pytest.mark.parametrize("line, why", [("(7 (2 It) (2 x))", "node label '7' is not 0-4"),
                                       ("(3 (2 It) (2 x)", "1 unclosed '('"),
                                       ("It is good", "not a PTB tree")])
def test_sst5_bad_tree_is_file_line(tmp_path, line, why):
    path = write(tmp_path / "trees/test.txt", "(1 (1 fine) (2 .))\n" + line + "\n")
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:2: {why}")):
        tasks.get("sst5").split_table(cfg("sst5", tmp_path), "test")


def test_missing_file_is_one_line_naming_it_and_where(tmp_path, monkeypatch):
    with pytest.raises(UserError) as err:
        tasks.get("sst5").split_table(cfg("sst5", tmp_path), "dev")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"sst5: missing trees/dev.txt: expected at {tmp_path}/trees/dev.txt")
    monkeypatch.setenv("RIRLAB_DATA", str(tmp_path / "elsewhere"))  # the default data_dir
    c = build(tasks.get("sst5").config, {}, "sst5")
    with pytest.raises(UserError, match=f"expected at {tmp_path}/elsewhere/trees/train.txt"):
        tasks.get("sst5").split_table(c, "train")


# --- IMDB ---

def imdb_folder(root, n=20):
    for i in range(n):
        for sub, word in (("pos", "great"), ("neg", "awful")):
            write(root / f"aclImdb/train/{sub}/{i}_{8 if sub == 'pos' else 2}.txt", f"A {word} film.<br /><br />The end.")
    write(root / "aclImdb/train/urls_pos.txt", "http://example.com\n")  # not a review


def test_imdb_train_dev_protocol_and_html_breaks(tmp_path):
    imdb_folder(tmp_path)
    c = cfg("imdb", tmp_path)
    train, dev = table_rows("imdb", c, "train"), table_rows("imdb", c, "dev")
    assert len(train) + len(dev) == 40 and len(dev) == 4
    assert sorted(y for y, _ in dev) == ["negative", "negative", "positive", "positive"]  # balanced
    assert ("positive", "A great film . The end .") in train + dev and not any("br" in t for _, t in train)


def test_imdb_contrast_tsv_with_quoting(tmp_path):
    write(tmp_path / "contrast-sets/IMDb/data/test_contrast.tsv",
          'Sentiment\tText\nPositive\t"He said ""wow""\tthen left.<br />Good."\nNegative\tPlain text, bad.\n')
    rows = table_rows("imdb", cfg("imdb", tmp_path), "contrast")
    assert rows == [("positive", "He said `` wow '' then left . Good ."), ("negative", "Plain text , bad .")]


@pytest.mark.parametrize("body, why", [("Sentiment\tText\nMixed\tso so\n", "2: unknown label 'Mixed'"),
                                       ("Rating\tReview text\nPositive\tok\n", "1: no column sentiment / label"),
                                       ("Sentiment\tText\nPositive\n", "2: 1 columns")])
def test_imdb_bad_tsv_is_file_line(tmp_path, body, why):
    path = write(tmp_path / "counterfactually-augmented-data/sentiment/new/test.tsv", body)
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:{why}")):
        tasks.get("imdb").split_table(cfg("imdb", tmp_path), "counterfactual")


def test_imdb_review_not_utf8_is_file_line(tmp_path):
    imdb_folder(tmp_path, 2)
    path = write(tmp_path / "aclImdb/train/neg/5_1.txt", b"caf\xe9 awful")
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:1: not UTF-8")):
        tasks.get("imdb").split_table(cfg("imdb", tmp_path), "train")


# --- SNLI / MNLI ---

def nli_line(gold, p, h, **extra):
    return json.dumps({"annotator_labels": [gold], "captionID": "x", "gold_label": gold, "pairID": "y",
                       "sentence1": p, "sentence1_binary_parse": "( x )", "sentence2": h, **extra}) + "\n"


def test_snli_skips_dash_labels_and_filters_long_training_pairs(tmp_path):
    long = " ".join(["w"] * 150)
    write(tmp_path / "snli_1.0/snli_1.0_train.jsonl",
          nli_line("neutral", "A man plays.", "He sleeps.") + nli_line("-", "No", "majority")
          + nli_line("entailment", long, "short") + nli_line("contradiction", " ".join(["w"] * 149), "ok"))
    c = cfg("snli", tmp_path)
    assert [r[0] for r in table_rows("snli", c, "train")] == ["neutral", "contradiction"]  # >= 150 dropped
    assert len(table_rows("snli", cfg("snli", tmp_path, max_train_len=1000), "train")) == 3
    write(tmp_path / "snli_1.0/snli_1.0_test.jsonl", nli_line("entailment", long, "x"))
    assert len(table_rows("snli", c, "test")) == 1  # test splits are not filtered


def test_snli_break_and_counterfactual_formats(tmp_path):
    write(tmp_path / "breaking_nli/dataset.jsonl",
          json.dumps({"annotator_labels": ["contradiction"], "category": "antonyms", "gold_label": "contradiction",
                      "pairID": 1, "sentence1": "The man is sad.", "sentence2": "The man is happy."}) + "\n")
    write(tmp_path / "counterfactually-augmented-data/NLI/revised_combined/test.tsv",
          'sentence1\tsentence2\tgold_label\n"A ""quoted"" man."\tA man.\tentailment\n')
    c = cfg("snli", tmp_path)
    assert table_rows("snli", c, "break") == [("contradiction", "The man is sad .", "The man is happy .")]
    assert table_rows("snli", c, "counterfactual") == [("entailment", "A `` quoted '' man .", "A man .")]


@pytest.mark.parametrize("line, why", [('{"gold_label": "maybe", "sentence1": "a", "sentence2": "b"}\n',
                                        "unknown label 'maybe'"),
                                       ('{"gold_label": "neutral", "sentence1": "a"}\n', "no text field sentence2"),
                                       ('{"gold_label": "neutral", \n', "not a JSON object")])
def test_snli_bad_line_is_file_line(tmp_path, line, why):
    path = write(tmp_path / "snli_1.0/snli_1.0_dev.jsonl", nli_line("neutral", "a", "b") + line)
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:2: {why}")):
        tasks.get("snli").split_table(cfg("snli", tmp_path), "dev")


def test_mnli_dev_is_sampled_from_filtered_train_and_stress_sets_read(tmp_path):
    lines = [nli_line(["entailment", "neutral", "contradiction"][i % 3], f"premise {i}", f"hyp {i}") for i in range(50)]
    write(tmp_path / "multinli_1.0/multinli_1.0_train.jsonl", "".join(lines) + nli_line("neutral", "w " * 200, "x"))
    c = cfg("mnli", tmp_path)
    train, dev = table_rows("mnli", c, "train"), table_rows("mnli", c, "dev")
    assert len(dev) == 5 and len(train) == 45 and not set(train) & set(dev)
    order = list(range(50))  # preprocess_MNLIdev.py: random.seed(101); random.shuffle; the first 10,000 (here 5)
    random.Random(101).shuffle(order)
    assert [r[1] for r in dev] == [f"premise {i}" for i in order[:5]]
    assert table_rows("mnli", cfg("mnli", tmp_path, data_seed=7), "dev") != dev
    write(tmp_path / "Stress_Tests/Negation/multinli_0.9_negation_matched.jsonl",
          nli_line("neutral", "A is B.", "C is D and false is not true.", genre="fiction"))
    write(tmp_path / "ConjNLI/conj_dev.tsv", "premise\thypothesis\tlabel\nA and B.\tA.\tentailment\n")
    assert table_rows("mnli", c, "negm") == [("neutral", "A is B .", "C is D and false is not true .")]
    assert table_rows("mnli", c, "conjnli") == [("entailment", "A and B .", "A .")]


# --- QQP ---

def test_qqp_quoted_rows_balanced_samples_and_paws(tmp_path):
    rows = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
    rows += [f"{i}\t{2 * i}\t{2 * i + 1}\tWhat is {i}?\tWhat's {i}?\t{i % 2}" for i in range(40)]
    rows.append('40\t81\t82\t"A ""multi\nline"" question?"\tAnother?\t0')
    write(tmp_path / "quora_duplicate_questions.tsv", "\n".join(rows) + "\n")
    c = cfg("qqp", tmp_path)
    train, dev, test = (table_rows("qqp", c, s) for s in ("train", "dev", "test"))
    assert len(train) + len(dev) + len(test) == 41 and len(dev) == len(test) == 4
    assert sorted(r[0] for r in dev) == ["duplicate", "duplicate", "not_duplicate", "not_duplicate"]
    assert ("not_duplicate", "A `` multi line '' question ?", "Another ?") in train + dev + test
    write(tmp_path / "paws_qqp/dev_and_test.tsv", "id\tsentence1\tsentence2\tlabel\n"
          "1\tb'Why can\\'t I sleep ?'\tb\"Why can't I sleep ?\"\t1\n")
    write(tmp_path / "paws_wiki/test.tsv", 'id\tsentence1\tsentence2\tlabel\n1\t"Quoted" start .\tNot quoted .\t0\n')
    assert table_rows("qqp", c, "paws_qqp") == [("duplicate", "Why ca n't I sleep ?", "Why ca n't I sleep ?")]
    assert table_rows("qqp", c, "paws_wiki") == [("not_duplicate", "`` Quoted '' start .", "Not quoted .")]
    write(tmp_path / "paws_wiki/test.tsv", "id\tsentence1\tsentence2\tlabel\n1\ta\tb\t2\n")
    with pytest.raises(UserError, match=r"paws_wiki/test.tsv:2: unknown label '2'; expected one of 0, 1"):
        tasks.get("qqp").split_table(c, "paws_wiki")


def test_paws_is_read_as_the_authors_csv_reader_reads_it(tmp_path):
    """process_QQP.py: csv.reader(delimiter="\t") (a field opening with a quote is quoted; text after its closing
    quote kept), the bytes literals kept as written, lower-cased, split on white space (``paws_format: authors``)."""
    write(tmp_path / "paws_qqp/dev_and_test.tsv", "id\tsentence1\tsentence2\tlabel\n"
          "1\tb'Why can\\'t I sleep ?'\tb\"Why can't I sleep ?\"\t1\n")
    write(tmp_path / "paws_wiki/test.tsv", 'id\tsentence1\tsentence2\tlabel\n1\t"Quoted\tone" start .\tNot .\t0\n')
    c = build(tasks.get("qqp").config, {"data_dir": str(tmp_path), "embeddings": "random"}, "qqp")
    assert table_rows("qqp", c, "paws_qqp") == [("duplicate", "b'why can\\'t i sleep ?'", 'b"why can\'t i sleep ?"')]
    assert table_rows("qqp", c, "paws_wiki") == [("not_duplicate", "quoted one start .", "not .")]


# --- GloVe and the trial data ---

def sst_fixture(root):
    write(root / "trees/train.txt", "(4 (4 Good) (2 film))\n(0 (0 Bad) (2 film))\n(2 (2 zyzzyx) (2 .))\n")
    write(root / "trees/dev.txt", "(4 (4 Good) (2 .))\n")
    write(root / "trees/test.txt", "(0 (0 Bad) (2 unseen))\n")


def glove_fixture(path, dim=300):  # the dimension the file's name says (glove.840B.300d.txt)
    rng = np.random.default_rng(0)
    words = ["Good", "film", "Bad", ".", ". . .", "other", "film"]  # ". . ." has spaces; "film" twice
    lines = [" ".join([w, *(f"{x:.3f}" for x in rng.normal(size=dim))]) for w in words]
    return write(path, "\n".join(lines) + "\n")


def test_glove_keeps_task_words_frozen_and_cached(tmp_path):
    sst_fixture(tmp_path)
    path = glove_fixture(tmp_path / "glove.840B.300d.txt")
    data = tasks.get("sst5").load(cfg("sst5", tmp_path, embeddings="glove"))
    assert data.vocab == ["<pad>", "<unk>", "film", ".", "Bad", "Good"]  # zyzzyx has no vector: <unk>
    assert data.embeddings.shape == (6, 300) and not data.embeddings[:2].any()
    last = [float(x) for x in path.read_text().splitlines()[6].split()[1:]]
    assert np.allclose(data.embeddings[2], last, atol=1e-3)  # the last "film" line wins, as the authors' dict
    assert data.eval_splits["test"] == [([4, 1], 0)]  # "unseen" -> <unk>
    assert len(list((tmp_path / "cache/glove").glob("*.npz"))) == 1
    v = glove.stream(path, [".", "absent"])  # ". . ." is ".", "." and 300 values: skipped, as theirs
    assert v.words == ["."] and v.dim == 300 and np.allclose(v.array[0], [float(x) for x in
                                                                        path.read_text().splitlines()[3].split()[1:]])

    from rirlab.models import registry as models

    model = models.get("bbt_grc").build(build(models.get("bbt_grc").config, {"hidden_size": 8}, "m"), data.info)
    frozen = [p for p in model.embed.parameters() if not p.requires_grad]
    assert len(frozen) == 1 and frozen[0].shape == (6, 300)
    batch = data.collate(data.train)
    model(batch).logits.sum().backward()
    assert frozen[0].grad is None


def test_glove_lines_split_on_any_white_space_the_last_line_of_a_word_winning(tmp_path):
    """The authors' load_glove: line.strip().split(), word = the first field, a vector of 300 values, a later line
    of the same word replacing an earlier one."""
    vec = lambda x: " ".join([str(x)] * 300)  # noqa: E731
    path = write(tmp_path / "glove.840B.300d.txt",
                 f"a {vec(1)}\nb\t{vec(2)}\na {vec(3)}\nc\u3000 {vec(4)}\nd {vec(5)} \n")
    v = glove.stream(path, ["a", "b", "c", "d"])
    assert {w: float(v.array[v.index[w], 0]) for w in v.words} == {"a": 3.0, "b": 2.0, "c": 4.0, "d": 5.0}


def test_glove_absent_is_an_error_not_random_vectors(tmp_path):
    sst_fixture(tmp_path)
    with pytest.raises(UserError, match=f"sst5: missing glove.840B.300d.txt: expected at {tmp_path}/glove.840B.300d.txt"):
        tasks.get("sst5").load(cfg("sst5", tmp_path, embeddings="glove"))
    data = tasks.get("sst5").load(cfg("sst5", tmp_path, embeddings="random"))  # asked for: trainable, no file
    assert data.embeddings is None and len(data.vocab) == 7


def test_glove_bad_vector_is_file_line(tmp_path):
    sst_fixture(tmp_path)
    write(tmp_path / "glove.840B.300d.txt", "film" + " 0.1" * 300 + "\nGood" + " 0.1" * 299 + " x\n")
    with pytest.raises(UserError, match=r"glove.840B.300d.txt:2: a value of 'Good' is not a number"):
        tasks.get("sst5").load(cfg("sst5", tmp_path, embeddings="glove"))


def test_generated_stand_in_says_what_it_is_and_loads(tmp_path):
    task = tasks.get("snli")
    c = build(task.config, {"generated": True}, "snli")
    data = task.load(c)
    assert data.info.kind == "pair" and data.embeddings.shape[1] == 300 and len(data.train) > 200
    note = next((tmp_path / "cache/standin/snli").glob("*/STAND-IN-README.txt")).read_text()
    assert "GENERATED STAND-IN" in note and "not the real dataset" in note
    assert all(d.source == "generated" and "not the real data" in d.params["stand_in"] for d in task.datasets(c))


def test_data_cli_reads_user_files_and_refuses_missing_ones(tmp_path):
    sst_fixture(tmp_path)
    runner = CliRunner()
    r = runner.invoke(main, ["data", "generate", "sst5", "--split", "train", "--set", f"data_dir={tmp_path}",
                             "--set", "lowercase=false", "--set", "train_phrases=false",
                             "--out", "-"])
    assert r.exit_code == 0 and r.stdout.splitlines()[0] == "4\tGood film"
    r = runner.invoke(main, ["data", "generate", "snli", "--split", "hard", "--set", f"data_dir={tmp_path}",
                             "--out", "-"])
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0
    assert "snli: missing snli_1.0/snli_1.0_test_hard.jsonl: expected at" in r.stderr


def test_tasks_lists_the_files_each_task_expects():
    out = CliRunner().invoke(main, ["tasks"]).stdout
    assert "snli_1.0/snli_1.0_test_hard.jsonl  (hard)" in out and "quora_duplicate_questions.tsv  (train, dev, test)" in out
    assert "lra_release/tsv_data/new_aan_pairs.eval.tsv  (dev)" in out and "trees/test.txt  (test)" in out


def test_a_bad_line_through_the_cli_is_one_file_line_error_exit_2(tmp_path):
    path = write(tmp_path / "trees/test.txt", "(3 (2 It) (3 good))\n(9 (2 It) (3 good))\n")
    r = CliRunner().invoke(main, ["data", "stats", "sst5", "--split", "test", "--set", f"data_dir={tmp_path}"])
    assert r.exit_code == 2 and r.stderr.strip() == f"error: {path}:2: node label '9' is not 0-4"
