"""Faults of a real sweep driver (real Ray, a real MLflow store): a local Ray that does not start within its time
limit is one line naming the limit and how to raise it, exit 2, no Tune folder and no store left behind."""

from __future__ import annotations

from tests.helpers.cli import REPO, run_cli

TINY = REPO / "tests" / "specs" / "tiny.yaml"


def test_a_local_ray_that_does_not_start_in_time_is_one_line_exit_2_and_leaves_nothing(workdir):
    # the boundary, for real: Ray's own wait for its GCS server set to 0 s times out as on an overloaded machine
    proc = run_cli(["sweep", TINY], cwd=workdir, env={"RAY_gcs_server_port_wait_time_s": "0"}, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "the local Ray did not start" in lines[0] and "RAY_gcs_server_port_wait_time_s=120" in lines[0], lines[0]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not list(workdir.glob("rirlab_runs/*")), "an empty Tune folder was left behind"
    assert not (workdir / "mlruns.db").exists(), "the store was written before Ray was up"
