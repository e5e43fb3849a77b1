"""The compat seam (rirlab/compat/): an installed library outside its checked range is refused in one line, every
private attribute rirlab relies on still exists on the installed library (an upgrade that removes one fails here,
naming it, instead of silently breaking a resume or a store migration), no module outside the seam reaches into
those internals, and setup.cfg states the same ranges as the compat modules."""

from __future__ import annotations

import configparser
import importlib
import importlib.metadata
import inspect
import os
import re
from pathlib import Path

import pytest

import rirlab.compat as compat
from rirlab.compat import Supported, UnsupportedVersion
from rirlab.compat import mlflow as compat_mlflow
from rirlab.compat import ray as compat_ray

REPO = Path(__file__).resolve().parents[2]
# every library with a compat surface or private use gets a tested upper bound in setup.cfg
BOUNDED = ("ray", "mlflow", "optuna", "torch", "pydantic")


def _fake_version(monkeypatch, version):
    monkeypatch.setattr(compat, "installed_version", lambda distribution: version)


# ---- the range check -------------------------------------------------------------------------------------

PRESENT = compat.modules()  # ray, mlflow, and optuna once rirlab/compat/optuna.py is written


@pytest.mark.parametrize("module", list(PRESENT.values()), ids=list(PRESENT))
@pytest.mark.parametrize("where", ["below", "above", "prerelease-of-upper"])
def test_a_version_outside_the_range_is_refused_in_one_line_naming_library_version_and_range(monkeypatch, module,
                                                                                             where):
    s = module.SUPPORTED
    lo = compat.release(s.lowest)
    version = {"below": ".".join(map(str, (*lo[:-1], lo[-1] - 1))) + ".9",  # 2.40 -> 2.39.9
               "above": f"{s.below}.1",
               "prerelease-of-upper": f"{s.below}.0rc1"}[where]
    _fake_version(monkeypatch, version)
    with pytest.raises(UnsupportedVersion) as info:
        module.check()
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{s.distribution} {version} is outside the versions rirlab was checked on "
                          f"(>={s.lowest},<{s.below}"), msg
    assert f"pip install '{s.requirement}'" in msg  # what to do
    with pytest.raises(UnsupportedVersion):  # the sweep's start-up check too
        compat.check_all()


def test_a_missing_library_is_named_with_what_to_install(monkeypatch):
    _fake_version(monkeypatch, None)
    with pytest.raises(UnsupportedVersion, match=r"^ray is not installed; rirlab needs ray>=2\.\d+,<\d+\.\d+: "
                                                 r"pip install 'ray\[tune\]>="):
        compat_ray.check()


def test_the_installed_versions_pass():
    for name, module in compat.modules().items():
        version = importlib.metadata.version(module.SUPPORTED.distribution)
        assert module.SUPPORTED.contains(version), (name, version)
        module.check()
    compat.check_all()


def test_versions_compare_by_release():
    assert compat.release("2.13.0+cpu") == (2, 13) == compat.release("2.13")
    assert compat.release("2.61.0rc1") == (2, 61)
    s = Supported("x", lowest="2.40", below="2.61")
    assert s.contains("2.40.0") and s.contains("2.60.9") and s.contains("2.60.0.post1")
    assert not s.contains("2.39.9") and not s.contains("2.61.0") and not s.contains("3.0") and not s.contains("2.100")


def test_a_sweep_refuses_an_out_of_range_library_with_one_line_and_exit_2(monkeypatch, workdir):
    from tests.helpers.cli import TINY_SPEC, invoke

    monkeypatch.setattr(compat, "installed_version", lambda d: "2.99.0" if d == "ray" else
                        importlib.metadata.version(d))
    result = invoke("sweep", TINY_SPEC, "--quick")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: ray 2.99.0 is outside the versions rirlab was checked on "
                     f"({compat_ray.SUPPORTED.specifier}; the private parts it relies on are in rirlab/compat/ray.py): "
                     f"pip install '{compat_ray.SUPPORTED.requirement}'"], result.output
    assert not (workdir / "mlruns.db").exists()  # refused before the store was touched


def test_a_store_command_refuses_an_out_of_range_mlflow(monkeypatch, workdir):
    from rirlab.sweeps.record.store import check_store

    _fake_version(monkeypatch, "9.0.0")
    with pytest.raises(UnsupportedVersion, match=r"^mlflow 9\.0\.0 is outside"):
        check_store(f"sqlite:///{workdir / 'mlruns.db'}", create=True)
    assert not (workdir / "mlruns.db").exists()


# ---- the private parts still exist -----------------------------------------------------------------------

