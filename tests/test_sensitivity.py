"""The sequential plan's sensitivity comparison (gmts_recipe.sequential.sensitivity): its statistics against hand-computed
values and their properties, its alarms at and just short of their thresholds, the comparison read at looks only in a
synthetic sequential sweep, and the plan's text in docs/results.md holding the thresholds the code uses."""

import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from gmts_recipe.sequential import stats as sequential
from gmts_recipe.sequential import sensitivity as sens
from gmts_recipe.sweep.grid import load_grid
from gmts_recipe.sequential.report import sensitivity_line
from gmts_recipe.sequential.looks import cell_facts
from gmts_recipe.sweep.report import render, write_summary
from gmts_recipe.sweep.summary import continued_summary, summarize
from gmts_recipe.verify.sweep import verify
from gmts_recipe.stats import seed_t_interval

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------- the statistics
def test_welch_matches_its_formula_by_hand():
    """x = 1..4 (mean 2.5, variance 5/3), y = 2, 4, 6, 8, 10 (mean 6, variance 10): difference -3.5, se^2 = 5/12 + 2,
    Welch-Satterthwaite df = se^4 / ((5/12)^2 / 3 + 2^2 / 4) = 5.52079..."""
    w = sens.welch([1, 2, 3, 4], [2, 4, 6, 8, 10])
    se = math.sqrt(5 / 12 + 2)
    df = (5 / 12 + 2) ** 2 / ((5 / 12) ** 2 / 3 + 1)
    assert df == pytest.approx(5.52079, abs=1e-5)
    half = scipy_stats.t.ppf(0.975, df) * se
    assert w["difference"] == -3.5
    assert (w["low"], w["high"]) == pytest.approx((-3.5 - half, -3.5 + half), rel=1e-12)
    assert (w["low"], w["high"]) == pytest.approx((-7.38537, 0.38537), abs=1e-5)  # t(0.975, 5.52079) = 2.49933


def test_welch_is_antisymmetric_and_none_without_two_seeds_a_side():
    rng = np.random.default_rng(1)
    x, y = rng.normal(1, 2, 12), rng.normal(0, 5, 30)
    a, b = sens.welch(x, y), sens.welch(y, x)
    assert a["difference"] == pytest.approx(-b["difference"]) and a["low"] == pytest.approx(-b["high"])
    assert a["low"] < a["difference"] < a["high"]
    assert sens.welch([1.0], y) is None and sens.welch([1, 1], [2, 2]) is None


def test_hodges_lehmann_by_hand():
    """old = 0..7, new = old + 5: the 64 differences are 5 + (i - j), value 5 + t occurring 8 - |t| times; their median
    is 5. Moses' k = floor(32 - 1.96 sqrt(64 x 17 / 12)) = floor(13.34) = 13: the 13th smallest difference is 2 (1 + 2
    + 3 + 4 differences lie at -2..1), the 13th largest 8."""
    old = list(range(8))
    hl = sens.hodges_lehmann([v + 5 for v in old], old)
    assert hl == {"shift": 5.0, "low": 2.0, "high": 8.0}
    three = sens.hodges_lehmann([1, 2, 10], [0, 0, 1])  # 9 differences: 0 1 1 2 2 9 9 10 10; k < 1: no interval
    assert three == {"shift": 2.0, "low": None, "high": None}


def test_hodges_lehmann_shifts_with_the_data_and_ignores_one_outlier():
    rng = np.random.default_rng(2)
    x, y = rng.normal(0, 1, 25), rng.normal(0, 1, 40)
    base = sens.hodges_lehmann(x, y)
    moved = sens.hodges_lehmann(x + 3.0, y)
    assert moved["shift"] == pytest.approx(base["shift"] + 3) and moved["low"] == pytest.approx(base["low"] + 3)
    assert sens.hodges_lehmann(y, x)["shift"] == pytest.approx(-base["shift"])
    assert base["low"] <= base["shift"] <= base["high"]
    wild = np.concatenate([x[:-1], [30.0]])  # one collapsed seed: the mean moves ~1.2, the median shift barely
    assert abs(sens.hodges_lehmann(wild, y)["shift"] - base["shift"]) < 0.2
    assert wild.mean() - x.mean() > 1.0


