"""Options shared by several commands."""

from __future__ import annotations

import functools
import gc
import os
import sys

import click


def command_name() -> str:
    """How the user called rirlab, for the commands the CLI suggests: ``.venv/bin/rirlab`` when they typed that
    path (as the README does), else ``rirlab``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "rirlab" and os.sep in argv0:
        rel = os.path.relpath(argv0)
        return rel if not rel.startswith("..") else argv0
    return "rirlab"

tracking_option = click.option("--tracking-uri", default=None, metavar="URI",
                               help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlruns.db).")
set_option = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                          help="Override any config field, e.g. --set chunk_size=20 (repeatable).")


def read_only(fn):
    """A command that reads the store and ends: the cyclic garbage collector is paused while it runs (issue 33
    item 6). Importing MLflow and opening its SQLAlchemy store build some 10^5 long-lived objects; the collector's
    passes over them free nothing, and so does the full collection at interpreter exit: together about a third of
    such a command's CPU time. In the `rirlab` process itself what was built is then frozen (gc.freeze), so neither
    the next collection nor the one at exit walks it; in-process callers (click's CliRunner in the tests) only get
    the collector back, so nothing of theirs stays uncollectable."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        gc.disable()
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            gone = server_stopped_answering(err, kwargs.get("tracking_uri"))
            if gone is None:
                raise
            raise gone from None
        finally:
            if _is_rirlab_process():
                gc.freeze()
            gc.enable()

    return run


# seconds a read-only command waits for one answer of a tracking server, unless $MLFLOW_HTTP_REQUEST_TIMEOUT says: a
# sweep's driver gives it 10 s an attempt (rirlab.sweeps.record.faults.HTTP_BOUNDS, to notice a dead server within a
# minute), but a read asks for much more at a time (pages of runs, histories), and one that timed out is asked again
# while the server still works on the first: at 1,000 runs on a busy core the commands failed after minutes, the
# server doing 3-5 times the work. A server that is gone refuses the connection at once, whatever this is, and the
# store is probed when the command starts.
READ_TIMEOUT_S = 60


def server_stopped_answering(err: BaseException, tracking_uri=None):
    """The one-line UserError of a tracking server that stopped answering while a read-only command read it (a
    request timed out, or found no server, after MLflow's retries; the store was probed at the start, so it
    answered then), else None. MLflow raised it with a traceback; at a thousand runs a busy server's answer can
    outlast an attempt. The URI is printed with its password masked."""
    from rirlab.errors import UserError
    from rirlab.sweeps.record.faults import chain, server_unreachable

    how = server_unreachable(err)
    if how is None:
        return None
    if any(isinstance(e, TimeoutError) or "read timed out" in str(e).lower() for e in chain(err)):
        how = "timed out"  # (requests reports urllib3's read timeout after retries as a ConnectionError)
    try:
        from rirlab.sweeps.record.tracker import resolve_tracking_uri

        where = f" {resolve_tracking_uri(tracking_uri)}"  # (a StoreURI: prints masked)
    except Exception:  # noqa: BLE001  (no URI to name: the line still says what happened)
        where = ""
    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "?")
    retries = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "?")
    longer = 2 * int(timeout) if timeout.isdigit() else READ_TIMEOUT_S  # more than it waited
    return UserError(f"the MLflow tracking server{where} stopped answering while it was read ({how}; {timeout} s "
                     f"an attempt, {retries} retries); check that it is up, or give a busy server longer, e.g. "
                     f"MLFLOW_HTTP_REQUEST_TIMEOUT={longer} in front of the command")


def _is_rirlab_process() -> bool:
    """Whether this process is the `rirlab` command (the console script or ``python -m rirlab.cli``), which ends
    when the command returns."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return os.path.basename(sys.argv[0] if sys.argv else "") == "rirlab" or \
        getattr(spec, "name", "") in ("rirlab.cli.__main__", "rirlab.cli")
