"""Statistics: the paired bootstrap with a real shift, the two-level pooled bootstrap over seeds, the comparisons."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_recipe import stats
from gmts_recipe.stats import compare, paired_delta, pooled_delta

SCORES = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])


def shifted(b: np.ndarray, shift: float, spread: float, rng: np.random.Generator) -> np.ndarray:
    """a = b + shift + noise whose mean is exactly zero (pairs of +spread and -spread), so mean(a - b) == shift."""
    noise = np.repeat([[spread, -spread]], b.size // 2, axis=0).ravel()
    return b + shift + rng.permutation(noise)


# ---------------------------------------------------------------- the one-level paired bootstrap with a real shift
@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from([-0.3, -0.1, 0.1, 0.3]))
def test_paired_interval_holds_a_nonzero_shift_and_excludes_zero_when_it_is_large(seed, shift):
    rng = np.random.default_rng(seed)
    b = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=120)
    d = paired_delta(shifted(b, shift, 0.25, rng), b, seed=seed)
    assert d["delta"] == pytest.approx(shift)
    assert d["low"] < shift < d["high"]  # a real interval (the noise has spread), around the true shift
    assert (d["low"] > 0) if shift > 0 else (d["high"] < 0)  # 0.1 is 4.4 standard errors here: excluded
    assert d["high"] - d["low"] == pytest.approx(2 * 1.96 * 0.25 / np.sqrt(120), rel=0.2)


def test_paired_interval_covers_the_true_shift_about_95_percent_of_the_time(monkeypatch):
    monkeypatch.setattr(stats, "N_RESAMPLES", 2000)
    rng = np.random.default_rng(0)
    covered = []
    for rep in range(200):  # tasks drawn from a population whose true mean difference is 0.05
        b = rng.binomial(4, 0.4, size=120) / 4
        a = np.clip(b + rng.choice([-0.25, 0.0, 0.25], size=120, p=[0.2, 0.4, 0.4]), 0, 1)
        true = np.mean(np.clip(b + 0.25, 0, 1) * 0.4 + b * 0.4 + np.clip(b - 0.25, 0, 1) * 0.2 - b)  # this b's
        d = paired_delta(a, b, seed=rep)
        covered.append(d["low"] <= true <= d["high"])
    assert 0.88 <= np.mean(covered) <= 0.99


# ---------------------------------------------------------------- the two-level bootstrap over seeds and tasks
def per_seed(rng, n_seeds, n_tasks):
    return [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=n_tasks) for _ in range(n_seeds)]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(SCORES, min_size=8, max_size=8), min_size=1, max_size=5), st.integers(0, 10**6))
def test_pooled_identical_arms_cover_zero(scores, seed):
    d = pooled_delta(scores, scores, seed=seed, n_resamples=500)
    assert d["delta"] == 0.0 and d["low"] <= 0.0 <= d["high"]
    assert d["n_seeds"] == len(scores) and d["n_tasks"] == 8 and d["per_seed"] == [0.0] * len(scores)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.floats(-0.3, 0.3), st.integers(2, 5))
def test_pooled_recovers_a_constant_shift(seed, shift, n_seeds):
    rng = np.random.default_rng(seed)
    b = per_seed(rng, n_seeds, 120)
    a = [shifted(x, shift, 0.25, rng) for x in b]
    d = pooled_delta(a, b, seed=seed, n_resamples=2000)
    assert d["delta"] == pytest.approx(shift) and d["per_seed"] == pytest.approx([shift] * n_seeds)
    assert d["low"] < shift < d["high"]
    assert d["low"] > 0 if shift > 0.1 else True


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10**6))
def test_seed_spread_widens_the_pooled_interval_beyond_the_task_bootstrap(seed):
    """Seeds whose deltas swing +-3 points (two seeds of the first grid): the one-level bootstrap over the seed-averaged
    task scores cannot see it; the two-level interval must be wider, and wider than without the swing."""
    rng = np.random.default_rng(seed)
    b = per_seed(rng, 4, 120)
    noise = [shifted(x, 0.0, 0.25, rng) - x for x in b]
    swing = [0.03, -0.03, 0.03, -0.03]
    a_swing = [x + e + s for x, e, s in zip(b, noise, swing)]
    a_calm = [x + e for x, e in zip(b, noise)]
    pooled = pooled_delta(a_swing, b, seed=seed, n_resamples=4000)
    calm = pooled_delta(a_calm, b, seed=seed, n_resamples=4000)
    one_level = paired_delta(np.mean(a_swing, axis=0), np.mean(b, axis=0), seed=seed)
    width = pooled["high"] - pooled["low"]
    assert pooled["delta"] == pytest.approx(one_level["delta"])
    assert width > 1.3 * (one_level["high"] - one_level["low"])
    assert width > 1.3 * (calm["high"] - calm["low"])


def test_pooled_with_one_seed_is_the_task_bootstrap_and_is_seeded():
    rng = np.random.default_rng(3)
    b = per_seed(rng, 1, 200)
    a = [shifted(b[0], 0.05, 0.25, rng)]
    one = paired_delta(a[0], b[0])
    pooled = pooled_delta(a, b)
    assert pooled["low"] == pytest.approx(one["low"], abs=0.01)
    assert pooled["high"] == pytest.approx(one["high"], abs=0.01)
    assert pooled_delta(a, b, seed=7) == pooled_delta(a, b, seed=7)


@pytest.mark.parametrize("a,b", [([], []), ([[1.0, 0.0]], []), ([[1.0, 0.0]], [[1.0]]), ([[1.0]], [[1.0]]),
                                 ([[1.0, 0.0], [1.0, 0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0, 1.0]])])
def test_pooled_refuses_unpaired_input(a, b):
    with pytest.raises(ValueError):
        pooled_delta(a, b)


# ---------------------------------------------------------------- comparisons between arms
def test_compare_in_both_directions_and_when_both_collapsed():
    rng = np.random.default_rng(0)
    b = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=120)
    up, down = shifted(b, 0.2, 0.25, rng), shifted(b, -0.2, 0.25, rng)
    assert compare(up, b, 0.05, ("GMTS", "ETS"))["verdict"] == "moved"
    assert compare(down, b, 0.05, ("GMTS", "ETS"))["verdict"] == "regressed"
    assert compare(up, b, 0.05, ("GMTS", "ETS"), collapsed=(True, True))["verdict"] == "both collapsed; GMTS less"
    assert compare(down, b, 0.05, ("GMTS", "ETS"), collapsed=(True, True))["verdict"] == "both collapsed; ETS less"
    assert compare(b, b, 0.05, ("GMTS", "ETS"), collapsed=(True, True))["verdict"] == "both collapsed; flat"
    assert compare(up, b, 0.05, ("GMTS", "ETS"), collapsed=(False, True))["flags"] == ["ETS collapsed"]
    small = shifted(b, -0.03, 0.05, rng)  # interval below zero, delta inside the floor: a dip, not a regression
    assert compare(small, b, 0.05)["flags"] == ["dip"] and compare(small, b, 0.05)["verdict"] == "flat"


def test_seed_t_interval_by_hand_and_its_coverage():
    from gmts_recipe.stats import seed_t_interval

    low, high = seed_t_interval([0.075, 0.016])  # the two seeds of results/qwen at lr 1e-4: t(1) = 12.706
    assert (low, high) == pytest.approx((0.0455 - 12.7062 * 0.0295, 0.0455 + 12.7062 * 0.0295), abs=1e-4)
    assert seed_t_interval([0.02]) == (None, None)
    rng = np.random.default_rng(0)  # 3 seeds from N(0.02, 0.03): ~95% of intervals hold the mean
    covered = [lo <= 0.02 <= hi for lo, hi in (seed_t_interval(rng.normal(0.02, 0.03, 3)) for _ in range(2000))]
    assert 0.93 <= np.mean(covered) <= 0.97


def test_with_three_seeds_the_t_interval_is_wider_than_the_seed_bootstrap():
    """The percentile bootstrap over 3 seeds stays inside their range; Student's t does not pretend to know more."""
    rng = np.random.default_rng(1)
    b = per_seed(rng, 3, 400)
    a = [np.clip(x + s, 0, 1) for x, s in zip(b, [0.06, 0.0, 0.03])]
    d = pooled_delta(a, b, n_resamples=2000)
    assert d["t_low"] < d["low"] and d["t_high"] > d["high"]
    assert d["t_low"] < min(d["per_seed"]) and d["t_high"] > max(d["per_seed"])


