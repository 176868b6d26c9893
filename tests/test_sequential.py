"""The sequential rule (gmts_recipe.sequential): each look's numbers and decision by hand, where a test stands as seeds
come in, the boundary's error over simulated null paths, and the committed plan's design reproduced from its seed."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from gmts_recipe.sequential import stats as sq

ROOT = Path(__file__).resolve().parent.parent
PLAN = ROOT / "configs/sweeps/confirm-extension.yaml"


def design(c_up=2.0, c_down=2.5):
    return sq.Design((4, 6, 8), (3.0, c_up, c_up), (3.0, c_down, c_down), 0.0, 1.3)


def test_a_look_by_hand():
    out = sq.look([1.0, 2.0, 3.0, 4.0], 2.0, 2.5, 0.0, 1.3)
    se = math.sqrt(np.var([1, 2, 3, 4], ddof=1) / 4)
    assert out["mean"] == 2.5 and out["se"] == pytest.approx(se)
    assert out["z_reproduced"] == pytest.approx(2.5 / se) and out["z_refuted"] == pytest.approx(1.2 / se)
    assert out["low"] == pytest.approx(2.5 - 2.0 * se) and out["high"] == pytest.approx(2.5 + 2.5 * se)
    assert out["decision"] == sq.REPRODUCED  # 2.5 / 0.645 = 3.87 > 2


@pytest.mark.parametrize("above, below, last, expected", [
    (True, False, False, sq.REPRODUCED), (False, True, False, sq.REFUTED), (True, True, False, sq.SMALLER),
    (False, False, False, sq.CONTINUE), (False, False, True, sq.UNDECIDED), (True, False, True, sq.REPRODUCED)])
def test_decide(above, below, last, expected):
    assert sq.decide(above, below, last) == expected


def test_each_direction_has_its_own_boundary():
    # mean 0.5, se 0.2: z_reproduced 2.5, z_refuted -4.0
    x = [0.5 + d for d in (-0.2, 0.2, -0.2, 0.2)] * 1
    se = float(np.std(x, ddof=1) / 2)
    assert sq.look(x, 0.5 / se + 0.01, 10.0, 0.0, 1.3)["decision"] == sq.CONTINUE
    assert sq.look(x, 0.5 / se - 0.01, 10.0, 0.0, 1.3)["decision"] == sq.REPRODUCED
    assert sq.look(x, 100.0, 0.8 / se - 0.01, 0.0, 1.3)["decision"] == sq.REFUTED


def test_state_reads_decisions_only_at_planned_looks():
    d = design()
    undecided = [1.0, -1.0, 1.5, -1.2]  # mean 0.075: neither boundary at the first look
    s = sq.state(undecided + [0.5], d)
    assert s["decision"] is None and [lk["seeds"] for lk in s["looks"]] == [4] and s["next_look"] == 6
    assert s["seeds_to_next_look"] == 1
    s = sq.state(undecided + [5.0, 5.0], d)  # the look at 6 seeds: z 1.4, below 2
    assert [lk["seeds"] for lk in s["looks"]] == [4, 6] and s["decision"] is None
    assert s["looks"][-1]["decision"] == sq.CONTINUE and s["next_look"] == 8
    s = sq.state(undecided + [5.0, 5.0], design(c_up=1.2))
    assert s["decision"] == sq.REPRODUCED and s["next_look"] is None


def test_state_stops_at_the_first_decision_and_ignores_later_seeds():
    d = design()
    x = [3.0, 3.1, 2.9, 3.05]  # reproduced at the first look already
    s = sq.state(x + [-50.0] * 4, d)
    assert s["decision"] == sq.REPRODUCED and len(s["looks"]) == 1 and s["next_look"] is None


def test_the_last_look_without_a_crossing_is_undecided():
    d = sq.Design((4, 8), (50.0, 50.0), (50.0, 50.0), 0.0, 1.3)
    s = sq.state([1.0, -1.0, 2.0, -2.0, 1.0, 0.0, 0.5, -0.5], d)
    assert s["decision"] == sq.UNDECIDED and s["next_look"] is None


@pytest.mark.parametrize("kwargs", [dict(looks=(4,), reproduced_critical=(2.0,), refuted_critical=(2.0,)),
                                    dict(looks=(4, 4), reproduced_critical=(2.0, 2.0), refuted_critical=(2.0, 2.0)),
                                    dict(looks=(4, 6), reproduced_critical=(2.0, math.nan), refuted_critical=(2, 2)),
                                    dict(looks=(4, 6), reproduced_critical=(2.0, 2.0), refuted_critical=(2.0,))])
def test_a_malformed_design_is_refused(kwargs):
    with pytest.raises(ValueError):
        sq.Design(**kwargs, reproduced_above=0.0, refuted_below=1.3)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-20, 20), min_size=8, max_size=8).filter(
    lambda v: all(np.std(v[:n]) > 1e-3 for n in (3, 5, 8))))
def test_t_at_looks_matches_the_direct_statistic(values):
    x = np.asarray(values)
    looks = [3, 5, 8]
    blocks = np.split(x, looks[:-1])
    sums = np.array([[b.sum() for b in blocks]])
    squares = np.array([[((b - b.mean()) ** 2).sum() for b in blocks]])
    t = sq._t_at_looks(sums, squares, looks)[0]
    for k, n in enumerate(looks):
        direct = x[:n].mean() / (x[:n].std(ddof=1) / math.sqrt(n))
        assert t[k] == pytest.approx(direct, rel=1e-6, abs=1e-6)


def test_the_boundary_spends_exactly_the_error_over_its_paths():
    rng = np.random.default_rng(0)
    t = sq.null_paths([20, 30, 40], 40_000, rng)
    c0 = sq.first_critical(20)
    c = sq.boundary(t, c0, 0.05)
    assert sq.crossing_rate(t, [c0, c, c]) == pytest.approx(0.05, abs=1 / 40_000)
    assert sq.crossing_rate(t, [c0, c - 0.01, c - 0.01]) > 0.05
    assert (t[:, 0] > c0).mean() == pytest.approx(0.025, abs=0.003)  # the first look: its own t quantile


def test_a_first_look_that_spent_the_error_leaves_no_later_boundary_and_raises_nothing():
    """Where the first look alone spends the error, no later look may decide that way: math.inf, never an exception
    (a simulation over many worlds, some of them such, goes on)."""
    t = sq.null_paths([20, 30], 10_000, np.random.default_rng(1))
    c = sq.boundary(t, sq.first_critical(20), 0.02)
    assert math.isinf(c) and sq.crossing_rate(t, [sq.first_critical(20), c]) == pytest.approx(0.025, abs=0.005)


SPEC = {"looks": [30, 40], "error_per_direction": 0.05, "reproduced_above_points": 0.0, "refuted_below_points": 1.3,
        "contamination": {"rate": 0.02, "jump_sds": 6.0},
        "simulation": {"seed": 5, "paths": 20_000, "contaminated_paths": 20_000, "resampled_paths": 2_000,
                       "sensitivity_paths": 1_000, "outcome_paths": 1_000, "conditional_paths": 4_000}}


def test_the_design_does_not_raise_where_its_model_spends_the_error_at_the_first_look():
    """A world whose fixed model makes the first look spend the whole error (collapses of 10 SDs in 5% of seeds):
    the design is written, that direction's boundary null (never decided later), its error what the first look
    spent; the outcomes still add up."""
    spec = {**SPEC, "contamination": {"rate": 0.05, "jump_sds": 10.0}}
    out = sq.design(spec, list(np.random.default_rng(6).standard_normal(20) * 5))
    assert out["critical"]["refuted"] is None and out["boundaries"]["refuted"]["contaminated"] is None
    e = out["errors"]["contaminated"]["refuted"]
    assert e["first_look"] > 0.05 and e["error"] == pytest.approx(e["first_look"])
    assert all(sum(r[k] for k in (sq.REPRODUCED, sq.REFUTED, sq.SMALLER, sq.UNDECIDED)) == pytest.approx(1.0)
               for r in out["outcomes"])
    assert json.loads(json.dumps(out, allow_nan=False)) == out  # strict JSON: no infinity written


def test_the_whole_sequences_boundaries_do_not_move_with_the_first_stages_draws():
    """The whole sequence's boundaries come from the plan's models (normal; its contamination), never from the
    observed deltas: a first stage with a +29 outlier and one without give the same ones; what is conditional on the
    first stage (its models' boundaries, the resampled model's error) moves with it, as it must. With no critical
    value in the plan the design adopts the required value rounded up."""
    rng = np.random.default_rng(7)
    calm = list(rng.standard_normal(20) * 4)
    wild = [*calm[:-1], 29.0]
    a, b = sq.design(SPEC, calm), sq.design(SPEC, wild)
    assert a["boundaries"] == b["boundaries"] and a["boundary_se"] == b["boundary_se"]
    assert a["errors"]["resampled"] != b["errors"]["resampled"] and a["conditional"] != b["conditional"]
    for out in (a, b):
        for direction in ("reproduced", "refuted"):
            assert out["critical"][direction] == math.ceil(out["required"][direction] * 100) / 100
            assert out["meets"][direction]
    assert b["observed"]["largest_outlier"]["delta"] == 29.0


def test_a_plans_critical_values_are_checked_never_moved():
    """A plan that fixed its critical values keeps them: the design records what they must hold and whether they do."""
    x = list(np.random.default_rng(11).standard_normal(20) * 4)
    low = sq.design({**SPEC, "critical": {"reproduced": 1.5, "refuted": 9.0}}, x)
    assert low["critical"] == {"reproduced": 1.5, "refuted": 9.0}
    assert low["meets"] == {"reproduced": False, "refuted": True}
    assert low["required"]["reproduced"] > 1.5


def test_the_required_value_is_the_largest_boundary_plus_its_margin():
    whole = {"normal": {"boundary": 2.1, "se": 0.01}, "contaminated": {"boundary": 2.5, "se": 0.02}}
    cond = {"normal": {"boundary": 2.4, "boundary_se": 0.01}, "collapse_down": {"boundary": 2.52, "boundary_se": 0.02}}
    assert sq.required_critical(whole, cond) == pytest.approx(2.52 + sq.MARGIN_SE * 0.02)
    assert math.isinf(sq.required_critical({"normal": {"boundary": None, "se": None}}, {}))


@pytest.mark.parametrize("rate, jump", [(0.0, 0.0), (0.02, -6.0), (0.05, 4.0)])
def test_the_first_looks_exact_share_agrees_with_simulation(rate, jump):
    """first_look_share (a binomial mixture of noncentral chi-square integrals) against 200,000 simulated looks."""
    n, c = 30, sq.first_critical(30)
    t = sq.contaminated_paths([n, n + 10], 200_000, np.random.default_rng(12), rate, jump)
    simulated = float((t[:, 0] > c).mean())
    assert sq.first_look_share(n, c, rate, jump) == pytest.approx(simulated, abs=4 * sq.mc_error(simulated, 200_000))
    if rate == 0.0:
        assert sq.first_look_share(n, c) == pytest.approx(0.025, abs=1e-9)  # Student's t tail


def test_the_control_variate_spends_the_error_and_its_standard_error_is_honest():
    """With the first look's exact share the boundary spends exactly the error (that share plus the later crossings
    read off the paths that do not cross first); over independent simulations its spread matches the standard error
    boundary_and_se gives, and is smaller than without the control variate."""
    looks, c0 = [20, 30, 40], sq.first_critical(20)
    exact = sq.first_look_share(20, c0, 0.02, -4.0)
    with_cv, without, ses = [], [], []
    for seed in range(8):
        t = -sq.contaminated_paths(looks, 40_000, np.random.default_rng(100 + seed), 0.02, 4.0)
        c = sq.boundary(t, c0, 0.05, exact)
        first = t[:, 0] > c0
        later = (t[~first, 1:].max(axis=1) > c).mean()
        assert exact + (1 - exact) * later == pytest.approx(0.05, abs=2 / 40_000)
        with_cv.append(c)
        without.append(sq.boundary(t, c0, 0.05))
        ses.append(sq.boundary_and_se(t, c0, 0.05, exact)[1])
    assert 0.5 < np.std(with_cv, ddof=1) / np.mean(ses) < 2.0
    assert np.std(with_cv, ddof=1) < np.std(without, ddof=1)


def test_conditional_paths_match_the_direct_statistic():
    """conditional_paths' largest statistic over the later looks equals the t statistic recomputed from the seeds."""
    observed = list(np.random.default_rng(13).standard_normal(10) * 3 + 0.5)
    d = sq.Design((10, 14, 18), (2.0, 2.5, 2.5), (2.0, 2.5, 2.5), 0.0, 1.3)
    got = sq.conditional_paths(observed, d, "normal", 3, np.random.default_rng(14), chunk=2)
    rng = np.random.default_rng(14)
    noise = np.concatenate([sq.conditional_noise(observed, "normal", (2, 8), rng),
                            sq.conditional_noise(observed, "normal", (1, 8), rng)])
    for direction, gap, sign in (("reproduced", 0.0, 1.0), ("refuted", 1.3, -1.0)):
        for p in range(3):
            seeds = np.concatenate([observed, gap + noise[p]])
            stats = [sign * (seeds[:n].mean() - gap) / (seeds[:n].std(ddof=1) / math.sqrt(n)) for n in (14, 18)]
            assert got[direction][p] == pytest.approx(max(stats), rel=1e-9)


