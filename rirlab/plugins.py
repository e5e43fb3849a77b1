"""Your own models and tasks: modules named in $RIRLAB_PLUGINS (comma-separated) are imported before the
registries are used, so their ``@register`` decorators run — in the CLI and in every Ray worker."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

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
        except UserError as err:  # e.g. a name it registers twice
            raise UserError(f"RIRLAB_PLUGINS module '{name}': {err}") from None
        except Exception as err:  # noqa: BLE001 - its own code raised (a syntax error, a bug): where, in one line
            raise UserError(f"RIRLAB_PLUGINS module '{name}' failed while it was imported ({_where(err)}); fix that "
                            f"module or leave it out of RIRLAB_PLUGINS") from None


def _where(err: Exception) -> str:
    """The error's type, message and the plugin's own line it came from: "ValueError: bad at my_plugin.py:12"."""
    import traceback

    if isinstance(err, SyntaxError):
        return f"SyntaxError: {err.msg} at {Path(err.filename or '?').name}:{err.lineno}"
    frames = traceback.extract_tb(err.__traceback__)
    home = str(Path(__file__).parent)  # a frame of the plugin's own code, not of rirlab's registry or importlib
    own = [f for f in frames if not f.filename.startswith((home, "<frozen"))]
    last = (own or frames or [None])[-1]
    at = f" at {Path(last.filename).name}:{last.lineno}" if last else ""
    return f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}{at}"