@pytest.mark.parametrize("effect_size, seeds", [(0.2, 199), (0.5, 34), (0.8, 15)])
def test_seeds_for_power_matches_the_one_sample_t_test_tables(effect_size, seeds):
    """G*Power's one-sample t-test, two-tailed, alpha 0.05, power 0.8: 199, 34 and 15 for d = 0.2, 0.5, 0.8."""
    from gmts_recipe.stats import seeds_for_power

    per_seed = np.array([1.0, -1.0, 1.0, -1.0])
    per_seed /= per_seed.std(ddof=1)  # seed-to-seed SD exactly 1: the effect is Cohen's d
    assert seeds_for_power(per_seed, effect_size) == seeds
    assert seeds_for_power(per_seed, -effect_size) == seeds  # two-sided


@given(st.lists(st.floats(-0.05, 0.05), min_size=3, max_size=8).filter(lambda x: np.std(x) > 1e-3),
       st.floats(0.01, 0.05), st.floats(-0.1, 0.1))
@settings(max_examples=25, deadline=None)
def test_seeds_for_power_depends_on_the_spread_only_and_falls_with_the_effect(per_seed, effect, shift):
    from gmts_recipe.stats import seeds_for_power

    n = seeds_for_power(per_seed, effect, max_seeds=20_000)
    assert n == seeds_for_power([x + shift for x in per_seed], effect, max_seeds=20_000)  # the mean plays no part
    assert seeds_for_power(per_seed, 2 * effect, max_seeds=20_000) <= n
    assert seeds_for_power([2 * x for x in per_seed], effect, max_seeds=20_000) >= n


