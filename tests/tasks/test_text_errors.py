"""Bad or changed user files for the text tasks: GloVe's first line and trailing spaces, an aclImdb review
rewritten in place, an unterminated quote, a long data row in an error, a missing GloVe file before any run."""

from __future__ import annotations

import os
import re

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


def test_missing_glove_stops_a_sweep_before_ray_or_mlflow(tmp_path):
    """The same check for `rirlab sweep`: a text spec at the papers' settings with no GloVe file beside its data
    is one line and exit 2, with no store, no Tune folder and no Ray started."""
    from tests.helpers.cli import REPO, run_cli

    proc = run_cli(["sweep", REPO / "search_spaces" / "rir_table6_sst5.yaml", "--set", f"data_dir={tmp_path}"],
                   cwd=tmp_path, env={"RIRLAB_CACHE": str(tmp_path / "cache")})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("error: sst5: missing glove.840B.300d.txt"), line
    assert not (tmp_path / "mlruns.db").exists() and not (tmp_path / "rirlab_runs").exists()


def test_a_field_longer_than_csvs_default_limit_is_read(tmp_path):
    """csv refuses fields over 131,072 bytes by default, so a valid LRA Retrieval row (two whole papers) was
    reported as "malformed TSV"."""
    from rirlab.tasks.text import tsv

    long_field = "x" * 200_000
    path = write(tmp_path / "r.tsv", f"1\tdoc1\tdoc2\t{long_field}\tshort\n")
    ((no, fields),) = list(tsv(path))
    assert no == 1 and fields[3] == long_field and fields[4] == "short"
