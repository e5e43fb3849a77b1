"""`rirlab bench`: speed and memory protocols (see rirlab/bench/)."""

from __future__ import annotations

import json

import click

from rirlab.cli.options import set_option


@click.command()
@click.option("--protocol", "name", default="step", show_default=True,
              help="step (one step of one model), table1 (RIR Table 1 length bins), gut_halt (dynamic-halt §7) or "
                   "learn (time to reach dev-accuracy thresholds under a training recipe); see rirlab/bench/.")
@click.option("--model", default="rir_ebt_grc", show_default=True, help="step, learn: the model.")
@click.option("--models", default="", help="table1: comma-separated models (default: the registered RIR Table 1 rows).")
@click.option("--batch", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--length", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--lengths", type=click.Choice(["full", "padded"]), default="full", show_default=True,
              help="step: full (every row --length long) or padded (one row --length long, the others uniform in "
                   "[length/5, length], right-padded: a training bucket of mixed lengths).")
@click.option("--mode", type=click.Choice(["train", "eval"]), default="train", show_default=True)
@click.option("--inference", type=click.Choice(["rir", "non_rir"]), default=None,
              help="RIR models: inference mode used in eval (default: the model's).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--precision", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
              help="step, table1: bf16 autocast of the forward (beam scores stay fp32); learn: --set precision=bf16.")
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1), help="step: timed steps.")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(min=0), help="step: untimed steps first.")
@click.option("--samples", default=100, show_default=True, type=click.IntRange(min=1), help="table1: samples per bin.")
@click.option("--mem-cap-gb", default=0.0, type=click.FloatRange(min=0),
              help="table1: memory cap per cell in GB (0: none); a cell over it reads OOM.")
@click.option("--time-cap-s", default=0.0, type=click.FloatRange(min=0),
              help="table1: time cap per cell in seconds (0: none); a cell over it reads TIMEOUT.")
@click.option("--threads", default=0, show_default=True, type=click.IntRange(min=0), help="torch threads (0: default).")
@click.option("--task", default="listops", show_default=True, help="learn: the task.")
@click.option("--recipe", type=click.Choice(["paper", "adamw"]), default="paper", show_default=True,
              help="learn: the training recipe (rirlab/config.py RECIPES).")
@click.option("--minutes", default=20.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="learn: budget of training time (evaluation excluded).")
@click.option("--thresholds", default="50,80,95,99", show_default=True,
              help="learn: comma-separated dev accuracies (%) to time.")
@click.option("--eval-every", default=100, show_default=True, type=click.IntRange(min=1),
              help="learn: steps between curve points (dev-subset evaluations).")
@click.option("--dev-examples", default=1000, show_default=True, type=click.IntRange(min=1),
              help="learn: dev examples per curve point.")
@click.option("--splits", default="all", show_default=True,
              help="learn: splits evaluated at the end with the best-dev weights: all (dev and every test split), "
                   "none, or comma-separated names (dev,test,len_200_300).")
@click.option("--checkpoint", "checkpoint", default=None, type=click.Path(dir_okay=False),
              help="learn: resume from FILE if it exists, write the state there at the end: a run longer than one "
                   "sitting is the same command repeated with a larger --minutes (the budget counts all of them).")
@set_option
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Also write the result here.")
@click.option("--png", "png_path", default=None, type=click.Path(dir_okay=False),
              help="learn: also plot the curve (dev accuracy vs training seconds) here.")
