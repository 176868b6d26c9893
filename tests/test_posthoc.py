"""gmts_recipe.posthoc: the pure statistics on hand-made inputs with exact answers, the numbers the documentation
shows recomputed from the committed sweep files, and check.py --power."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from gmts_recipe import posthoc
from gmts_recipe.stats import seeds_for_power

ROOT = Path(__file__).resolve().parent.parent


def test_fixed_effect_pool_weights_each_test_by_its_precision():
    # means 2 and 3, each with variance 2 / 2 seeds = 1: equal weights, se sqrt(1/2), Q = 0.25 + 0.25
    out = posthoc.fixed_effect_pool([[1, 3], [2, 4]])
    assert out["delta"] == pytest.approx(2.5)
    assert out["se"] == pytest.approx(2 ** -0.5)
    assert out["low"] == pytest.approx(2.5 - 1.959963985 * 2 ** -0.5)
    assert out["q"] == pytest.approx(0.5)
    assert out["p_heterogeneity"] == pytest.approx(scipy_stats.chi2.sf(0.5, 1))
    assert out["n_seeds"] == 4
    # a more precise test pulls the pooled mean toward itself: variances 1 and 0.25 -> weights 1 and 4
    out = posthoc.fixed_effect_pool([[1, 3], [2.5, 3.5]])
    assert out["delta"] == pytest.approx((1 * 2 + 4 * 3) / 5)


def test_fixed_effect_pool_refuses_a_single_test_or_no_spread():
    with pytest.raises(ValueError):
        posthoc.fixed_effect_pool([[1, 2, 3]])
    with pytest.raises(ValueError):
        posthoc.fixed_effect_pool([[1, 1], [2, 3]])


def test_holm_adjusts_step_down_and_keeps_order():
    assert posthoc.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert posthoc.holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])
    assert posthoc.holm([0.001]) == pytest.approx([0.001])


def test_pearson_p_is_scipys():
    rng = np.random.default_rng(3)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    r = scipy_stats.pearsonr(x, y)
    assert posthoc.pearson_p(float(r.statistic), 12) == pytest.approx(float(r.pvalue))
    with pytest.raises(ValueError):
        posthoc.pearson_p(0.5, 2)


def test_without_seeds_drops_the_named_seeds_and_says_how_far_the_mean_moves():
    out = posthoc.without_seeds([1, 2, 3], [0.1, 0.2, 0.9], [3])
    assert out["delta"] == pytest.approx(0.15)
    assert out["shift"] == pytest.approx(0.4 - 0.15)
    assert out["dropped"] == [3] and out["n_seeds"] == 2


def test_signed_rank_p_exact_on_five_positive_deltas():
    assert posthoc.signed_rank_p([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)


def test_evaluation_noise_share():
    # each seed: task variance 2 over 2 tasks = 1; the seeds' means 1 and 5: variance 8
    assert posthoc.evaluation_noise_share([[0, 2], [4, 6]]) == pytest.approx(1 / 8)


def test_arms_correlation_and_seeds_to_decide():
    assert posthoc.arms_correlation([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    d = [0.05, -0.03, 0.01, 0.04, -0.02]
    assert posthoc.seeds_to_decide(d, 0.013) == seeds_for_power(d, 0.0065, power=0.5)


def test_collapsed_seeds_by_rule():
    cell = lambda seed, ets: {"variant": "v", "learning_rate": 1e-4, "seed": seed,  # noqa: E731
                              "arms": {"ets": {"verdict": ets}, "gmts": {"verdict": "moved"}}}
    summary = {"name": "unit", "primary": {"comparison": "gmts - ets", "variant": "v", "learning_rate": 1e-4,
                                           "seeds_done": [1, 2, 3], "per_seed": [0.1, 0.2, 0.3]},
               "cells": [cell(1, "moved"), cell(2, "collapsed"), cell(3, "flat")]}
    assert posthoc.collapsed_seeds(summary) == [2]


@pytest.fixture(scope="module")
def committed():
    read = lambda name: json.loads((ROOT / "results" / name / "sweep.json").read_text())  # noqa: E731
    tests = [("First", read("qwen")), ("Confirmatory", read("confirm"))]
    mechanism = json.loads((ROOT / "results" / "confirm" / "mechanism.json").read_text())
    return posthoc.posthoc(tests, ("pilot", read("coupled")), mechanism,
                           [ROOT / "results" / "qwen", ROOT / "results" / "confirm"])


def test_the_committed_numbers(committed):
    """The values an independent recomputation gave for the committed sweeps."""
    pooled = committed["pooled"]
    assert [round(100 * pooled[k], 2) for k in ("delta", "low", "high")] == [1.16, 0.26, 2.05]
    assert round(pooled["p_heterogeneity"], 2) == 0.33
    every = committed["all_seeds"]  # one t interval over the 119 seeds, each weighted alike
    assert [round(100 * every[k], 2) for k in ("delta", "low", "high")] == [1.08, 0.16, 1.99]
    drop = committed["without_collapsed"]
    assert drop["dropped"] == [227]
    assert [round(100 * drop[k], 2) for k in ("delta", "low", "high")] == [0.63, -0.25, 1.50]
    assert round(100 * drop["shift"], 2) == 0.28
    assert round(committed["signed_rank_p"], 2) == 0.10
    assert [round(m["holm"], 3) for m in committed["mechanism"][:2]] == [0.050, 0.069]
    assert len(committed["mechanism"]) == 8
    records = committed["records"]
    assert round(posthoc.evaluation_noise_share(records["task_deltas"]), 2) == 0.03
    assert round(posthoc.arms_correlation(records["a"], records["b"]), 2) == 0.15


def test_check_power_prints_the_seeds_a_decision_needs():
    out = subprocess.run([sys.executable, "check.py", "--power", "results/coupled/sweep.json"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Seeds for 80% power" in out.stdout and "106 at +1.3" in out.stdout
    assert "of the per-seed variance" in out.stdout


def test_check_power_refuses_a_results_file_in_one_line():
    out = subprocess.run([sys.executable, "check.py", "--power", "results/quickstart-cpu/results.json"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "--power reads a sweep.json" in out.stderr


def test_sweep_note_counts_collapses_per_arm():
    from gmts_recipe.sweep.report import collapse_counts

    cells = [{"seed": 1, "arms": {"ets": {"verdict": "collapsed"}, "gmts": {"verdict": "moved"}}},
             {"seed": 2, "arms": {"ets": {"verdict": "flat"}}}]
    assert collapse_counts(cells, ["ets", "gmts"]) == "Collapsed below the base: ets 1 of 2 (seed 1); gmts 0 of 1."


def test_headline_figure_marks_the_collapsed_seed(tmp_path):
    from gmts_recipe import plots

    confirm = json.loads((ROOT / "results" / "confirm" / "sweep.json").read_text())
    assert plots.collapsed_in(confirm, list(range(200, 300)), ("gmts", "ets")) == {227: ["ets"]}
    out = tmp_path / "h.png"
    assert plots.main(["--tests", f"Confirmatory={ROOT}/results/confirm/sweep.json",
                       f"First={ROOT}/results/qwen/sweep.json", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
