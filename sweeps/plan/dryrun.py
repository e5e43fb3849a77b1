"""``rirlab sweep --dry-run``: the plan's trials as a table, started nowhere, and a compute estimate (each distinct
model config's training step timed here on a batch shaped like the task's)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Optional

from rirlab.contract import short_value
from rirlab.errors import command
from rirlab.tasks.base import LENGTH_Q
from rirlab.sweeps.plan.plan import SweepPlan
from rirlab.sweeps.spec.schema import Spec


TIMING_BUDGET_S = 8.0  # the dry run spends about this long timing training steps (all model configs together)
TIMING_CONFIG_S = 3.0  # ... of which a model config may take this much while the budget lasts (more if it is
# the only one left); each is timed at batch 1, 2, 8, 32, ... up to the trial's batch size or ...
TIMING_MAX_BATCH = 128  # ... this (beyond it the time per example is taken as constant), while the next size is
# expected to fit in its share; the trial's batch size is extrapolated from the two largest timed (_at_batch)
TIMING_REPEAT_S = 0.5  # after a warm-up step, the fastest of up to three steps that together take this long
TIMING_SECOND_S = 1.5  # batch 2 is timed after batch 1 whenever it should take at most this long, budget or not
TIMING_ENV = "RIRLAB_DRY_RUN_TIMING"  # 0: no timing (the estimate then says so)
TIMING_MIN_CONFIG_S = 1.0  # every distinct model config is timed (at least at batch 1) with at least this long, ...
TIMING_MAX_S = 60.0  # ... until the dry run has timed this long: configs left then are named as not timed
TIMING_REPEATS = 3  # the trial's batch (or the largest timed) is timed this many times: the estimate's range
BENCHMARKS_DIR = "benchmarks"  # `rirlab bench --device cuda --json` figures (step protocol) the GPU projection reads

# --- how long a task's training sequences are, for the batch the dry run times ---
#
# Step time grows with the padded length of a batch, so the timed batch must be as long as the trial's batches
# will be. Each task states the distribution of its training sequences' lengths (``Task.train_lengths``: quantiles
# at LENGTH_Q, one tuple per sequence of an example); ``padded_batch`` draws lengths from it and cuts them into
# batches as rirlab.tasks.batching.BatchPlan does.
GLOVE_DIM = 300  # the text tasks' frozen GloVe 840B-300d vectors (rirlab.tasks.text)


def train_lengths(resolved) -> tuple:
    """The quantiles (at LENGTH_Q) of a trial's training sequence lengths, one tuple per sequence of an example:
    the task's own figures (``Task.train_lengths``)."""
    from rirlab.tasks import registry as tasks

    return tasks.get(resolved.task).train_lengths(resolved.task_cfg)