def test_moses_interval_is_the_mann_whitney_tests_acceptance_region():
    """Just outside the Moses interval the Mann-Whitney test of that shift rejects at 5% (normal approximation, no
    ties), just inside it does not: the interval is the test inverted."""
    rng = np.random.default_rng(3)
    x, y = rng.normal(1, 2, 30), rng.normal(0, 2, 45)
    hl = sens.hodges_lehmann(x, y)
    p = lambda shift: scipy_stats.mannwhitneyu(x - shift, y, method="asymptotic", use_continuity=False).pvalue  # noqa
    eps = 1e-9
    assert p(hl["low"] - eps) < 0.05 and p(hl["high"] + eps) < 0.05
    assert p(hl["low"] + eps) > 0.04 and p(hl["shift"]) > 0.5


def test_sd_ratio_by_hand():
    assert sens.sd_ratio([0, 2], [0, 1, 2]) == pytest.approx(math.sqrt(2))  # SDs sqrt(2) and 1
    assert sens.sd_ratio([0], [0, 1]) is None and sens.sd_ratio([0, 1], [3, 3]) is None


def test_welch_power_is_the_tests_size_at_no_shift_and_grows_with_shift_and_seeds():
    assert sens.welch_power(0.0, 5.2, 40, 100) == pytest.approx(0.05, abs=1e-12)
    powers = [sens.welch_power(s, 5.2, 40, 100) for s in (0.3, 0.65, 1.3, 3.5)]
    assert powers == sorted(powers) and powers[-1] > 0.9
    assert sens.welch_power(0.65, 5.2, 80, 100) > sens.welch_power(0.65, 5.2, 40, 100)
    with pytest.raises(ValueError, match="power needs 2 seeds a side"):
        sens.welch_power(0.65, 5.2, 1, 100)


def test_welch_power_agrees_with_simulated_welch_tests():
    """100,000 simulated Welch tests of 40 against 100 normal seeds (SD 5.2) 0.65 points apart: the share that rejects
    at 0.05 is the computed power within 4 standard errors (about 0.004)."""
    rng = np.random.default_rng(20261207)
    reps = 100_000
    new, old = rng.normal(0.65, 5.2, (reps, 40)), rng.normal(0.0, 5.2, (reps, 100))
    share = float((scipy_stats.ttest_ind(new, old, axis=1, equal_var=False).pvalue < 0.05).mean())
    power = sens.welch_power(0.65, 5.2, 40, 100)
    assert abs(share - power) < 4 * math.sqrt(power * (1 - power) / reps)


# ---------------------------------------------------------------------------- the comparison and its alarms
ARMS = ("gmts", "ets")


def seed_row(seed: int, delta: float, card: str = "H200", ets: float = 54.0, gmts: float | None = None,
             collapsed: tuple = (), versions: str = "torch 2.11.0+cu130, transformers 5.17.0, trl 1.16.0, CUDA 13.0",
             commit: str = "abc1234567", day: str = "2026-12-08") -> dict:
    return {"seed": seed, "delta": delta, "card": card, "versions": versions, "commit": commit, "day": day,
            "pass@1": {"ets": ets, "gmts": ets + delta if gmts is None else gmts}, "collapsed": list(collapsed)}


def old_rows(n: int = 20) -> list[dict]:
    rng = random.Random(5)
    return [seed_row(200 + i, rng.gauss(1.0, 5.0), "H200", ets=54 + rng.gauss(0, 1)) for i in range(n)]


def new_rows(deltas: list[float], card: str = "H100", start: int = 300, **kw) -> list[dict]:
    return [seed_row(start + i, d, card, **kw) for i, d in enumerate(deltas)]