def test_collapse_noise_is_centred_and_one_sided():
    x = list(np.random.default_rng(15).standard_normal(50) * 4)
    down = sq.conditional_noise(x, "collapse_down", (4000, 100), np.random.default_rng(16), 0.05, 6.0)
    up = sq.conditional_noise(x, "collapse_up", (4000, 100), np.random.default_rng(16), 0.05, 6.0)
    assert abs(down.mean()) < 0.05 and abs(up.mean()) < 0.05
    assert down.min() < -15 and up.max() > 15 and np.percentile(down, 99.9) < np.percentile(up, 99.9)
    with pytest.raises(ValueError, match="conditional model"):
        sq.conditional_noise(x, "typo", (1, 1), np.random.default_rng(0))


def test_the_stagewise_estimate_of_a_look_that_cannot_stop_early_is_the_fixed_sample_one():
    """A design whose first look can never decide: stopping at the second is a fixed-size test there, so the
    median-unbiased estimate is the mean and its interval the normal one (to the simulation's error)."""
    d = sq.Design((20, 40), (50.0, 2.0), (50.0, 2.0), 0.0, 1.3)
    x = np.random.default_rng(17).standard_normal(40) * 3 + 2.5
    e = sq.stagewise_estimate(list(x), d, paths=100_000)
    se = x.std(ddof=1) / math.sqrt(40)
    assert e["look"] == 1 and e["median_unbiased"] == pytest.approx(x.mean(), abs=0.02 * se + 0.01)
    assert e["low"] == pytest.approx(x.mean() - 1.96 * se, abs=0.05 * se)
    assert e["high"] == pytest.approx(x.mean() + 1.96 * se, abs=0.05 * se)


