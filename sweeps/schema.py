"""The MLflow contract between the sweep (which writes runs) and the analysis (which reads them back).

Every tag, param and metric name either side uses is spelled here and nowhere else, with the trial
record (name, swept values, config) and the split labels. Torch-free and Ray-free: ``analysis``
imports this module and MLflow, never the library. The spec file's schema (``Spec``, ``expand``,
``read_spec``) lives in the torch-free ``sweeps.specfile`` and is re-exported here, so that analysis
can lay out a table before any run exists without importing anything else of the project.

One sweep = one parent run (``SWEEP_TAG: PARENT``) and one child run per trial (MLflow's parent tag),
all in the experiment named after the spec.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

from rirlab.errors import UserError

# ------------------------------------------------------------------ parent run (one per sweep)
SWEEP_TAG = "rirlab.sweep"
PARENT = "parent"  # value of SWEEP_TAG on the parent run
SPEC_HASH = "rirlab.spec_hash"
SPEC_PATH = "rirlab.spec_path"
QUICK = "rirlab.quick"
OVERRIDES = "rirlab.overrides"  # --set, JSON
TUNE_PATH = "rirlab.tune_path"  # Ray Tune's experiment directory (--resume restores it)
SWEPT_KEYS = "rirlab.swept"  # on the parent: the swept parameters, comma separated (same name as the child's tag)
ALGORITHM = "rirlab.algorithm"
METRIC = "rirlab.metric"  # comma separated
SEEDS = "rirlab.seeds"  # seeds per configuration (how many runs a table cell expects)
SPLITS = "rirlab.splits"  # JSON [[split, paper label], ...] of the task's evaluation splits, in the papers' order
CLUSTER_RESOURCES = "rirlab.cluster_resources"
TRIALS_FINISHED = "rirlab.trials_finished"
TRIALS_FAILED = "rirlab.trials_failed"
VERSION = "rirlab.version"
GIT_COMMIT = "rirlab.git_commit"
SPEC_ARTIFACT_DIR = "spec"  # the spec file as written
EFFECTIVE_SPEC_ARTIFACT = "spec/effective_spec.json"  # the spec as run (after --quick and --set)

# ------------------------------------------------------------------ child run (one per trial)
PARENT_RUN_ID = MLFLOW_PARENT_RUN_ID
TRIAL_KEY = "rirlab.trial_key"  # Ray Tune's trial id: a resumed sweep finds and continues its own runs
SWEPT = "rirlab.swept"  # JSON {key: value} of the values that differ between trials, seed included
VARIANT = "rirlab.variant"
FAILURE_REASON = "rirlab.failure_reason"  # a FAILED run says why
EARLY_STOPPED = "rirlab.early_stopped"  # stopped by the scheduler or a time limit: not counted in tables
RETRIED = "rirlab.retried"  # Ray Tune restarted the trial (a lost worker) this many times
RESUMED = "rirlab.resumed"
INTERRUPTED = "rirlab.interrupted"  # also on the parent
TRUE = "true"
CHECKPOINT_ARTIFACT = "checkpoint"
# Each child run's dataset inputs (MLflow "Datasets used"): one per split the trial reads, named
# "<task>/<split>"; source type "local" (an imported file: the source holds the cached Parquet path and the
# import record) or "generated" (the source holds the generator parameters); the digest is the imported rows'
# content digest or the generated split's cache key; the profile holds the rows. The split is the context tag.
DATASET_CONTEXT = "mlflow.data.context"
DATASET_GENERATED = "generated"

# ------------------------------------------------------------------ params and metrics
# Params are the trial's whole flat config (rirlab.config field names); analysis reads these by name:
PARAM_BATCH_SIZE = "batch_size"
# Metrics are what rirlab.train.run_trial reports (the last report has FINAL and SPLIT_METRIC per eval split):
STEP = "step"
FINAL = "final"
TRAIN_LOSS = "train/loss"
TIME_PER_STEP_MS = "time_per_step_ms"
PEAK_MEM_MB = "peak_mem_mb"
NON_EVAL_SPLITS = ("train", "dev")
TRAIN_PREFIX = "train/"  # train/loss, train/accuracy and each model's own train/<stat>
EVAL_METRICS = ("accuracy", "loss")  # what every evaluated split reports: <split>/accuracy, <split>/loss
RUN_METRICS = (STEP, TIME_PER_STEP_MS, PEAK_MEM_MB, "lr", "epoch", "num_params", "stopped_epoch", "early_stopped",
               "best/step", "best/epoch", "best/dev_accuracy", "best/dev_loss")  # splits with metrics that are not a table column
# A trial that ends on a deterministic failure (a NaN loss) reports this string as its last result: the
# child run ends FAILED with it as FAILURE_REASON (never a metric, never retried).
FAILURE_RESULT = "failure_reason"


def split_metric(split: str, metric: str = "accuracy") -> str:
    """``test`` -> ``test/accuracy``: the final per-split metric of a trial."""
    return f"{split}/{metric}"


def split_of(metric_key: str, metric: str = "accuracy"):
    """``test/accuracy`` -> ``test``; None for any other metric."""
    suffix = "/" + metric
    return metric_key[: -len(suffix)] if metric_key.endswith(suffix) else None


def reported_metrics(eval_splits) -> list[str]:
    """The metric names a trial reports (besides the train/ ones): dev and each evaluated split x EVAL_METRICS, and
    the run metrics; what a spec's ``metric`` must name."""
    return [*RUN_METRICS, *(split_metric(s, m) for s in ("dev", *eval_splits) for m in EVAL_METRICS)]