def calm_deltas(n: int, shift: float = 0.0, seed: int = 6) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(1.0 + shift, 5.0) for _ in range(n)]


def kinds(c: dict) -> list[str]:
    return [a["alarm"] for a in c["alarms"]]


def test_new_seeds_like_the_old_raise_no_alarm_and_print_no_strata():
    old = old_rows()
    c = sens.compare(old, new_rows(calm_deltas(10), "H100") + new_rows(calm_deltas(10, seed=7), "H200", start=310),
                     ARMS, [], ["card", "commit", "day"], look=40)
    assert c["alarms"] == [] and c["stratified"] == [] and c["seeds"] == 40 and c["new_seeds"] == 20
    assert [(g["by"], g["group"], g["seeds"]) for g in c["groups"]] == [
        ("card", "H100", 10), ("card", "H200", 10), ("versions", c["groups"][2]["group"], 20),
        ("commit", "abc1234567", 20), ("day", "2026-12-08", 20)]
    h100 = c["groups"][0]
    x, y = [r["delta"] for r in new_rows(calm_deltas(10))], [r["delta"] for r in old]
    assert h100["welch"] == sens.welch(x, y) and h100["hodges_lehmann"] == sens.hodges_lehmann(x, y)
    assert h100["sd_ratio"] == pytest.approx(statistics.stdev(x) / statistics.stdev(y))
    assert h100["mean"] == pytest.approx(statistics.fmean(x)) and c["old"]["card"] == "H200"
    p = c["power"]
    assert p["power"] == pytest.approx(sens.welch_power(0.65, statistics.stdev(y), 20, 20))


def test_a_card_shift_raises_the_interval_alarm_and_the_card_stratified_estimates():
    old = [{**r, "pass@1": {"ets": 54.0, "gmts": 55.0}} for r in old_rows(30)]  # pass@1 alike: no pass@1 alarm
    new = new_rows(calm_deltas(30, shift=8.0), "H100", gmts=55.0)
    c = sens.compare(old, new, ARMS, [], ["card"], look=60)
    assert kinds(c) == ["interval"] and c["alarms"][0]["what"].startswith("new H100 - old: ")
    strata = {s["card"]: s for s in c["stratified"]}
    assert set(strata) == {"H100", "H200"} and strata["H100"]["seeds"] == 30
    low, high = seed_t_interval([r["delta"] for r in new])
    assert (strata["H100"]["low"], strata["H100"]["high"]) == (low, high)
    assert strata["H200"]["mean"] == pytest.approx(statistics.fmean(r["delta"] for r in old))


def test_the_sd_ratio_alarm_fires_above_its_threshold_only():
    old = old_rows(30)
    sd = statistics.stdev(r["delta"] for r in old)
    mean = statistics.fmean(r["delta"] for r in old)
    for ratio, fires in ((1.45, False), (1.55, True)):
        z = [-1.0, 1.0] * 10  # SD of z: sqrt(20/19); scaled so that the ratio is exactly `ratio`
        deltas = [mean + v * ratio * sd / statistics.stdev(z) for v in z]
        c = sens.compare(old, new_rows(deltas, "H200"), ARMS, [], ["card"], look=50)
        assert c["groups"][0]["sd_ratio"] == pytest.approx(ratio)
        assert ("sd ratio" in kinds(c)) == fires


def test_three_collapses_of_one_arm_within_forty_new_seeds_raise_an_alarm():
    old = old_rows()
    for at, fires in (((0, 20, 39), True), ((0, 20, 44), False), ((3, 4), False)):
        new = [seed_row(300 + i, 1.0 + (i % 3), "H100", collapsed=("ets",) if i in at else ()) for i in range(45)]
        c = sens.compare(old, new, ARMS, [], ["card"], look=65)
        assert ("collapses" in kinds(c)) == fires, at
    assert any("ets collapsed in 3 of 40 consecutive new seeds (seeds 300, 320, 339)" == a["what"]
               for a in sens.compare(old, [seed_row(300 + i, 1.0 + (i % 3), "H100",
                                                    collapsed=("ets",) if i in (0, 20, 39) else ())
                                           for i in range(45)], ARMS, [], ["card"])["alarms"])
    few = [seed_row(300 + i, float(i), "H100", collapsed=("gmts",) if i < 3 else ()) for i in range(5)]
    assert "collapses" in kinds(sens.compare(old, few, ARMS, [], ["card"]))  # 5 new seeds: the window is all of them


