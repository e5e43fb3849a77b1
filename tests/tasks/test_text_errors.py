"""Bad or changed user files for the text tasks: GloVe's first line and trailing spaces, an aclImdb review
rewritten in place, an unterminated quote, a long data row in an error, a missing GloVe file before any run; hostile
files through the CLI (a stray file among the reviews, CIFAR batches with string labels or pixels of 300, a JSON line
nested too deep) and GloVe files that used to train quietly (another dimension than the name's, an extra value, no
word matched, nan)."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from rirlab.cli import main
from rirlab.config import build
from rirlab.errors import UserError
from rirlab.tasks import glove
from rirlab.tasks import registry as tasks
from tests.helpers.text import write

pytestmark = pytest.mark.usefixtures("cache")  # the data cache of each test alone


def cfg(task, root, **kw):
    return build(tasks.get(task).config, {"data_dir": str(root), "embeddings": "random", **kw}, task)


def test_glove_first_line_with_too_few_values_is_an_error_at_line_1(tmp_path):
    path = write(tmp_path / "g.txt", "the 0.1 0.2\nfilm 0.1 0.2 0.3\ngood 0.4 0.5 0.6\n")  # line 1 lost a value
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:1: 2 values; the file's next lines have 3")):
        glove.stream(path, ["film"])


def test_glove_trailing_spaces_are_accepted(tmp_path):
    path = write(tmp_path / "g.txt", "the 0.1 0.2 0.3 \r\nfilm 0.4 0.5 0.6  \n")
    v = glove.stream(path, ["the", "film"])
    assert v.words == ["the", "film"] and v.array.shape == (2, 3) and v.array[1, 2] == pytest.approx(0.6)


def test_imdb_cache_notices_a_review_rewritten_in_place(tmp_path):
    for sub, text in (("pos", "Great film"), ("neg", "Bad film")):
        for i in range(4):
            write(tmp_path / f"aclImdb/test/{sub}/{i}_5.txt", text)
    c = cfg("imdb", tmp_path, html_breaks="space")
    t = tasks.get("imdb")
    assert ["great", "film"] in t.split_table(c, "test").column("text").to_pylist()
    folder, review = tmp_path / "aclImdb/test/pos", tmp_path / "aclImdb/test/pos/0_5.txt"
    st = folder.stat()
    review.write_text("Changed text")
    os.utime(review, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns))  # the folder's own stamp is unchanged
    assert ["changed", "text"] in t.split_table(c, "test").column("text").to_pylist()


def test_unterminated_quote_is_reported_at_its_line(tmp_path):
    path = write(tmp_path / "counterfactually-augmented-data/sentiment/new/test.tsv",
                 'Sentiment\tText\nPositive\tfine\nNegative\t"never closed\nPositive\tmore\nPositive\tend\n')
    with pytest.raises(UserError, match="^" + re.escape(f"{path}:3: unterminated quote")):
        tasks.get("imdb").split_table(cfg("imdb", tmp_path), "counterfactual")


def test_an_error_quoting_a_data_row_is_cut_to_a_readable_length(tmp_path):
    path = write(tmp_path / "counterfactually-augmented-data/sentiment/new/test.tsv",
                 "Sentiment\tText\n" + "x" * 5000 + "\tfine\n")
    with pytest.raises(UserError) as err:
        tasks.get("imdb").split_table(cfg("imdb", tmp_path), "counterfactual")
    msg = str(err.value)
    assert msg.startswith(f"{path}:2: unknown label 'xxx") and "(5000 characters)" in msg and len(msg) < 300


def test_missing_glove_fails_before_any_run_is_recorded(tmp_path):
    write(tmp_path / "trees/train.txt", "(3 (2 It) (3 good))\n")
    store = tmp_path / "store.db"
    r = CliRunner().invoke(main, ["train", "--model", "bbt_grc", "--task", "sst5", "--set", f"data_dir={tmp_path}",
                                  "--tracking-uri", f"sqlite:///{store}"])
    assert r.exit_code == 2 and "sst5: missing glove.840B.300d.txt" in r.stderr
    assert not store.exists()


def test_missing_glove_stops_a_sweep_before_ray_or_mlflow(workdir, cache):
    """The same check for `rirlab sweep`: a text spec at the papers' settings with no GloVe file beside its data
    is one line and exit 2, with no store, no Tune folder and no Ray started (in-process: the command's own exit
    code and stderr)."""
    import ray

    from tests.helpers.cli import REPO, invoke

    was_up = ray.is_initialized()
    r = invoke("sweep", REPO / "search_spaces" / "rir_table6_sst5.yaml", "--set", f"data_dir={workdir}")
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: sst5: missing glove.840B.300d.txt"), line
    assert not (workdir / "mlruns.db").exists() and not (workdir / "rirlab_runs").exists()
    assert ray.is_initialized() == was_up


def test_a_field_longer_than_csvs_default_limit_is_read(tmp_path):
    """csv refuses fields over 131,072 bytes by default, so a valid LRA Retrieval row (two whole papers) was
    reported as "malformed TSV"."""
    from rirlab.tasks.text import tsv

    long_field = "x" * 200_000
    path = write(tmp_path / "r.tsv", f"1\tdoc1\tdoc2\t{long_field}\tshort\n")
    ((no, fields),) = list(tsv(path))
    assert no == 1 and fields[3] == long_field and fields[4] == "short"


# --- hostile files through `rirlab data stats` (issue 32 item 12): one line naming file and fix, exit 2 ---

def one_error_line(r) -> str:
    """The single stderr line of a refused command (exit 2), without its ``error: `` prefix."""
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: "), line
    return line[len("error: "):]


def test_lra_text_skips_a_stray_file_in_a_review_folder_as_imdb_does(tmp_path, cli):
    """A note or backup in aclImdb/train/pos (``notes_x.txt``) is not a review: LRA Text read the id before the
    first ``_`` as a number and stopped with a ValueError traceback; it skips it, as the IMDB task does."""
    for split in ("train", "test"):
        for sub in ("neg", "pos"):
            for i in range(3):
                write(tmp_path / f"aclImdb/{split}/{sub}/{i}_7.txt", f"A fine film {i}")
    write(tmp_path / "aclImdb/train/pos/notes_x.txt", "not a review")
    write(tmp_path / "aclImdb/train/pos/urls_pos.txt", "http://example.com")
    for task in ("lra_text", "imdb"):
        r = cli("data", "stats", task, "--split", "train", "--json", "--set", f"data_dir={tmp_path}",
                "--set", "embeddings=random" if task == "imdb" else "max_len=100")
        assert r.exit_code == 0, r.stderr
        assert '"count": 6' in r.stdout, r.stdout


def cifar_batch(tmp_path, labels, data):
    import pickle

    return write(tmp_path / "cifar-10-batches-py/test_batch", pickle.dumps({b"labels": labels, b"data": data}))


ZEROS = np.zeros((2, 3072), np.uint8)
PIXEL_300 = np.zeros((2, 3072), np.int64)
PIXEL_300[1, 5] = 300


@pytest.mark.parametrize("labels, data, why", [
    (["cat", "dog"], ZEROS, "image 0 has label 'cat'; CIFAR-10 labels are the integers 0-9"),
    ([3, 12], ZEROS, "image 1 has label 12; CIFAR-10 labels are the integers 0-9"),
    # lists of ints: an OverflowError traceback; an int64 array: read as 44, silently
    ([3, 7], PIXEL_300.tolist(), "image 1 has a pixel of 300 (value 5 of 3072); CIFAR-10 pixels are 0-255"),
    ([3, 7], PIXEL_300, "image 1 has a pixel of 300 (value 5 of 3072)"),
    ([3, 7], np.full((2, 3072), 0.5, np.float32), "pixels of type float32; CIFAR-10 pixels are integers 0-255"),
])
def test_lra_image_refuses_string_labels_and_pixels_out_of_range(tmp_path, cli, labels, data, why):
    path = cifar_batch(tmp_path, labels, data)
    line = one_error_line(cli("data", "stats", "lra_image", "--split", "test", "--set", f"data_dir={tmp_path}"))
    assert line.startswith(f"{path}:1: {why}"), line
    assert line.endswith("(give the python batches of cifar-10-python.tar.gz as distributed)"), line


def test_a_deeply_nested_snli_line_is_one_line_not_a_recursion_error(tmp_path, cli):
    ok = '{"gold_label": "entailment", "sentence1": "A man sleeps .", "sentence2": "A man rests ."}\n'
    path = write(tmp_path / "snli_1.0/snli_1.0_train.jsonl", ok + ok + "[" * 100_000 + "]" * 100_000 + "\n")
    line = one_error_line(cli("data", "stats", "snli", "--split", "train", "--set", f"data_dir={tmp_path}",
                              "--set", "embeddings=random"))
    assert line == (f"{path}:3: JSON nested too deep to read; a line holds one flat object of strings (sentence1, "
                    f"sentence2, gold_label): fix or delete the line")


# --- GloVe files that used to train quietly (issue 32 item 13): refused in one line, exit 2 ---

def vector(values=300, first="0.1"):
    return " ".join([first, *["0.2"] * (values - 1)])


def train_sst5_on(tmp_path, glove_lines, cli):
    """`rirlab train` of SST5 on a two-sentence corpus and a GloVe file of ``glove_lines``: (result, store)."""
    for split in ("train", "dev", "test"):
        write(tmp_path / f"trees/{split}.txt", "(4 (4 Good) (2 film))\n(0 (0 Bad) (2 film))\n")
    path = write(tmp_path / "glove.840B.300d.txt", "".join(f"{line}\n" for line in glove_lines))
    store = tmp_path / "store.db"
    r = cli("train", "--model", "bbt_grc", "--task", "sst5", "--set", f"data_dir={tmp_path}", "--set", "steps=2",
            "--set", "hidden_size=8", "--set", "eval_every=2", "--tracking-uri", f"sqlite:///{store}")
    return r, path, store


def test_glove_file_of_another_dimension_than_its_name_is_refused_before_any_run(tmp_path, cli):
    """A 50-d file saved as glove.840B.300d.txt trained with 50-d vectors where the papers' settings read 300."""
    r, path, store = train_sst5_on(tmp_path, [f"{w} {vector(50)}" for w in ("good", "film", "bad")], cli)
    assert one_error_line(r) == (f"{path}:1: 50 values per word, but the file's name says 300-d vectors; give the "
                                 f"300-d file (the papers': glove.840B.300d.txt), or these vectors under their own "
                                 f"name (--set glove_path=FILE)")
    assert not store.exists()  # the task's preflight: before the run is recorded
    other = write(tmp_path / "my_vectors.txt", f"good {vector(50)}\nfilm {vector(50)}\n")  # its own name: used
    assert glove.stream(other, ["good", "film"]).dim == 50