def test_the_stagewise_estimate_after_an_early_stop_corrects_the_naive_mean():
    """Stopping "reproduced" at the first later look with a mean just past the boundary: the naive mean is biased up,
    so the median-unbiased estimate lies below it; none while the test goes on."""
    d = sq.Design((20, 30, 40), (sq.first_critical(20), 2.2, 2.2), (sq.first_critical(20), 2.2, 2.2), 0.0, 1.3)
    rng = np.random.default_rng(18)
    z = rng.standard_normal(20)
    first = list((z - z.mean()) / z.std(ddof=1) * 3 + 0.6)  # t 0.9 against 0, -1.0 against 1.3: no decision
    assert sq.stagewise_estimate(first, d) is None  # look 0 did not decide: the test goes on
    x = [*first, *(rng.standard_normal(10) * 3 + 5.0)]
    st = sq.state(x, d)
    assert st["decision"] == sq.REPRODUCED and st["looks"][-1]["look"] == 1
    e = sq.stagewise_estimate(x, d, paths=50_000)
    assert e["median_unbiased"] < e["mean"] and e["low"] < e["median_unbiased"] < e["high"]


def test_contaminated_paths_are_normal_without_jumps_and_skewed_with_one_sided_ones():
    looks = [20, 40]
    clean = sq.contaminated_paths(looks, 20_000, np.random.default_rng(8), 0.0, 6.0)
    normal = sq.null_paths(looks, 20_000, np.random.default_rng(9))
    c0 = sq.first_critical(20)
    assert (clean[:, 0] > c0).mean() == pytest.approx((normal[:, 0] > c0).mean(), abs=0.006)
    jumps = sq.contaminated_paths(looks, 20_000, np.random.default_rng(8), 0.02, 6.0)
    assert (jumps[:, 1] < -c0).mean() > (jumps[:, 1] > c0).mean() + 0.01  # up-jumps: false "refuted" more likely


