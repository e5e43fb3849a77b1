"""Task registry: name -> :class:`rirlab.tasks.base.Task`. The sweep layer and the CLI only see names."""

from __future__ import annotations

from rirlab.registry import Registry
from rirlab.tasks.base import Task

_REGISTRY = Registry("task", "rirlab.tasks")
names = _REGISTRY.names
get = _REGISTRY.get
unregister = _REGISTRY.remove


def register(cls):
    """Class decorator: register one instance of a :class:`~rirlab.tasks.base.Task` subclass under ``cls.name``."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"@register takes a subclass of rirlab.tasks.base.Task, got {cls!r}")
    missing = [a for a in ("name", "config", "kind") if not hasattr(cls, a)]
    if missing:
        raise TypeError(f"task class {cls.__name__} must set {', '.join(missing)}")
    if isinstance(cls.quick, dict):  # written as a dict in the task file; entries keep (key, value) pairs
        cls.quick = tuple(cls.quick.items())
    _REGISTRY.add(cls.name, cls())
    return cls
