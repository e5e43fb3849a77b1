"""The driver's start-up window (rirlab.sweeps.driver.signals): a real SIGINT or SIGTERM sent to a real process while
Ray's start-up has SIGINT ignored for a moment (what /proc/PID/status showed during ``ray.init``) is still taken
and raised, and without the window the same signal is lost. A separate interpreter each, so pytest's own
handlers stay untouched."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.helpers.cli import REPO


def _default_sigint() -> None:
    """In the child before it execs: SIGINT's default disposition, as a terminal's foreground command has. A suite
    started in the background of a script (`bash scripts/test.sh &`) inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler, so the Ctrl-C these tests send would be lost for a reason of the test's
    own starting (the startup window handles an ignored SIGINT itself: test_a_ctrl_c_while_sigint_is_ignored...)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


FOREGROUND = {"preexec_fn": _default_sigint}

SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    from rirlab.sweeps.driver import signals
    window = sys.argv[1] == "window"
    if window:
        signals.open_startup_window()
    else:
        signals.stop_on_sigterm_like_ctrl_c()
    try:
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)   # as inside ray.init: SIGINT ignored a moment
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
        time.sleep(0.5)
        signal.signal(signal.SIGINT, handler)
        time.sleep(0.5)
        signals.close_startup_window()
        signals.raise_if_interrupted()
        time.sleep(0.5)
    except KeyboardInterrupt:
        print("interrupted", "terminated" if signals.terminated() else "")
        sys.exit(130)
    print("lost")
""")


def _run(mode: str, sig: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, mode, sig], cwd=REPO, capture_output=True, text=True, **FOREGROUND,
                          timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_a_ctrl_c_while_sigint_is_ignored_is_kept_by_the_startup_window():
    proc = _run("window", "SIGINT")
    assert proc.returncode == 130 and proc.stdout.strip() == "interrupted", proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr


def test_without_the_window_the_same_ctrl_c_is_lost():
    """The defect the window fixes (the sweep then ran every trial and exited 0)."""
    proc = _run("handler", "SIGINT")
    assert proc.returncode == 0 and proc.stdout.strip() == "lost", proc.stdout + proc.stderr


def test_sigterm_in_the_window_stops_like_ctrl_c_and_says_terminated():
    proc = _run("window", "SIGTERM")
    assert proc.returncode == 130 and proc.stdout.strip() == "interrupted terminated", proc.stdout + proc.stderr


SHIELDED = textwrap.dedent("""
    import os, signal, sys, time
    from rirlab.sweeps.driver import signals
    if sys.argv[1] == "window":
        signals.open_startup_window()
    else:
        signals.stop_on_sigterm_like_ctrl_c()
    steps = []
    try:
        with signals.shielded(raise_at_end=sys.argv[2] == "raise"):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10):          # the watcher takes the signal within 50 ms: this is the store's write
                time.sleep(0.05)
                steps.append(1)
        print("after", len(steps), flush=True)
        time.sleep(0.2)
    except KeyboardInterrupt:
        print("interrupted after", len(steps), flush=True)
        sys.exit(130)
