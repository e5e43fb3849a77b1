"""A disk that fills mid-sweep (a real 20 MB tmpfs, real Ray, a real MLflow store): under the store, or under the
sweep's Ray Tune folder. The driver ends with one line naming the full disk and the command that continues the
sweep, exit 2; once space is freed, that command finishes every trial and no metric step is logged twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import time

import pytest
import yaml

from tests.helpers.cli import REPO, RIRLAB

TINY = yaml.safe_load((REPO / "tests" / "specs" / "tiny.yaml").read_text())


@pytest.fixture
def small_disk(tmp_path):
    """A 20 MB tmpfs (root and a kernel that allows mounting it, else the test is skipped and says why)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a 20 MB tmpfs here ({proc.stderr.strip() or 'not root'}): the full-disk "
                    f"tests need one")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _metric_rows(db) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("select count(*) from metrics where key = 'train/loss'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _sweep(workdir, spec, db, out, *extra, fill=None):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    proc = subprocess.Popen([*RIRLAB, "sweep", str(spec), "--tracking-uri", f"sqlite:///{db}", "--output-dir",
                             str(out), "--no-checkpoint-artifacts", *extra], cwd=workdir, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if fill is not None:  # once trials report, the disk fills up
            end = time.time() + 400
            while _metric_rows(db) < 3 and proc.poll() is None and time.time() < end:
                time.sleep(0.3)
            subprocess.run(["dd", "if=/dev/zero", f"of={fill / 'filler'}", "bs=1M", "count=40"], capture_output=True)
        out_text, err_text = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out_text, err_text


def _check_resumed_sweep(db):
    con = sqlite3.connect(str(db))
    try:
        statuses = con.execute("select status from runs").fetchall()
        dups = con.execute("select run_uuid, key, step, count(*) from metrics group by run_uuid, key, step "
                           "having count(*) > 1 limit 5").fetchall()
    finally:
        con.close()
    assert sorted(s for (s,) in statuses) == ["FINISHED"] * 3, statuses  # the parent and its two trials
    assert dups == [], f"metric steps logged twice: {dups}"


@pytest.mark.parametrize("where", ["store", "tune_folder"])
def test_a_disk_that_fills_mid_sweep_stops_it_in_one_line_and_resume_completes_it(workdir, small_disk, where):
    spec = workdir / "s.yaml"
    # two trials (one seed of the two learning rates): both run when the disk fills, both finish on resume
    spec.write_text(yaml.safe_dump({**TINY, "name": "full", "fixed": {**TINY["fixed"], "steps": 200}, "seeds": 1},
                                   sort_keys=False))
    db = (small_disk if where == "store" else workdir) / "mlruns.db"
    out = (small_disk if where == "tune_folder" else workdir) / "runs"
    rc, out_text, err = _sweep(workdir, spec, db, out, fill=small_disk)
    assert rc == 2, out_text + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    what = "MLflow store" if where == "store" else "sweep's Ray Tune folder"
    assert f"the disk of the {what}" in lines[0] and "is full" in lines[0], lines[0]
    assert f"continue with: {RIRLAB[-1] if len(RIRLAB) == 1 else 'rirlab'}" in lines[0] or "--resume" in lines[0]
    assert lines[0].rstrip().endswith("--resume"), lines[0]

    (small_disk / "filler").unlink()
    rc, out_text, err = _sweep(workdir, spec, db, out, "--resume")
    assert rc == 0, out_text + err
    assert "done: 2 finished, 0 failed" in out_text, out_text
    _check_resumed_sweep(db)