def test_glove_line_of_a_wanted_word_with_an_extra_value_is_refused(tmp_path, cli):
    """'film' with 301 values read as a word "film 0.1" with no vector: film became <unk>, silently."""
    lines = [f"good {vector()}", f"film {vector(301)}", f"bad {vector()}", f". . . {vector()}"]
    r, path, store = train_sst5_on(tmp_path, lines, cli)
    assert one_error_line(r) == f"{path}:2: 301 values for 'film'; the file's vectors have 300 (fix or delete the line)"
    assert not store.exists()  # the task's preflight: before the run is recorded
    # a word with spaces that starts with a wanted word is a word, not an extra value
    assert glove.stream(path, [".", "good"]).words == ["good"]


def test_glove_file_where_no_wanted_word_has_a_vector_is_refused(tmp_path, cli):
    """Trained on the vocabulary <pad>, <unk> alone, at 100% OOV."""
    r, path, store = train_sst5_on(tmp_path, [f"{w} {vector()}" for w in ("xx", "yy")], cli)
    assert one_error_line(r) == (f"{path}: none of the 3 words asked for has a vector here (e.g. 'bad', 'film', "
                                 f"'good'); give the GloVe file of this text (glove.840B.300d.txt), or --set "
                                 f"embeddings=random to train without it")
    assert not store.exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-Infinity"])