def padded_batch(resolved, seed: int = 0) -> list:
    """Sequence lengths of a typical training batch of the trial: one int array (batch_size,) per sequence of an
    example, longest first. About 4,000 examples drawn from ``train_lengths`` (a pair's two sequences
    independently) are cut into batches as the trainer's BatchPlan cuts them (pools of bucket_factor batches
    sorted by the longer sequence); the batch whose padded size is nearest the mean of them all is returned."""
    import numpy as np

    t = resolved.train
    quantiles = train_lengths(resolved)
    bs, factor = t.batch_size, max(1, t.bucket_factor or 1)
    pool = bs * factor
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(max(4, -(-4096 // pool))):
        sides = [np.maximum(1, np.rint(np.interp(rng.random(pool), LENGTH_Q, q))).astype(int) for q in quantiles]
        order = np.argsort(np.max(sides, axis=0), kind="stable") if factor > 1 else np.arange(pool)
        batches += [[s[order[i: i + bs]] for s in sides] for i in range(0, pool, bs)]
    padded = np.array([sum(int(s.max()) for s in b) for b in batches])
    best = batches[int(np.argmin(np.abs(padded - padded.mean())))]
    return [np.sort(s)[::-1] for s in best]


@dataclasses.dataclass
class StepShape:
    """What the dry run times a trial's training step on: the task's kind, vocabulary and classes (``info``) and
    the lengths of a typical training batch (``padded_batch``)."""

    task: str
    info: object  # rirlab.tasks.base.TaskInfo
    lengths: list  # one int array (batch_size,) per sequence of an example, longest first

    @property
    def padded(self) -> tuple[int, ...]:
        return tuple(int(s.max()) for s in self.lengths)

    def describe(self) -> str:
        tokens = " + ".join(str(n) for n in self.padded)
        return (f"{self.task}: {self.info.kind}, {tokens} tokens padded, vocabulary {self.info.vocab_size:,}, "
                f"{self.info.num_classes} classes")

    def batch(self, n: int, device: str = "cpu") -> dict:
        """A random batch of ``n`` examples (the typical batch's lengths, evenly subsampled, the longest kept),
        as the task's collator makes it: tokens / mask (and tokens2 / mask2 for a pair), labels."""
        import numpy as np
        import torch

        g = torch.Generator().manual_seed(0)
        pick = np.linspace(0, len(self.lengths[0]) - 1, n).round().astype(int)
        out = {}
        for side, suffix in zip(self.lengths, ("", "2")):
            lens = torch.as_tensor(side[pick])
            mask = torch.arange(int(lens.max()))[None, :] < lens[:, None]  # (N, S)
            out["tokens" + suffix] = torch.randint(1, self.info.vocab_size, mask.shape, generator=g) * mask
            out["mask" + suffix] = mask
        if self.info.kind == "lm":  # a label per token, -100 (no loss) on padding
            labels = torch.randint(0, self.info.num_classes, out["mask"].shape, generator=g)
            out["labels"] = labels.masked_fill(~out["mask"], -100)
        else:
            out["labels"] = torch.randint(0, self.info.num_classes, (n,), generator=g)
        return {k: v.to(device) for k, v in out.items()}


def step_shape(resolved) -> StepShape:
    """The trial's StepShape. Vocabulary and classes are the task's; a text task's vocabulary is its training
    split's words, taken as the most it keeps (max_vocab + padding and unknown), with frozen GloVe vectors
    when it uses them (the step then trains no embedding table)."""
    import numpy as np

    from rirlab.tasks import registry as tasks
    from rirlab.tasks.base import TaskInfo

    task, cfg = tasks.get(resolved.task), resolved.task_cfg
    vocab, glove = task.planned_vocab(cfg)
    vectors = np.zeros((vocab, GLOVE_DIM), np.float32) if glove else None
    info = TaskInfo(vocab, task.num_classes, task.kind, embeddings=vectors)
    return StepShape(resolved.task, info, padded_batch(resolved))


@dataclasses.dataclass
class StepTiming:
    ms: float  # one training step at the trial's batch size, in ms
    timed: tuple  # (batch size, ms of one step) of each size timed, smallest first
    shape: StepShape
    threads: int = 0  # CPU threads timed with (0: on CUDA)
    trial_threads: int = 0  # ... and those the trial will use
    spread: tuple = (1.0, 1.0)  # the fastest and slowest of TIMING_REPEATS timings, as multiples of ``ms``

    @property
    def ms_range(self) -> tuple[float, float]:
        return self.ms * self.spread[0], self.ms * self.spread[1]

    @property
    def scaled(self) -> bool:
        return self.timed[-1][0] != len(self.shape.lengths[0])


def dry_run(plan: SweepPlan, out=None, timing: Optional[bool] = None) -> None:
    """What the sweep will run, started nowhere: one line of header, a table with one row per trial (one column
    per swept value, the trial's training steps), then the compute estimate (``compute_estimate``). ``out``: the
    stream (default: sys.stdout as it is at the call, not at import: a redirected stdout gets the table)."""
    out = out or sys.stdout
    spec, trials, resolved = plan.spec, plan.trials, plan.resolved
    how = plan.algorithm.describe(spec)
    print(f"{spec.name}: {len(trials)} trials (spec hash {plan.hash}) by {how}", file=out)
    steps = [trial_steps(r) for r in resolved]
    columns = list(dict.fromkeys(k for t in trials for k in t.swept))
    rows = [[str(i + 1), *(short_value(t.swept[k]) if k in t.swept else "-" for k in columns),
             f"{n:,}" if n is not None else f"{r.train.epochs} epoch{'s' if r.train.epochs > 1 else ''}"]
            for i, (t, r, n) in enumerate(zip(trials, resolved, steps))]
    header = ["#", *columns, "steps"]
    widths = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header))]
    for r in [header, *rows]:
        print("  ".join(c.rjust(w) if j == 0 or j == len(header) - 1 else c.ljust(w)
                        for j, (c, w) in enumerate(zip(r, widths))).rstrip(), file=out)
    shared = {k: v for k, v in plan.base.items()
              if k not in columns and all(t.config.get(k, v) == v for t in trials)}  # a row may set it otherwise
    if shared:
        print("every trial: " + ", ".join(f"{k}={short_value(v)}" for k, v in shared.items()), file=out)
    rows_run = {t.variant for t in trials}
    for v in spec.variants:  # what each training row sets on top of that
        if v.name in rows_run and v.set:
            print(f"row {v.name}: " + ", ".join(f"{k}={short_value(x)}" for k, x in v.set.items()), file=out)
    for row in dict.fromkeys(ev.record.variant for ev in plan.evaluations):  # evaluation-only rows train nothing
        cells = [ev for ev in plan.evaluations if ev.record.variant == row]
        changed = ", ".join(f"{k}={short_value(v)}" for k, v in cells[0].changed.items()) or "nothing changed"
        print(f"then {len(cells)} evaluation(s), row {row}: the trained weights of "
              f"{', '.join(ev.source.name for ev in cells)} evaluated with {changed} (no training)", file=out)
    print(compute_estimate(spec, resolved, steps, timing), file=out)