def test_seeds_for_power_needs_three_seeds_to_estimate_the_spread():
    from gmts_recipe.stats import seeds_for_power

    assert seeds_for_power([0.01, 0.03], 0.02) is None
    assert seeds_for_power([0.01, 0.03, 0.05], 0.02) is not None
    assert seeds_for_power([0.5, -0.5, 0.5], 1e-6, max_seeds=50) is None  # more than the cap: said, not guessed


def test_t_test_power_is_finite_where_scipy_gives_nan_and_agrees_where_it_does_not():
    from scipy import stats as scipy_stats

    from gmts_recipe.stats import _t_test_power

    df = np.arange(1, 7)
    crit = scipy_stats.t.ppf(0.975, df)
    large = 4.744 * np.sqrt(df + 1)  # a 4.7-SD effect: scipy's nct returns NaN for some of these
    assert np.isnan(scipy_stats.nct.sf(crit, df, large) + scipy_stats.nct.cdf(-crit, df, large)).any()
    scipy_power = scipy_stats.nct.sf(crit, df, large) + scipy_stats.nct.cdf(-crit, df, large)
    power = np.array([_t_test_power(c, k, m) for c, k, m in zip(crit, df, large)])
    assert np.all((power > 0) & (power <= 1 + 1e-9)) and np.all(np.diff(power) > 0)  # more seeds, more power
    finite = np.isfinite(scipy_power)
    assert np.allclose(power[finite], scipy_power[finite])
    moderate = 1.5 * np.sqrt(df + 1)
    exact = scipy_stats.nct.sf(crit, df, moderate) + scipy_stats.nct.cdf(-crit, df, moderate)
    assert np.allclose([_t_test_power(c, k, m) for c, k, m in zip(crit, df, moderate)], exact)


@pytest.mark.parametrize("t_low, t_high, decision", [
    (0.4, 6.1, "reproduced"),                                   # above 0, reaches past +1.3
    (-1.3, 6.1, "undecided"),                                   # the interim row of the qwen grid
    (-2.0, 1.0, "refuted at +1.3"),                             # cannot reach the paper's smallest gain
    (0.2, 1.1, "a gain above 0 but below +1.3: smaller than claimed"),
    (0.0, 1.3, "undecided"),                                    # the bounds themselves decide nothing
])
def test_plan_decision_applies_the_rule_fixed_before_the_seeds_ran(t_low, t_high, decision):
    assert stats.plan_decision(t_low, t_high, reproduced_above=0.0, refuted_below=1.3) == decision


# ---------------------------------------------------------------- the paired bootstrap: scipy's numbers, computed fast
@settings(max_examples=30, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 5, 8]), st.integers(2, 90), st.integers(0, 3), st.sampled_from([0.9, 0.95]),
       st.integers(0, 10**6))
