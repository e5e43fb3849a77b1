"""What a wheel of rirlab holds (issue 48 item 1): the repository's top-level folders sweeps/ and analysis/ install
as rirlab.sweeps and rirlab.analysis (setup.cfg's package_dir), every package folder is listed, and every
third-party module the installed code imports is an install requirement (psutil, once imported but only in the
[dev] extra, broke `pip install .` with a ModuleNotFoundError on the first sweep)."""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys

from tests.helpers.cli import REPO

FOLDERS = {"rirlab": "rirlab", "rirlab.sweeps": "sweeps", "rirlab.analysis": "analysis"}  # package -> folder


def _setup() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    return cfg


def _listed(value: str) -> list[str]:
    return [line.strip() for line in value.splitlines() if line.strip()]


def test_setup_cfg_maps_the_folders_inside_rirlab_and_lists_every_package_folder():
    opts = _setup()["options"]
    mapping = dict(line.replace(" ", "").split("=") for line in _listed(opts["package_dir"]))
    assert mapping == {"rirlab.sweeps": "sweeps", "rirlab.analysis": "analysis"}
    listed = set(_listed(opts["packages"]))
    found = set()
    for package, folder in FOLDERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join((package, *init.parent.relative_to(REPO / folder).parts)))
    assert found == listed, (f"in setup.cfg's packages but no folder: {sorted(listed - found)}; "
                             f"a package folder setup.cfg does not list: {sorted(found - listed)}")
    assert not {name.split(".")[0] for name in listed} - {"rirlab"}  # nothing under another top-level name


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> a file importing it, over every module a wheel installs (stdlib and rirlab left out)."""
    found = {}
    for folder in FOLDERS.values():
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("rirlab", "_thread", "__future__"):
                        found.setdefault(top, str(path.relative_to(REPO)))
    return found


def _distribution(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_import_is_an_install_requirement():
    requires = {_distribution(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0])
                for r in _listed(_setup()["options"]["install_requires"])}
    providers = importlib.metadata.packages_distributions()
    # what the requirements bring along (ray[tune] brings pandas' and pyarrow's, MLflow brings sqlalchemy, ...)
    closure, todo = set(), list(requires)
    while todo:
        dist = todo.pop()
        if dist in closure:
            continue
        closure.add(dist)
        try:
            deps = importlib.metadata.requires(dist) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        todo += [_distribution(re.split(r"[<>=!~\[; (]", d, maxsplit=1)[0]) for d in deps if "extra ==" not in d]
    # a module only a requirement's own requirements install (sqlalchemy, alembic: MLflow's) is accepted
    missing = {module: where for module, where in _third_party_imports().items()
               if not {_distribution(d) for d in providers.get(module, [module])} & closure}
    assert not missing, f"imported but not installed by `pip install rirlab` (add to install_requires): {missing}"


def test_a_clusters_workers_get_the_package_as_a_wheel_lays_it_out(tmp_path):
    """On a Ray cluster the trial code travels as a py_module: in a source checkout rirlab.sweeps lives in the
    top-level sweeps/ folder, so the package is assembled as one folder (sweeps inside rirlab) and a worker
    importing from it finds rirlab.sweeps there, not in the driver's checkout."""
    import subprocess

    from rirlab.sweeps.driver.cluster import package_for_workers

    staged = package_for_workers(tmp_path / "staging")
    assert staged == tmp_path / "staging" / "rirlab"
    assert (staged / "sweeps" / "tune" / "trainable.py").is_file() and (staged / "train.py").is_file()
    assert not (staged / "analysis").exists() and not list(staged.rglob("__pycache__"))
    probe = "import rirlab.sweeps.tune.trainable as t; print(t.__file__)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(staged.parent), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0 and out.stdout.strip().startswith(str(staged)), out.stdout + out.stderr
