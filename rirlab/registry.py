"""A name -> entry table filled by ``@register`` decorators when the modules of its home package are imported.

The home is a package (``rirlab.models``, ``rirlab.tasks``): every module in it is imported on first use, so a
new model family or task is one new file with an ``@register`` in it; nothing else lists it.

Adding an entry claims its config class's field names as flat keys (:func:`rirlab.config.claim_keys`): a key
that would mean two things (a field of a model config and of a task config, or of two model configs with
different types) is refused when the entry is registered, naming both classes.
"""

from __future__ import annotations

import importlib
import pkgutil

from rirlab.config import claim_keys, closest, release_keys
from rirlab.errors import UserError
from rirlab.plugins import load_plugins


class Registry:
    def __init__(self, kind: str, home: str):
        self.kind, self.home = kind, home  # home: the package whose modules register every built-in entry
        self.entries: dict = {}
        self._imported = False

    def add(self, name: str, entry) -> None:
        """Add ``entry`` (which has a ``config`` class) under ``name``, after checking its config keys."""
        if name in self.entries:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        claim_keys(self.kind, entry.config, name)
        self.entries[name] = entry

    def remove(self, name: str) -> None:
        """Drop ``name`` (plugins under test); its config keys are released when no other entry uses its class."""
        entry = self.entries.pop(name)
        if all(e.config is not entry.config for e in self.entries.values()):
            release_keys(entry.config)

    def _load(self) -> None:
        load_plugins()
        if self._imported:
            return
        package = importlib.import_module(self.home)
        for mod in pkgutil.iter_modules(getattr(package, "__path__", [])):
            importlib.import_module(f"{self.home}.{mod.name}")
        self._imported = True

    def names(self) -> list[str]:
        self._load()
        return sorted(self.entries)

    def get(self, name: str):
        self._load()
        if name not in self.entries:
            raise UserError(f"unknown {self.kind} '{name}'{closest(name, self.entries)}; "
                            f"known {self.kind}s: {', '.join(sorted(self.entries))}")
        return self.entries[name]
