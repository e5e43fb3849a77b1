"""Dev-accuracy curves of several ``rirlab bench --protocol learn --json`` records on one plot, against the
training step (not seconds), so that runs of the same recipe on different devices can be compared point by point.

    python benchmarks/learn_compare.py benchmarks/h100/learn.json benchmarks/learn_cpu_amd.json --out curves.png

Each curve is labelled with its record's device; ``--max-step`` cuts the x axis (default: the shortest run's
last step, the range both runs cover). A file that is not such a record is one line on stderr, exit 2, and
nothing is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


@click.command()
@click.argument("records", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", required=True, type=click.Path(dir_okay=False, path_type=Path), help="the PNG to write")
@click.option("--max-step", type=click.IntRange(min=1), default=None, help="last step drawn (default: the shortest run's last)")
def main(records: tuple[Path, ...], out: Path, max_step: int | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = []
    for path in records:
        try:
            run = json.loads(path.read_text())
        except ValueError:
            run = None
        if not isinstance(run, dict) or run.get("protocol") != "learn" or not run.get("curve"):
            click.echo(f"error: {path} is not a `rirlab bench --protocol learn --json` record: pass the files that"
                       " command wrote", err=True)
            sys.exit(2)
        runs.append(run)
    last = max_step or min(run["curve"][-1]["step"] for run in runs)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in runs:
        pts = [p for p in run["curve"] if p["step"] <= last]
        ax.plot([p["step"] for p in pts], [p["dev_accuracy"] for p in pts], marker=".", ms=3, label=run["device"])
    first = runs[0]
    ax.set_xlabel("training step")
    ax.set_ylabel(f"dev accuracy (%), first {first['dev_examples']} dev examples")
    ax.set_ylim(0, 100)
    ax.set_title(f"{first['model']} on {first['task']}, recipe {first['recipe']}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    click.echo(f"wrote {out} ({len(runs)} curves, steps 0-{last})")


if __name__ == "__main__":
    main()
