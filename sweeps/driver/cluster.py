"""The Ray side of a sweep's driver: ``--address`` checked, Ray started (a fresh local Ray, or a cluster joined
with this checkout's code as py_modules), Ray's logging sent to the sweep's folder, and a trial's resources
checked against the nodes."""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import Optional

from rirlab.errors import UserError
from rirlab.sweeps.record.tracker import worker_env
from rirlab.sweeps.spec.schema import Spec


def ray_init(address: Optional[str], log_dir: Path, tracking_uri: Optional[str] = None,
             ray_log: Optional["RayLog"] = None) -> "RayLog":
    """Start (or join) Ray, its driver-side logging into ``log_dir``/ray_driver.log through ``ray_log`` (the
    caller's, so that it can detach it even when Ray fails to start; a new one when none is given). Returns it."""
    import ray

    skip_final_collections()
    if address not in (None, "local"):
        _check_reachable(address)
    ray_log = ray_log if ray_log is not None else RayLog()
    handler = ray_log.attach(log_dir)
    if ray.is_initialized():
        return ray_log
    kwargs = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
    if address in (None, "local"):
        # no --address: always a fresh local Ray sized to this machine, never an unrelated `ray start` cluster;
        # workers get the same environment as on a cluster ($RIRLAB_CACHE made absolute: trials run in their own
        # directories). Ray starts its workers 15 steps nicer than itself (its raylet's `worker_niceness`), so a
        # trial ran at nice 15-19 whatever the user chose, and any other process on the machine starved it (a
        # real trial went from 0.24 to 6.8 s/step beside a test run): trials run at the sweep's own niceness, so
        # `nice rirlab sweep ...` means what it says. A user's RAY_worker_niceness still wins.
        os.environ.setdefault(WORKER_NICENESS_ENV, "0")
        # Ray prestarts a worker per CPU for its first driver; Ray Tune starts each trial's worker itself, and
        # the prestarted ones stay idle through the whole sweep: each imported Ray (0.6-0.8 s of CPU apiece, one
        # per core of the machine) beside the sweep's start for nothing. A user's RAY_prestart_worker_first_driver
        # still wins.
        os.environ.setdefault(PRESTART_ENV, "0")
        try:
            ray.init(address="local", runtime_env={"env_vars": worker_env(tracking_uri)}, **kwargs)
        except Exception as err:  # noqa: BLE001 - Ray's start-up raises plain RuntimeError/Exception/TimeoutError
            raise UserError(local_start_failure(err)) from None
        _log_ray_to(handler)
        return ray_log
    # a running cluster (ray start, `ray up`, KubeRay, Slurm): workers need only the Python environment; the
    # trial code travels as py_modules (the driver's rirlab package, rirlab.sweeps inside it, so every node runs the
    # driver's version) with the top-level packages of $RIRLAB_PLUGINS, MLflow's URI and credentials as env_vars
    # (the trial configs themselves travel with the trials)
    import importlib

    plugins = {m.strip().split(".")[0] for m in os.environ.get("RIRLAB_PLUGINS", "").split(",") if m.strip()}
    modules = [str(package_for_workers(log_dir / "rirlab_package"))]
    modules += [importlib.import_module(p) for p in sorted(plugins - {"rirlab"})]
    runtime_env = {"py_modules": modules, "excludes": ["__pycache__", "*.pyc"], "env_vars": worker_env(tracking_uri)}
    try:
        ray.init(address=address, runtime_env=runtime_env, **kwargs)
        _log_ray_to(handler)
        return ray_log
    except (ConnectionError, ValueError, RuntimeError) as err:  # not a Ray head there, or a token that is not
        # the cluster's (token authentication)
        why = (str(err).splitlines() or [type(err).__name__])[0]
        raise UserError(f"cannot join the Ray cluster at {address} ({why}); check the address "
                        f"and give this process the cluster's token: RAY_AUTH_MODE=token with RAY_AUTH_TOKEN or "
                        f"RAY_AUTH_TOKEN_PATH (see cluster/README.md)") from None