def test_resampled_paths_of_symmetric_residuals_agree_with_normal_ones():
    rng = np.random.default_rng(2)
    residuals = np.concatenate([rng.standard_normal(200), -rng.standard_normal(200)])
    c_resampled = sq.boundary(sq.resampled_paths(residuals, [20, 40], 20_000, rng), sq.first_critical(20), 0.05)
    c_normal = sq.boundary(sq.null_paths([20, 40], 20_000, rng), sq.first_critical(20), 0.05)
    assert c_resampled == pytest.approx(c_normal, abs=0.08)


def test_operating_characteristics_add_up_and_follow_the_gap():
    rng = np.random.default_rng(3)
    observed = rng.standard_normal(20) * 5 + 0.9
    d = sq.Design((20, 30, 40), (sq.first_critical(20), 2.1, 2.1), (sq.first_critical(20), 2.6, 2.6), 0.0, 1.3)
    low = sq.operating_characteristics(observed, d, 0.0, 4000, rng)
    high = sq.operating_characteristics(observed, d, 5.0, 4000, rng, resample=True)
    for row in (low, high):
        assert sum(row[k] for k in (sq.REPRODUCED, sq.REFUTED, sq.SMALLER, sq.UNDECIDED)) == pytest.approx(1.0)
        assert 10 <= row["new_seeds"] <= 20
    assert high[sq.REPRODUCED] > low[sq.REPRODUCED]


