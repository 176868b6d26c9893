"""gmts_recipe.posthoc: the pure statistics on hand-made inputs with exact answers, the numbers the documentation
shows recomputed from the committed sweep files, and check.py --power."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from scipy import stats as scipy_stats

from gmts_recipe import posthoc
from gmts_recipe.stats import seeds_for_power
from gmts_recipe.sweep.summary import training_reward_fell

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


def test_robust_centres_on_hand_made_deltas():
    # Huber: with [0, 1, 2, 3, 4, 100] the MAD is 1.5 around the median 2.5, so c s = 1.345 x 1.4826 x 1.5 clips
    # only the runaway 100; the estimate solves (0 + 1 + 2 + 3 + 4 - 5 mu) + c s = 0
    x = [0, 1, 2, 3, 4, 100]
    cs = posthoc.HUBER_C * 1.482602218505602 * 1.5
    assert posthoc.huber_location(x) == pytest.approx((10 + cs) / 5, abs=1e-9)
    assert posthoc.huber_location([1, 2, 3, 4]) == pytest.approx(2.5)  # nothing clipped: the mean
    assert posthoc.huber_location([5, 5, 5]) == 5  # no spread: the median
    # Hodges-Lehmann: the Walsh averages of [0, 0, 10] are 0, 0, 0, 5, 5, 10
    assert posthoc.hodges_lehmann([0, 0, 10]) == pytest.approx(2.5)
    assert posthoc.hodges_lehmann([1, 2, 3]) == pytest.approx(2)
    ten = list(range(10)) + [1000]  # 10% of 11 cut from each end: one value each side
    assert posthoc.trimmed_mean(ten) == pytest.approx(np.mean(range(1, 10)))
    rc = posthoc.robust_centres(x)
    assert rc["mean"] == pytest.approx(110 / 6) and rc["n_seeds"] == 6 and rc["huber"] < rc["mean"]


def test_partial_correlation_is_the_textbook_formula_with_n_minus_3_df():
    rng = np.random.default_rng(7)
    z = rng.normal(size=40)
    x, y = z + rng.normal(size=40), z + 0.5 * rng.normal(size=40)
    r = lambda a, b: np.corrcoef(a, b)[0, 1]  # noqa: E731
    want = (r(x, y) - r(x, z) * r(y, z)) / np.sqrt((1 - r(x, z) ** 2) * (1 - r(y, z) ** 2))
    out = posthoc.partial_correlation(x, y, z)
    assert out["r"] == pytest.approx(want) and out["n"] == 40
    t = want * np.sqrt(37 / (1 - want**2))
    assert out["p"] == pytest.approx(2 * scipy_stats.t.sf(abs(t), 37))
    with pytest.raises(ValueError):
        posthoc.partial_correlation([1, 2, 3], [1, 2, 3], [1, 2, 3])


def test_share_confound_reads_what_the_share_goes_with():
    zero_spread = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]
    share = [2 * v for v in zero_spread]  # the share follows the run's zero-spread groups exactly
    gap = [1.0, 0.5, 0.8, 0.1, 0.3, -0.2]
    own = [0.5, 0.4, 0.6, 0.3, 0.2, 0.5]
    out = posthoc.share_confound(share, [v + 0.01 * (-1) ** i for i, v in enumerate(zero_spread)], own, gap)
    assert out["n"] == 6 and out["zero_spread"] > 0.99
    assert out["gap"]["r"] == pytest.approx(scipy_stats.pearsonr(share, gap).statistic)
    assert out["own_pass"] == pytest.approx(scipy_stats.pearsonr(share, own).statistic)
    assert abs(out["gap_given_zero_spread"]["r"]) <= 1


@given(st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_reward_fall_is_what_training_reward_fell_compares(rewards):
    log = [{"step": i + 1, "reward": r} for i, r in enumerate(rewards)]
    fall = posthoc.reward_fall(log)
    assert fall["drop"] == pytest.approx(fall["early"] - fall["late"])
    assert (fall["late"] < fall["early"]) == training_reward_fell(log)
    assert posthoc.reward_fall([{"step": 1}]) is None


def test_fall_story_finds_the_step_from_which_most_answers_hit_the_cap():
    cut = [0.1, 0.2, 0.6, 0.3, 0.8, 0.9, 1.0]
    reward = [0.5, 0.6, 0.4, 0.47, 0.2, 0.08, 0.39]
    log = [{"step": i + 1, "reward": r, "completions/clipped_ratio": c} for i, (r, c) in enumerate(zip(reward, cut))]
    st_ = posthoc.fall_story(log)
    assert (st_["onset_step"], st_["before_step"], st_["before_reward"], st_["before_cut"]) == (5, 4, 0.47, 0.3)
    assert (st_["reward_low"], st_["reward_high"], st_["cut_low"], st_["last_step"]) == (0.08, 0.39, 0.8, 7)
    calm = [{**row, "completions/clipped_ratio": 0.1} for row in log]
    st_ = posthoc.fall_story(calm)
    assert st_["onset_step"] is None and st_["cut_max"] == 0.1 and st_["first_step"] == 1  # fewer than 10 steps


def test_fall_line_names_each_fall_and_the_large_ones():
    falls = [{"seed": 3, "arm": "ets", "drop": 0.2}, {"seed": 4, "arm": "ets", "drop": 0.002},
             {"seed": 4, "arm": "gmts", "drop": 0.01}]
    line = posthoc.fall_line({"seeds": [1, 2, 3, 4], "falls": falls}, ["gmts", "ets"])
    assert "in 1 of 4 GMTS runs, by 0.010 (seed 4); in 2 of 4 ETS runs, by 0.200 (seed 3), 0.002 (seed 4)" in line
    assert line.endswith("By more than 0.05: GMTS 0, ETS 1 (seed 3).")


def test_a_fresh_test_of_seeds_to_decide_seeds_is_rarely_undecided():
    """seeds_to_decide's docstring: at that many seeds the t interval rarely holds both thresholds; simulated with
    normal deltas of the committed confirmatory test's spread, at true gaps between and at the thresholds."""
    confirm = json.loads((ROOT / "results" / "confirm" / "sweep.json").read_text())
    d = np.asarray(confirm["primary"]["per_seed"])
    n = posthoc.seeds_to_decide(d, 0.013)
    rng = np.random.default_rng(0)
    crit = scipy_stats.t.ppf(0.975, n - 1)
    for gap in (0.0, 0.0065, 0.013):
        x = rng.normal(gap, d.std(ddof=1), (2000, n))
        half = crit * x.std(axis=1, ddof=1) / np.sqrt(n)
        undecided = np.mean((x.mean(axis=1) - half <= 0) & (x.mean(axis=1) + half >= 0.013))
        assert undecided < 0.1, (gap, undecided)


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