def test_one_arms_pass_at_1_apart_between_cards_raises_an_alarm_and_the_same_card_never_does():
    old = [{**r, "pass@1": {"ets": 54.0, "gmts": 55.0}} for r in old_rows()]
    deltas = [r["delta"] for r in old]  # the same deltas: no interval or SD alarm
    for ets, card, fires in ((56.5, "H100", True), (55.5, "H100", False), (58.0, "H200", False)):
        new = new_rows(deltas, card, ets=ets, gmts=55.0)
        c = sens.compare(old, new, ARMS, [], ["card"], look=40)
        assert kinds(c) == (["pass@1"] if fires else []), (ets, card)
    c = sens.compare(old, new_rows(deltas, "H100", ets=56.5, gmts=55.0), ARMS, [], ["card"])
    assert c["alarms"][0]["what"] == "ets pass@1 54.0% on old H200 against 56.5% on new H100: 2.5 points apart"
    both = new_rows(deltas[:10], "H100", ets=54.0, gmts=55.0) + \
        new_rows(deltas[10:], "H200", start=310, ets=57.0, gmts=55.0)  # new H200 vs new H100: 3 points
    assert "pass@1" in kinds(sens.compare(old, both, ARMS, [], ["card"]))


def test_failed_attempts_are_counted_by_card_and_arm_even_on_a_card_without_a_seed():
    c = sens.compare(old_rows(), new_rows(calm_deltas(4)), ARMS,
                     [{"seed": 300, "arm": "gmts", "card": "H100"}, {"seed": 300, "arm": "gmts", "card": "A100"},
                      {"seed": 302, "arm": "ets", "card": "H100"}], ["card"])
    assert c["failures"] == [{"card": "A100", "gmts": 1, "ets": 0}, {"card": "H100", "gmts": 1, "ets": 1}]


def test_too_few_seeds_for_a_comparison_is_one_line():
    with pytest.raises(ValueError, match="needs 2 old seeds and a new one"):
        sens.compare(old_rows(1), new_rows([1.0]), ARMS, [])


def test_versions_read_unrecorded_where_a_file_has_none():
    assert sens.versions_label({"torch": "2.11.0+cu130", "transformers": "5.17.0", "trl": "1.16.0"}) == \
        "torch 2.11.0+cu130, transformers 5.17.0, trl 1.16.0, CUDA unrecorded"
    assert sens.versions_label({"torch": "2.13.0+cpu", "cuda": None}).endswith("trl unrecorded, CUDA none")
    assert sens.card_label("NVIDIA H100 80GB HBM3") == "H100" and sens.card_label("NVIDIA GH200 480GB") == \
        "NVIDIA GH200 480GB"


def test_a_committed_old_cell_reads_its_card_and_versions_with_cuda_unrecorded():
    from gmts_recipe.verify.file import load

    facts = cell_facts(load(ROOT / "results/confirm/coupled-lr0.0001-s200/results.json"))
    assert facts["card"] == "H200" and facts["commit"] == "unrecorded"
    assert facts["versions"] == "torch 2.11.0+cu130, transformers 5.17.0, trl 1.16.0, CUDA unrecorded"
    assert set(facts["pass@1"]) == {"ets", "gmts", "ets_nz", "grpo"} and facts["collapsed"] == []


def test_a_run_records_its_cuda_version():
    import torch

    from gmts_recipe.run_setup import versions

    v = versions()
    assert "cuda" in v and v["cuda"] == torch.version.cuda
    assert sens.versions_label(v).startswith(f"torch {torch.__version__}, ")


