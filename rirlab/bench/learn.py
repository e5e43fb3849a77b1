"""``learn``: time to learn -- trains one model on a task under a recipe (rirlab.train.Trainer, no Ray or MLflow)
for a budget of training minutes and reports the training seconds, steps and samples at which dev accuracy first
reaches each threshold, and the curve (dev accuracy vs seconds); ``plot_learn`` draws it."""

from __future__ import annotations

import time
from typing import Optional

from rirlab.bench.base import BenchOptions, device_name, protocol, sync
from rirlab.errors import UserError


@protocol("learn")
def learn(opts: BenchOptions) -> dict:
    """Time to learn: train ``opts.model`` on ``opts.task`` under ``opts.recipe`` for ``opts.minutes`` of training.

    Every ``eval_every`` steps (and at step 0 and the last step) dev accuracy on the first ``dev_examples`` dev
    examples is one curve point. ``train_seconds`` counts only training steps (data, forward, backward,
    optimiser; synchronised on CUDA); dev evaluations, the curve's and the recipe's own per-epoch ones, go to
    ``eval_seconds``; ``wall_seconds`` is both (setup excluded, reported as ``setup_seconds``). The budget is
    on ``train_seconds``; training also ends at the config's steps / epochs or by the recipe's early stopping.
    ``--set`` overrides any trial key: model, task (n_train, ...) or training (batch_size, lr, ...).

    At the end the whole dev split is evaluated once more (a best-dev candidate, as a trial's last step is, so a
    budget that ends mid-epoch keeps its weights in the running) and ``splits`` (default every eval split) are
    evaluated with the best-dev weights: ``result["splits"]``, what a trial's test cells would be.
    ``checkpoint``: a file to resume from if it exists (the trainer's state, the clock and the curve: the budget
    counts the training time of every run of the chain) and to write at the end, before the final evaluation;
    so a run longer than one sitting (a GPU lease's call) is a chain of the same command.
    """
    from rirlab.trial import resolve
    from rirlab.train import Trainer

    if not opts.thresholds or any(not 0 < t <= 100 for t in opts.thresholds):
        raise UserError(f"bench learn: thresholds {list(opts.thresholds)} must be dev accuracies in (0, 100]")
    config = {"model": opts.model, "task": opts.task, "recipe": opts.recipe, "device": opts.device,
              "seed": opts.seed, "num_threads": opts.threads, **opts.overrides}
    if "steps" not in opts.overrides and "epochs" not in opts.overrides:
        config["epochs"] = 100  # the papers' cap; the time budget usually ends training first
    cfg = resolve(config, where="bench learn")
    flat = cfg.flat()
    state = load_chain(opts.checkpoint, flat)
    say = opts.progress or (lambda line: None)
    t_setup = time.perf_counter()
    trainer = Trainer(cfg)
    splits = final_splits(opts.splits, list(trainer.data.eval_splits))
    setup_s = time.perf_counter() - t_setup
    dev = list(trainer.dev_split())[: opts.dev_examples]
    budget = 60.0 * opts.minutes
    clock = {"train": 0.0, "eval": 0.0, "samples": 0}
    curve: list[dict] = []
    if state is not None:
        trainer.load_state_dict(state["trainer"])
        clock, curve = state["clock"], state["curve"]
    losses: list[float] = []
    say(f"learn: {opts.model} on {opts.task}, recipe {cfg.train.recipe}, batch {cfg.train.batch_size}, "
        f"{len(trainer.data.train)} train / {len(dev)} dev examples, budget {opts.minutes:g} min of training, "
        f"{device_name(opts.device)}; setup {setup_s:.1f} s"
        + (f"; resumed at step {trainer.step} ({clock['train']:.0f} s of training)" if state is not None else ""))

    def timed(fn, key: str):
        sync(opts.device)
        t0 = time.perf_counter()
        out = fn()
        sync(opts.device)
        clock[key] += time.perf_counter() - t0
        return out

    def point() -> None:
        m = timed(lambda: trainer.evaluate(dev), "eval")
        p = {"step": trainer.step, "samples": clock["samples"], "epoch": trainer.epoch,
             "train_seconds": clock["train"], "wall_seconds": clock["train"] + clock["eval"],
             "dev_accuracy": m["accuracy"], "dev_loss": m["loss"],
             "train_loss": sum(losses) / len(losses) if losses else None, "lr": trainer.lr}
        losses.clear()
        curve.append(p)
        got = [f"{t:g}%@{h['train_seconds']:.0f}s" for t, h in first_reached(curve, opts.thresholds).items()
               if h is not None]
        say(f"step {p['step']:6d}  epoch {p['epoch']:6.2f}  train {p['train_seconds']:8.1f} s  eval "
            f"{clock['eval']:6.1f} s  dev acc {p['dev_accuracy']:6.2f}  loss {p['dev_loss']:.4f}  lr {p['lr']:.2g}"
            f"  reached {' '.join(got) or '-'}")

    if not curve:
        point()
    last_dev = None  # (step, metrics) of the latest evaluation of the whole dev split
    while clock["train"] < budget and trainer.step < trainer.total_steps and not trainer.stopped:
        clock["samples"] += len(trainer.plan.indices(trainer.step))
        losses.append(timed(trainer.train_step, "train")["train/loss"])
        sel = timed(trainer.selection_point, "eval")  # the recipe's per-epoch dev evaluation (plateau, stopping)
        if sel is not None:
            last_dev = (trainer.step, sel)
        if trainer.step % opts.eval_every == 0:
            point()
            if opts.checkpoint:  # a chain killed between points loses at most eval_every steps
                save_chain(opts.checkpoint, flat, trainer, clock, curve)
    if curve[-1]["step"] != trainer.step:
        point()
    stopped = ("early stopping" if trainer.stopped else "time budget" if clock["train"] >= budget
               else "steps")
    if trainer.best.get("step") != trainer.step:  # the last weights are a candidate, as at a trial's last step
        last_dev = (trainer.step, timed(lambda: trainer.evaluate(trainer.dev_split()), "eval"))
        trainer.consider(last_dev[1], epoch_end=False, counts=False)
    if opts.checkpoint:
        save_chain(opts.checkpoint, flat, trainer, clock, curve)
    t_final = time.perf_counter()
    weights = trainer.use_final_weights("best")
    results = {}
    dev_name = next(iter(trainer.data.eval_splits))
    for name in splits:
        if name == dev_name and last_dev is not None and last_dev[0] == trainer.best.get("step") == trainer.step:
            results[name] = last_dev[1]  # the best weights are the last ones, whose dev evaluation is at hand
        else:
            results[name] = trainer.evaluate(trainer.data.eval_splits[name])
        say(f"{name:>12s} ({weights} weights, step {trainer.best.get('step', trainer.step)}): accuracy "
            f"{results[name]['accuracy']:6.2f}  loss {results[name]['loss']:.4f}")
    reached = first_reached(curve, opts.thresholds)
    return {"model": opts.model, "task": opts.task, "recipe": cfg.train.recipe, "config": flat,
            "budget_minutes": opts.minutes, "eval_every": opts.eval_every, "dev_examples": len(dev),
            "thresholds": [{"threshold": t, "reached": h is not None,
                            **{k: (h or {}).get(k) for k in ("step", "samples", "epoch", "train_seconds",
                                                             "wall_seconds", "dev_accuracy")}}
                           for t, h in reached.items()],
            "curve": curve, "steps": trainer.step, "samples": clock["samples"], "train_seconds": clock["train"],
            "eval_seconds": clock["eval"], "wall_seconds": clock["train"] + clock["eval"], "setup_seconds": setup_s,
            "stopped_by": stopped, "best_dev_accuracy": max(p["dev_accuracy"] for p in curve),
            "best": {k: v for k, v in trainer.best.items() if k != "score"}, "weights": weights, "splits": results,
            "final_eval_seconds": time.perf_counter() - t_final, "resumed": state is not None,
            "peak_mem_mb": trainer.peak_mem_mb()}


