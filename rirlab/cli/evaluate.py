"""`rirlab evaluate`: the test splits of a sweep trial from one of its checkpoints (a trial that did not finish). The
checkpoint says which trial it is (its resolved config, rirlab.train.checkpoint_config); for one written before it
did, the spec the sweep ran and Ray Tune's params.json say it."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("first", metavar="[SPEC] CHECKPOINT", type=click.Path(exists=True, path_type=Path))
@click.argument("second", metavar="", required=False, type=click.Path(exists=True, path_type=Path))
@click.option("--weights", type=click.Choice(["auto", "best", "last"]), default="auto", show_default=True,
              help="auto: what the trial's end uses (the best dev evaluation's weights unless its recipe selects "
                   "the last); best; last (the weights at the checkpoint's step).")
@click.option("--split", "splits", multiple=True, metavar="NAME",
              help="Evaluate only this split (repeatable; default: dev and every test split of the trial).")
@click.option("--threads", type=int, default=None, help="torch CPU threads (default: the trial's num_threads).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Evaluate with this config field changed (repeatable), e.g. --set imported=[ops_10] (a split "
                   "imported from real files with `rirlab data import`), --set inference=rir, --set n_eval=5000. The "
                   "checkpoint's weights must fit the model the changed config builds.")
@click.option("--every-checkpoint", is_flag=True,
              help="Evaluate every checkpoint of the trial folder CHECKPOINT, oldest first, and summarise each "
                   "split over them (median, min, max): how much the tested checkpoint moves a cell. A sweep keeps "
                   "them with `keep_checkpoints: 0` in its spec.")
@click.option("--since-step", type=click.IntRange(min=0), default=None, metavar="STEP",
              help="With --every-checkpoint: only the checkpoints written at this training step or later.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
def evaluate(first, second, weights, splits, threads, sets, every_checkpoint, since_step, as_json):
    """Evaluate a sweep trial's CHECKPOINT on its splits: the cells of a trial that did not finish.

    A trial evaluates its test splits only when it ends. When it is stopped first (Ctrl-C, a lost machine, the end
    of a working session) its checkpoints keep the weights of its best dev evaluation; this command evaluates them
    as the trial's end would, and says at which step and epoch the trial stood. The figures are interim, not a
    finished trial's: nothing is written to MLflow and `rirlab tables` does not count them (a finished trial evaluated
    with other settings as a row of its table: an evaluation-only row of the spec, `evaluates:`, see docs/spec.md).

    CHECKPOINT is a trial's folder in the sweep's output directory (its latest checkpoint is used), one of its
    checkpoint_* folders, or a state.pt. A checkpoint carries its trial's config, so it is all the command needs;
    one written before checkpoints did needs SPEC, the spec the sweep ran (for the trial's variant, with the
    trial folder's params.json). Given SPEC, the trial's config is always read from it and params.json.

    \b
    rirlab evaluate rirlab_runs/ebt_table4_logic-*/trial_506b1_00000
    rirlab evaluate TRIAL_DIR/checkpoint_000009 --weights last --split ops_12 --json
    rirlab evaluate TRIAL_DIR --split ops_12 --set imported=[ops_12]   # after: rirlab data import logic test12 --split ops_12
    rirlab evaluate search_spaces/ebt_table4_logic.yaml TRIAL_DIR      # a checkpoint written before it held its config
    rirlab evaluate TRIAL_DIR --every-checkpoint --since-step 9000 --weights last --split lra

    --set changes the trial's config for this evaluation only (the data it is tested on, the inference mode, the
    evaluation batches, ...); the report names every change. The trial's weights are evaluated as they are.
    """
    from rirlab import contract
    from rirlab.config import parse_overrides
    from rirlab.errors import UserError
    from rirlab.train import evaluate_checkpoint

    spec, checkpoint = (first, second) if second is not None else (None, first)
    if spec is not None and not spec.is_file():
        raise UserError(f"{spec} is not a spec file; give the spec and then the checkpoint (rirlab evaluate SPEC "
                        f"CHECKPOINT), or the checkpoint alone")
    if since_step is not None and not every_checkpoint:
        raise UserError("--since-step chooses among the checkpoints that --every-checkpoint evaluates; add "
                        "--every-checkpoint, or drop --since-step")
    overrides = parse_overrides(sets)
    every = _every_state_file(checkpoint) if every_checkpoint else None  # (refused before any is read)
    if spec is not None:  # the trial's config from the spec and Ray's params.json (checkpoints of any age)
        state_file = every[0] if every else _state_file(checkpoint)
        name, config = _spec_config(spec, state_file)
    else:  # the trial's config from its checkpoint
        state_file = every[0] if every else None
    if spec is not None and overrides:
        _check_overrides(config, overrides)  # an unknown key or a bad value: one line, before any data is built
    state, state_file = _read_state(every[0], every[0]) if every else _read_state(checkpoint, state_file)
    if spec is None:
        config = state.get(contract.STATE_CONFIG)
        if not isinstance(config, dict):
            raise UserError(f"{state_file} was written before checkpoints carried their trial's config; name the "
                            f"spec the sweep ran: rirlab evaluate SPEC {checkpoint}")
        config = dict(config)
        name = str(state.get(contract.STATE_TRIAL) or _trial_folder(state_file).name)
        if overrides:
            _check_overrides(config, overrides)
    changed = {k: v for k, v in overrides.items() if config.get(k, object()) != v}  # what differs from the trial
    config.update(overrides)
    if threads:
        config["num_threads"] = threads
    if every:
        _evaluate_every(every, state, spec is None, config, weights, list(splits) or None, since_step,
                        {"trial": name, "folder": str(checkpoint), "overrides": changed}, as_json)
        return
    result = evaluate_checkpoint(config, state, weights, list(splits) or None)
    result.update({"trial": name, "checkpoint": str(state_file), "overrides": changed})
    if as_json:
        click.echo(json.dumps(result, default=float))
        return
    click.echo(_report(result))


def _every_state_file(folder: Path) -> list[Path]:
    """The state files of every checkpoint of the trial folder ``folder``, oldest first (--every-checkpoint)."""
    from rirlab import contract
    from rirlab.errors import UserError
    from rirlab.train import checkpoints

    one = folder if folder.is_file() else folder / contract.CHECKPOINT_STATE_FILE
    if one.is_file():
        raise UserError(f"--every-checkpoint evaluates the checkpoints of a trial folder, and {folder} is one "
                        f"checkpoint; give its trial folder ({_trial_folder(one)})")
    found = checkpoints(folder)
    if not found:
        raise UserError(f"{folder} holds no checkpoint (no checkpoint_*/{contract.CHECKPOINT_STATE_FILE}); a sweep "
                        f"checkpoints a trial every `checkpoint_every` steps and keeps `keep_checkpoints` of them")
    return found


def _evaluate_every(files: list[Path], first_state: dict, own_config: bool, config: dict, weights: str, splits,
                    since_step, about: dict, as_json: bool) -> None:
    """Each checkpoint of ``files`` evaluated with one model and data (``checkpoint_evaluator``), a line of
    progress each on stderr, then the table and each split's median, min and max over them."""
    from rirlab import contract
    from rirlab.errors import UserError
    from rirlab.train import checkpoint_evaluator

    trial_config, chosen = first_state.get(contract.STATE_CONFIG), []
    for i, path in enumerate(files):  # every refusal before the first evaluation (minutes each on long splits)
        state = first_state if i == 0 else _read_state(path, path)[0]
        if own_config and state.get(contract.STATE_CONFIG) != trial_config:
            raise UserError(f"{path} is a checkpoint of another trial than {files[0]} (its config differs); "
                            f"keep one trial's checkpoints in the folder")
        if since_step is None or state.get("step", 0) >= since_step:
            chosen.append(path)
    if not chosen:
        raise UserError(f"no checkpoint of {about['folder']} was written at step {since_step} or later (the latest: "
                        f"{files[-1].parent.name}); lower --since-step")
    evaluator, rows = checkpoint_evaluator(config, splits), []
    for path in chosen:
        state = first_state if path == files[0] else _read_state(path, path)[0]
        row = {**evaluator(state, weights), "checkpoint": str(path)}
        rows.append(row)
        cells = ", ".join(f"{k} {m['accuracy']:.2f}" for k, m in row["splits"].items())
        click.echo(f"[{len(rows)}/{len(chosen)}] step {row['step']} ({path.parent.name}): {cells}", err=True)
    result = {**about, "weights": weights, "checkpoints": rows, "summary": _spread(rows)}
    click.echo(json.dumps(result, default=float) if as_json else _every_report(result))