# ---------------------------------------------------------------------------- read at looks only
def test_due_only_at_a_look_beyond_the_first_or_where_the_test_stopped():
    design = sequential.Design((4, 6, 8), (3.18, 2.5, 2.5), (3.18, 3.0, 3.0), 0.0, 1.3)
    noisy = [0.0, 5.0, -5.0, 10.0, 2.0, -3.0, 4.0, 1.0]
    due = [sens.due(sequential.state(noisy[:n], design)) for n in range(4, 9)]
    assert due == [None, None, 6, None, 8]  # 4: the continued test's own look; 5 and 7: between looks
    decided = [0.0, 2.0, 0.0, 2.0, 2.0, 2.0, 2.1]  # continue at 4 (z 1.73), "reproduced" at 6 (z 3.16); one past it
    st = sequential.state(decided, design)
    assert st["decision"] == "reproduced" and sens.due(st) == 6


def provenance_cell(root: Path, seed: int, card: str, gmts: float = 0.9, cuda: str = "12.8",
                    collapse_gmts: bool = False) -> None:
    """A fake cell of the extension whose arms record a provenance: card, commit, start and library versions."""
    from test_check import with_samples
    from test_sweep import fake_cell

    name = f"paper-lr0.0001-s{seed}"
    fake_cell(root, name, {"ets": 0.5, "gmts": 0.0 if collapse_gmts else gmts}, seed=seed)
    path = root / name / "results.json"
    results = json.loads(path.read_text())
    for arm in results["arms"].values():
        arm["provenance"] = {"commit": "5ebb1210aa", "dirty": False, "started": "2026-12-08T09:00:00+00:00",
                             "gpu": card, "gpus": 1, "versions": {"python": "3.12.3", "torch": "2.11.0+cu130",
                                                                  "transformers": "5.17.0", "trl": "1.16.0",
                                                                  "peft": "0.21.0", "cuda": cuda}}
    for key in ("schema", "summary", "digest"):
        results.pop(key, None)
    # provenance needs samples; scored by the continued test's reading (its fake cells record none: version 1)
    path.write_text(json.dumps(with_samples(results, path.parent, root / "base-evals", reward=None)))


def test_a_synthetic_sweep_prints_the_comparison_at_its_looks_and_not_between_them(tmp_path):
    """The test_sweep sequential grid (4 old seeds, looks at 6 and 8): at 5 seeds, between looks, no comparison, only
    when it comes; at 6, the comparison (stored, verified, printed by check.py's tables and the README block); at 7
    gone again; at 8, the last look, back with 4 new seeds."""
    import update_readme
    from test_sweep import sequential_trees

    path = sequential_trees(tmp_path)
    grid = load_grid(path)
    root = tmp_path / "results" / "more"
    provenance_cell(root, 5, "NVIDIA H100 80GB HBM3")
    summary = summarize(grid, continued=continued_summary(grid))
    q = summary["sequential"]
    assert q["state"]["seeds_done"] == 5 and q["sensitivity_comparison"] is None
    text = " ".join(render(summary).split())
    assert "Sensitivity comparison (planned, never a decision): at the next look (6 seeds)." in text
    assert "new by card" not in text and "Sensitivity" not in update_readme.sequential_block(summary)

    provenance_cell(root, 6, "NVIDIA H200", cuda="13.0")
    written = write_summary(grid, path)
    summary = verify(written)
    c = summary["sequential"]["sensitivity_comparison"]
    assert c["look"] == 6 and c["new_seeds"] == 2 and c["old"]["group"] == "seeds 1-4"
    assert c["old"]["versions"] == "torch unrecorded, transformers unrecorded, trl unrecorded, CUDA unrecorded"
    cards = [(g["group"], g["seeds"]) for g in c["groups"] if g["by"] == "card"]
    assert cards == [("H100", 1), ("H200", 1)]
    assert [g["group"] for g in c["groups"] if g["by"] == "versions"] == [
        "torch 2.11.0+cu130, transformers 5.17.0, trl 1.16.0, CUDA 12.8",
        "torch 2.11.0+cu130, transformers 5.17.0, trl 1.16.0, CUDA 13.0"]
    assert [g["group"] for g in c["groups"] if g["by"] in ("commit", "day")] == ["5ebb1210aa", "2026-12-08"]
    text = " ".join(render(summary).split())
    assert "Sensitivity comparison at 6 seeds (planned, never a decision)" in text and "new by card H100" in text
    power = sens.welch_power(0.65, statistics.stdev(100 * d for d in q["per_seed"][:4]), 2, 4)
    assert f"found with probability {power:.2f}" in text
    readme = " ".join(update_readme.sequential_block(summary).split())
    assert "Sensitivity comparison at 6 seeds" in readme and sensitivity_line(summary["sequential"]) in readme

    provenance_cell(root, 7, "NVIDIA H100 80GB HBM3")
    summary = summarize(grid, continued=continued_summary(grid))
    assert summary["sequential"]["sensitivity_comparison"] is None
    assert "at the next look (8 seeds)" in " ".join(render(summary).split())

    provenance_cell(root, 8, "NVIDIA H100 80GB HBM3", collapse_gmts=True)
    c = summarize(grid, continued=continued_summary(grid))["sequential"]["sensitivity_comparison"]
    assert c["look"] == 8 and c["new_seeds"] == 4
    h100 = next(g for g in c["groups"] if (g["by"], g["group"]) == ("card", "H100"))
    assert h100["seeds"] == 3 and h100["collapses"] == {"gmts": 1, "ets": 0}


