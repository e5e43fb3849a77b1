"""Where rirlab reaches below a third-party library's public API: one module per library (``ray``, ``mlflow``,
``optuna``), holding every private attribute, monkeypatch and version-dependent call rirlab makes on it, and the
range of versions that was checked.

Why one seam: a private name (``ray._private.utils.set_sigterm_handler``, MLflow's ``_upgrade_db``) can vanish
or change in any release without notice, and the first sign would be a sweep that no longer resumes or a store
that no longer migrates. Gathered here, an upgrade is one file to read per library, and
``tests/train/test_compat.py`` fails naming the attribute that went missing.

Each module declares ``SUPPORTED`` (a :class:`Supported`: the oldest version believed to work, inclusive, and the
first version not checked, exclusive), ``check()``, and ``PRIVATE``: the (module, attribute[, keywords passed]) of
every private name it uses, which the tests look up on the installed library. ``setup.cfg``'s ``install_requires``
states the same range (a test keeps them equal). To adopt a new release: install it, run ``tests/train/test_compat.py`` and the e2e sweep
tests, then move ``SUPPORTED.below`` and ``setup.cfg`` together.

Nothing here imports the libraries themselves at module level (``check()`` reads installed metadata only), so the
checks are cheap enough to run before anything starts.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from dataclasses import dataclass
from typing import Optional

from rirlab.errors import UserError

# the modules of this package, one per library; optuna's is written separately and may be absent for now
LIBRARIES = ("ray", "mlflow", "optuna", "torch")


class UnsupportedVersion(UserError):
    """An installed library outside the range its compat module was checked on (the CLI: one line, exit 2)."""


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution`` from its metadata (no import of the library), None if absent."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``2.13.0+cpu`` -> (2, 13, 0), ``2.61.0rc1`` -> (2, 61, 0).

    A pre-release of the exclusive upper bound (``2.61.0rc1`` against ``<2.61``) counts as that release: it is
    outside the checked range too, which is what a bound on an unchecked release is for."""
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    parts = [int(p) for p in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:  # 2.61 == 2.61.0
        parts.pop()
    return tuple(parts)


@dataclass(frozen=True)
class Supported:
    """The versions of one library a compat module was checked on: ``lowest`` <= version < ``below``."""

    distribution: str  # the name pip knows it by
    lowest: str  # inclusive: the oldest version believed to work (setup.cfg's lower bound)
    below: str  # exclusive: the first release not checked
    extras: str = ""  # as setup.cfg requires it, e.g. "[tune]"

    @property
    def specifier(self) -> str:
        return f">={self.lowest},<{self.below}"

    @property
    def requirement(self) -> str:
        """The line of setup.cfg's install_requires (and what to pip install)."""
        return f"{self.distribution}{self.extras}{self.specifier}"

    def contains(self, version: str) -> bool:
        return release(self.lowest) <= release(version) < release(self.below)

    def check(self) -> None:
        """Raise one UnsupportedVersion line when the installed version is outside the range (or not installed)."""
        version = installed_version(self.distribution)
        fix = f"pip install '{self.requirement}'"
        where = f"rirlab/compat/{self.distribution}.py"
        if version is None:
            raise UnsupportedVersion(f"{self.distribution} is not installed; rirlab needs {self.distribution}"
                                     f"{self.specifier}: {fix}")
        if not self.contains(version):
            raise UnsupportedVersion(f"{self.distribution} {version} is outside the versions rirlab was checked on "
                                     f"({self.specifier}; the private parts it relies on are in {where}): {fix}")


def modules() -> dict:
    """The compat modules present, by library name (optuna's may not be written yet)."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":  # the module exists but fails to import: not ours to hide
                raise
    return found


def check_all() -> None:
    """Every compat module's ``check()``: before a sweep starts Ray or touches its store."""
    for module in modules().values():
        module.check()
