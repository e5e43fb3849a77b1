"""The MLflow contract: every tag, param, metric and artifact name that a writer (the trainer's reports, the
sweep driver) or a reader (analysis, the CLI) uses, spelled here and nowhere else; with the trial record (name,
swept values, config) and the split labels.

Plain Python (no torch, Ray or MLflow import), so the trainer (``rirlab.train``), the sweep side and the
torch-free analysis all import it. ``docs/metrics.md``'s metric table is generated from ``METRICS``
(``metrics_table``, written by scripts/metrics_doc.py; tests/train/test_contract.py checks that the page and this
table agree).

One sweep = one parent run (``SWEEP_TAG: PARENT``) and one child run per trial (MLflow's parent tag),
all in the experiment named after the spec.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Optional

from rirlab.errors import UserError

# ------------------------------------------------------------------ parent run (one per sweep)
SWEEP_TAG = "rirlab.sweep"
PARENT = "parent"  # value of SWEEP_TAG on the parent run
SPEC_HASH = "rirlab.spec_hash"
SPEC_PATH = "rirlab.spec_path"
QUICK = "rirlab.quick"
OVERRIDES = "rirlab.overrides"  # --set, JSON
TUNE_PATH = "rirlab.tune_path"  # Ray Tune's experiment directory (--resume restores it)
SWEPT_KEYS = "rirlab.swept_keys"  # on the parent: JSON [key, ...] of the parameters that differ between trials
ALGORITHM = "rirlab.algorithm"
METRIC = "rirlab.metric"  # comma separated
SEEDS = "rirlab.seeds"  # seeds per configuration (how many runs a table cell expects)
WARM_START = "rirlab.warm_start"  # JSON {experiments, configurations, skipped}: what --warm-start seeded the search with
SPLITS = "rirlab.splits"  # JSON [[split, paper label], ...] of the task's evaluation splits, in the papers' order
CLUSTER_RESOURCES = "rirlab.cluster_resources"
# `rirlab sweep SPEC --trial I --group G` (one job per trial, e.g. a Slurm job array): each job's parent run carries
# the index of its trial in the grid, the group its jobs share and the grid's size; readers take the parents of one
# group (and spec hash) as one sweep (rirlab.analysis.runs.group_parents)
TRIAL_INDEX = "rirlab.trial_index"
SWEEP_GROUP = "rirlab.sweep_group"
GRID_TRIALS = "rirlab.grid_trials"
TRIALS_FINISHED = "rirlab.trials_finished"
TRIALS_FAILED = "rirlab.trials_failed"
VERSION = "rirlab.version"
GIT_COMMIT = "rirlab.git_commit"
SPEC_ARTIFACT_DIR = "spec"  # the spec file as written
EFFECTIVE_SPEC_ARTIFACT = "spec/effective_spec.json"  # the spec as run (after --quick and --set)
SPEC_PARAM_PREFIX = "spec."  # the spec as the parent's params: spec.fixed.hidden_size, spec.search.lr (JSON), ...
BEST_PREFIX = "sweep/best/"  # parent metric: the best final value of an objective over the sweep's finished trials
BEST_TRIAL_PREFIX = "sweep/best_trial/"  # parent metric: every final metric of the best trial (first objective)
BEST_TRIAL = "rirlab.best_trial"  # parent tag: the best trial's run name
BEST_RUN_ID = "rirlab.best_run_id"
BEST_TRIAL_ARTIFACT = "best_trial.yaml"
REPORT_ARTIFACT_DIR = "report"  # the parent's table (Markdown, CSV) and Pareto plot
NOTE = "mlflow.note.content"  # MLflow's description of a run or an experiment (the spec's description)
MAX_TAG_VALUE = 8000  # MLflow's limit on a run tag's value (mlflow.utils.validation.MAX_TAG_VAL_LENGTH)
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"  # MLflow 3's UI opens an experiment by its kind (GenAI or training)
EXPERIMENT_KIND = "custom_model_development"
GIT_COMMIT_MLFLOW = "mlflow.source.git.commit"  # MLflow's own commit tag, set beside GIT_COMMIT

# ------------------------------------------------------------------ child run (one per trial)
PARENT_RUN_ID = "mlflow.parentRunId"  # MLflow's nesting tag (mlflow.utils.mlflow_tags.MLFLOW_PARENT_RUN_ID)
TRIAL_KEY = "rirlab.trial_key"  # Ray Tune's trial id: a resumed sweep finds and continues its own runs
SWEPT = "rirlab.swept"  # JSON {key: value} of the values that differ between trials, seed included
VARIANT = "rirlab.variant"
FAILURE_REASON = "rirlab.failure_reason"  # a FAILED run says why
# a FAILED run whose trial stopped on its damaged checkpoint (truncated, deleted): that file's path. Not an end:
# --resume tries the trial again (--restart-damaged says from where)
DAMAGED_CHECKPOINT = "rirlab.damaged_checkpoint"
EARLY_STOPPED = "rirlab.early_stopped"  # stopped by the scheduler or a time limit: not counted in tables
OUTCOME = "rirlab.outcome"  # how a trial ended, a column of the runs view: FINISHED_WORD or STOPPED_EARLY_WORD
FINISHED_WORD, STOPPED_EARLY_WORD = "finished", "stopped early"  # the one word each, in every count and view
RETRIED = "rirlab.retried"  # Ray Tune restarted the trial (a lost worker) this many times
RESUMED = "rirlab.resumed"
INTERRUPTED = "rirlab.interrupted"  # also on the parent
# --rerun-failed: a trial trained again gets a new run (its metric history starts at step 0) tagged with the run it
# replaces and its attempt number (2 for the first rerun); the replaced run stays, tagged with its successor. A run
# named by another run's RERUN_OF is superseded: readers count the latest attempt of a trial only (``superseded``)
RERUN_OF = "rirlab.rerun_of"
ATTEMPT = "rirlab.attempt"
SUPERSEDED_BY = "rirlab.superseded_by"
RERUNS = "rirlab.reruns"  # on the parent: how many --rerun-failed passes it had (each in a Tune folder of its own)
FIRST_TUNE_PATH = "rirlab.first_tune_path"  # on the parent: the sweep's own Tune folder, once a rerun took TUNE_PATH
TRUE = "true"
FINAL_LOGGED = "rirlab.final_logged"  # the trial's final result is in the run (--resume never reruns it)
# an evaluation-only row's run (a variant with evaluates:): the run id and name of the trial whose weights it tested
EVALUATES = "rirlab.evaluates"
EVALUATES_TRIAL = "rirlab.evaluates_trial"
MODEL_ERROR = "rirlab.model_error"  # the trial's weights could not be logged as an MLflow model: why
CHECKPOINT_ARTIFACT = "checkpoint"
CHECKPOINT_STATE_FILE = "state.pt"  # inside a checkpoint: the trainer's state dict (torch.save)
CHECKPOINT_MODEL_FILE = "model.pth"  # inside a trial's final checkpoint: its evaluated model, pickled as MLflow's
# PyTorch flavor stores it (written by the trial's worker; the driver logs it as the run's MLflow model)
CHECKPOINT_DIR = re.compile(r"checkpoint_(\d+)")  # a trial folder's numbered checkpoints (Ray Tune's names)
# keys of that state dict that say what it is (absent from checkpoints written before): the trial's resolved flat
# config (plain JSON types, URL passwords masked) and, in a sweep's checkpoint, the trial's run name
STATE_CONFIG = "config"
STATE_TRIAL = "trial"
CONFIG_ARTIFACT = "config.yaml"  # the trial's resolved flat config
MODEL_ARTIFACT = "model"  # its final weights as an MLflow PyTorch model of that name (MLflow 3: a logged model)
TRIAL_NAME_TAG = "rirlab.trial"  # on a trial's logged model: the trial's run name
# algorithm: optuna: a child run and the Optuna study trial that proposed its configuration name each other
OPTUNA_TRIAL_NUMBER = "rirlab.optuna.trial_number"  # child tag: that trial's number in its study
OPTUNA_STUDY = "rirlab.optuna.study"  # child tag: the study's name
OPTUNA_RUN_IDS_ATTR = "mlflow_run_ids"  # Optuna user attr of that trial: its MLflow child run ids, one per seed
# Each child run's dataset inputs (MLflow "Datasets used"): one per split the trial reads, named
# "<task>/<split>"; source type "local" (an imported file: the source holds the cached Parquet path and the
# import record) or "generated" (the source holds the generator parameters); the digest is the imported rows'
# content digest or the generated split's cache key; the profile holds the rows. The split is the context tag.
DATASET_CONTEXT = "mlflow.data.context"
DATASET_GENERATED = "generated"

# ------------------------------------------------------------------ params and metrics
# Params are the trial's whole flat config (rirlab.config field names); analysis reads these by name:
PARAM_BATCH_SIZE = "batch_size"
# Metrics are what rirlab.train.run_trial reports (the last report has FINAL and SPLIT_METRIC per eval split).
STEP = "step"
FINAL = "final"  # a report key, not a metric: the trial's last report
DEVICE = "device"  # a report key with a string value (cpu, or the GPU's name): the child run's tag rirlab.device
ARTIFACT_PREFIX = "artifact:"  # a report key artifact:<file>: a JSON-able value the tracker logs as that artifact
PARAM_PREFIX = "param:"  # a report key param:<name>: a string the tracker logs as the run's param <name> (a fact
# of the trial's data, known once it is loaded: OOV_PARAM of each split)
OOV_PARAM = "oov/"  # oov/<split>: share of the split's tokens outside the trial's vocabulary (text tasks), 0..1
TRAIN_PREFIX = "train/"  # train/loss, train/accuracy and each model's own train/<stat>
TRAIN_LOSS = "train/loss"
TRAIN_ACCURACY = "train/accuracy"
TRAIN_AUX_LOSS = "train/aux_loss"
# the halting models' own statistics (rirlab.models.halting, tlb), reported as train/<stat>
HALTING_STATS = ("train/act_loss", "train/mean_layers", "train/max_layers_used")
TIME_PER_STEP_MS = "time_per_step_ms"  # wall clock: inflated when trials share the CPU cores
CPU_TIME_PER_STEP_MS = "cpu_time_per_step_ms"  # CPU time of the trial's own process, summed over its threads
# A step time in words that name its clock: every table, plot axis and curve showing one says which it is
CLOCK_WORDS = {CPU_TIME_PER_STEP_MS: "CPU time per step (ms)", TIME_PER_STEP_MS: "wall-clock time per step (ms)"}

PEAK_MEM_MB = "peak_mem_mb"
PROCESS_RSS_MB = "process_rss_mb"
LR = "lr"
EPOCH = "epoch"
NUM_PARAMS = "num_params"
STOPPED_EPOCH = "stopped_epoch"
EARLY_STOPPED_METRIC = "early_stopped"  # 1 when early stopping ended the trial (the tag EARLY_STOPPED is the scheduler's)
BEST_PREFIX_METRIC = "best/"  # best/step, best/epoch, best/dev_accuracy, best/dev_loss: the best dev evaluation
BEST_METRICS = tuple(BEST_PREFIX_METRIC + k for k in ("step", "epoch", "dev_accuracy", "dev_loss"))
LAST_PREFIX_METRIC = "last/"  # last/dev_accuracy, last/dev_loss: the dev evaluation at the last step (last weights)
LAST_METRICS = tuple(LAST_PREFIX_METRIC + k for k in ("dev_accuracy", "dev_loss"))
NON_EVAL_SPLITS = ("train", "dev")
EVAL_METRICS = ("accuracy", "loss")  # what every evaluated split reports: <split>/accuracy, <split>/loss
EXAMPLES = "examples"  # and <split>/examples at the end: N, the examples its accuracy was computed on (the tables'
# binomial standard error; rirlab.analysis.stats derives it for runs recorded before, where the config fixes it)
RUN_METRICS = (STEP, TIME_PER_STEP_MS, CPU_TIME_PER_STEP_MS, PEAK_MEM_MB, PROCESS_RSS_MB, LR, EPOCH, NUM_PARAMS,
               STOPPED_EPOCH, EARLY_STOPPED_METRIC, *BEST_METRICS, *LAST_METRICS)  # reported by every trial; never a table column

# What each metric means, in one unit per kind (accuracy %, loss nats, time ms, memory MiB): the one source of the
# metric list. Every trial reports only these (tests/train/test_contract.py), rirlab.train's docstring points here,
# and docs/metrics.md's table is generated from it (``metrics_table``; scripts/metrics_doc.py writes it, a test
# fails while the page and this table differ). Metric -> (unit, meaning), in the page's order; "—": no unit.
# Meanings are Markdown (backticks) and hold no "|".
METRICS = {
    TRAIN_LOSS: ("nats", "cross-entropy of the training batches since the last report (mean)"),
    TRAIN_ACCURACY: ("%", "correct predictions of those batches, 0–100 (the same unit as every evaluation split)"),
    TRAIN_AUX_LOSS: ("—", "halting models: the ACT penalty L_ACT of those batches, the auxiliary loss the training "
                          "loss adds times `halt_loss_weight` (GUTLB: per sequence over its chunks, then over the "
                          "batch)"),
    HALTING_STATS[0]: ("—", "halting models: the same L_ACT as the model reports it among its own statistics"),
    HALTING_STATS[1]: ("layers", "halting models: mean number of *kept* layers per halting unit (the layer that "
                                 "crosses the halting threshold is computed and discarded, as the paper's code does, "
                                 "so it is not counted)"),
    HALTING_STATS[2]: ("—", "halting models: block applications in the forward"),
    "<split>/accuracy": ("%", "`dev/accuracy` while training (per epoch or every `eval_every` steps), every "
                              "split's at the end (with the best-dev weights under the `paper` recipe)"),
    "<split>/loss": ("nats", "cross-entropy on that split"),
    "<split>/examples": ("count", "N, the examples of that split its accuracy and loss were computed on (at the end, "
                                  "every split): `rirlab tables` gives each accuracy its binomial standard error from "
                                  "it. Runs recorded before it: derived from the logged config where the task fixes "
                                  "the split's size (generated splits: `n_eval`, ListOps' `n_test`; logic's test "
                                  "splits at the real files' sizes), else unknown"),
    TIME_PER_STEP_MS: ("ms", "mean wall time of one **training** step — data, forward, backward, optimiser — since "
                             "the trial (or its resume) started. Evaluation and checkpointing are **not** included, "
                             "so a trial that evaluates often is not charged for it. Wall clock: when trials share "
                             "the CPU cores it counts the time others hold them too (below)"),
    CPU_TIME_PER_STEP_MS: ("ms", "the same training steps' **CPU time** of the trial's own process "
                                 "(`time.process_time`: user + system time summed over all its threads), per step. "
                                 "Trials that share the cores do not inflate it: the time to compare between CPU "
                                 "trials of a sweep (below)"),
    PEAK_MEM_MB: ("MiB", "the memory the model's training uses: on CUDA the allocator's peak over the trial, on CPU "
                         "the tensor-level high-water mark of `rirlab.perf.TensorMemory` (below)"),
    PROCESS_RSS_MB: ("MiB", "peak resident set size of the whole process since the trial started (in a reused "
                            "worker, `reuse_workers: true`, not an earlier trial's peak): the Python interpreter, "
                            "torch's libraries, the datasets and heap the allocator keeps after freeing (several "
                            "hundred MB whatever the model). Kept as its own metric; never plot it as the model's memory"),
    **{m: ("—", "the best dev evaluation of a recipe that selects by dev: its step, epoch, accuracy (%) and loss "
                "(nats)") for m in BEST_METRICS},
    **{m: ("—", "the dev evaluation of training at the trial's last step (a recipe that selects by dev): the last "
                "weights under the dev inference, the evaluation that ended an early-stopped trial. The final "
                "`dev/accuracy` is the tested weights' and takes that step's place in the history") for m in LAST_METRICS},
    STOPPED_EPOCH: ("—", "the epoch the trial stopped in (a recipe that selects by dev)"),
    EARLY_STOPPED_METRIC: ("—", "1 when early stopping ended the trial (a recipe that selects by dev)"),
    LR: ("—", "learning rate of the last parameter group"),
    EPOCH: ("—", "epochs done (a fraction)"),
    STEP: ("—", "steps done"),
    NUM_PARAMS: ("count", "parameters of the model"),
}
# A trial that ends on a deterministic failure (a NaN loss) reports this string as its last result: the
# child run ends FAILED with it as FAILURE_REASON (never a metric, never retried).
FAILURE_RESULT = "failure_reason"
# A trial whose checkpoint cannot be read reports this (the file's path; FAILURE_RESULT: why, in one line) before it
# stops: a deterministic failure, so Tune does not retry it; the child run ends FAILED with DAMAGED_CHECKPOINT set.
DAMAGED_RESULT = "damaged_checkpoint"


def metrics_table() -> str:
    """docs/metrics.md's metric table (Markdown) from METRICS, so the page cannot drift from the contract: one row
    per metric, consecutive metrics of the same unit and meaning in one row."""
    rows: list[list] = []
    for name, (unit, meaning) in METRICS.items():
        if rows and rows[-1][1:] == [unit, meaning]:
            rows[-1][0].append(name)
        else:
            rows.append([[name], unit, meaning])
    lines = ["| metric | unit | meaning |", "|---|---|---|"]
    lines += [f"| {', '.join(f'`{n}`' for n in names)} | {unit} | {meaning} |" for names, unit, meaning in rows]
    return "\n".join(lines) + "\n"


def is_documented(metric: str) -> bool:
    """A metric name in METRICS, or ``<split>/accuracy`` / ``<split>/loss`` of an evaluated split."""
    split, _, kind = metric.rpartition("/")
    return metric in METRICS or (kind in (*EVAL_METRICS, EXAMPLES) and split not in ("train", "best", "")
                                 and f"<split>/{kind}" in METRICS)


def metric_named(metric: str) -> str:
    """A metric as a table names it: a step time by its clock in words (``CPU time per step (ms)``), others by
    their logged name."""
    return CLOCK_WORDS.get(metric, metric)


def is_better(value: float, name: str, than: Optional[tuple[float, str]], mode: str) -> bool:
    """Whether trial ``name`` with final ``value`` beats ``than`` = (value, name) of the best so far (None: nothing
    yet) under ``mode`` max/min. A tie goes to the name that sorts first, so the progress line, the parent run
    and ``rirlab runs`` name the same best trial whatever order the runs arrive in. NaN and inf never win."""
    if not math.isfinite(value):
        return False
    if than is None:
        return True
    key = (-value if mode == "max" else value, name)
    return key < (-than[0] if mode == "max" else than[0], than[1])


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


RUN_ID = re.compile(r"^[0-9a-f]{32}$")  # MLflow's run ids (uuid4 hex) on every backend


def children_filter(parent_id: str) -> str:
    """MLflow filter for the child runs of a parent; the id is checked first, since it is pasted into the filter
    (``--run "x' OR '1'='1"`` would otherwise widen the search)."""
    if not RUN_ID.match(str(parent_id)):
        raise UserError(f"{str(parent_id)[:80]!r} is not an MLflow run id (32 hex digits); `rirlab runs SPEC` lists "
                        f"the sweeps and their run ids")
    return f"tags.`{PARENT_RUN_ID}` = '{parent_id}'"


def is_parent(tags: dict) -> bool:
    return tags.get(SWEEP_TAG) == PARENT


GROUP_NAME = re.compile(r"^[\w.-]{1,100}$")  # a --group name (pasted into filters: no quote, no space)


def group_filter(group: str, spec_hash: str) -> str:
    """MLflow filter for the parent runs of one group of one-trial sweeps (``--trial I --group G``) of a spec."""
    if not GROUP_NAME.match(group) or not re.fullmatch(r"[0-9a-f]*", spec_hash):
        raise UserError(f"{group[:80]!r} is not a sweep group name (letters, digits, '_', '.', '-'; at most 100)")
    return f"{parent_filter(spec_hash)} and tags.`{SWEEP_GROUP}` = '{group}'"


def superseded(runs) -> set[str]:
    """The ids of the runs (MLflow Run objects) that a later attempt of the same trial replaced (--rerun-failed):
    named by another run's RERUN_OF tag. The new run is created with that tag, so the pair is never seen half-made;
    every reader that counts a sweep's trials leaves these out, and a trial is counted once."""
    return {r.data.tags[RERUN_OF] for r in runs if r.data.tags.get(RERUN_OF)}


def current_runs(runs) -> list:
    """``runs`` without the superseded ones (``superseded``), in their order."""
    gone = superseded(runs)
    return [r for r in runs if r.info.run_id not in gone]


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
