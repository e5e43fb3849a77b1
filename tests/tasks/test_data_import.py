"""Imported data: the papers' import protocol, refusals of bad files, and cache keys that never mix an imported
split's neighbours into a generated run."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rirlab.tasks import cache, registry
from tests.helpers.cli import SHARED

LISTOPS = registry.get("listops")
# iid_pool 10,000 (the quick profile's; default 90,000: 15 s of this file): a generated test split may repeat train's
# short expressions by design, which a pool of 500 does here; at 10,000 none of these seeds' rows do
SMALL = dict(n_train=300, n_dev=30, n_test=60, n_eval=20, iid_pool=10000)


def _texts(cfg, split) -> set:
    return set(LISTOPS.split_table(cfg, split).column("text").to_pylist())


def test_a_generated_run_after_an_imported_train_shares_no_split_with_it(tmp_path):
    """The issue's sequence: a run with an imported train builds dev/test de-duplicated against that train; a
    later generated run must build its own (before: it read those back, and test rows lay inside its train)."""
    root = str(tmp_path / "cache")
    foreign = LISTOPS.split_table(LISTOPS.config(**SMALL, data_seed=7, cache_dir=str(tmp_path / "other")), "train")
    cache.write_atomic(foreign, cache.imported_path("listops", "train", root))
    with_import = LISTOPS.config(**SMALL, imported=["train"], cache_dir=root)
    for split in ("dev", "test"):
        _texts(with_import, split)
    generated = LISTOPS.config(**SMALL, cache_dir=root)
    got = {s: _texts(generated, s) for s in ("train", "dev", "test")}
    assert not got["train"] & got["test"] and not got["train"] & got["dev"] and not got["dev"] & got["test"]
    fresh = LISTOPS.config(**SMALL, cache_dir=str(tmp_path / "fresh"))  # what a clean cache builds
    for split in ("dev", "test"):
        assert got[split] == _texts(fresh, split)
    assert len(list((tmp_path / "cache" / "listops").glob("test-*.parquet"))) == 2  # one per run, each its own key


def test_the_key_of_a_generated_split_follows_the_imported_content(tmp_path):
    root = str(tmp_path)
    table = LISTOPS.split_table(LISTOPS.config(**SMALL, data_seed=3, cache_dir=str(tmp_path / "g")), "dev")
    params = {"n": 1}
    cache.write_imported("listops", "train", table, {"protocol": "as-is"}, root)
    k1 = cache.key_params("listops", params, ["train"], root)
    assert k1 != params and cache.key_params("listops", params, [], root) == params
    cache.write_imported("listops", "train", table.slice(1), {"protocol": "as-is"}, root)
    assert cache.key_params("listops", params, ["train"], root) != k1
    record = cache.imported_record("listops", "train", root)
    assert record["rows"] == table.num_rows - 1 and record["protocol"] == "as-is"
    assert pq.read_metadata(record["path"]).num_rows == record["rows"]


# ---------------------------------------------------------------- rirlab data import

def _imported(tmp_path, task) -> list:
    d = tmp_path / "cache" / task / "imported"
    return sorted(p.stem for p in d.glob("*.parquet")) if d.exists() else []


def test_listops_training_file_becomes_the_papers_dev_and_filtered_train(cli, tmp_path):
    src = tmp_path / "train_d20s.tsv"  # lengths up to 1000: the filter has work to do
    r = cli("data", "generate", "listops", "--split", "test", "--set", "n_test=1100", "--set", "n_train=50",
            "--set", "n_dev=10", "--out", src)
    assert r.exit_code == 0, r.output
    lines = src.read_text().splitlines()
    r = cli("data", "import", "listops", src, "--split", "train")
    assert r.exit_code == 0, r.output
    assert "split 'train'" in r.output and "split 'dev'" in r.output and "first 1000 lines" in r.output
    assert "--set 'imported=[train,dev]'" in r.output
    dev = cache.read_imported("listops", "dev")
    train = cache.read_imported("listops", "train")
    assert list(LISTOPS.to_lines(dev)) == lines[:1000]  # unfiltered, in file order
    want = [line for line in lines[1000:] if len(line.split("\t")[1].replace("(", "").replace(")", "").split()) <= 100]
    assert list(LISTOPS.to_lines(train)) == want and 0 < len(want) < 100
    record = cache.imported_record("listops", "train")
    assert record["files"][0]["path"] == str(src) and record["files"][0]["examples"] == 1100
    assert record["rows"] == len(want) and "papers' protocol" in record["protocol"]
    r = cli("data", "import", "listops", src, "--split", "train", "--as-is")
    assert r.exit_code == 0 and cache.read_imported("listops", "train").num_rows == 1100
    assert "split 'dev'" not in r.output
    short = tmp_path / "short.tsv"
    short.write_text("\n".join(lines[:20]) + "\n")
    r = cli("data", "import", "listops", short, "--split", "train")
    assert r.exit_code == 2 and "--as-is" in r.output


def test_a_wrong_label_is_one_file_line_error_and_nothing_is_written(cli, tmp_path):
    src = tmp_path / "t.tsv"
    src.write_text("9\t( ( ( [MAX 2 ) 9 ) ] )\n2\t( ( ( [MIN 2 ) 9 ) ] )\n3\t( ( ( [MIN 2 ) 9 ) ] )\n")
    r = cli("data", "import", "listops", src, "--split", "test")
    assert r.exit_code == 2
    assert r.output.splitlines()[-1].startswith(f"error: {src}:3: label 3, solver says 2")
    assert _imported(tmp_path, "listops") == []


def test_a_file_of_wrong_labels_is_one_line_with_the_count(cli, tmp_path):
    src = tmp_path / "wrong.tsv"
    src.write_text("3\t( ( ( [MIN 2 ) 9 ) ] )\n" * 30)
    r = cli("data", "import", "listops", src, "--split", "test")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert f"{src}:1: label 3, solver says 2 (and 29 more wrong labels)" in r.output
    assert _imported(tmp_path, "listops") == []


def test_crlf_files_import_as_their_lf_twins(cli, tmp_path):
    lines = ["9\t( ( ( [MAX 2 ) 9 ) ] )", "2\t( ( ( [MIN 2 ) 9 ) ] )"]
    for name, end in (("lf", "\n"), ("crlf", "\r\n")):
        src = tmp_path / f"{name}.tsv"
        src.write_bytes(end.join(lines).encode() + end.encode())
        assert cli("data", "import", "listops", src, "--split", "test").exit_code == 0
        texts = cache.read_imported("listops", "test").column("text").to_pylist()
        assert texts == [line.split("\t")[1] for line in lines], (name, texts)
    logic_src = tmp_path / "logic_crlf"
    logic_src.write_bytes(b"=\ta\ta\r\n<\t( a ( and b ) )\ta\r\n")
    assert cli("data", "import", "logic", logic_src, "--split", "dev").exit_code == 0
    assert "\r" not in "".join(cache.read_imported("logic", "dev").column("hypothesis").to_pylist())


BAD_FILES = {
    "empty": (b"", "no examples"),
    "blank": (b"\n  \n", "no examples"),
    "bom": (b"\xef\xbb\xbf9\t( ( ( [MAX 2 ) 9 ) ] )\n", ":1: the file starts with a UTF-8 byte-order mark"),
    "binary": (bytes(range(256)) * 4, ":1: NUL bytes"),
    "latin1": ("9\t( ( ( [MAX 2 ) 9 ) ] )\n2\t( [MIN 2 9 ] ) é\n".encode("latin-1"), ":2: not UTF-8 text"),
    "deep": (("5\t" + "[MAX 5 " * 3000 + "5 ]" * 3000 + "\n").encode(), ":1: operators nested deeper than 1000"),
    # what the original tokenisers would not parse: brackets that are not the binary ListOps bracketing
    "flat brackets": (b"9\t( [MAX 2 9 ] )\n", ":1: the parentheses are not the ListOps binary bracketing"),
    "bracketed digit": (("5\t" + "( " * 100000 + "5" + " )" * 100000 + "\n").encode(), ":1: the parentheses are not"),
}


@pytest.mark.parametrize("kind", BAD_FILES)
def test_bad_files_are_one_line_exit_2_and_write_nothing(cli, tmp_path, kind):
    content, needle = BAD_FILES[kind]
    src = tmp_path / f"{kind}.tsv"
    src.write_bytes(content)
    for command in (("import", "listops", src, "--split", "test"), ("verify", "listops", src)):
        r = cli("data", *command)
        assert r.exit_code == 2, r.output
        assert r.output.count("\n") == 1 and needle in r.output and str(src) in r.output
    assert _imported(tmp_path, "listops") == []


def test_a_fifo_or_a_device_is_refused_without_waiting_or_reading_it(cli, tmp_path, monkeypatch):
    """A FIFO with no writer hung the import in open(); a link to /dev/zero read one endless line into memory."""
    import os

    from rirlab.cli import data

    fifo = tmp_path / "stream.tsv"
    os.mkfifo(fifo)
    (tmp_path / "zero.tsv").symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO"), (tmp_path / "zero.tsv", "a device")):  # (click refuses a directory)
        for command in (("import", "listops", path, "--split", "test"), ("verify", "listops", path)):
            r = cli("data", *command)
            assert r.exit_code == 2 and f"{path}: {kind}, not a data file" in r.output and r.output.count("\n") == 1
    monkeypatch.setattr(data, "MAX_LINE_BYTES", 1000)  # a line without an end, bounded
    (tmp_path / "long.tsv").write_bytes(b"9\t" + b"( " * 5000)
    r = cli("data", "verify", "listops", tmp_path / "long.tsv")
    assert r.exit_code == 2 and ":1: a line longer than" in r.output
    assert _imported(tmp_path, "listops") == []


def test_logic_formulas_thousands_deep_are_refused_and_the_labeler_is_not_recursive(cli, tmp_path):
    from rirlab.tasks import logic

    src = tmp_path / "deep"
    src.write_text("=\t" + "( not " * 4000 + "a" + " )" * 4000 + "\ta\n")
    r = cli("data", "import", "logic", src, "--split", "ops_7")
    assert r.exit_code == 2 and f"{src}:1: premise: formula nested deeper than 1000" in r.output
    assert _imported(tmp_path, "logic") == []
    deep = "( not " * 998 + "a" + " )" * 998  # within the limit: parsed and labelled without recursion
    assert logic.label(deep, "a") == "=" and logic.label("( not " + deep + " )", "a") == "^"


def test_logic_train_files_become_train_and_every_tenth_pair_dev(cli, tmp_path):
    from rirlab.tasks import logic

    files = []
    for n in (1, 2):
        f = tmp_path / f"train{n}"
        f.write_text("".join(f"{r}\t{p}\t{h}\n" for r, p, h in logic.generate(15, n, seed=n)))
        files.append(f)
    rows = [line for f in files for line in f.read_text().splitlines()]
    r = cli("data", "import", "logic", *files, "--split", "train")
    assert r.exit_code == 0, r.output
    assert list(logic.to_lines(cache.read_imported("logic", "dev"))) == rows[9::10]
    assert list(logic.to_lines(cache.read_imported("logic", "train"))) == [x for k, x in enumerate(rows, 1) if k % 10]
    r = cli("data", "import", "logic", files[1], "--split", "ops_7")  # N = 2 pairs are not test7
    assert r.exit_code == 2 and f"{files[1]}:1: a pair with 2 operators in split ops_7" in r.output
    assert cli("data", "import", "logic", files[1], "--split", "ops_7", "--as-is").exit_code == 0


REAL_LOGIC = SHARED / "data" / "propositional_logic"


@pytest.mark.skipif(not (REAL_LOGIC / "test12").exists(), reason="real logic files absent")
def test_real_logic_files_import_with_the_papers_splits(cli):
    files = [REAL_LOGIC / f"train{n}" for n in range(3)]
    r = cli("data", "import", "logic", *files, "--split", "train")
    assert r.exit_code == 0, r.output
    total = sum(len(f.read_text().splitlines()) for f in files)
    assert cache.imported_record("logic", "dev")["rows"] == total // 10
    assert cache.imported_record("logic", "train")["rows"] == total - total // 10
    assert cli("data", "import", "logic", REAL_LOGIC / "test12", "--split", "ops_12").exit_code == 0  # N >= 12
    assert cli("data", "import", "logic", REAL_LOGIC / "test8", "--split", "ops_7").exit_code == 2


def test_the_record_hashes_the_bytes_imported_not_a_file_that_replaced_them(cli, tmp_path, monkeypatch):
    import hashlib

    src = tmp_path / "t.tsv"
    original = b"9\t( ( ( [MAX 2 ) 9 ) ] )\n2\t( ( ( [MIN 2 ) 9 ) ] )\n"
    src.write_bytes(original)
    protocol = LISTOPS.import_protocol

    def replace_then_protocol(split, rows):  # the file changes on disk after its rows were read
        src.write_bytes(b"5\t( ( ( [SM 2 ) 3 ) ] )\n")
        return protocol(split, rows)

    monkeypatch.setattr(LISTOPS, "import_protocol", replace_then_protocol)
    assert cli("data", "import", "listops", src, "--split", "test").exit_code == 0
    record = cache.imported_record("listops", "test")
    assert record["files"][0]["sha256"] == hashlib.sha256(original).hexdigest() and record["rows"] == 2


def test_a_cache_that_cannot_be_written_is_one_line(cli, tmp_path, monkeypatch):
    """RIRLAB_CACHE inside a regular file, or on a full disk, ended in a NotADirectoryError / OSError traceback."""
    import errno

    src = tmp_path / "t.tsv"
    src.write_text("9\t( ( ( [MAX 2 ) 9 ) ] )\n")
    (tmp_path / "a_file").write_text("not a folder")
    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "a_file" / "cache"))
    r = cli("data", "import", "listops", src, "--split", "test")
    assert r.exit_code == 2 and r.output.count("\n") == 1, r.output
    assert f"cannot write the data cache {tmp_path / 'a_file' / 'cache'}" in r.output and "Not a directory" in r.output

    monkeypatch.setenv("RIRLAB_CACHE", str(tmp_path / "cache"))

    def full_disk(table, where, *a, **k):
        with open(where, "wb") as f:
            f.write(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache.pq, "write_table", full_disk)
    r = cli("data", "import", "listops", src, "--split", "test")
    assert r.exit_code == 2 and "No space left on device" in r.output and r.output.count("\n") == 1, r.output
    assert [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []  # no half-written file kept