def first_reached(curve: list[dict], thresholds) -> dict:
    """For each threshold (ascending) the first curve point at or above it, or None."""
    return {float(t): next((p for p in curve if p["dev_accuracy"] >= t), None) for t in sorted(thresholds)}


def final_splits(spec: str, names: list[str]) -> list[str]:
    """``--splits``: ``all`` (every eval split, dev first), ``none``, or comma-separated names of eval splits."""
    if spec.strip() == "all":
        return names
    if spec.strip() == "none":
        return []
    asked = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [s for s in asked if s not in names]
    if unknown:
        raise UserError(f"bench learn: --splits {unknown[0]!r} is not one of this task's splits "
                        f"({', '.join(names)}); name those, 'all' or 'none'")
    return asked


def load_chain(path: Optional[str], config: dict) -> Optional[dict]:
    """The state of an earlier run of the chain at ``path`` (None: no file yet); refused when it was trained under
    another config (the chain would mix two runs)."""
    import os

    from rirlab.train import load_checkpoint

    if not path or not os.path.exists(path):
        return None
    try:
        state = load_checkpoint(path)  # weights and plain data only: a crafted file runs no code
        saved = state["config"]
    except Exception as err:  # noqa: BLE001 -- any unreadable file is the same user error
        raise UserError(f"bench learn: --checkpoint {path} is not a learn checkpoint ({type(err).__name__}); "
                        f"move it away or name a new file") from None
    changed = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
    if changed:
        raise UserError(f"bench learn: --checkpoint {path} was trained with other settings ({', '.join(changed)}); "
                        f"run with the same --set values or name a new file")
    return state


def save_chain(path: str, config: dict, trainer, clock: dict, curve: list[dict]) -> None:
    """Write the chain's state atomically (a kill mid-write leaves the previous file)."""
    import os

    import torch

    tmp = f"{path}.tmp"
    torch.save({"config": config, "trainer": trainer.state_dict(), "clock": dict(clock), "curve": list(curve)}, tmp)
    os.replace(tmp, path)


def plot_learn(result: dict, path) -> None:
    """The learn curve as a PNG: dev accuracy vs training seconds, each threshold and where it was reached."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [p["train_seconds"] for p in result["curve"]]
    ax.plot(xs, [p["dev_accuracy"] for p in result["curve"]], marker=".", label="dev accuracy")
    for t in result["thresholds"]:
        ax.axhline(t["threshold"], color="grey", lw=0.6, ls=":")
        if t["reached"]:
            ax.plot([t["train_seconds"]], [t["dev_accuracy"]], "o", color="C3")
            ax.annotate(f"{t['threshold']:g}% @ {t['train_seconds']:.0f} s", (t["train_seconds"], t["dev_accuracy"]),
                        textcoords="offset points", xytext=(5, -12), fontsize=8)
    ax.set_xlabel("training seconds (evaluation excluded)")
    ax.set_ylabel(f"dev accuracy (%), first {result['dev_examples']} dev examples")
    ax.set_ylim(0, 100)
    ax.set_title(f"{result['model']} on {result['task']}, recipe {result['recipe']} ({result['device']})", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