""")


@pytest.mark.parametrize("mode", ["window", "handler"])
def test_a_ctrl_c_inside_a_shielded_store_write_is_raised_when_the_write_ends(mode):
    """A KeyboardInterrupt raised inside a SQLite statement while the sweep's parent run was being written left the
    store locked: marking the run KILLED then failed ("database is locked") and the sweep exited 1, not 130 (a CI
    failure of test_ctrl_c_while_the_parent_run_is_written...). The write runs to its end; the Ctrl-C comes after."""
    proc = subprocess.run([sys.executable, "-c", SHIELDED, mode, "raise"], cwd=REPO, capture_output=True, text=True,
                          **FOREGROUND,
                          timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 130 and proc.stdout.strip() == "interrupted after 10", proc.stdout + proc.stderr
    kept = subprocess.run([sys.executable, "-c", SHIELDED, mode, "keep"], cwd=REPO, capture_output=True, text=True,
                          **FOREGROUND,
                          timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert kept.returncode == 0 and kept.stdout.strip() == "after 10", kept.stdout + kept.stderr  # clean-up: recorded


STOPPED = textwrap.dedent("""
    import sys, time
    from rirlab.sweeps.driver import signals
    signals.open_startup_window()
    print("ready", flush=True)
    try:
        while sys.stdin.readline().strip() != "end":   # the test stops and continues this process meanwhile
            print("still running", flush=True)
        time.sleep(5)                                  # the test sends a real SIGINT here
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted by", signals.sender(), flush=True)
""")


def test_a_driver_stopped_and_continued_in_the_window_sees_no_sigint_and_a_real_one_names_its_sender():
    """CI's "interrupted by SIGINT from process -1623728833" with no signal sent: CPython's sigtimedwait, ending in
    EINTR once its 0.1 s deadline had passed (a thread that could not run in time on a loaded machine; here the
    process stopped for 0.3 s, as by Ctrl-Z or a scheduler's suspend, and continued), returned the uninitialised
    siginfo on its stack as a SIGINT. The window must see nothing; a real SIGINT after it names this process."""
    import os
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-c", STOPPED], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            **FOREGROUND,
                            stderr=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        for _ in range(3):
            proc.send_signal(signal.SIGSTOP)
            time.sleep(0.3)
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.3)
            proc.stdin.write("go on\n")
            proc.stdin.flush()
            line = proc.stdout.readline().strip()
            assert line == "still running", line + proc.stdout.read()
        proc.stdin.write("end\n")
        proc.stdin.flush()
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert out.startswith(f"interrupted by process {os.getpid()} ("), out + err


def test_rays_sigterm_handler_is_kept_out_while_ray_starts():
    """ray.init installs a SIGTERM handler that calls sys.exit (status 15, no line, nothing marked)."""
    import signal

    import ray._private.utils as ray_utils

    from rirlab.sweeps.driver.signals import keep_sigterm_handler

    before = signal.getsignal(signal.SIGTERM)
    with keep_sigterm_handler():
        ray_utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_ray_start_up_timeout_names_the_limit_and_how_to_raise_it():
    from rirlab.sweeps.driver.cluster import local_start_failure

    gcs = local_start_failure(RuntimeError("Timed out waiting for file /tmp/ray/session_x/gcs_server_port_ab12"))
    assert gcs.startswith("the local Ray did not start: its GCS server was not up within 30 s")
    assert "RAY_gcs_server_port_wait_time_s=120" in gcs and "\n" not in gcs
    node = local_start_failure(Exception("The current node timed out during startup. This could happen ..."))
    assert "did not start in time" in node and "--address auto" in node and "\n" not in node
    other = local_start_failure(OSError("No space left on device\nmore"))
    assert other.startswith("the local Ray failed to start (OSError: No space left on device)")


def test_a_refused_or_dry_run_sweep_leaves_ctrl_c_working_in_its_process(workdir, cli):
    """The startup window blocks SIGINT until Tune runs; a sweep refused before Tune (or a dry run) must unblock it:
    called in-process it left SIGINT blocked, so every process started afterwards inherited the block and Ctrl-C
    no longer reached it."""
    import signal

    from tests.helpers.cli import TINY_SPEC

    bad = workdir / "bad.yaml"
    bad.write_text(TINY_SPEC.read_text().replace("model: rir_grc", "model: rir_grx"))
    assert cli("sweep", bad).exit_code == 2
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert cli("sweep", TINY_SPEC, "--dry-run").exit_code == 0
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_keyboard_interrupt_no_signal_explains_is_an_error_with_its_traceback(workdir, cli, monkeypatch):
    """Every Ctrl-C and SIGTERM the driver gets is recorded; a KeyboardInterrupt raised by code (a library's) is not
    the user's: it must not read "interrupted ... run the same command again" (exit 130), which hid where it came
    from, but show its traceback and exit 1."""
    import rirlab.sweeps.driver.sweep as driver
    from rirlab.sweeps.driver import signals
    from tests.helpers.cli import TINY_SPEC

    def raised_by_code(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "run_sweep", raised_by_code)
    monkeypatch.setattr(signals, "_INTERRUPTED", [])
    monkeypatch.setattr(signals, "_TERMINATED", [])
    result = cli("sweep", TINY_SPEC, "--tracking-uri", f"sqlite:///{workdir / 'm.db'}")
    assert result.exit_code == 1, result.output
    assert "no signal explains" in result.stderr and "in raised_by_code" in result.stderr, result.stderr
    assert "interrupted before" not in result.stderr