def result_tag(key: str) -> str:
    """A string value in a trial's result is recorded as the tag ``rirlab.<key>``."""
    return f"rirlab.{key}"


# ------------------------------------------------------------------ searches
def parent_filter(spec_hash: str = "") -> str:
    """MLflow filter for the parent runs of an experiment (of one effective spec when given its hash)."""
    flt = f"tags.`{SWEEP_TAG}` = '{PARENT}'"
    return flt + (f" and tags.`{SPEC_HASH}` = '{spec_hash}'" if spec_hash else "")


def children_filter(parent_id: str) -> str:
    return f"tags.`{PARENT_RUN_ID}` = '{parent_id}'"


def is_parent(tags: dict) -> bool:
    return tags.get(SWEEP_TAG) == PARENT


# ------------------------------------------------------------------ the trial record
def short_value(value) -> str:
    """A swept value as a run name shows it: floats to 4 significant digits (a sampled lr 0.000123456 -> 0.0001235)."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_name(swept: dict) -> str:
    """The child run's name: the swept values in spec order, the variant by its name alone, floats rounded:
    ``chunk_size=30,beam_size=7,seed=0``, ``-S4D,seed=1``, ``lr=0.001235,seed=0``. The exact values are the
    run's params and its SWEPT tag."""
    return ",".join(str(v) if k == "variant" else f"{k}={short_value(v)}" for k, v in swept.items())


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    """One trial: its run name, its swept values (variant first, seed last) and its flat config."""

    name: str
    swept: dict[str, Any]
    config: dict[str, Any]

    @classmethod
    def of(cls, swept: dict, config: dict) -> "TrialRecord":
        return cls(trial_name(swept), dict(swept), dict(config))

    @property
    def variant(self) -> str:
        return str(self.swept.get("variant") or "")

    def tags(self, trial_key: str) -> dict[str, str]:
        """The child run's tags (its params are the resolved config)."""
        tags = {TRIAL_KEY: trial_key, SWEPT: json.dumps(self.swept, default=str)}
        if self.variant:
            tags[VARIANT] = self.variant
        return tags

    def __getitem__(self, key: str):  # callers that read trials as dicts: trial["config"]
        return getattr(self, key)


def swept_of(tags: dict) -> dict:
    """The swept values of a child run, from its tags ({} for a run without them)."""
    return json.loads(tags.get(SWEPT) or "{}")


# ------------------------------------------------------------------ split labels
def encode_splits(splits) -> str:
    """[(split, paper label), ...] -> the parent's SPLITS tag."""
    return json.dumps([[str(s), str(label)] for s, label in splits])


def decode_splits(tags: dict) -> list[tuple[str, str]]:
    """The parent's recorded splits in the papers' order; [] for a parent that predates the record."""
    try:
        return [(str(s), str(label)) for s, label in json.loads(tags.get(SPLITS) or "[]")]
    except (ValueError, TypeError):
        return []


# ------------------------------------------------------------------ the spec file's schema, torch-free
_SPECFILE = ("Spec", "expand", "read_spec", "closest")


def __getattr__(name: str):
    """``from sweeps.schema import Spec, expand, read_spec, closest``: the spec schema (sweeps.specfile),
    imported on first use so the two modules can refer to each other."""
    if name in _SPECFILE:
        from sweeps import specfile

        return getattr(specfile, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["UserError", "TrialRecord", "trial_name", "swept_of", "split_metric", "split_of", "encode_splits",
           "decode_splits", "parent_filter", "children_filter", "is_parent", *_SPECFILE]
