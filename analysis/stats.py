"""The statistics of a sweep's tables, Pareto points and curves.

* One centre over seeds (``--stat``; default the median, as the papers report ListOps), so a curve and a table
  cell of one configuration agree; the spread is the sample std (ddof 1), as papers report it.
* Each cell's 95% interval counts two sources of error: seed-to-seed variation (Student's t over the seeds, or with
  ``ci="bootstrap"`` a percentile bootstrap of the centre over seeds) and the test split's own sampling error (an
  accuracy on N examples has the binomial standard error sqrt(p(1 - p) / N); a one-seed cell keeps this one).
* A cell against a published one: Welch's t on the summary statistics, each side's split error added (the
  Welch-Satterthwaite degrees of freedom); Holm's correction for the many cells of a table.
* A row against a base row of ours: the difference by seed (paired) where both ran the same seeds, else Welch.

Import-light: the CLI reads the defaults before it imports pandas; numpy and scipy load inside the functions.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Optional, Sequence

STATS = ("median", "mean")
DEFAULT_STAT = "median"
CIS = ("t", "bootstrap")  # --ci: how a cell's interval counts the seeds
DEFAULT_CI = "t"
CORRECTIONS = ("none", "holm")  # --correction: of the p values of a table's comparisons with the paper
LEVEL = 0.95  # every interval; a comparison is "consistent" at ALPHA = 1 - LEVEL
ALPHA = 1 - LEVEL
RESAMPLES = 10_000  # bootstrap resamples, drawn from numpy's default_rng(BOOTSTRAP_SEED): the same table every time
BOOTSTRAP_SEED = 0


def centre(values, stat: str = DEFAULT_STAT, axis=None):
    """``stat`` of a pandas Series (a number) or, with ``axis=1``, of each row of a DataFrame (a Series)."""
    if stat not in STATS:
        raise ValueError(f"stat {stat!r}: one of {', '.join(STATS)}")
    kwargs = {} if axis is None else {"axis": axis}
    return values.median(**kwargs) if stat == "median" else values.mean(**kwargs)


def centre_of(values: Sequence[float], stat: str = DEFAULT_STAT) -> float:
    """:func:`centre` of a few floats without a pandas Series (one a table cell: thousands at 1,000 runs): numpy's
    median, or the sum over the count, as pandas computes them for float values without NaN."""
    import numpy as np

    if stat not in STATS:
        raise ValueError(f"stat {stat!r}: one of {', '.join(STATS)}")
    arr = np.asarray(values, dtype=float)
    return float(np.median(arr) if stat == "median" else arr.sum() / len(arr))


def centre_groups(frame, by, stat: str = DEFAULT_STAT):
    """:func:`centre` of every other column of ``frame`` within each group of equal ``by`` (a column, or a list of
    them; one groupby, not a mask per group), and the rows of each group: (a DataFrame indexed by the groups, a Series
    of counts)."""
    if stat not in STATS:
        raise ValueError(f"stat {stat!r}: one of {', '.join(STATS)}")
    groups = frame.groupby(by, sort=isinstance(by, list))  # several keys: sorted, e.g. steps in order
    return (groups.median() if stat == "median" else groups.mean()), groups.size()


def sample_sd(values: Sequence[float]) -> Optional[float]:
    """The sample standard deviation (ddof 1); None for fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))


def binomial_se(accuracy: float, examples: Optional[int]) -> Optional[float]:
    """Standard error (percentage points) of an accuracy (%) measured on ``examples`` test examples; None if unknown."""
    if not examples:
        return None
    p = min(max(accuracy / 100.0, 0.0), 1.0)
    return 100.0 * math.sqrt(p * (1 - p) / examples)


def quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (the normal's for inf)."""
    from scipy import special  # (scipy.stats itself costs over a second of import for `rirlab tables`)

    q = 1 - (1 - level) / 2
    return float(special.ndtri(q) if math.isinf(df) else special.stdtrit(df, q))


@dataclasses.dataclass
class Summary:
    """One table cell over its seeds: centre, sample std, the test split's size and error, a 95% interval."""

    values: tuple  # per seed
    centre: float
    mean: float
    sd: Optional[float]  # sample std; None for one seed
    examples: Optional[int]  # N: test examples of the split (None: not recorded and not derivable)
    split_se: Optional[float]  # binomial standard error at the mean on N examples
    low: Optional[float] = None
    high: Optional[float] = None
    method: str = ""  # t | bootstrap | binomial ("" : no interval)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def seed_var(self) -> Optional[float]:
        """Variance of the mean over seeds (sd^2 / n); None for one seed."""
        return None if self.sd is None else self.sd ** 2 / self.n


def summarise(values: Sequence[float], stat: str = DEFAULT_STAT, examples: Optional[int] = None, ci: str = DEFAULT_CI,
              level: float = LEVEL) -> Optional[Summary]:
    """A cell of ``values`` (one per seed); None when there are none. Its interval: ``t`` the mean's, Student t
    with n - 1 degrees of freedom on sqrt(sd^2/n + split_se^2); ``bootstrap`` percentiles of the centre over seeds
    resampled with replacement, each resample shifted by a normal draw of the split's error; one seed: the
    binomial interval of its accuracy alone (normal approximation)."""
    vals = tuple(float(v) for v in values)
    if not vals:
        return None
    mean = sum(vals) / len(vals)
    s = Summary(vals, centre_of(vals, stat), mean, sample_sd(vals), examples,
                binomial_se(mean, examples))
    split_var = (s.split_se or 0.0) ** 2
    if s.n == 1:
        if s.split_se:
            h = quantile(math.inf, level) * s.split_se
            s.low, s.high, s.method = mean - h, mean + h, "binomial"
    elif ci == "bootstrap":
        s.low, s.high = bootstrap_interval(vals, stat, s.split_se, level)
        s.method = "bootstrap"
    else:
        h = quantile(s.n - 1, level) * math.sqrt(s.seed_var + split_var)
        s.low, s.high, s.method = mean - h, mean + h, "t"
    return s


def bootstrap_interval(values: Sequence[float], stat: str = DEFAULT_STAT, split_se: Optional[float] = None,
                       level: float = LEVEL, resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap of ``stat`` over the seeds (resampled with replacement; each resample plus a normal draw
    of ``split_se`` when given), from a fixed seed."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    draws = arr[rng.integers(0, len(arr), size=(resamples, len(arr)))]  # (resamples, seeds)
    reps = np.median(draws, axis=1) if stat == "median" else draws.mean(axis=1)  # (resamples,)
    if split_se:
        reps = reps + rng.normal(0.0, split_se, resamples)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(reps, [tail, 100 - tail])
    return float(low), float(high)


# ---------------------------------------------------------------- tests of a difference

@dataclasses.dataclass
class Test:
    """A difference with its standard error: t (or z where every part's variance is known), df, two-sided p."""

    diff: float
    se: float
    df: float  # inf: a z test
    method: str  # welch | paired | prediction
    p_adjusted: Optional[float] = None  # after a correction over the table (Holm)

    @property
    def stat(self) -> float:
        return self.diff / self.se

    @property
    def p(self) -> float:
        from scipy import special

        tail = special.ndtr(-abs(self.stat)) if math.isinf(self.df) else special.stdtr(self.df, -abs(self.stat))
        return float(2 * tail)

    def interval(self, level: float = LEVEL) -> tuple[float, float]:
        h = quantile(self.df, level) * self.se
        return self.diff - h, self.diff + h

    def verdict(self, alpha: float = ALPHA) -> str:
        """``consistent`` at ``alpha`` (the corrected p where there is one), else ``above`` / ``below``."""
        p = self.p if self.p_adjusted is None else self.p_adjusted
        return "consistent" if p >= alpha else ("above" if self.diff > 0 else "below")


def combined(diff: float, parts: list[tuple[float, float]], method: str) -> Optional[Test]:
    """A Test of ``diff`` whose variance is the sum of ``parts`` (variance, degrees of freedom; inf for a variance
    known, as a binomial one); the Welch-Satterthwaite df. None when the variance is zero."""
    var = sum(v for v, _ in parts)
    if var <= 0:
        return None
    finite = sum(v * v / df for v, df in parts if not math.isinf(df) and v > 0)
    return Test(diff, math.sqrt(var), var * var / finite if finite else math.inf, method)


def welch(mean1: float, sd1: float, n1: int, mean2: float, sd2: float, n2: int,
          known_var: float = 0.0) -> Optional[Test]:
    """Welch's t of mean1 - mean2 from summary statistics (sample std, seeds), plus a variance known exactly
    (the test splits' binomial errors); without it, scipy's ``ttest_ind_from_stats(..., equal_var=False)``."""
    parts = [(sd1 ** 2 / n1, n1 - 1), (sd2 ** 2 / n2, n2 - 1), (known_var, math.inf)]
    return combined(mean1 - mean2, parts, "welch")


def against_paper(ours: Summary, centre: float, sd: Optional[float], seeds: Optional[int],
                  paper_examples: Optional[int] = None):
    """Our cell against a published one (its centre, std over ``seeds`` runs): a Test, or a string saying why
    none. Both test splits' binomial errors count (the paper's at its centre, on ``paper_examples``, by default a
    split of our size N: its std over seeds tested on one file does not hold that file's own error). One seed of
    ours: its seed spread is taken to be the paper's (a new seed against the mean of theirs)."""
    if sd is None:
        return "no std published"
    if not seeds or seeds < 2:
        return "the paper's seeds are not stated"
    theirs = binomial_se(centre, paper_examples or ours.examples) if ours.split_se is not None else None
    split_var = (ours.split_se or 0.0) ** 2 + (theirs or 0.0) ** 2
    if ours.n >= 2:
        test = welch(ours.mean, ours.sd, ours.n, centre, sd, seeds, split_var)
    else:
        test = combined(ours.mean - centre, [(sd ** 2 * (1 + 1 / seeds), seeds - 1), (split_var, math.inf)],
                        "prediction")
    return test or "no spread on either side"


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p values, in the given order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def difference(row: dict, base: dict) -> Optional[Test]:
    """Row minus base row, each ``{seed: value}``: paired by seed where both ran the same seeds (two or more),
    else Welch's t of the two means (two seeds or more each); None where neither applies."""
    if len(row) >= 2 and set(row) == set(base):
        d = [row[k] - base[k] for k in sorted(row)]
        sd = sample_sd(d)
        return combined(sum(d) / len(d), [(sd ** 2 / len(d), len(d) - 1)], "paired")
    a, b = list(row.values()), list(base.values())
    if len(a) < 2 or len(b) < 2:
        return None
    return welch(sum(a) / len(a), sample_sd(a), len(a), sum(b) / len(b), sample_sd(b), len(b))


# ---------------------------------------------------------------- N of a split

# The test splits' sizes for runs recorded before trials logged ``<split>/examples``: where the task fixes them
# from the logged config (generated splits: n_eval, ListOps's n_test; logic at the real files' sizes), capped by
# ``max_eval_examples``. tests/analysis/test_analysis_stats.py holds these equal to the tasks' own ``split_rows``.
LOGIC_TEST_ROWS = {7: 4707, 8: 3347, 9: 2230, 10: 1444, 11: 864, 12: 853}  # rirlab.tasks.logic.TEST_SIZES


def _int(value) -> Optional[int]:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return None


def derived_examples(params: dict, split: str) -> Optional[int]:
    """N of ``split`` from a trial's logged config (params as strings), where it is deterministic; else None."""
    if split in re.findall(r"[\w.-]+", str(params.get("imported") or "")):
        return None  # an imported file: its rows, which the config does not say
    task, n_eval = params.get("task"), _int(params.get("n_eval"))
    if task == "logic" and split.startswith("ops_") and split[4:].isdigit():
        n = n_eval or LOGIC_TEST_ROWS.get(int(split[4:]))
    elif task == "listops":
        n = _int(params.get("n_test")) if split == "test" else n_eval
    elif task == "flipflop":
        n = n_eval
    else:
        return None
    cap = _int(params.get("max_eval_examples"))
    return min(n, cap) if n and cap else n