def _private_parts():
    for module in PRESENT.values():
        for entry in getattr(module, "PRIVATE", ()):
            where, attribute, keywords = (*entry, ())[:3]
            yield pytest.param(module, where, attribute, keywords, id=f"{where}.{attribute}")


@pytest.mark.parametrize("compat_module, where, attribute, keywords", list(_private_parts()))
def test_every_private_part_exists_on_the_installed_library(compat_module, where, attribute, keywords):
    library = compat_module.SUPPORTED.distribution
    version = importlib.metadata.version(library)
    file = f"rirlab/compat/{library}.py"
    try:
        owner = importlib.import_module(where)
    except ImportError as err:
        pytest.fail(f"{library} {version} has no module {where} ({err}); {file} relies on it: adapt {file}")
    assert hasattr(owner, attribute), (f"{library} {version} has no {where}.{attribute}; {file} relies on it: adapt "
                                       f"{file} before widening its SUPPORTED range")
    if keywords:
        params = inspect.signature(getattr(owner, attribute)).parameters
        missing = [k for k in keywords if k not in params]
        assert not missing, f"{library} {version}: {where}.{attribute} takes no {missing}; {file} passes them"


def test_every_private_name_the_compat_modules_import_is_listed():
    """PRIVATE is what the existence test checks: a private import added to a compat module without listing it
    would go unchecked."""
    from tests.train.test_imports import all_imports

    for module in PRESENT.values():
        listed = {f"{m}.{a}" for m, a, *_ in module.PRIVATE} | {m for m, *_ in module.PRIVATE}
        root = module.SUPPORTED.distribution
        used = {i for i in all_imports(Path(module.__file__)) if i.split(".")[0] == root}
        private = {i for i in used if any(part.startswith("_") for part in i.split("."))}
        assert private <= listed, sorted(private - listed)


def test_ray_looks_up_set_sigterm_handler_through_its_module_at_call_time():
    """keep_sigterm_handler replaces the module attribute; it keeps our handler only while ray.init calls the
    function as ``ray._private.utils.set_sigterm_handler(...)`` (a ``from ... import`` would bypass it)."""
    import ray._private.worker as worker

    source = inspect.getsource(worker.init)
    assert "ray._private.utils.set_sigterm_handler(" in source, \
        "ray.init no longer calls ray._private.utils.set_sigterm_handler: adapt rirlab/compat/ray.py keep_sigterm_handler"


def test_keep_sigterm_handler_stops_ray_from_replacing_it():
    import signal

    import ray._private.utils as ray_utils

    before = signal.getsignal(signal.SIGTERM)
    original = ray_utils.set_sigterm_handler
    with compat_ray.keep_sigterm_handler():
        ray_utils.set_sigterm_handler(lambda signum, frame: None)
    assert signal.getsignal(signal.SIGTERM) is before
    assert ray_utils.set_sigterm_handler is original  # put back after the block


def test_dropped_env_vars_no_longer_reach_a_trainables_runtime_env(monkeypatch):
    """What Tune puts into a trainable's runtime_env, with the names dropped: Ray must still read
    ENV_VARS_TO_PROPAGATE from the module when it builds one."""
    from ray.tune.execution import class_cache

    monkeypatch.setattr(class_cache, "ENV_VARS_TO_PROPAGATE", class_cache.ENV_VARS_TO_PROPAGATE)  # restored after
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "t0k3n")
    seen = []
    monkeypatch.setattr(class_cache.ray, "remote", lambda **options: (seen.append(options), lambda cls: cls)[1])

    class A:
        pass

    class B:
        pass

    class_cache._ActorClassCache().get(A)
    assert seen[-1]["runtime_env"]["env_vars"].get("AWS_SECRET_ACCESS_KEY") == "s3cr3t"  # Tune copies it
    compat_ray.drop_propagated_env(["AWS_SECRET_ACCESS_KEY"])
    class_cache._ActorClassCache().get(B)
    env_vars = seen[-1]["runtime_env"]["env_vars"]
    assert "AWS_SECRET_ACCESS_KEY" not in env_vars and env_vars.get("AWS_SESSION_TOKEN") == "t0k3n"


# ---- one seam --------------------------------------------------------------------------------------------

def _project_files():
    for top in ("rirlab", "sweeps", "analysis", "tests/helpers"):
        for path in sorted((REPO / top).rglob("*.py")):
            if path.parent != REPO / "rirlab" / "compat":
                yield path


# the Optuna glue's use of Ray internals (issue 48): allowed until rirlab/compat/optuna.py exists, which takes it over
OPTUNA_GLUE = {("sweeps/tune/optuna.py", "ray.tune.experiment.config_parser._make_parser")}


