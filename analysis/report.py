"""The sweep's report on its parent run: the table (Markdown and CSV) and the Pareto plot as MLflow artifacts,
so the MLflow UI shows the sweep's result beside its trials. `rirlab sweep` calls ``log_parent_report`` when
the sweep ends; it never raises (a sweep whose trials all failed, or that logged one metric, still gets
whatever part of the report its runs support, and a line saying why the rest is missing)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from analysis import tables as T
from analysis.runs import load_sweep
from rirlab.errors import UserError

REPORT_DIR = "report"  # artifacts: report/table.md, report/table.csv, report/pareto.png (or report/pareto.txt: why not)


def _warn(text: str) -> None:
    print(f"warning: sweep report: {text}", file=sys.stderr)


def log_parent_report(tracking_uri: str, parent_run_id: str) -> None:
    """Log the sweep's ablation table (``report/table.md``, ``report/table.csv``) and its Pareto plot
    (``report/pareto.png``) to the sweep's parent run. Problems are warnings on stderr, never exceptions."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        client = MlflowClient(getattr(tracking_uri, "raw", tracking_uri))  # a masked StoreURI: the real one
        parent = client.get_run(parent_run_id)
        experiment = client.get_experiment(parent.info.experiment_id).name
        sw = load_sweep(client, experiment, parent_run_id)
    except Exception as err:  # noqa: BLE001  (the sweep has ended; its report must not turn it into a failure)
        _warn(f"cannot read sweep {parent_run_id}: {err}")
        return
    try:
        grid = T.ablation(sw.runs, spec=sw.spec, n_expected=sw.n_expected, splits=sw.splits, about=sw.about)
        client.log_text(parent_run_id, T.render(grid, "markdown"), f"{REPORT_DIR}/table.md")
        client.log_text(parent_run_id, T.render(grid, "csv"), f"{REPORT_DIR}/table.csv")
    except Exception as err:  # noqa: BLE001
        _warn(f"no table: {err}")
    try:
        from analysis.plots import pareto_plot

        with tempfile.TemporaryDirectory() as tmp:
            png = Path(tmp) / "pareto.png"
            pareto_plot(sw, png)
            client.log_artifact(parent_run_id, str(png), REPORT_DIR)
    except UserError as err:  # nothing to plot (no finished run, no split metric, no cost metric): say so
        client.log_text(parent_run_id, f"no Pareto plot: {err}\n", f"{REPORT_DIR}/pareto.txt")
    except Exception as err:  # noqa: BLE001
        _warn(f"no Pareto plot: {err}")
