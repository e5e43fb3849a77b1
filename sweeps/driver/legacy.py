"""Module names of sweeps recorded before the sweep side moved into the rirlab package.

Until version 0.1.0's packaging change the sweep side installed as a top-level package ``sweeps``; it is now
``rirlab.sweeps`` (setup.cfg's package_dir: the repository keeps its ``sweeps/`` folder, but nothing installs under
a generic top-level name). Ray Tune pickles classes by their module's name, so the Tune folder of a sweep recorded
before names ``sweeps.tune.optuna.SeedRepeater``, ``sweeps.record.callback...``: a ``--resume`` of it must find
them. While a resumed sweep's Tune state is read, every module of ``rirlab.sweeps`` is also reachable under its old
name (the same module objects, so an unpickled object is an instance of the classes the driver uses)."""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import sys

OLD, NEW = "sweeps", "rirlab.sweeps"


@contextlib.contextmanager
def legacy_module_names():
    """Within the block, ``sweeps.X`` names the module ``rirlab.sweeps.X`` (sys.modules aliases, removed after it).
    Left out when a module named ``sweeps`` is already loaded (a package of that name in use: it is not shadowed)."""
    if OLD in sys.modules:
        yield
        return
    import rirlab.sweeps as package

    names = [NEW] + [info.name for info in pkgutil.walk_packages(package.__path__, NEW + ".")]
    added = []
    try:
        for name in names:
            alias = OLD + name[len(NEW):]
            if alias not in sys.modules:
                sys.modules[alias] = importlib.import_module(name)
                added.append(alias)
        yield
    finally:
        for alias in added:
            sys.modules.pop(alias, None)
