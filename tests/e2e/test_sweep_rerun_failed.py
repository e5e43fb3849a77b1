"""``rirlab sweep SPEC --rerun-failed`` through the CLI, a real local Ray and a real MLflow sqlite store: a sweep
whose trial failed (a model that raises while a file exists), the file removed, the failed trial trained again as a
new run under the same parent; finished trials untouched; tables count the trial once; nothing left to rerun is one
line and exit 0. Without Ray: tests/sweeps/test_rerun_failed.py."""

from __future__ import annotations

from rirlab import contract
from tests.helpers.cli import REPO, run_cli
from tests.helpers.plugin_models import FAIL_FILE_ENV
from tests.helpers.sweep_runs import runs_of, write_spec


def test_rerun_failed_trains_only_the_failed_trial_again_and_tables_read_the_new_run(workdir, new_store):
    from rirlab.analysis.runs import sweeps_of

    db = workdir / "mlruns.db"
    new_store(db)
    fail = workdir / "fail-now"
    fail.touch()
    spec = write_spec(workdir / "r.yaml", name="rerun", seeds=1, max_failures=0,
                      search={"model": {"grid": ["rir_grc", "flaky_grc"]}})
    env = {"RIRLAB_PLUGINS": "tests.helpers.plugin_models", "PYTHONPATH": str(REPO), FAIL_FILE_ENV: str(fail)}
    first = run_cli(["sweep", spec, "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "1 finished, 1 failed" in first.stdout
    client, (parent,), children = runs_of(db, "rerun")
    before = {r.data.params["model"]: r for r in children}
    assert before["flaky_grc"].info.status == "FAILED"

    fail.unlink()  # the cause is gone (a full GPU, a lost node): the same trial now trains
    again = run_cli(["sweep", spec, "--rerun-failed", "--no-checkpoint-artifacts"], cwd=workdir, env=env, check=True)
    assert "rerunning 1 trial(s)" in again.stdout and "(1 FAILED): model=flaky_grc,seed=0" in again.stdout
    assert "done: 2 finished, 0 failed" in again.stdout, again.stdout
    client, parents, children = runs_of(db, "rerun")
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same sweep, no second parent
    (new,) = [r for r in children if r.data.tags.get(contract.RERUN_OF)]
    old = client.get_run(before["flaky_grc"].info.run_id)
    assert new.data.tags[contract.RERUN_OF] == old.info.run_id and new.data.tags[contract.ATTEMPT] == "2"
    assert new.info.status == "FINISHED" and new.data.params["model"] == "flaky_grc"
    assert new.data.metrics["dev/accuracy"] >= 0
    assert old.info.status == "FAILED" and old.data.tags[contract.SUPERSEDED_BY] == new.info.run_id  # kept
    kept = client.get_run(before["rir_grc"].info.run_id)  # the finished trial: untouched
    assert (kept.info.status, kept.info.end_time, kept.data.metrics) == (
        "FINISHED", before["rir_grc"].info.end_time, before["rir_grc"].data.metrics)
    tags = client.get_run(parent.info.run_id).data.tags
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"
    assert (tags[contract.TRIALS_FINISHED], tags[contract.TRIALS_FAILED], tags[contract.RERUNS]) == ("2", "0", "1")
    (row,) = sweeps_of(client, "rerun").to_dict("records")  # what `rirlab runs` prints: the trial counted once
    assert (row["finished"], row["failed"], row["other"]) == (2, 0, 0)
    table = run_cli(["tables", spec], cwd=workdir, env=env, check=True)
    assert "2 finished runs; 0 failed" in table.stdout, table.stdout

    nothing = run_cli(["sweep", spec, "--rerun-failed"], cwd=workdir, env=env)
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.strip().splitlines()[-1] == (f"nothing to rerun: every trial of sweep run "
                                                       f"{parent.info.run_id} finished (2 trial run(s))")
    assert len(runs_of(db, "rerun")[2]) == 3
