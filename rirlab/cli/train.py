"""`rirlab train`: one trial in this process (no Ray), one MLflow run."""

from __future__ import annotations

import sys

import click

from rirlab.cli.options import set_option, tracking_option

TRAIN_QUICK = {"steps": 200, "batch_size": 32, "eval_every": 100, "log_every": 20, "max_eval_examples": 200}


@click.command()
@click.option("--model", required=True, help="Registered model name (see `rirlab models`).")
@click.option("--task", required=True, help="Registered task name, e.g. listops.")
@click.option("--quick", is_flag=True, help="Small data, tiny model, 200 steps.")
@set_option
@tracking_option
@click.option("--experiment", default="rirlab-train", show_default=True, help="MLflow experiment to record the run in.")
def train(model, task, quick, sets, tracking_uri, experiment):
    """Train and evaluate ONE trial in this process (no Ray), recording one MLflow run.

    Every --set key is a field of the training config, of the model's config or of the task's config (a key
    means one thing across the three); a wrong key or value stops before training with one line.

    \b
    rirlab train --model rir_grc --task listops --quick
    rirlab train --model rir_ebt_grc --task logic --set chunk_size=20 --set beam_size=5 --set steps=5000
    rirlab train --model rir_grc --task listops --quick --set recipe=paper   # Ranger, plateau, best-dev weights
    """
    from rirlab.config import field_names, parse_overrides
    from rirlab.trial import resolve
    from rirlab.models import registry as models
    from rirlab.tasks import cache
    from rirlab.tasks import registry as tasks

    config = {"model": model, "task": task}
    if quick:
        config.update(TRAIN_QUICK)
        config.update(dict(tasks.get(task).quick))
        if "hidden_size" in field_names(models.get(model).config):
            config["hidden_size"] = 32
    config.update(parse_overrides(sets))
    trial = resolve(config, where="train")
    flat = trial.flat()

    from rirlab.train import run_trial
    from rirlab.sweeps.record.tracker import Tracker, resolve_tracking_uri

    tasks.get(trial.task).preflight_all([trial.task_cfg])  # e.g. a bad GloVe file: before any run is recorded
    cache.check_writable(getattr(trial.task_cfg, "cache_dir", None))
    check_memory(trial)  # a model far too big: refused here, as by `rirlab sweep`, not killed by the kernel

    from rirlab.errors import UserError
    from rirlab.train import NonFiniteLoss
    from rirlab.sweeps.driver.signals import sigterm_like_ctrl_c, terminated

    tracker = Tracker(resolve_tracking_uri(tracking_uri))
    exp_id = tracker.experiment_id(experiment)
    with sigterm_like_ctrl_c():  # SIGTERM (a scheduler's, `kill`) ends the run as Ctrl-C does
        run_id = tracker.create_run(exp_id, f"{model}-{task}").info.run_id  # with MLflow's context tags

        def report(metrics, checkpoint=None):
            tracker.log_result(run_id, metrics, int(metrics.get("step", 0)))
            shown = {k: round(v, 4) if isinstance(v, float) else v for k, v in metrics.items()}
            click.echo(" ".join(f"{k}={v}" for k, v in shown.items()))

        try:
            tracker.log_params(run_id, flat)
            click.echo(f"run {run_id} in experiment '{experiment}'")
            run_trial(config, report)
        except NonFiniteLoss as err:  # a property of the settings, not a bug: one line that says what to change
            tracker.finish(run_id, "FAILED", str(err))
            raise UserError(diverged_hint(err, flat, run_id)) from None
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run ends KILLED in one line (not click's "Aborted!")
            tracker.finish(run_id, "KILLED", "interrupted")
            click.echo(f"interrupted by {'SIGTERM' if terminated() else 'Ctrl-C'}; run {run_id} marked KILLED",
                       err=True)
            sys.exit(143 if terminated() else 130)
        except BaseException as err:
            tracker.finish(run_id, "FAILED", repr(err))
            raise
        tracker.finish(run_id, "FINISHED")


def check_memory(trial) -> None:
    """Refuse a trial whose memory lower bound (the sweep's estimate) exceeds this machine's or its container's
    memory, or its GPU's where it trains on one."""
    from rirlab.errors import UserError
    from rirlab.limits import memory_limit_gb
    from rirlab.sweeps.spec.load import memory_estimate_gb

    need = memory_estimate_gb(trial)
    limit, what = memory_limit_gb(gpu=trial.train.device != "cpu")
    if need > limit:
        sizes = ", ".join(f"{k}={getattr(trial.model_cfg, k)}" for k in ("hidden_size", "beam_size")
                          if hasattr(trial.model_cfg, k))
        raise UserError(f"a trial of {trial.model} ({sizes}, batch_size={trial.train.batch_size}) needs at least "
                        f"{need:,.1f} GB, more than {what} ({limit:,.1f} GB); lower hidden_size or batch_size")


def diverged_hint(err, flat: dict, run_id: str) -> str:
    """One line: where the loss became NaN/inf, that the run is FAILED, and the settings to try."""
    tries = [f"a lower learning rate (--set lr={flat['lr'] / 10:g})"]
    clip = flat.get("grad_clip")
    tries.append("gradient clipping (--set grad_clip=1)" if not clip else f"a tighter clip (--set grad_clip={clip / 4:g})")
    if flat.get("precision") == "bf16":
        tries.append("fp32 instead of bf16 (--set precision=fp32)")
    return f"{err} (run {run_id} marked FAILED); try {', '.join(tries[:-1])} or {tries[-1]}"
