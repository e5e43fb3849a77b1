"""`rirlab bench` through the CLI: the step, table1 and learn protocols write the figures they print. The table1
protocol runs as a user runs it (a separate process: its memory cap and allocator settings are the process's);
the others run the same click command in this process (a Python start-up and torch import fewer each)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import run_cli


def _bench(cli, *args):
    """`rirlab bench ARGS` in-process (the ``cli`` fixture: the test's own data cache); checked to have exited 0."""
    result = cli("bench", *args)
    assert result.exit_code == 0, result.output
    return result


def test_bench_step_reports_median_and_peak_memory(cli, tmp_path):
    out = tmp_path / "step.json"
    proc = _bench(cli, "--protocol", "step", "--batch", "3", "--length", "40", "--repeats", "3", "--warmup", "1",
                  "--set", "hidden_size=16", "--set", "chunk_size=6", "--json", out)
    r = json.loads(out.read_text())
    assert r["model"] == "rir_ebt_grc" and r["mode"] == "train" and len(r["times_ms"]) == 3
    assert min(r["times_ms"]) <= r["median_ms"] <= max(r["times_ms"]) and r["median_ms"] > 0
    assert r["peak_mem_mb"] >= 0 and f"median {r['median_ms']:.1f} ms" in proc.stdout
    _bench(cli, "--protocol", "step", "--mode", "eval", "--inference", "non_rir", "--batch", "1", "--length", "50",
           "--repeats", "1", "--set", "hidden_size=16", "--json", out)
    r = json.loads(out.read_text())
    assert r["mode"] == "eval" and r["inference"] == "non_rir" and r["median_ms"] > 0


def test_bench_table1_has_the_four_length_bins(tmp_path):
    out = tmp_path / "t1.json"
    run_cli(["bench", "--protocol", "table1", "--models", "rir_ebt_grc,bbt_grc", "--samples", "1",
             "--set", "hidden_size=16", "--json", out], cwd=tmp_path, check=True)
    rows = json.loads(out.read_text())["rows"]
    assert [(r["model"], r["bin"]) for r in rows] == [(m, b) for m in ("rir_ebt_grc", "bbt_grc")
                                                       for b in ("200-250", "500-600", "900-1000", "1500-2000")]
    assert all(r["minutes"] > 0 and r["samples"] == 1 for r in rows)


def test_bench_refuses_an_unknown_field(cli):
    result = cli("bench", "--set", "no_such_field=1")
    assert result.exit_code == 2 and "no_such_field" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# n_eval / iid_pool: the trainer builds every ListOps split, and at their defaults (2,000 rows of up to 1,000 tokens,
# the near-IID split drawn from 90,000) that took 50 s of a 60 s test; learn reads only dev
LEARN_TINY = ["--threads", "1", "--set", "hidden_size=16", "--set", "chunk_size=10", "--set", "d_s=8",
              "--set", "n_eval=10", "--set", "iid_pool=500", "--set", "n_test=50",
              "--set", "n_train=192", "--set", "n_dev=60", "--set", "batch_size=16"]


def test_bench_learn_reports_thresholds_consistent_with_its_curve(cli, tmp_path, one_thread):
    out, png = tmp_path / "learn.json", tmp_path / "learn.png"
    proc = _bench(cli, "--protocol", "learn", "--minutes", "0.03", "--eval-every", "4", "--dev-examples", "40",
                  "--thresholds", "5,15,99.9", *LEARN_TINY, "--set", "early_stop_patience=1000", "--json", out,
                  "--png", png)  # the time budget ends it: 12-step epochs on a quiet machine early-stopped first
    r = json.loads(out.read_text())
    curve = r["curve"]
    assert r["protocol"] == "learn" and r["recipe"] == "paper" and r["config"]["optimizer"] == "ranger"
    assert r["dev_examples"] == 40 and r["stopped_by"] == "time budget" and len(curve) >= 3
    assert curve[0]["step"] == 0 and curve[-1]["step"] == r["steps"] > 0 and r["samples"] == 16 * r["steps"]
    assert all(b["train_seconds"] > a["train_seconds"] and b["step"] > a["step"] for a, b in zip(curve, curve[1:]))
    assert r["train_seconds"] >= 0.03 * 60 and r["eval_seconds"] > 0  # budget on training time; eval kept apart
    assert r["wall_seconds"] == r["train_seconds"] + r["eval_seconds"]
    assert all(p["wall_seconds"] >= p["train_seconds"] for p in curve)
    assert [t["threshold"] for t in r["thresholds"]] == [5, 15, 99.9]
    for t in r["thresholds"]:
        first = next((p for p in curve if p["dev_accuracy"] >= t["threshold"]), None)
        assert t["reached"] == (first is not None)
        if first is not None:
            assert {k: t[k] for k in ("step", "samples", "train_seconds", "dev_accuracy")} == \
                {k: first[k] for k in ("step", "samples", "train_seconds", "dev_accuracy")}
            assert f"dev accuracy >= {t['threshold']:g}%: {t['train_seconds']:.1f} s of training" in proc.stdout
        else:
            assert f"dev accuracy >= {t['threshold']:g}%: not reached" in proc.stdout
    assert r["thresholds"][0]["reached"] and not r["thresholds"][2]["reached"]  # 5%: chance level; 99.9%: no
    assert proc.stdout.count("\nstep ") >= len(curve) - 1  # a progress line per curve point
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_bench_learn_chains_through_its_checkpoint_and_tests_the_best_dev_weights(cli, tmp_path, one_thread):
    """A second run of the same command resumes the first (its curve, clock and step go on; the budget counts both
    runs); the splits are evaluated with the best dev weights; another setting or split name is refused."""
    ck, out1, out2 = tmp_path / "learn.pt", tmp_path / "l1.json", tmp_path / "l2.json"
    args = ["--protocol", "learn", "--eval-every", "4", "--dev-examples", "40", *LEARN_TINY,
            "--set", "early_stop_patience=1000", "--checkpoint", ck]
    _bench(cli, *args, "--minutes", "0.02", "--splits", "none", "--json", out1)
    first = json.loads(out1.read_text())
    assert ck.exists() and not first["resumed"] and first["splits"] == {}
    proc = _bench(cli, *args, "--minutes", "0.04", "--splits", "dev,test", "--json", out2)
    second = json.loads(out2.read_text())
    assert second["resumed"] and "resumed at step" in proc.stdout
    assert second["curve"][: len(first["curve"])] == first["curve"] and second["steps"] > first["steps"]
    assert second["train_seconds"] >= 0.04 * 60 > first["train_seconds"]
    assert list(second["splits"]) == ["dev", "test"] and second["weights"] == "best"
    assert second["splits"]["dev"]["accuracy"] == second["best"]["dev_accuracy"]  # the best dev weights were loaded
    assert second["splits"]["dev"]["loss"] == second["best"]["dev_loss"]
    other = cli("bench", *args, "--minutes", "0.04", "--set", "lr=0.01")
    assert other.exit_code == 2 and "other settings (lr)" in other.stderr
    bad = cli("bench", *args[: args.index("--checkpoint")], "--splits", "dev,nope")
    assert bad.exit_code == 2 and "'nope' is not one of this task's splits" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


def test_bench_learn_needs_neither_ray_nor_mlflow(tmp_path):
    import subprocess
    import sys

    code = ("import sys; sys.modules['ray'] = sys.modules['mlflow'] = None\n"
            "from rirlab.bench.base import BenchOptions, run\n"
            "r = run('learn', BenchOptions(minutes=0.005, eval_every=2, dev_examples=8, threads=1, overrides=dict("
            "hidden_size=16, chunk_size=10, d_s=8, n_train=64, n_dev=16, n_eval=10, iid_pool=500, n_test=50, "
            "batch_size=16)))\n"
            "assert r['steps'] > 0 and not any(m.split('.')[0] in ('ray', 'mlflow') for m in sys.modules "
            "if sys.modules[m] is not None)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_bench_cuda_without_cuda_is_one_line_exit_2(cli):
    import torch

    if torch.cuda.is_available():
        import pytest

        pytest.skip("this machine has CUDA")
    result = cli("bench", "--protocol", "learn", "--device", "cuda")  # checked for every protocol
    assert result.exit_code == 2 and "no CUDA device" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_bench_table1_reports_oom_in_its_cell_and_runs_the_other_models(tmp_path):
    """BT-GRC (every pair composed at every step) exceeds a 0.5 GB cap where EBT-GRC does not; the table goes on."""
    out = tmp_path / "t1.json"
    proc = run_cli(["bench", "--protocol", "table1", "--models", "bt_grc,ebt_grc", "--samples", "1", "--threads", "1",
                    "--mem-cap-gb", "0.5", "--set", "hidden_size=16", "--json", out], cwd=tmp_path, check=True)
    rows = {(r["model"], r["bin"]): r for r in json.loads(out.read_text())["rows"]}
    assert rows[("bt_grc", "1500-2000")]["status"] == "OOM" and rows[("bt_grc", "1500-2000")]["minutes"] is None
    assert rows[("bt_grc", "200-250")]["status"] == "ok"  # the cap binds only where the L^2 memory grows past it
    assert all(rows[("ebt_grc", b)]["status"] == "ok" and rows[("ebt_grc", b)]["minutes"] > 0
               for b in ("200-250", "500-600", "900-1000", "1500-2000"))
    assert "OOM" in proc.stdout


def test_bench_table1_time_cap_and_default_model_list():
    from rirlab.bench.base import TABLE1_ROWS, BenchOptions, run
    from rirlab.bench.table1 import table1_models
    from rirlab.models import registry

    names, notes = table1_models(BenchOptions())
    assert {"bt_grc", "bt_grc_os", "ebt_grc", "rir_ebt_grc", "rnn_grc"} <= set(names)
    assert names == sorted(names, key=lambda m: registry.get(m).table1_row)  # the paper's row order
    assert len(names) + len(notes) == TABLE1_ROWS  # unregistered rows are named, not silently dropped
    r = run("table1", BenchOptions(models=("rnn_grc",), samples=3, bins=((30, 40), (50, 60)), time_cap_s=1e-6,
                                   overrides={"hidden_size": 8}))
    assert [(x["status"], x["samples"]) for x in r["rows"]] == [("TIMEOUT", 1), ("TIMEOUT", 0)]
    assert r["rows"][1]["skipped"]
    r = run("table1", BenchOptions(models=("rnn_grc",), samples=1, bins=((30, 40),), time_cap_s=1e-6,
                                   overrides={"hidden_size": 8}))
    assert r["rows"][0]["status"] == "ok"  # every sample ran: over the cap, but nothing was cut


def test_bench_step_runs_every_registered_model_on_a_padded_batch():
    """Issue 31's zoo benchmark is `rirlab bench --protocol step --lengths padded` (one row --length long, the others
    shorter): every registered model runs it (here at toy sizes), and the batch has the lengths it says."""
    from rirlab.bench.base import BenchOptions, run
    from rirlab.config import field_names
    from rirlab.models import registry

    for name in registry.names():
        fields = field_names(registry.get(name).config)
        small = {k: v for k, v in {"hidden_size": 16, "chunk_size": 4, "num_layers": 1}.items() if k in fields}
        r = run("step", BenchOptions(model=name, batch=4, length=12, lengths="padded", repeats=1, warmup=0,
                                     overrides=small))
        assert r["lengths"] == "padded" and r["row_lengths"][0] == 12 and r["median_ms"] > 0, name
        assert all(2 <= n <= 12 for n in r["row_lengths"]), (name, r["row_lengths"])


@pytest.mark.parametrize("end", [["--minutes", "0.01"], ["--minutes", "5", "--set", "epochs=1"]],
                         ids=["budget", "last-epoch"])  # the last step: mid-epoch, or an epoch end (12 steps)
def test_bench_learn_evaluates_dev_once_at_the_end_when_the_last_weights_are_the_best(cli, tmp_path, one_thread,
                                                                                        monkeypatch, end):
    """The last weights are a best-dev candidate; when they win, the final dev cell is that evaluation, not a second
    pass over dev with the same weights. Every full-dev evaluation (the recipe's at epoch ends, the candidate's, the
    final cell's; the curve's points read a 40-row subset) scores 50 points more at each later step, so the last
    weights win whatever the number of epochs this machine reaches in the budget."""
    from rirlab.train import Trainer

    calls = []
    real = Trainer.evaluate

    def evaluate(self, examples):
        m = real(self, examples)
        if examples is self.dev_split():
            calls.append(self.step)
            m = {**m, "accuracy": m["accuracy"] + 50.0 * self.step}
        return m

    monkeypatch.setattr(Trainer, "evaluate", evaluate)
    out = tmp_path / "learn.json"
    _bench(cli, "--protocol", "learn", *end, "--eval-every", "4", "--dev-examples", "40",
           *LEARN_TINY, "--set", "early_stop_patience=1000", "--splits", "dev", "--json", out)
    r = json.loads(out.read_text())
    assert r["best"]["step"] == r["steps"] > 0
    assert calls.count(r["steps"]) == 1  # one full-dev evaluation of the last weights (two before: then the cell)
    assert r["splits"]["dev"]["accuracy"] == r["best"]["dev_accuracy"]


def test_op_counter_counts_every_dispatched_op_and_its_views():
    """The counter behind ``ops_per_step``: each ATen op once (a view too, but also counted apart), in autograd's
    backward as well (a counter that sees nothing would pass any op budget)."""
    import torch

    from rirlab.bench.ops import OpCounter

    x = torch.ones(3, requires_grad=True)
    with OpCounter() as ops:
        y = (x * 2).view(3, 1)  # mul, view
        y.sum().backward()  # sum, then backward: ones_like, expand (sum), view, mul (and an accumulation)
    assert ops.by_name["mul"] == 2 and ops.by_name["sum"] == 1 and ops.by_name["view"] >= 2
    assert ops.total == sum(ops.by_name.values()) >= 7 and 3 <= ops.views < ops.total


def test_bench_step_reports_the_ops_one_step_dispatches(cli, tmp_path):
    out = tmp_path / "step.json"
    proc = _bench(cli, "--protocol", "step", "--batch", "2", "--length", "12", "--repeats", "1", "--warmup", "0",
                  "--set", "hidden_size=16", "--set", "chunk_size=4", "--json", out)
    r = json.loads(out.read_text())
    assert r["ops_per_step"] > r["view_ops_per_step"] > 0 and f"{r['ops_per_step']} ATen ops" in proc.stdout
    assert sum(r["top_ops"].values()) <= r["ops_per_step"] and "view" in r["top_ops"]
    assert "kernels_per_step" not in r  # CUDA only