def skip_final_collections() -> None:
    """At its exit the driver no longer runs the interpreter's last garbage collections over what it holds. A
    sweep's driver ends with about 675,000 objects the collector tracks (torch, Ray Tune, MLflow, SQLAlchemy, the
    Tune experiment), and Python's finalization walks them several times over (once before the modules are torn down,
    again while they are): 8-16 s between the sweep's last line and the process's end on a loaded core, 3 s with
    them frozen (benchmarks/README.md, "Test suite time"). ``gc.freeze`` at exit leaves them to the operating
    system: the atexit handlers still run (Ray's shutdown among them: registered when Ray was imported, it runs after
    this one), objects still go when their last reference does, and what is made after the freeze (Ray's shutdown)
    is collected as before; a cycle of objects alive at exit is not finalized, as Python never promised it would
    be. Once per process."""
    global _FINAL_COLLECTIONS_SKIPPED
    if not _FINAL_COLLECTIONS_SKIPPED:
        import atexit
        import gc

        atexit.register(gc.freeze)
        _FINAL_COLLECTIONS_SKIPPED = True


_FINAL_COLLECTIONS_SKIPPED = False


def package_for_workers(staging: Path) -> Path:
    """The rirlab package as a cluster's workers import it: installed from a wheel it is one folder (rirlab.sweeps
    inside it), shipped as it is; in a source checkout rirlab.sweeps lives in the top-level ``sweeps/`` folder
    (setup.cfg's package_dir), so the package is assembled under ``staging`` as a wheel would install it (Ray
    uploads a py_module by its content hash: unchanged code is not uploaded twice). rirlab.analysis, which trials
    never import, stays behind."""
    import shutil

    import rirlab
    import rirlab.sweeps

    root, sweeps_dir = Path(rirlab.__file__).parent, Path(rirlab.sweeps.__file__).parent
    if sweeps_dir.parent == root:  # (installed: already one folder)
        return root
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    target = staging / "rirlab"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(root, target, ignore=ignore)
    shutil.copytree(sweeps_dir, target / "sweeps", ignore=ignore)
    return target


WORKER_NICENESS_ENV = "RAY_worker_niceness"  # how much nicer than the raylet Ray starts a worker (Ray: 15)
PRESTART_ENV = "RAY_prestart_worker_first_driver"  # Ray starts a worker per CPU for the first driver (Ray: on)
GCS_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"  # Ray's wait for its GCS server to start (default 30 s)


def local_start_failure(err: BaseException) -> str:
    """One line for a local Ray that did not start: what timed out, and how to give it longer or avoid it."""
    why = (str(err).strip().splitlines() or [type(err).__name__])[0]
    if len(why) > 160:
        why = why[:157] + "..."
    timed_out = isinstance(err, TimeoutError) or "timed out" in why.lower()
    if timed_out and "gcs_server_port" in why:
        now = os.environ.get(GCS_WAIT_ENV, "30")
        return (f"the local Ray did not start: its GCS server was not up within {now} s ({why}); this machine is "
                f"busy: run the command again with {GCS_WAIT_ENV}=120 in the environment to give Ray longer")
    if timed_out:
        return (f"the local Ray did not start in time ({why}); this machine is busy: run the command again when "
                f"it is less loaded, or start Ray once yourself (ray start --head --num-cpus N) and pass "
                f"--address auto")
    return (f"the local Ray failed to start ({type(err).__name__}: {why}); see Ray's logs under "
            f"/tmp/ray/session_latest/logs, or start Ray yourself (ray start --head) and pass --address auto")