def test_no_module_outside_the_seam_imports_ray_or_mlflow_internals():
    from tests.train.test_imports import all_imports

    internal = {m for module in (compat_ray, compat_mlflow) for m, *_ in module.PRIVATE}
    allowed = set() if "optuna" in compat.modules() else OPTUNA_GLUE
    found = []
    for path in _project_files():
        for name in all_imports(path):
            parts = name.split(".")
            if parts[0] in ("ray", "mlflow") and (any(p.startswith("_") for p in parts[1:]) or
                                                  any(name == m or name.startswith(m + ".") for m in internal)):
                if (path.relative_to(REPO).as_posix(), name) not in allowed:
                    found.append(f"{path.relative_to(REPO)}: {name}")
    assert not found, "move these into rirlab/compat/: " + "; ".join(found)


def test_the_seam_is_the_lowest_layer():
    """rirlab/compat imports nothing of the project but its error type: the library (optim, bench) and the sweep
    side both use it."""
    from tests.train.test_imports import all_imports

    for path in (REPO / "rirlab" / "compat").glob("*.py"):
        project = {i for i in all_imports(path) if i.split(".")[0] == "rirlab"
                   and not i.startswith(("rirlab.compat", "rirlab.errors"))}
        assert not project, (path.name, project)


# ---- setup.cfg and the compat modules agree --------------------------------------------------------------

def _install_requires() -> dict[str, str]:
    """Distribution name (extras dropped, lower case) -> its install_requires line."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    lines = [line.strip() for line in cfg["options"]["install_requires"].splitlines() if line.strip()]
    return {re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower(): line for line in lines}


def test_setup_cfg_states_the_compat_modules_ranges():
    requires = _install_requires()
    present = compat.modules()
    assert {"ray", "mlflow"} <= set(present)
    for name, module in present.items():  # optuna's once it is written
        supported = getattr(module, "SUPPORTED", None)
        assert isinstance(supported, Supported), \
            f"rirlab/compat/{name}.py declares no SUPPORTED = rirlab.compat.Supported(...) range"
        assert requires.get(supported.distribution) == supported.requirement, \
            (f"setup.cfg requires {requires.get(supported.distribution)!r} but rirlab/compat/{name}.py was checked on "
             f"{supported.requirement!r}: change both together")


@pytest.mark.parametrize("name", BOUNDED)
def test_setup_cfg_bounds_each_library_with_private_use_above_and_admits_the_installed_one(name):
    line = _install_requires()[name]
    m = re.fullmatch(r"[A-Za-z0-9_.-]+(\[[a-z,]+\])?>=([\d.]+),<([\d.]+)", line)
    assert m, f"setup.cfg: {line!r} is not NAME>=LOW,<HIGH (a tested upper bound)"
    installed = importlib.metadata.version(name)
    assert Supported(name, m.group(2), m.group(3)).contains(installed), (line, installed)
    # the bound is at most the next minor after the tested version: no untested minor release is admitted
    major, minor = map(int, re.match(r"(\d+)\.(\d+)", installed).groups())
    assert compat.release(m.group(3)) <= (major, minor + 1), (line, installed)


def test_the_compat_modules_import_no_library_when_imported():
    """check() runs before anything starts: importing the seam must not import Ray or MLflow (seconds)."""
    import subprocess
    import sys

    code = ("import sys; import rirlab.compat as c; c.modules(); c.check_all(); "
            "print(sorted(m for m in ('ray', 'mlflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_tunes_environment_settings_are_set_unless_the_user_set_them(monkeypatch):
    for name in compat_ray.TUNE_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "60")  # the user's own choice stays
    compat_ray.tune_environment()
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "60" and os.environ["RAY_AIR_NEW_OUTPUT"] == "0"
    assert all(name in os.environ for name in compat_ray.TUNE_ENV)


def test_state_saved_on_its_period_stops_the_save_per_trial_checkpoint_only_while_it_runs(tmp_path):
    """Inside the block a trial checkpoint no longer forces Tune to save its experiment state (its manager built as
    Tune builds it for CheckpointConfig(num_to_keep=1)); after it, Tune's own method is back."""
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    from rirlab.compat.ray import state_saved_on_its_period

    original = _ExperimentCheckpointManager.on_trial_checkpoint
    manager = _ExperimentCheckpointManager(storage=None, checkpoint_period=10, sync_every_n_trial_checkpoints=1)
    with state_saved_on_its_period():
        manager.on_trial_checkpoint(object())
        assert manager._should_force_sync_up is False
    assert _ExperimentCheckpointManager.on_trial_checkpoint is original
    manager.on_trial_checkpoint(object())  # Tune's own: one checkpoint of a trial forces the next save
    assert manager._should_force_sync_up is True