def test_glove_vector_with_nan_is_refused_not_a_learning_rate_hint(tmp_path, cli, value):
    lines = [f"good {vector()}", f"film {vector(first=value)}", f"bad {vector()}"]
    r, path, store = train_sst5_on(tmp_path, lines, cli)
    line = one_error_line(r)
    assert line.startswith(f"{path}:2: the vector of 'film' holds "), line
    assert line.endswith("; GloVe values are finite numbers (a damaged file? fix the line or fetch the file again)")
    assert "learning rate" not in line
    assert not store.exists()


# --- the same refusals for `rirlab sweep`: the driver's preflight, before Ray, MLflow or any trial (issue 32) ---

BAD_GLOVE = {  # the three faults above that only the vocabulary reveals, and the start of their line
    "extra value": ([f"good {vector()}", f"film {vector(301)}", f"bad {vector()}"], "{path}:2: 301 values for 'film'"),
    "no word": ([f"{w} {vector()}" for w in ("xx", "yy")], "{path}: none of the 3 words asked for has a vector"),
    "nan": ([f"good {vector()}", f"film {vector(first='nan')}", f"bad {vector()}"],
            "{path}:2: the vector of 'film' holds nan"),
}


@pytest.mark.parametrize("fault", BAD_GLOVE)
def test_bad_glove_stops_a_sweep_before_any_trial(tmp_path, cli, fault):
    """These were found when a trial loaded its data: the sweep had started Ray, recorded its parent run and
    failed every trial. The driver's preflight now streams the GloVe file (once, for every vocabulary the
    trials will use) and refuses in the same one line as `rirlab train`, exit 2, with no store, no Tune folder
    and no Ray started."""
    import ray

    from tests.helpers.cli import REPO

    lines, start = BAD_GLOVE[fault]
    r, path, _ = train_sst5_on(tmp_path, lines, cli)
    store, runs = tmp_path / "sweep.db", tmp_path / "rirlab_runs"
    sweep = cli("sweep", REPO / "search_spaces" / "rir_table6_sst5.yaml", "--set", f"data_dir={tmp_path}",
                "--tracking-uri", f"sqlite:///{store}", "--output-dir", runs)
    line = one_error_line(sweep)
    assert line == one_error_line(r) and line.startswith(start.format(path=path)), line
    assert not store.exists() and not runs.exists() and not ray.is_initialized()


