"""A data cache the trials cannot write is refused before any trial (issue 53): an unwritable ~/.cache/rirlab was
found only after Ray started and two trials FAILED; and a trial's full cache disk is not blamed on the Tune folder."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("command", ["sweep", "train"])
def test_an_unwritable_cache_is_one_line_before_ray_or_mlflow(workdir, cli, monkeypatch, command):
    from tests.helpers.cli import TINY_SPEC

    (workdir / "a_file").write_text("not a folder")
    monkeypatch.setenv("RIRLAB_CACHE", str(workdir / "a_file" / "cache"))
    store = f"sqlite:///{workdir / 'm.db'}"
    args = ([TINY_SPEC] if command == "sweep" else ["--model", "rir_grc", "--task", "listops", "--quick"])
    result = cli(command, *args, "--tracking-uri", store)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"cannot write the data cache {workdir / 'a_file' / 'cache'} (Not a directory)" in result.stderr
    assert not (workdir / "m.db").exists() and not (workdir / "rirlab_runs").exists()  # no store, no Ray


def test_a_full_cache_disk_is_refused_and_a_trials_full_disk_named_as_its_error_says(workdir, monkeypatch):
    import shutil

    from rirlab.errors import UserError
    from rirlab.tasks import cache
    from rirlab.sweeps.record.callback import _full_line

    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10**9, 10**9, 1000))
    with pytest.raises(UserError, match=r"cannot write the data cache .* \(its disk is full: 0.0 MB free\)"):
        cache.check_writable(str(workdir / "c"))
    error = ("ray.exceptions.RayTaskError(UserError): ray::ImplicitFunc.train() (pid=1, ip=1)\n  File x\n"
             "rirlab.errors.UserError: cannot write the data cache /c/listops (No space left on device); point $RIRLAB")
    assert _full_line(error).startswith("cannot write the data cache /c/listops (No space left on device)")
