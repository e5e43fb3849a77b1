"""A wheel of rirlab works where a user installs it (issue 48 item 1): built from this checkout, installed without
extras into a fresh virtual environment, it holds one top-level package (rirlab; its sweep side and analysis inside
it, nothing named sweeps or analysis in site-packages), and from a folder outside the checkout a real sweep runs
and `rirlab tables` prints its table.

The third-party libraries come from this environment (a path entry of the fresh one: nothing is downloaded);
tests/packaging checks that every one the installed code imports is an install requirement."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.cli import REPO

TINY = REPO / "tests" / "specs" / "tiny.yaml"


# no PYTHONPATH (a checkout on it holds rirlab.egg-info: pip would take the wheel's rirlab as installed already)
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI", "VIRTUAL_ENV")}


def _run(args, cwd, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_a_wheel_installs_without_extras_and_sweeps_from_outside_the_checkout(tmp_path):
    source = tmp_path / "source"  # a copy: setuptools builds in the project's folder (build/, *.egg-info)
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("rirlab", "sweeps", "analysis"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", wheels, source],
         cwd=tmp_path)
    wheel = next(wheels.glob("rirlab-*.whl"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    py = venv / "bin" / "python"
    purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=tmp_path).stdout.strip())
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel], cwd=tmp_path)
    # then this environment's libraries, as a plain path entry: its .pth files (this checkout's editable install)
    # stay inactive, so rirlab can only come from the wheel
    (purelib / "zz_libraries.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    tops = {p.name for p in purelib.iterdir() if not p.name.endswith((".dist-info", ".pth")) and p.name != "__pycache__"}
    assert tops & {"rirlab", "sweeps", "analysis"} == {"rirlab"}, sorted(tops)
    installed = purelib / "rirlab"
    for module in ("sweeps/driver/sweep.py", "sweeps/tune/trainable.py", "analysis/tables.py",
                   "analysis/references/rir.yaml", "tasks/targets.json"):
        assert (installed / module).is_file(), module

    work = tmp_path / "elsewhere"
    work.mkdir()
    tiny = yaml.safe_load(TINY.read_text())
    (work / "w.yaml").write_text(yaml.safe_dump({**tiny, "name": "wheel", "seeds": 1, "search": {},
                                                 "fixed": {**tiny["fixed"], "steps": 10}}, sort_keys=False))
    where = _run([py, "-c", "import rirlab, rirlab.sweeps, rirlab.analysis; print(rirlab.sweeps.__file__)"],
                 cwd=work).stdout.strip()
    assert where.startswith(str(installed)), where
    rirlab = venv / "bin" / "rirlab"
    sweep = _run([rirlab, "sweep", "w.yaml", "--no-checkpoint-artifacts"], cwd=work)
    assert "done: 1 finished" in sweep.stdout, sweep.stdout
    table = _run([rirlab, "tables", "w.yaml"], cwd=work)
    assert "| configuration | near-IID |" in table.stdout and "1 finished runs" in table.stdout, table.stdout