def _spread(rows: list[dict]) -> dict:
    """Per split, the accuracy's median, min and max over the evaluated checkpoints."""
    import statistics

    out = {}
    for split in rows[0]["splits"]:
        values = [r["splits"][split]["accuracy"] for r in rows]
        out[split] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                      "n": len(values)}
    return out


def _every_report(r: dict) -> str:
    splits = list(r["summary"])
    width = [max(len(s), 7) for s in splits]
    lines = [f"trial {r['trial']}: {len(r['checkpoints'])} checkpoints of {r['folder']}"]
    if r["overrides"]:
        lines.append("evaluated with settings the trial did not have: "
                     + ", ".join(f"{k}={v}" for k, v in r["overrides"].items()))
    said = {"last": "each checkpoint's own", "best": "the best dev evaluation's as of each checkpoint",
            "auto": "those the trial's end would use at each checkpoint"}
    lines.append(f"weights: {said[r['weights']]}")
    head = f"{'step':>7}  {'epoch':>6}  {'weights':<7}  {'best dev (step)':<17}"
    lines.append(head + "  " + "  ".join(f"{s:>{w}}" for s, w in zip(splits, width)))
    for row in r["checkpoints"]:
        best = row["best"]
        dev = f"{best['dev_accuracy']:.2f} ({best['step']})" if best else "-"
        lines.append(f"{row['step']:>7}  {row['epoch']:>6.2f}  {row['weights']:<7}  {dev:<17}  "
                     + "  ".join(f"{row['splits'][s]['accuracy']:>{w}.2f}" for s, w in zip(splits, width)))
    for label in ("median", "min", "max"):
        lines.append(f"{label:>7}  {'':>6}  {'':<7}  {'':<17}  "
                     + "  ".join(f"{r['summary'][s][label]:>{w}.2f}" for s, w in zip(splits, width)))
    return "\n".join(lines)


