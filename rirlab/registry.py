"""A name -> entry table filled by ``@register`` decorators when its home module is imported."""

from __future__ import annotations

import importlib

from rirlab.config import closest
from rirlab.errors import UserError
from rirlab.plugins import load_plugins


class Registry:
    def __init__(self, kind: str, home: str):
        self.kind, self.home = kind, home  # home: the module whose import registers every built-in entry
        self.entries: dict = {}

    def add(self, name: str, entry) -> None:
        if name in self.entries:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        self.entries[name] = entry

    def _load(self) -> None:
        load_plugins()
        importlib.import_module(self.home)

    def names(self) -> list[str]:
        self._load()
        return sorted(self.entries)

    def get(self, name: str):
        self._load()
        if name not in self.entries:
            raise UserError(f"unknown {self.kind} '{name}'{closest(name, self.entries)}; "
                            f"known {self.kind}s: {', '.join(sorted(self.entries))}")
        return self.entries[name]