def test_the_preflight_streams_glove_once_for_every_vocabulary_and_trials_read_its_cache(tmp_path, monkeypatch):
    """Two task configs of a sweep (min_count 1 and 7: two vocabularies) cost one pass over the GloVe file (5.6 GB
    for the papers' one); each trial's vocabulary then comes from the cache, with the vectors a pass of its own
    would read."""
    for split in ("train", "dev", "test"):
        write(tmp_path / f"trees/{split}.txt", "(4 (4 Good) (2 film))\n(0 (0 Bad) (2 film))\n")  # film: 12
    write(tmp_path / "glove.840B.300d.txt", "".join(f"{w} {vector(first=str(i))}\n"
                                                     for i, w in enumerate(("film", "good", "bad", "other"))))
    task = tasks.get("sst5")
    configs = [cfg("sst5", tmp_path, embeddings="glove", min_count=m) for m in (1, 7)]
    passes = []
    real = glove._read
    monkeypatch.setattr(glove, "_read", lambda *a: passes.append(a) or real(*a))
    task.preflight_all(configs)
    assert len(passes) == 1
    vocabularies = [task.vocabulary(c, task.split_table(c, "train")) for c in configs]
    assert len(passes) == 1  # the trials: from the cache
    assert [v[0] for v in vocabularies] == [["<pad>", "<unk>", "film", "bad", "good"], ["<pad>", "<unk>", "film"]]
    assert [v[1][2:, 0].tolist() for v in vocabularies] == [[0.0, 2.0, 1.0], [0.0]]
    task.preflight_all(configs)  # again (a --resume): nothing to read
    assert len(passes) == 1


@pytest.mark.parametrize("where", ["among", "after"])
def test_glove_line_of_a_wanted_word_with_an_extra_field_that_is_no_number_is_refused(tmp_path, cli, where):
    """'film' with 300 numbers and an extra field that is not one was skipped as a word with spaces: film became
    <unk>, silently. A word with spaces keeps its 300 numbers at the end; this line does not."""
    numbers = vector().split()
    extra = " ".join(numbers[:5] + ["x"] + numbers[5:]) if where == "among" else " ".join(numbers + ["x"])
    lines = [f"good {vector()}", f"film {extra}", f"bad {vector()}", f". . . {vector()}"]
    r, path, store = train_sst5_on(tmp_path, lines, cli)
    assert one_error_line(r) == f"{path}:2: a value of 'film' is not a number (fix or delete the line)"
    assert not store.exists()
