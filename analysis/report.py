"""The sweep's report on its parent run: the table (Markdown and CSV) and the Pareto plot as MLflow artifacts,
so the MLflow UI shows the sweep's result beside its trials. `rirlab sweep` calls ``log_parent_report`` when
the sweep ends; it never raises (a sweep whose trials all failed, or that logged one metric, still gets
whatever part of the report its runs support, and a line saying why the rest is missing)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

from mlflow.tracking import MlflowClient

from rirlab.analysis import tables as T
from rirlab.analysis.runs import load_sweep
from rirlab import contract
from rirlab.errors import UserError

REPORT_DIR = "report"  # artifacts: report/table.md, report/table.csv, report/pareto.png (or report/pareto.txt: why not)
NOTE_MARK = "<!-- rirlab report -->"  # the parent's note: the spec's description, this mark, then the report
NOTE_LIMIT = 8000  # characters of an MLflow tag value (mlflow.utils.validation.MAX_TAG_VAL_LENGTH)


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
    table = None
    try:
        grid = T.ablation(sw.runs, spec=sw.spec, n_expected=sw.n_expected, splits=sw.splits, about=sw.about)
        table = broken_lines(T.render(grid, "markdown"))
        client.log_text(parent_run_id, table, f"{REPORT_DIR}/table.md")
        client.log_text(parent_run_id, T.render(grid, "csv"), f"{REPORT_DIR}/table.csv")
    except Exception as err:  # noqa: BLE001
        _warn(f"no table: {err}")
    try:
        from rirlab.analysis.plots import pareto_plot

        with tempfile.TemporaryDirectory() as tmp:
            png = Path(tmp) / "pareto.png"
            pareto_plot(sw, png)
            client.log_artifact(parent_run_id, str(png), REPORT_DIR)
    except UserError as err:  # nothing to plot (no finished run, no split metric, no cost metric): say so
        client.log_text(parent_run_id, f"no Pareto plot: {err}\n", f"{REPORT_DIR}/pareto.txt")
    except Exception as err:  # noqa: BLE001
        _warn(f"no Pareto plot: {err}")
    try:
        client.set_tag(parent_run_id, contract.NOTE, report_note(client, client.get_run(parent_run_id), table))
    except Exception as err:  # noqa: BLE001
        _warn(f"no note: {err}")


def broken_lines(table: str) -> str:
    """A rendered Markdown table whose footer lines stay one per line where Markdown is rendered (two spaces)."""
    body, _, footer = table.partition("\n\n")
    return body + "\n\n" + "".join(f"{line}  \n" for line in footer.splitlines())


def report_note(client: MlflowClient, parent, table: Optional[str]) -> str:
    """The parent run's MLflow note (Markdown, what its page opens on): the spec's description, then the best trial,
    the table and the Pareto plot (an image served by the UI's get-artifact endpoint, relative to the UI's root)."""
    tags, run_id = parent.data.tags, parent.info.run_id
    description = tags.get(contract.NOTE, "").split(NOTE_MARK)[0].rstrip()
    lines = [description, "", NOTE_MARK] if description else [NOTE_MARK]
    best, best_id = tags.get(contract.BEST_TRIAL), tags.get(contract.BEST_RUN_ID)
    if best:
        metric = (tags.get(contract.METRIC) or "").split(",")[0]
        value = parent.data.metrics.get(contract.BEST_PREFIX + metric)
        link = f"[{best}](#/experiments/{parent.info.experiment_id}/runs/{best_id})" if best_id else best
        lines += ["", f"**Best trial**: {link}" + (f", {metric} {value:.2f}" if value is not None else "")]
    if table:
        fits = len(table) + sum(map(len, lines)) < NOTE_LIMIT - 300
        lines += ["", table.rstrip() if fits else f"(the table is too long for a note: Artifacts, {REPORT_DIR}/table.md)"]
    if any(a.path == f"{REPORT_DIR}/pareto.png" for a in client.list_artifacts(run_id, REPORT_DIR)):
        lines += ["", f"![Pareto plot](get-artifact?path={REPORT_DIR}/pareto.png&run_uuid={run_id})"]
    return "\n".join(lines) + "\n"