def test_the_committed_plan_holds_its_design_files_requirements():
    from gmts_recipe.sweep.grid import load_grid

    grid = load_grid(PLAN)
    committed = json.loads((ROOT / grid.sequential["design"]).read_text(encoding="utf-8"))
    assert grid.sequential["critical"] == committed["critical"]
    assert committed["simulation"] == grid.sequential["simulation"]
    assert committed["looks"][1:] == grid.sequential["looks"]
    for direction, found in committed["boundaries"].items():  # every boundary plus its margin, held
        whole = {k: {"boundary": b, "se": committed["boundary_se"][direction][k]} for k, b in found.items()}
        need = sq.required_critical(whole, committed["conditional"][direction])
        assert committed["required"][direction] == pytest.approx(need, rel=1e-12)
        assert committed["critical"][direction] >= need and committed["meets"][direction]
    assert committed["contamination"] == grid.sequential["contamination"]
    for model in ("normal", "contaminated"):  # the adopted models: at most the plan's error, to its Monte Carlo error
        for e in committed["errors"][model].values():
            assert e["error"] <= grid.sequential["error_per_direction"] + 2 * e["mc_error"]
    for rows in committed["conditional"].values():  # given the first stage, every model
        for e in rows.values():
            assert e["error"] <= grid.sequential["error_per_direction"]
    assert {r["direction"] for r in committed["outlier_sensitivity"]} == {"reproduced", "refuted"}  # mirrored
    assert {r["direction"] for r in committed["contamination_sensitivity"]} == {"reproduced", "refuted"}


@pytest.mark.slow
def test_the_committed_design_is_reproduced_from_its_seed(tmp_path):
    """python -m gmts_recipe.sweep.design on the committed plan writes the committed design file, byte for byte
    (reads results/confirm's cells, about a minute and a half on 2 cores)."""
    from gmts_recipe.sweep.grid import load_grid

    out = tmp_path / "design.json"
    from gmts_recipe.sweep import design

    assert design.main([str(PLAN.relative_to(ROOT)), "--out", str(out)]) == 0
    committed = ROOT / load_grid(PLAN).sequential["design"]
    assert json.loads(out.read_text()) == json.loads(committed.read_text())