def test_the_committed_numbers_of_the_write_up(committed):
    """The numbers an independent review gave for the write-up: the pooled estimate without seed 227, the robust
    centres, the confound of ETS's zero-advantage share, the control, and the size of every fall in training reward."""
    without = committed["pooled_without_collapsed"]  # the fixed-effect pool, seed 227 out of the confirmatory test
    assert [round(100 * without[k], 2) for k in ("delta", "low", "high")] == [0.87, 0.08, 1.65]
    assert without["n_seeds"] == 118
    rc = committed["robust"]
    assert [round(100 * rc[k], 2) for k in ("trimmed_mean", "huber", "hodges_lehmann")] == [0.61, 0.60, 0.66]
    c = committed["confound"]
    assert (round(c["zero_spread"], 2), round(c["own_pass"], 2), round(c["gap"]["r"], 2)) == (0.90, 0.25, -0.27)
    assert round(c["gap_given_zero_spread"]["r"], 2) == 0.09 and round(c["gap_given_zero_spread"]["p"], 2) == 0.37
    controls = {e["comparison"]: e for e in committed["controls"]}
    assert round(100 * controls["ets_nz - ets"]["delta"], 1) == 1.3 and round(100 * controls["gmts - ets_nz"]["delta"], 1) == -0.1
    falls = committed["records"]["falls"]
    large = sorted((f["arm"], f["seed"]) for f in falls if f["drop"] > posthoc.LARGE_FALL)
    assert large == [("ets", 227), ("ets", 297)]
    assert sorted(round(f["drop"], 3) for f in falls if f["drop"] <= 0.01) == [0.002, 0.006]
    story = next(f["story"] for f in falls if (f["arm"], f["seed"]) == ("ets", 227))
    assert (story["onset_step"], story["before_step"], story["last_step"]) == (33, 32, 40)
    assert (round(story["reward_low"], 2), round(story["reward_high"], 2), round(story["before_reward"], 2)) == \
        (0.08, 0.39, 0.47)
    assert round(story["cut_low"], 2) == 0.80


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
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


@pytest.mark.slow  # draws the headline figure from two committed sweeps (8 s)
def test_headline_figure_marks_the_collapsed_seed(tmp_path):
    from gmts_recipe import plots

    confirm = json.loads((ROOT / "results" / "confirm" / "sweep.json").read_text())
    assert plots.collapsed_in(confirm, list(range(200, 300)), ("gmts", "ets")) == {227: ["ets"]}
    out = tmp_path / "h.png"
    assert plots.main(["--tests", f"Confirmatory={ROOT}/results/confirm/sweep.json",
                       f"First={ROOT}/results/qwen/sweep.json", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_a_falls_share_at_the_cap_is_printed_as_it_is_never_rounded_up_past_a_bound():
    """Seed 227's ETS run: from step 33 on, at least 51 of 64 answers (79.7%) ran to the cap, which "at least 80%"
    overstated."""
    story = {"onset_step": 33, "cut_low": 51 / 64, "before_step": 32, "before_cut": 0.48, "reward_low": 0.08,
             "reward_high": 0.39, "last_step": 40, "before_reward": 0.47}
    fall = {"seed": 227, "arm": "ets", "pass@1": 0.254, "verdict": "collapsed", "early": 0.48, "late": 0.26,
            "cap": 256, "story": story}
    (line,) = posthoc.fall_stories({"falls": [fall]})
    assert "at least 79.7% of its completions ran to the 256-token cap" in line and "80%" not in line