def test_an_alarm_puts_the_card_stratified_estimates_and_homogeneity_beside_the_verdict():
    q = {"comparison": "gmts - ets", "sensitivity": ["card", "commit", "day"], "state": {"next_look": None}}
    old = old_rows(30)
    q["sensitivity_comparison"] = sens.compare(old, new_rows(calm_deltas(30, shift=8.0)), ARMS, [], ["card"], 60)
    line = sensitivity_line(q)
    assert "Alarm: new H100 - old: " in line and sens.HOMOGENEITY in line
    assert "Card-stratified, gmts - ets per card (points, Student's t 95%): H100 " in line and "H200 " in line
    q["sensitivity_comparison"] = sens.compare(old, new_rows(calm_deltas(30)), ARMS, [], ["card"], 60)
    calm = sensitivity_line(q)
    assert calm.count("No alarm (") == 1 and sens.HOMOGENEITY not in calm and "Its power is low" in calm


# ---------------------------------------------------------------------------- the plan's text
def test_the_plan_in_docs_states_the_thresholds_and_power_the_code_uses():
    """docs/results.md's plan names every alarm threshold the code holds, the card shift, and the power at the first
    look's 40 new seeds against the 100 old at the confirmatory test's SD, as computed."""
    text = " ".join((ROOT / "docs/results.md").read_text().split())
    plan = text.split("A sensitivity comparison, never a decision", 1)[1].split("- The boundaries", 1)[0]
    per_seed = json.loads((ROOT / "results/confirm/sweep.json").read_text())["primary"]["per_seed"]
    sd = statistics.stdev(100 * d for d in per_seed)
    power = sens.welch_power(sens.CARD_SHIFT, sd, 40, len(per_seed))
    for said in (f"an SD ratio above {sens.SD_RATIO_ALARM:g}", f"{sens.COLLAPSE_ALARM} or more collapses of one arm "
                 f"within {sens.COLLAPSE_WINDOW} consecutive new seeds", f"more than {sens.PASS_GAP_ALARM:g} points "
                 f"apart between two cards", f"a {sens.CARD_SHIFT:g}-point card shift", f"{sens.CONFIDENCE:.0%} interval",
                 f"probability {power:.2f} with all 40 new seeds", f"SD {sd:.1f}", "card homogeneity"):
        assert said in plan, said
