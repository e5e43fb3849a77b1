"""`rirlab bench`: speed and memory protocols (see rirlab/bench.py)."""

from __future__ import annotations

import json

import click

from rirlab.cli.options import set_option


@click.command()
@click.option("--protocol", "name", default="step", show_default=True,
              help="step (one step of one model), table1 (RIR Table 1 length bins) or gut_halt (dynamic-halt §7); "
                   "see rirlab/bench.py.")
@click.option("--model", default="rir_ebt_grc", show_default=True, help="step: the model to time.")
@click.option("--models", default="rir_ebt_grc", show_default=True, help="table1: comma-separated models.")
@click.option("--batch", default=16, show_default=True, type=click.IntRange(min=1))
@click.option("--length", default=100, show_default=True, type=click.IntRange(min=1))
@click.option("--mode", type=click.Choice(["train", "eval"]), default="train", show_default=True)
@click.option("--inference", type=click.Choice(["rir", "non_rir"]), default=None,
              help="RIR models: inference mode used in eval (default: the model's).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--repeats", default=5, show_default=True, type=click.IntRange(min=1), help="step: timed steps.")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(min=0), help="step: untimed steps first.")
@click.option("--samples", default=100, show_default=True, type=click.IntRange(min=1), help="table1: samples per bin.")
@click.option("--threads", default=0, show_default=True, type=click.IntRange(min=0), help="torch threads (0: default).")
@set_option
@click.option("--json", "json_path", default=None, type=click.Path(dir_okay=False), help="Also write the result here.")
def bench(name, model, models, batch, length, mode, inference, device, repeats, warmup, samples, threads, sets,
          json_path):
    """Time models: median step time and peak memory (step), RIR Table 1 (table1) or dynamic halting (gut_halt).

    \b
    rirlab bench --model rir_ebt_grc --batch 16 --length 500 --mode eval
    rirlab bench --protocol table1 --models rir_ebt_grc,ebt_grc --device cuda
    rirlab bench --model rir_grc --set chunk_size=20 --json step.json
    """
    from rirlab.bench import BenchOptions, run
    from rirlab.config import parse_overrides

    opts = BenchOptions(model=model, models=tuple(m.strip() for m in models.split(",") if m.strip()), batch=batch,
                        length=length, mode=mode, inference=inference, device=device, repeats=repeats,
                        warmup=warmup, samples=samples, threads=threads, overrides=parse_overrides(sets))
    result = run(name, opts)
    if "table" in result:  # protocols that format their own table (gut_halt)
        click.echo(f"{result['table']}\n({result['device']})")
    elif "rows" in result:
        click.echo(f"{'model':14s} {'bin':>10s} {'minutes':>9s} {'peak GB':>8s}   ({result['device']})")
        for r in result["rows"]:
            click.echo(f"{r['model']:14s} {r['bin']:>10s} {r['minutes']:9.3f} {r['peak_mem_gb']:8.3f}")
    else:
        click.echo(f"{result.get('model')} {result.get('mode')} batch {result.get('batch')} x length "
                   f"{result.get('length')}: median {result['median_ms']:.1f} ms (min {min(result['times_ms']):.1f}, "
                   f"max {max(result['times_ms']):.1f} over {len(result['times_ms'])}), peak {result['peak_mem_mb']:.1f} MB"
                   f" ({result['device']})")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)
