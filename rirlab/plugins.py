"""Your own models and tasks: modules named in $RIRLAB_PLUGINS (comma-separated) are imported before the
registries are used, so their ``@register`` decorators run — in the CLI and in every Ray worker."""

from __future__ import annotations

import importlib
import os

from rirlab.errors import UserError

_loaded: set[str] = set()


def load_plugins() -> None:
    for name in filter(None, (m.strip() for m in os.environ.get("RIRLAB_PLUGINS", "").split(","))):
        if name in _loaded:
            continue
        _loaded.add(name)
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise UserError(f"RIRLAB_PLUGINS names module '{name}' which cannot be imported ({err}); "
                            f"fix the name or PYTHONPATH") from None