class _QuietFileHandler(logging.FileHandler):
    """Ray's driver log is a convenience: a record it cannot write (its disk is full) is dropped, not printed
    on the terminal with a traceback ("--- Logging error ---") for every line Ray logs."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


RAY_LOGGERS = ("ray", "ray._private", "ray.tune", "ray.train", "ray.data")


class RayLog:
    """One sweep's ray_driver.log: the handlers that send Ray's driver-side logging there, owned by the driver that
    attached them (no module-level list: a driver detaches its own, and only its own, before removing its folder)."""

    def __init__(self) -> None:
        self.handlers: list[logging.Handler] = []

    def attach(self, log_dir: Path) -> logging.Handler:
        log_dir.mkdir(parents=True, exist_ok=True)
        handler = _QuietFileHandler(log_dir / "ray_driver.log")
        self.handlers.append(handler)
        _log_ray_to(handler)
        return handler

    def detach(self) -> None:
        """Ray's logging no longer goes to the sweep's ray_driver.log (its folder is about to be removed: a closed
        FileHandler that logs again would create the file, and so the folder's contents, anew)."""
        while self.handlers:
            handler = self.handlers.pop()
            for name in RAY_LOGGERS:
                lg = logging.getLogger(name)
                if handler in lg.handlers:
                    lg.removeHandler(handler)
            handler.close()


def _log_ray_to(handler: logging.Handler) -> None:
    """Ray's driver-side logging goes to the sweep's ray_driver.log, never to the terminal. (Called again after
    ray.init: with configure_logging=False it empties the "ray" logger's handlers, and a warning it logs then,
    such as the token-authentication notice, would reach stderr through Python's last-resort handler.)"""
    for name in RAY_LOGGERS:
        lg = logging.getLogger(name)
        lg.handlers = [handler]
        lg.propagate = False
        lg.setLevel(logging.INFO)


_ADDRESS = re.compile(r"^(ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-]*):(\d{1,5})$")


def check_address(address: Optional[str]) -> None:
    """--address is local, auto, HOST:PORT or ray://HOST:PORT (checked before anything starts)."""
    if address in (None, "local", "auto") or _ADDRESS.match(address):
        return
    raise UserError(f"--address {address!r} is not a Ray address; give HOST:PORT of the head's GCS (e.g. "
                    f"10.0.0.5:6379), ray://HOST:10001 for Ray Client, auto for the cluster this machine belongs to, "
                    f"or leave it out for a local Ray")


def _check_reachable(address: str) -> None:
    """HOST:PORT or ray://HOST:PORT must accept a TCP connection (Ray itself would wait for minutes)."""
    hostport = address.split("://", 1)[-1]
    if address == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except (OSError, ValueError) as err:
        raise UserError(f"--address {address}: nothing answers there ({err}); start the cluster (ray start --head) "
                        f"or fix the address (HOST:PORT of the head's GCS, e.g. 10.0.0.5:6379)") from None


def check_resources(spec: Spec, address: Optional[str]) -> None:
    """A trial must fit on one node (cpu and gpu of one placement-group bundle). On a local Ray nothing would
    ever run: refuse. On a cluster an autoscaler may still add a node that fits: say so at once, in one line."""
    import ray

    cpu, gpu = spec.resources.cpu, spec.resources.gpu
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0) >= cpu and r.get("GPU", 0) >= gpu for r in nodes):
        return
    biggest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    have = f"cpu {biggest.get('CPU', 0):g}, gpu {biggest.get('GPU', 0):g}"
    need = f"resources: {{cpu: {cpu:g}, gpu: {gpu:g}}}"
    if address in (None, "local"):
        raise UserError(f"{need} per trial does not fit this machine (Ray sees {have}); lower the spec's resources "
                        f"(gpu: 0 on a machine without a GPU) or run on a cluster with --address")
    print(f"warning: {need} per trial fits no node of the cluster at {address} (the largest has {have}); trials "
          f"stay pending until a node that fits joins (an autoscaler's); Ctrl-C to stop", file=sys.stderr, flush=True)