def bench(name, model, models, batch, length, lengths, mode, inference, device, precision, repeats, warmup, samples,
          mem_cap_gb, time_cap_s, threads,
          task, recipe, minutes, thresholds, eval_every, dev_examples, splits, checkpoint, sets, json_path, png_path):
    """Time models: median step time and peak memory (step), RIR Table 1 (table1), dynamic halting (gut_halt)
    or time to learn (learn).

    For learn, --set takes any trial key (model, task or training: n_train=20000, batch_size=64, lr=...);
    --batch and --length do not apply (the task's data and the recipe's batch size do).

    \b
    rirlab bench --model rir_ebt_grc --batch 16 --length 500 --mode eval
    rirlab bench --protocol table1 --models rir_ebt_grc,ebt_grc --device cuda
    rirlab bench --model rir_grc --set chunk_size=20 --json step.json
    rirlab bench --model bt_grc --threads 1 --lengths padded
    rirlab bench --protocol learn --device cuda --minutes 20 --json learn.json --png learn.png
    """
    from rirlab.bench.base import BenchOptions, run
    from rirlab.config import parse_overrides
    from rirlab.errors import UserError

    if png_path and name != "learn":
        raise UserError(f"bench: --png plots the learn protocol's curve; drop it for --protocol {name}")
    try:
        levels = tuple(float(t) for t in thresholds.split(",") if t.strip())
    except ValueError:
        raise UserError(f"bench: --thresholds {thresholds!r} must be comma-separated numbers, e.g. 50,80,95,99") from None
    opts = BenchOptions(model=model, models=tuple(m.strip() for m in models.split(",") if m.strip()), batch=batch,
                        length=length, lengths=lengths, mode=mode, inference=inference, device=device,
                        precision=precision, repeats=repeats, warmup=warmup, samples=samples, mem_cap_gb=mem_cap_gb,
                        time_cap_s=time_cap_s, threads=threads, overrides=parse_overrides(sets), task=task,
                        recipe=recipe, minutes=minutes, thresholds=levels, eval_every=eval_every,
                        dev_examples=dev_examples, splits=splits, checkpoint=checkpoint,
                        progress=lambda line: click.echo(line))
    result = run(name, opts)
    if name == "learn":
        for t in result["thresholds"]:
            click.echo(f"dev accuracy >= {t['threshold']:g}%: " + (
                f"{t['train_seconds']:.1f} s of training ({t['wall_seconds']:.1f} s with evaluation), step "
                f"{t['step']}, {t['samples']} samples" if t["reached"] else "not reached"))
        click.echo(f"{result['steps']} steps, {result['samples']} samples, {result['train_seconds']:.1f} s training + "
                   f"{result['eval_seconds']:.1f} s evaluation; stopped by {result['stopped_by']}; best dev accuracy "
                   f"{result['best_dev_accuracy']:.2f} ({result['device']})")
        if png_path:
            from rirlab.bench.learn import plot_learn

            plot_learn(result, png_path)
    elif "table" in result:  # protocols that format their own table (gut_halt)
        click.echo(f"{result['table']}\n({result['device']})")
    elif "rows" in result:
        click.echo(f"{'model':14s} {'bin':>10s} {'minutes':>9s} {'peak GB':>8s}   ({result['device']})")
        for r in result["rows"]:
            if r.get("status", "ok") not in ("ok", "TIMEOUT") or r["minutes"] is None:
                click.echo(f"{r['model']:14s} {r['bin']:>10s} {r['status']:>9s} {r['status']:>8s}")
            else:
                note = f"  TIMEOUT after {r['samples']} samples" if r.get("status") == "TIMEOUT" else ""
                click.echo(f"{r['model']:14s} {r['bin']:>10s} {r['minutes']:9.3f} {r['peak_mem_gb']:8.3f}{note}")
        for note in result.get("notes", []):
            click.echo(f"note: {note}")
    else:
        padded = " (padded)" if result.get("lengths") == "padded" else ""
        click.echo(f"{result.get('model')} {result.get('mode')} batch {result.get('batch')} x length "
                   f"{result.get('length')}{padded}: median {result['median_ms']:.1f} ms "
                   f"(min {min(result['times_ms']):.1f}, "
                   f"max {max(result['times_ms']):.1f} over {len(result['times_ms'])}), peak {result['peak_mem_mb']:.1f} MB"
                   f", {result['ops_per_step']} ATen ops" + (f", {result['kernels_per_step']} kernel launches, "
                                                             f"{result['syncs_per_step']} host syncs"
                                                             if "kernels_per_step" in result else "")
                   + f" per step ({result['device']})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