def _spec_config(spec: Path, state_file: Path) -> tuple[str, dict]:
    """(run name, flat config) of the trial a checkpoint belongs to, from the spec the sweep ran and the trial
    folder's params.json (Ray Tune's record of the trial's Tune config)."""
    from rirlab import contract
    from rirlab.errors import UserError
    from rirlab.sweeps.spec.load import load_spec
    from rirlab.sweeps.spec.trials import TrialSpace

    params = _trial_folder(state_file) / "params.json"
    if not params.is_file():
        raise UserError(f"{params} not found: CHECKPOINT must lie in a trial folder of a sweep's output directory "
                        f"(trial_*/checkpoint_*/{contract.CHECKPOINT_STATE_FILE}, next to the trial's params.json)")
    try:
        tune_config = json.loads(params.read_text(encoding="utf-8"))
    except ValueError as err:
        raise UserError(f"{params} is not valid JSON ({err}); it is the trial's config as Ray Tune wrote it") from None
    space = TrialSpace.of(load_spec(spec).spec)
    variant = tune_config.get("variant")
    if variant and variant not in space.variants:
        raise UserError(f"{spec} has no variant {variant!r} (the trial's); name the spec the sweep ran")
    trial = space.trial(tune_config)
    return trial.name, dict(trial.config)


def _check_overrides(config: dict, overrides: dict) -> None:
    from rirlab.trial import resolve

    resolve({**config, **overrides}, where="evaluate --set")


def _trial_folder(state_file: Path) -> Path:
    """The trial folder of a checkpoint_*/state.pt."""
    return state_file.parent.parent


def _read_state(checkpoint: Path, state_file=None) -> tuple[dict, Path]:
    """The trainer state of CHECKPOINT (weights and plain data only: a file naming code is refused, not run) and the
    file it was read from. A running sweep may delete the latest checkpoint as it is read: then the new latest."""
    from rirlab.errors import UserError
    from rirlab.train import load_checkpoint, unreadable_checkpoint

    state_file = state_file or _state_file(checkpoint)
    for attempt in range(3):
        try:
            state = load_checkpoint(state_file)
            break
        except FileNotFoundError:  # a running trial's sweep replaced its latest checkpoint meanwhile: the new one
            if attempt == 2 or state_file == checkpoint or state_file.parent == checkpoint:
                raise UserError(f"{state_file} disappeared while it was being read (a running sweep deletes a "
                                f"trial's older checkpoints); run the command again") from None
            state_file = _state_file(checkpoint)
        except Exception as err:  # noqa: BLE001  (a truncated or foreign file, or one that names code: not run)
            raise UserError(unreadable_checkpoint(state_file, err)) from None
    if not isinstance(state, dict) or "model" not in state:
        raise UserError(f"{state_file} is not a rirlab trial checkpoint (no trainer state in it)")
    return state, state_file


def _state_file(path: Path) -> Path:
    """The state.pt of CHECKPOINT: itself, inside it, or inside the trial folder's latest checkpoint_*."""
    from rirlab import contract
    from rirlab.errors import UserError
    from rirlab.train import latest_checkpoint

    if path.is_file():
        return path
    if (path / contract.CHECKPOINT_STATE_FILE).is_file():
        return path / contract.CHECKPOINT_STATE_FILE
    latest = latest_checkpoint(path)
    if latest is None:
        raise UserError(f"{path} holds no checkpoint (no checkpoint_*/{contract.CHECKPOINT_STATE_FILE}); a sweep "
                        f"checkpoints a trial every `checkpoint_every` steps (the spec's key)")
    return latest


def _report(r: dict) -> str:
    ended = "ended (early stopping)" if r["stopped"] else \
        ("at its last step" if r["step"] >= r["total_steps"] else "NOT finished: interim figures")
    lines = [f"trial {r['trial']}: checkpoint at step {r['step']} (epoch {r['epoch']:.2f}), {ended}",
             f"  {r['checkpoint']}"]
    if r["overrides"]:
        lines.append("evaluated with settings the trial did not have: "
                     + ", ".join(f"{k}={v}" for k, v in r["overrides"].items()))
    best = r["best"]
    if r["weights"] == "best" and best:
        lines.append(f"weights: best dev evaluation, step {best['step']} (epoch {best['epoch']:.2f}): dev accuracy "
                     f"{best['dev_accuracy']:.2f}, dev loss {best['dev_loss']:.4f}")
    else:
        lines.append(f"weights: the checkpoint's own (step {r['step']})")
    width = max(len("split"), *(len(s) for s in r["splits"]))
    lines.append(f"{'split':<{width}}  accuracy      loss")
    for name, m in r["splits"].items():
        lines.append(f"{name:<{width}}  {m['accuracy']:8.2f}  {m['loss']:8.4f}")
    return "\n".join(lines)