def test_paired_delta_is_scipys_bootstrap_bit_for_bit(k, n, seed, confidence, draw):
    """The interval is the one scipy.stats.bootstrap gives for the same seed, to the last bit, for scores in 1/k
    steps: k = 1, 2, 4, 8 take the exact-sum path (counts x deltas), k = 3, 5 the gathered draws."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(draw)
    a, b = rng.integers(0, k + 1, n) / k, rng.integers(0, k + 1, n) / k
    d = a - b
    if np.all(d == d[0]):
        return
    ref = bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=stats.N_RESAMPLES, method="percentile",
                    rng=np.random.default_rng(seed))
    assert np.array_equal(stats.bootstrap_means(d, stats.N_RESAMPLES, seed), ref.bootstrap_distribution)
    got = paired_delta(a, b, confidence=confidence, seed=seed)
    assert (got["low"], got["high"]) == (ref.confidence_interval.low, ref.confidence_interval.high)
    if k in (1, 2, 4, 8):  # dyadic steps: the exact-sum path (k = 3, 5 take it only when every delta is whole)
        assert stats._sum_exponent(d) is not None
    assert stats._sum_exponent(np.array([1 / 3, 0.0])) is None  # thirds: the gathered draws


def test_the_task_counts_are_drawn_once_for_every_comparison_over_the_same_tasks():
    """A results file's comparisons share one draw of the resamples' task counts (the cost of the old bootstrap)."""
    stats._resample_counts.cache_clear()
    rng = np.random.default_rng(1)
    for _ in range(4):
        paired_delta(rng.integers(0, 5, 300) / 4, rng.integers(0, 5, 300) / 4)
    info = stats._resample_counts.cache_info()
    assert (info.misses, info.hits) == (1, 3)


@pytest.mark.parametrize("path", ["results/qwen/paper-lr0.0001-s17/results.json", "results/offline/results.json",
                                  "results/quickstart-cpu/results.json"])
def test_every_sealed_number_is_recomputed_bit_for_bit(path):
    """The committed files' summaries (bootstrap intervals included) come out of the current code exactly, not only
    within check.py's tolerance: the faster bootstrap did not move a committed number."""
    import json
    from pathlib import Path

    from gmts_recipe.records import summarize

    results = json.loads((Path(__file__).resolve().parent.parent / path).read_text())
    assert summarize(results) == results["summary"]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(SCORES, min_size=1, max_size=8), min_size=1, max_size=40), st.booleans())
def test_pass_at_1_is_the_mean_of_the_per_task_means(tasks, same_k):
    """One array for tasks of equal sample counts, a mean per task otherwise: the same number either way."""
    if same_k:
        tasks = [t[:1] * len(tasks[0]) if len(t) != len(tasks[0]) else t for t in tasks]
    records = [{"scores": s} for s in tasks]
    assert stats.pass_at_1(records) == float(np.mean([np.mean(s) for s in tasks]))


# ---------------------------------------------------------------- the per-seed spread with its interval
def test_sd_interval_of_two_seeds_is_the_chi_square_interval_by_hand():
    sd, low, high = stats.sd_interval([0.0, 2.0])
    assert sd == pytest.approx(np.sqrt(2.0))
    # one degree of freedom: chi-square quantiles 5.023886 (97.5%) and 0.000982069 (2.5%), from the printed tables
    assert low == pytest.approx(np.sqrt(2.0) / np.sqrt(5.023886), rel=1e-6)
    assert high == pytest.approx(np.sqrt(2.0) / np.sqrt(0.000982069), rel=1e-5)
    assert stats.sd_interval([1.0]) is None


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=3, max_size=30).filter(lambda x: np.std(x) > 1e-3),
       st.floats(-5, 5), st.floats(0.1, 10))
def test_sd_interval_moves_with_the_scale_not_the_location(x, shift, scale):
    sd, low, high = stats.sd_interval(x)
    sd2, low2, high2 = stats.sd_interval([scale * v + shift for v in x])
    assert low < sd < high
    assert (sd2, low2, high2) == pytest.approx((scale * sd, scale * low, scale * high), rel=1e-6)


def test_sd_interval_covers_the_true_spread_95_percent_of_the_time():
    rng = np.random.default_rng(7)
    draws = rng.normal(0.0, 4.1, size=(4000, 10))  # a 10-seed pilot of deltas with SD 4.1
    covered = np.mean([low <= 4.1 <= high for _, low, high in map(stats.sd_interval, draws)])
    assert 0.94 <= covered <= 0.96  # binomial SD of the coverage over 4000 draws: 0.0034


# ---------------------------------------------------------------- correlation across seeds (the mechanism analysis)
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


