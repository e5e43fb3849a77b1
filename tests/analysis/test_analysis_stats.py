"""Each cell's uncertainty and each comparison's test (issue 49; the sample std: issue 54 item 9), held to cases
worked out independently: scipy's own tests, an exact enumeration of a bootstrap, the binomial error by hand."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest
from scipy import stats as scipy_stats

from rirlab.analysis import stats as S
from rirlab.analysis import tables as T


def test_the_spread_is_the_sample_std():
    """Two seeds 50 and 60: the sample std 7.07 (papers' ddof 1), not numpy's population 5.00."""
    cell = S.summarise([50.0, 60.0], "mean")
    assert cell.sd == pytest.approx(math.sqrt(50.0)) and T.fmt_cell(cell, 2).startswith("55.00 ± 7.07 [")


def test_the_t_interval_is_scipys_without_a_split_size():
    cell = S.summarise([71.0, 74.5, 80.25], "mean")
    low, high = scipy_stats.t.interval(0.95, 2, loc=cell.mean, scale=scipy_stats.sem([71.0, 74.5, 80.25]))
    assert (cell.low, cell.high, cell.method) == (pytest.approx(low), pytest.approx(high), "t")


def test_the_binomial_standard_error_of_a_known_split_size():
    """95% on EBT Table 4's 1,444-pair split: sqrt(0.95 * 0.05 / 1444) = 0.005735 -> 0.5735 points."""
    assert S.binomial_se(95.0, 1444) == pytest.approx(0.57354, abs=1e-5)
    assert S.binomial_se(95.0, None) is None


def test_a_one_seed_cell_keeps_the_split_error():
    """One seed has no std but its accuracy on N examples has an interval: 95.02 on 864 pairs, +-1.96 x 0.740."""
    cell = S.summarise([95.02], "mean", examples=864)
    h = 1.959964 * 100 * math.sqrt(0.9502 * 0.0498 / 864)
    assert cell.sd is None and (cell.low, cell.high) == (pytest.approx(95.02 - h), pytest.approx(95.02 + h))
    assert T.fmt_cell(cell, 3) == f"95.02 [{95.02 - h:.2f}, {95.02 + h:.2f}] (n=1)" == "95.02 [93.57, 96.47] (n=1)"
    assert T.fmt_cell(S.summarise([95.02], "mean"), 3) == "95.02 (n=1)"  # no N: nothing to say


def test_the_t_interval_adds_the_split_error_in_quadrature():
    vals, n_examples = [80.0, 84.0, 90.0], 853
    cell = S.summarise(vals, "mean", examples=n_examples)
    se = math.sqrt(scipy_stats.tstd(vals) ** 2 / 3 + 100 ** 2 * (0.84666667 * 0.15333333) / n_examples)
    assert cell.high - cell.mean == pytest.approx(scipy_stats.t.ppf(0.975, 2) * se, rel=1e-6)


def test_a_cell_with_no_run_is_empty():
    assert S.summarise([], "mean", examples=100) is None and T.fmt_cell(None, 3) == T.EMPTY
    assert T.aggregate([float("nan"), None]) is None


def test_the_bootstrap_lands_on_the_exact_resampling_percentiles():
    """The percentile bootstrap of the mean of 4 seeds against the exact distribution of a resample's mean (all
    4^4 resamples, equally likely): its 2.5% and 97.5% points, where the CDF crosses them well inside an atom."""
    vals = [60.0, 71.0, 75.0, 90.0]
    means = sorted(sum(c) / 4 for c in itertools.product(vals, repeat=4))
    cdf = lambda x: sum(m <= x for m in means) / len(means)  # noqa: E731
    lo = next(m for m in means if cdf(m) >= 0.025)
    hi = next(m for m in means if cdf(m) >= 0.975)
    assert cdf(lo) - 0.025 > 0.003 and 0.025 - cdf(max(m for m in means if m < lo)) > 0.003  # no knife edge
    assert 0.975 - cdf(max(m for m in means if m < hi)) > 0.003 and cdf(hi) - 0.975 > 0.003
    assert S.bootstrap_interval(vals, "mean") == (lo, hi)
    cell = S.summarise(vals, "mean", ci="bootstrap")
    assert (cell.low, cell.high, cell.method) == (lo, hi, "bootstrap")


def test_welch_on_summary_statistics_is_scipys():
    """Ours (3 seeds) against the paper's EGT-GRC 11-operator cell 73.38 +- 6.80 over 3 runs."""
    test = S.welch(82.18, 8.34, 3, 73.38, 6.80, 3)
    ref = scipy_stats.ttest_ind_from_stats(82.18, 8.34, 3, 73.38, 6.80, 3, equal_var=False)
    assert (test.stat, test.p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
    assert test.verdict() == "consistent" and S.welch(95.0, 0.1, 3, 90.0, 0.1, 3).verdict() == "above"


def test_against_the_paper_counts_both_splits_errors():
    ours = S.summarise([94.0, 95.0, 96.0], "mean", examples=864)
    test = S.against_paper(ours, 93.87, 0.74, 3)
    split = S.binomial_se(95.0, 864) ** 2 + S.binomial_se(93.87, 864) ** 2
    assert test.se == pytest.approx(math.sqrt(1.0 / 3 + 0.74 ** 2 / 3 + split))
    assert test.df < scipy_stats.ttest_ind_from_stats(95, 1, 3, 93.87, 0.74, 3, equal_var=False).statistic * 100
    assert test.p > S.welch(95.0, 1.0, 3, 93.87, 0.74, 3).p  # the split errors widen it
    larger = S.against_paper(S.summarise([94.0, 95.0, 96.0], "mean", examples=5000), 93.87, 0.74, 3, 864)
    split = S.binomial_se(95.0, 5000) ** 2 + S.binomial_se(93.87, 864) ** 2  # ours on 5,000 pairs, theirs on 864
    assert larger.se == pytest.approx(math.sqrt(1.0 / 3 + 0.74 ** 2 / 3 + split))


def test_one_seed_against_the_paper_is_a_new_seed_against_their_mean():
    """A prediction interval: var = sd_paper^2 (1 + 1/3) + the two splits' binomial variances, df = 2."""
    ours = S.summarise([95.02], "mean", examples=864)
    test = S.against_paper(ours, 93.87, 0.74, 3)
    var = 0.74 ** 2 * (4 / 3) + S.binomial_se(95.02, 864) ** 2 + S.binomial_se(93.87, 864) ** 2
    assert (test.se, test.method) == (pytest.approx(math.sqrt(var)), "prediction")
    assert test.df == pytest.approx(var ** 2 / ((0.74 ** 2 * 4 / 3) ** 2 / 2))


def test_a_reference_without_std_or_seeds_is_not_tested():
    ours = S.summarise([90.0, 91.0], "mean", examples=1000)
    assert S.against_paper(ours, 89.64, None, 3) == "no std published"
    assert S.against_paper(ours, 89.64, 0.5, None) == "the paper's seeds are not stated"


def test_holm_adjusts_step_down():
    """By hand: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> kept at 0.06."""
    assert S.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_a_difference_is_paired_by_seed_when_both_rows_ran_the_same_seeds():
    row, base = {"0": 90.0, "1": 85.0, "2": 88.0}, {"0": 91.0, "1": 87.5, "2": 88.5}
    test = S.difference(row, base)
    ref = scipy_stats.ttest_rel([90.0, 85.0, 88.0], [91.0, 87.5, 88.5])
    assert test.method == "paired" and (test.stat, test.p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
    other = S.difference(row, {"3": 91.0, "4": 87.5})
    ref = scipy_stats.ttest_ind([90.0, 85.0, 88.0], [91.0, 87.5], equal_var=False)
    assert other.method == "welch" and other.p == pytest.approx(ref.pvalue)
    assert S.difference({"0": 90.0}, base) is None  # one seed: no spread to test with


CONFIGS = [({"task": "logic", "model": "ebt_grc"}, "ops_10"), ({"task": "logic", "model": "ebt_grc", "n_eval": 500}, "ops_12"),
           ({"task": "logic", "model": "ebt_grc", "max_eval_examples": 100}, "ops_11"),
           ({"task": "listops", "model": "ebt_grc"}, "test"), ({"task": "listops", "model": "ebt_grc"}, "args_10"),
           ({"task": "flipflop", "model": "gut"}, None)]


@pytest.mark.parametrize("config, split", CONFIGS)
def test_a_split_size_derived_from_the_logged_config_is_the_tasks_own(config, split):
    """Runs recorded before ``<split>/examples``: N from the params, as the task itself sizes the split."""
    from rirlab.tasks import registry as tasks
    from rirlab.trial import resolve

    cfg = resolve(config)
    split = split or cfg.task_cfg.eval_splits[0]
    params = {k: str(v) for k, v in cfg.flat().items()}
    rows = tasks.get(config["task"]).split_rows(cfg.task_cfg, split)
    cap = config.get("max_eval_examples")
    assert S.derived_examples(params, split) == (min(rows, cap) if cap else rows)
    assert S.derived_examples({**params, "imported": str([split])}, split) is None  # a file's rows: unknown


def runs(cells: dict, task: str = "logic") -> pd.DataFrame:
    """A runs DataFrame as rirlab.analysis.runs reads it: ``{(variant, seed): {split: accuracy}}``."""
    rows = []
    for (variant, seed), metrics in cells.items():
        rows.append({"run_id": f"{variant}{seed}", "name": f"{variant},seed={seed}", "status": "FINISHED",
                     "swept": {"variant": variant, "seed": seed}, "early_stopped": False, "param.task": task,
                     "param.model": variant.lower().replace("-", "_"), "param.seed": str(seed),
                     **{f"metric.{s}/accuracy": v for s, v in metrics.items()}})
    return pd.DataFrame(rows)


def test_a_table_tests_each_paper_cell_and_says_how():
    df = runs({("EGT-GRC", 1): {"ops_10": 72.09}, ("EGT-GRC", 2): {"ops_10": 82.83},
               ("EBT-GRC", 0): {"ops_10": 94.81}})
    grid = T.ablation(df, task="logic", reference="ebt_nlp:table4_logic", splits=[("ops_10", "10")], n_expected=3)
    body = {row[0]: row[1] for row in grid.body}
    ours = S.summarise([72.09, 82.83], "mean", examples=1444)
    test = S.against_paper(ours, 75.79, 6.10, 3)
    assert body["EGT-GRC"] == T.fmt_cell(ours, 3) and body["EGT-GRC"].endswith("(n=2)")
    assert body["paper: EGT-GRC"] == f"75.79 ± 6.10 (Δ +1.67; {T.fmt_p(test.p)}, consistent)"
    one = S.against_paper(S.summarise([94.81], "mean", examples=1444), 94.95, 0.15, 3)
    assert one.method == "prediction" and body["paper: EBT-GRC"] == f"94.95 ± 0.15 (Δ −0.14; {T.fmt_p(one.p)}, consistent)"
    footer = "\n".join(grid.footer)
    assert "sample std (ddof 1)" in footer and "Welch's t" in footer and "N, test examples" in footer
    assert "10: 1,444 (derived from the trial config" in footer and "2 cells tested at once" in footer
    holm = T.ablation(df, task="logic", reference="ebt_nlp:table4_logic", splits=[("ops_10", "10")],
                      correction="holm")
    assert "Holm-corrected over them" in "\n".join(holm.footer)
    adjusted = S.holm([test.p, S.against_paper(S.summarise([94.81], "mean", examples=1444), 94.95, 0.15, 3).p])
    assert f"{T.fmt_p(adjusted[0])}, consistent" in {r[0]: r[1] for r in holm.body}["paper: EGT-GRC"]


def test_the_csv_has_a_column_per_quantity():
    df = runs({("EBT-GRC", 0): {"ops_11": 95.02}, ("EBT-GRC", 1): {"ops_11": 94.0}})
    csv = T.render(T.ablation(df, task="logic", splits=[("ops_11", "11")], stat="mean"), "csv")
    frame = pd.read_csv(__import__("io").StringIO(csv))
    rec = frame.iloc[0]
    assert {"n", "centre", "sd", "examples", "split_se", "ci_low", "ci_high", "ci"} <= set(frame.columns)
    assert (rec["n"], rec["examples"], rec["ci"]) == (2, 864, "t")
    assert rec["sd"] == pytest.approx(scipy_stats.tstd([95.02, 94.0]))


def test_compare_to_adds_each_rows_paired_difference():
    df = runs({("A", 0): {"ops_10": 90.0}, ("A", 1): {"ops_10": 85.0}, ("A", 2): {"ops_10": 88.0},
               ("B", 0): {"ops_10": 91.0}, ("B", 1): {"ops_10": 87.5}, ("B", 2): {"ops_10": 88.5}})
    grid = T.ablation(df, task="logic", splits=[("ops_10", "10")], compare_to="B")
    diff = {r[0]: r[1] for r, k in zip(grid.body, grid.kinds) if k == "difference"}
    test = S.difference({"0": 90.0, "1": 85.0, "2": 88.0}, {"0": 91.0, "1": 87.5, "2": 88.5})
    low, high = test.interval()
    assert diff == {f"A {T.MINUS} B": f"{T.fmt_diff(test.diff)} [{T.fmt_signed(low)}, {T.fmt_signed(high)}] "
                                      f"(paired, {T.fmt_p(test.p)})"}
    with pytest.raises(T.UserError, match="--compare-to 'C': no row of this table is named so; rows: A; B"):
        T.ablation(df, task="logic", splits=[("ops_10", "10")], compare_to="C")