def train_rows(resolved) -> Optional[int]:
    """Examples in the trial's training split as far as known before loading it: an imported or cached split's
    stored rows, else the rows its config asks for (``n_train``); None for a split read from the user's files
    that was never cached (the count is the files'), and for a text task's generated stand-in corpus (which
    the first trial writes; a dry run writes nothing). ``Task.datasets`` says which; it reads no rows."""
    from rirlab.tasks import registry as tasks

    task = tasks.get(resolved.task)
    if task.generated_corpus(resolved.task_cfg):
        return None
    try:
        info = next(d for d in task.datasets(resolved.task_cfg) if d.split == "train")
        return info.rows
    except Exception:  # noqa: BLE001 -- e.g. an imported split whose record is missing: the trial will say so
        return task.split_rows(resolved.task_cfg, "train")


def trial_steps(resolved) -> Optional[int]:
    """Training steps of a resolved trial, as the trainer counts them: ``epochs`` x ceil(training rows /
    batch_size) when epochs is set (an upper bound where the recipe stops early; None when the rows are not
    known before the split is read, ``train_rows``), else ``steps``."""
    t = resolved.train
    if not t.epochs:
        return t.steps
    rows = train_rows(resolved)
    return None if rows is None else t.epochs * max(1, -(-int(rows) // t.batch_size))


def compute_estimate(spec: Spec, resolved: list, steps: list, timing: Optional[bool] = None) -> str:
    """trials x steps x step time, as device-hours. The step time is measured here, on this machine's device, for
    each distinct (model config, task config, batch size) with the trial's optimiser, loss, gradient clipping,
    precision and threads, on a random batch shaped as the trial's training batches (``step_shape``: the task's
    kind, vocabulary and classes, a typical padded batch of its training lengths): at batch 1, 2, 8, 32, ...
    up to the trial's batch size (at most TIMING_MAX_BATCH) while its share of TIMING_BUDGET_S lasts
    (``_time_step``); a batch not reached is extrapolated from the two largest timed ones (``_at_batch``). On a
    busy machine the step is timed with fewer threads than the trial's (``_free_cores``), an overestimate the
    line states. Evaluation time is not included. Configs left once the budget is spent take the mean
    per-example time of the timed ones. Trials whose steps are unknown (``trial_steps``) count in the step
    time, not in the hours."""
    import os

    if timing is None:
        timing = os.environ.get(TIMING_ENV, "1") != "0"
    known = [n for n in steps if n is not None]
    unknown = len(steps) - len(known)
    if not unknown:
        head = f"compute: {len(steps)} trials, {sum(known):,} training steps in all"
    else:
        why = ("epochs over a training split not read yet, the user's files or a generated stand-in, whose rows "
               "a trial counts when it reads them")
        head = (f"compute: {len(steps)} trials, training steps unknown ({why})" if not known else
                f"compute: {len(steps)} trials, {sum(known):,} training steps in the {len(known)} that know "
                f"theirs ({unknown} unknown: {why})")
    if not timing or not resolved:
        return head + f" (step time not measured: {TIMING_ENV}=0)"
    import time

    import torch

    device = "cuda" if torch.cuda.is_available() and resolved[0].train.device != "cpu" else "cpu"
    free = _free_cores()

    def key_of(r) -> str:
        return json.dumps([r.model, dataclasses.asdict(r.model_cfg), r.task, dataclasses.asdict(r.task_cfg),
                           r.train.batch_size, r.train.bucket_factor, r.train.optimizer, r.train.precision,
                           r.train.num_threads], sort_keys=True, default=str)

    keys = [key_of(r) for r in resolved]
    first: dict = {}  # key -> its first trial, in spec order
    for k, r in zip(keys, resolved):
        first.setdefault(k, r)
    timings: dict[str, Optional[StepTiming]] = {}
    skipped: dict[str, str] = {}  # config -> why it was not timed
    t0 = time.monotonic()
    t_end = t0 + TIMING_BUDGET_S
    for i, (k, r) in enumerate(first.items()):
        if i and time.monotonic() - t0 > TIMING_MAX_S:  # (the first is always timed)
            timings[k], skipped[k] = None, f"the dry run's {TIMING_MAX_S:g} s of timing were spent"
            continue
        left = max(0.0, t_end - time.monotonic())
        want = r.train.num_threads or torch.get_num_threads()  # as the trial will run (torch's default: cores)
        threads = 0 if device == "cuda" else min(want, free[0])
        share = max(left / (len(first) - i), min(left, TIMING_CONFIG_S), TIMING_MIN_CONFIG_S)
        timings[k] = _time_step(r, device, share, threads, want)
        if timings[k] is None:
            skipped[k] = "it could not be built or run here"
    measured = [(first[k].train.batch_size, v) for k, v in timings.items() if v is not None]
    if not measured:
        return head + " (step time not measured: timing one step failed)"
    per_example = sum(v.ms / b for b, v in measured) / len(measured)
    step_ms = [timings[k].ms if timings[k] is not None else per_example * r.train.batch_size
               for k, r in zip(keys, resolved)]
    lo_ms = [timings[k].ms_range[0] if timings[k] is not None else ms for k, ms in zip(keys, step_ms)]
    hi_ms = [timings[k].ms_range[1] if timings[k] is not None else ms for k, ms in zip(keys, step_ms)]
    hours = sum(n * ms for n, ms in zip(steps, step_ms) if n is not None) / 3.6e6
    hours_lo = sum(n * ms for n, ms in zip(steps, lo_ms) if n is not None) / 3.6e6
    hours_hi = sum(n * ms for n, ms in zip(steps, hi_ms) if n is not None) / 3.6e6
    res = spec.resources
    if skipped:
        numbers = {k: i + 1 for i, k in reversed(list(enumerate(keys)))}  # a config's first trial, as in the table
        named = "; ".join(f"#{numbers[k]} ({first[k].model}): {why}" for k, why in skipped.items())
        timed = (f"{len(measured)} of {len(timings)} distinct model configs timed, not timed (their step time taken "
                 f"as the timed ones' mean per example): {named}")
    else:
        timed = f"every distinct model config timed ({len(measured)})"
    lo, hi = min(step_ms), max(step_ms)
    per_step = _ms(lo) if _ms(lo) == _ms(hi) else f"{_ms(lo)} to {_ms(hi)}"
    shapes = list(dict.fromkeys(v.shape.describe() for _, v in measured))
    shape = shapes[0] if len(shapes) == 1 else f"{shapes[0]}; other trials their own"
    batches = ", ".join(str(b) for b in sorted({b for b, _ in measured}))
    scaled = [v for _, v in measured if v.scaled]
    if scaled:
        top = max(v.timed[-1][0] for v in scaled)
        how = (f"timed at batch 1, 2, 8, ... up to the trial's batch {batches} as far as the time allowed; "
               f"{len(scaled)} of {len(measured)} configs stopped short (at batch {top} or less) and are "
               f"extrapolated (affine in the batch size) from their two largest batches")
        alone = [v for v in scaled if len(v.timed) == 1]
        if alone:
            how += f", {len(alone)} of them from batch 1 alone, in proportion (rough)"
    else:
        how = f"timed at the trial's batch size {batches}"
    fewer = [v for _, v in measured if 0 < v.threads < v.trial_threads]
    if fewer:
        k = fewer[0].threads
        how += (f"; with {k} thread{'s' if k > 1 else ' (its CPU time)'} instead of the trial's "
                f"{fewer[0].trial_threads} as this machine is busy ({free[1]}): an overestimate, by up to "
                f"{fewer[0].trial_threads / k:g}x")
    if known:
        rate = res.gpu if res.gpu > 0 else res.cpu
        unit = "GPU-hours" if res.gpu > 0 else "CPU-hours"
        if _duration(hours_lo) == _duration(hours_hi):
            amount = f"about {_duration(hours)} of trial time = {hours * rate:,.3g} {unit}"
        else:
            amount = (f"{_duration(hours_lo)} to {_duration(hours_hi)} of trial time (the fastest and slowest of "
                      f"{TIMING_REPEATS} timings) = {hours_lo * rate:,.3g} to {hours_hi * rate:,.3g} {unit}")
    else:
        amount = f"about {per_step} per training step"
    lines = [f"{head}; {amount} at {res.cpu:g} cpu / {res.gpu:g} gpu per trial "
             f"(step time measured here on {device}: {per_step} per step, one training step on a random batch "
             f"shaped as the task's training batches ({shape}), {how}; {timed}; evaluations not counted)",
             "  early stopping: " + early_stopping_note(spec, resolved, steps, hours if known else None)]
    if device != "cuda":
        lines.append("  on a GPU: " + gpu_projection(resolved, steps, keys, first, timings, res.gpu))
    return "\n".join(lines)


def early_stopping_note(spec: Spec, resolved: list, steps: list, hours: Optional[float]) -> str:
    """What the estimate assumes about trials that end before their last step (ASHA, the recipe's early
    stopping, a time limit): the hours above count every trial to its end, an upper bound where one applies."""
    notes = []
    sch = spec.scheduler
    if sch.type == "asha":
        from rirlab.sweeps.plan.plan import asha_max_t

        max_t = asha_max_t(resolved[0].flat() if resolved else {}, resolved[0] if resolved else None)
        frac = asha_fraction(sch.grace_period, sch.reduction_factor, max_t)
        then = f" (about {_duration(hours * frac)} of trial time)" if hours is not None else ""
        notes.append(f"ASHA (grace {sch.grace_period:g}, reduction {sch.reduction_factor:g}, up to {max_t:,} steps) "
                     f"stops most trials early: if it keeps 1 in {sch.reduction_factor:g} at each rung, the sweep "
                     f"takes about {frac:.0%} of these steps{then}")
    patience = {r.train.early_stop_patience for r in resolved if r.train.epochs and r.train.early_stop_patience}
    if patience:
        notes.append(f"the recipe stops a trial after {', '.join(map(str, sorted(patience)))} epochs without a "
                     f"better dev score; how soon is not known before it runs")
    if spec.budget.time_limit_s:
        cap = len(steps) * spec.budget.time_limit_s / 3600
        notes.append(f"each trial stops after {spec.budget.time_limit_s:g} s (at most {_duration(cap)} of trial "
                     f"time in all)")
    if not notes:
        return "none: every trial runs all its steps"
    return "the hours above count every trial to its last step, an upper bound; " + "; ".join(notes)


def asha_fraction(grace: int, eta: int, max_t: int) -> float:
    """The share of all trials' steps that ASHA runs when each rung (grace, grace x eta, ...) keeps 1 in eta."""
    if max_t <= 0 or grace >= max_t:
        return 1.0
    total, start, rung, keep = 0.0, 0, grace, 1.0
    while rung < max_t:
        total += keep * (rung - start)
        start, rung, keep = rung, rung * eta, keep / eta
    total += keep * (max_t - start)
    return total / max_t


def bench_figures(root: Optional[str] = None) -> list[dict]:
    """`rirlab bench --json` results of the step protocol on a GPU, training mode, under benchmarks/."""
    from pathlib import Path

    base = Path(root) if root else Path(__file__).resolve().parents[2] / BENCHMARKS_DIR
    found = []
    for path in sorted(base.rglob("*.json")) if base.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("protocol") == "step" and data.get("mode", "train") == "train" \
                and not str(data.get("device", "cpu")).startswith("cpu") and data.get("median_ms"):
            found.append({**data, "path": str(path)})
    return found


def gpu_projection(resolved: list, steps: list, keys: list, first: dict, timings: dict, gpu: float,
                   root: Optional[str] = None) -> str:
    """GPU hours projected from `rirlab bench --device cuda` figures of the trials' models: each trial's step time
    at its tokens per step (batch x padded length) from the model's figures (:func:`step_ms_at`), which is rough;
    or why there is no projection."""
    figures = bench_figures(root)
    models = sorted({r.model for r in resolved})
    by_model: dict[str, list] = {}
    for f in figures:
        by_model.setdefault(f.get("model"), []).append(f)
    have = [m for m in models if m in by_model]
    if not have:
        where = "benchmarks/ holds none" if not figures else f"none for {', '.join(models)} among {len(figures)}"
        bench = command("rirlab", "bench", "--model", models[0], "--device", "cuda", "--json",
                        f"{BENCHMARKS_DIR}/{models[0]}_cuda.json")
        return (f"not projected: no `rirlab bench --device cuda --json` figures ({where}); write one per model, "
                f"e.g. {bench}")
    hours, counted = 0.0, 0
    for k, r, n in zip(keys, resolved, steps):
        f, t = by_model.get(r.model), timings.get(k)
        if f is None or n is None or t is None:
            continue
        tokens = r.train.batch_size * sum(t.shape.padded)
        hours += n * step_ms_at(f, tokens) / 3.6e6
        counted += 1
    devices = sorted({str(f["device"]) for m in have for f in by_model[m]})
    missing = [m for m in models if m not in by_model]
    rest = f"; {len(resolved) - counted} trials not counted (no figure for {', '.join(missing)})" if missing else ""
    return (f"about {_duration(hours)} of trial time = {hours * (gpu or 1):,.3g} GPU-hours at "
            f"{gpu or 1:g} gpu per trial, from `rirlab bench --device cuda` figures of {', '.join(have)} on "
            f"{', '.join(devices)} by tokens per step (rough: interpolated between figures, never below the "
            f"smallest one's time){rest}")


def step_ms_at(figures: list[dict], tokens: int) -> float:
    """A training step's ms at ``tokens`` (batch x padded length) from one model's GPU step figures: interpolated
    between the figures' token counts; below the smallest, that figure's time (a small GPU step is mostly fixed
    cost: on an H100 RIR-EBT-GRC's 128 x 100 and 128 x 1000 steps took 64 and 171 ms, not 10x apart, and a
    ListOps batch of 128 x 33 trained at 69 ms per step); above the largest, its time per token."""
    points = sorted({f["batch"] * f["length"]: f["median_ms"] for f in figures}.items())
    if tokens <= points[0][0]:
        return points[0][1]
    for (t0, m0), (t1, m1) in zip(points, points[1:]):
        if tokens <= t1:
            return m0 + (m1 - m0) * (tokens - t0) / (t1 - t0)
    t, m = points[-1]
    return m * tokens / t


def _ms(ms: float) -> str:
    return f"{ms:,.0f} ms" if ms < 1000 else f"{ms / 1000:,.1f} s"


def _duration(hours: float) -> str:
    return f"{hours:,.1f} h" if hours >= 1 else f"{hours * 60:.1f} min" if hours * 60 >= 1 else f"{hours * 3600:.0f} s"


def _free_cores() -> tuple[int, str]:
    """(CPU cores the dry run may time with, why fewer than all): the cores this process may run on less the
    load of the last minute that is not its own. Threads that share busy cores with another process's threads
    wait for each other (a 2-thread step of a small model was 25x slower than its 1-thread one beside a
    2-thread trial on 2 cores), so a busy machine is timed with fewer threads."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:
        return cores, ""
    free = max(1, min(cores, int(cores - max(0.0, load - 1) + 0.5)))  # the 1: this process, timing soon
    return free, f"load {load:.1f} on {cores} cores" if free < cores else ""


def _time_step(resolved, device: str, budget_s: float, threads: int = 0, trial_threads: int = 0
               ) -> Optional[StepTiming]:
    """One training step of the resolved trial at its batch size, in ms (``StepTiming``; None when it cannot be
    built or run here). Timed at batch 1, 2, 8, 32, ... up to the trial's (at most TIMING_MAX_BATCH) while the
    next one is expected to fit in ``budget_s``; the trial's batch, when not reached, is extrapolated from the
    two largest (``_at_batch``). ``threads``: torch's CPU threads meanwhile (0: leave them); with one thread the
    step's process CPU time is taken, which other processes on the machine do not lengthen, else its wall time."""
    import time

    import torch

    from rirlab.models import registry as models
    from rirlab.perf import tune_allocator
    from rirlab.train import make_optimizer

    t = resolved.train
    start = time.monotonic()
    saved = torch.get_num_threads()
    try:
        tune_allocator()  # as a trial does
        shape = step_shape(resolved)
        model = models.get(resolved.model).build(resolved.model_cfg, shape.info).to(device)
        model.train()
        opt = make_optimizer(model, t)
        if threads:
            torch.set_num_threads(threads)
        clock = time.process_time if device == "cpu" and threads == 1 else time.perf_counter
        top = min(t.batch_size, TIMING_MAX_BATCH)
        n = 1
        timed = [(n, _measure(model, opt, shape.batch(n, device), resolved, device, clock))]
        while n < top:
            nxt = min(top, 2 if n == 1 else 4 * n)
            expect = _at_batch(timed, nxt)
            cost = expect if expect > 1000 else expect + min(3 * expect, 1000 * TIMING_REPEAT_S + expect)
            second = len(timed) == 1 and cost <= 1000 * TIMING_SECOND_S  # a fixed cost shows only with two
            if time.monotonic() - start + cost / 1000 > budget_s and not second:
                break
            n = nxt
            timed.append((n, _measure(model, opt, shape.batch(n, device), resolved, device, clock)))
        # the same batch again (a busy machine's steps vary run to run): the range the estimate gives
        repeats = [timed[-1][1]]
        big = shape.batch(timed[-1][0], device)
        while len(repeats) < TIMING_REPEATS and time.monotonic() - start + repeats[0] / 1000 <= budget_s:
            repeats.append(_measure(model, opt, big, resolved, device, clock))
    except Exception:  # noqa: BLE001 -- a model this machine cannot build or run at this size: no estimate for it
        return None
    finally:
        torch.set_num_threads(saved)
    base = timed[-1][1]
    spread = (min(repeats) / base, max(repeats) / base) if base > 0 else (1.0, 1.0)
    return StepTiming(_at_batch(timed, t.batch_size), tuple(timed), shape, threads, trial_threads or threads,
                      spread)


def _at_batch(timed, n: int) -> float:
    """ms of a step at batch ``n`` from (batch, ms) measurements, smallest batch first: the largest one's when it
    is ``n``, else the line through the two largest (a fixed cost per step plus a cost per example), kept between
    the largest one's time and that time scaled in proportion to the batch (an upper bound when a step has a
    fixed cost); in proportion from a single measurement."""
    b, ms = timed[-1]
    if n == b:
        return ms
    if len(timed) < 2:
        return ms * n / b
    a, ms_a = timed[-2]
    slope = (ms - ms_a) / (b - a)
    return min(max(ms + slope * (n - b), ms if n > b else 0.0), ms * n / b)


def _measure(model, opt, batch: dict, resolved, device: str, clock=None) -> float:
    """ms of one training step on ``batch`` by ``clock`` (default: wall time): after a warm-up step, the fastest
    of up to three that together take TIMING_REPEAT_S (this machine may be busy); a first step over a second is
    taken as it is (an overestimate)."""
    import time

    import torch

    clock = clock or time.perf_counter
    times = []
    for _ in range(4):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        _train_step(model, opt, batch, resolved)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(clock() - t0)
        if times[0] > 1.0 or sum(times[1:]) > TIMING_REPEAT_S:
            break
    return 1000 * min(times[1:] or times)


def _train_step(model, opt, batch: dict, resolved) -> None:
    """A training step as rirlab.train.Trainer.train_step takes it: the forward under the trial's precision, the
    task's loss (a token-level one for language modelling) plus the weighted halting loss, backward, gradient
    clipping, the optimiser's step."""
    import torch

    from rirlab.train import aux_loss_weight, training_loss

    t = resolved.train
    loss = training_loss(model, batch, t.precision, batch["tokens"].device, aux_loss_weight(resolved))[0]
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if t.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
    opt.step()