def test_correlation_of_a_known_pair_matches_the_closed_forms():
    """x = 1..5, y = 2, 1, 4, 3, 5: sum dx dy = 8, sum dx^2 = sum dy^2 = 10, so r = 0.8 and slope 0.8 (intercept
    3 - 0.8 x 3 = 0.6); the ranks are the values, so rho = 0.8 too. Fisher z: tanh(atanh(0.8) +- 1.96 se) with
    se = 1/sqrt(2) for r and sqrt((1 + 0.32)/2) for rho (Bonett-Wright)."""
    c = stats.correlation([1, 2, 3, 4, 5], [2, 1, 4, 3, 5])
    assert c["n"] == 5 and c["note"] is None
    assert c["pearson"] == pytest.approx(0.8) and c["spearman"] == pytest.approx(0.8)
    assert c["slope"] == pytest.approx(0.8) and c["intercept"] == pytest.approx(0.6)
    z = np.arctanh(0.8)
    assert (c["pearson_low"], c["pearson_high"]) == pytest.approx(
        (np.tanh(z - Z95 / np.sqrt(2)), np.tanh(z + Z95 / np.sqrt(2))))
    se = np.sqrt((1 + 0.8**2 / 2) / 2)
    assert (c["spearman_low"], c["spearman_high"]) == pytest.approx((np.tanh(z - Z95 * se), np.tanh(z + Z95 * se)))
    assert c["pearson_low"] == pytest.approx(-0.2796400419693548) and c["pearson_high"] == pytest.approx(0.9861961933)


def test_correlation_of_a_line_and_of_no_line():
    line = stats.correlation([0, 1, 2, 3, 4], [1, 3, 5, 7, 9])  # y = 2x + 1 exactly
    assert line["pearson"] == pytest.approx(1) and line["spearman"] == pytest.approx(1)
    assert line["pearson_low"] == pytest.approx(1) and line["spearman_high"] == pytest.approx(1)
    assert line["slope"] == pytest.approx(2) and line["intercept"] == pytest.approx(1)
    flat = stats.correlation([-2, -1, 1, 2], [1, -1, -1, 1])  # a V: no linear or monotone trend
    assert flat["pearson"] == pytest.approx(0, abs=1e-12) and flat["slope"] == pytest.approx(0, abs=1e-12)
    assert flat["pearson_low"] == pytest.approx(-np.tanh(Z95)) and flat["pearson_high"] == pytest.approx(np.tanh(Z95))
    cube = stats.correlation([1, 2, 3, 4, 5], [1, 8, 27, 64, 125])  # monotone, not linear
    assert cube["spearman"] == pytest.approx(1) and cube["pearson"] < 0.99


def test_correlation_says_why_it_is_undefined():
    three = stats.correlation([1, 2, 3], [1, 2, 4])
    assert three["pearson"] is None and three["slope"] is not None and "4 or more" in three["note"]
    flat_x = stats.correlation([1, 1, 1, 1], [1, 2, 3, 4])
    assert flat_x["pearson"] is None and flat_x["slope"] is None and "x is the same" in flat_x["note"]
    flat_y = stats.correlation([1, 2, 3, 4], [5, 5, 5, 5])
    assert flat_y["pearson"] is None and flat_y["slope"] == 0 and "y is the same" in flat_y["note"]
    assert stats.correlation([], [])["note"].startswith("0 seeds")
    with pytest.raises(ValueError, match="equal-length"):
        stats.correlation([1, 2], [1])
    with pytest.raises(ValueError, match="finite"):
        stats.correlation([1, 2, 3, 4], [1, 2, float("nan"), 4])


VALUES = st.lists(st.floats(-100, 100, allow_nan=False).map(lambda v: round(v, 3)), min_size=4, max_size=19)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_correlation_follows_affine_and_monotone_maps(data):
    """r is unchanged by a positive affine map of x and flips sign (interval mirrored) under a negative one; the slope
    scales by 1/a; rho is unchanged by any increasing map (exp of a rescaled x); every interval holds its estimate."""
    x = data.draw(VALUES)
    y = data.draw(st.lists(st.floats(-100, 100, allow_nan=False).map(lambda v: round(v, 3)), min_size=len(x),
                           max_size=len(x)))
    c = stats.correlation(x, y)
    if c["pearson"] is None:
        return
    a = data.draw(st.sampled_from([-3.0, -0.5, 0.25, 2.0]))
    moved = stats.correlation([a * v + 7 for v in x], y)
    sign = 1 if a > 0 else -1
    assert moved["pearson"] == pytest.approx(sign * c["pearson"], abs=1e-9)
    assert moved["slope"] == pytest.approx(c["slope"] / a, rel=1e-6, abs=1e-9)
    low, high = (moved["pearson_low"], moved["pearson_high"])[::sign]
    assert (sign * low, sign * high) == pytest.approx((c["pearson_low"], c["pearson_high"]), abs=1e-9)
    span = max(x) - min(x)
    assert stats.correlation([np.exp((v - min(x)) / span) for v in x], y)["spearman"] == pytest.approx(
        c["spearman"], abs=1e-9)
    for key in ("pearson", "spearman"):
        assert -1 <= c[f"{key}_low"] <= c[key] + 1e-12 and c[key] - 1e-12 <= c[f"{key}_high"] <= 1
