"""The mechanism analysis: per-seed GMTS - ETS against the arms' logged updates, on hand-made grids whose answers are
known exactly, and the committed mechanism.json files as recomputed from their sweep.json."""

import json
import math
from pathlib import Path

import pytest
import yaml

from gmts_recipe import mechanism as m
from gmts_recipe.records import digest

ROOT = Path(__file__).resolve().parent.parent


def log(steps: int = 4, **values) -> list[dict]:
    """A train_log whose every step logs the same value per key (key given with / as __)."""
    return [{"step": s, **{k.replace("__", "/"): v for k, v in values.items()}} for s in range(1, steps + 1)]


def arm(zero: float, effective: float = 40.0, top: float = 0.3, grad: float = 0.1, digests: dict | None = None) -> dict:
    entry = {"train_log": log(selection__zero_advantage_kept_share=zero, selection__effective_answers=effective,
                              selection__top_answer_weight_share=top, grad_norm=grad)}
    if digests is not None:
        entry["rollout_digests"] = digests
    return entry


# ---------------------------------------------------------------------------- per-step means and per-seed records
def test_step_mean_counts_what_it_leaves_out():
    rows = [{"k": 0.1}, {"k": 0.3}, {"k": float("nan")}, {"other": 1.0}, {"k": None}, {"k": "x"}]
    assert m.step_mean(rows, "k") == (pytest.approx(0.2), 2)  # NaN and "x" are counted, a missing value is absent
    assert m.step_mean(rows, "absent") == (None, 0)
    assert m.step_mean([{"k": 1.0}, {"k": 0.0}, {"k": 0.5}], "k") == (0.5, 0)


def test_seed_record_holds_each_arms_means_and_the_rollout_agreement():
    ets = arm(0.3, digests={"0": ["a", "b", "c", "d"], "1": ["a", "b", "x", "y"], "2": ["p", "q", "r", "s"]})
    gmts = arm(0.0, effective=30.0, digests={"0": ["a", "b", "c", "d"], "1": ["a", "b", "c", "d"],
                                             "2": ["z", "z", "z", "s"]})
    ets["train_log"][0]["grad_norm"] = float("inf")  # one step's norm is not finite: left out and counted
    r = m.seed_record(7, -0.025, {"ets": ets, "gmts": gmts})
    assert r["seed"] == 7 and r["delta_points"] == pytest.approx(-2.5)
    assert r["arms"]["ets"][m.ZERO] == pytest.approx(0.3) and r["arms"]["gmts"][m.EFFECTIVE] == 30.0
    assert r["arms"]["ets"][m.GRAD] == pytest.approx(0.1) and r["nonfinite_steps"] == {"ets grad_norm": 1}
    assert r["arms"]["ets"][m.ZERO_SPREAD] is None  # not logged here; TRL's frac_reward_zero_std where it is
    spread = m.seed_record(7, 0.0, {"ets": {"train_log": log(frac_reward_zero_std=0.25)}, "gmts": arm(0.0)})
    assert spread["arms"]["ets"][m.ZERO_SPREAD] == 0.25
    assert r["rollout_agreement"] == [[0, 1.0], [1, 0.5], [2, 0.25]]
    assert r["rollout_agreement_mean"] == pytest.approx(1.75 / 3)
    without = m.seed_record(7, 0.0, {"ets": arm(0.3), "gmts": arm(0.0, digests={"0": ["a"]})})
    assert without["rollout_agreement"] is None and without["rollout_agreement_mean"] is None
    assert "nonfinite_steps" not in without
    with pytest.raises(m.MechanismError, match="arm gmts is missing"):
        m.seed_record(7, 0.0, {"ets": arm(0.3)})


def test_agreement_by_step_averages_over_the_seeds_that_recorded_it():
    records = [{"rollout_agreement": [[0, 1.0], [1, 0.5]]}, {"rollout_agreement": [[0, 1.0], [1, 0.25], [2, 0.0]]},
               {"rollout_agreement": None}]
    rows = m.agreement_by_step(records)
    assert [(r["step"], r["n"], r["mean"]) for r in rows] == [(0, 2, 1.0), (1, 2, 0.375), (2, 1, 0.0)]
    assert rows[0]["low"] == rows[0]["high"] == 1.0  # two equal values: no spread
    assert rows[1]["low"] < 0.375 < rows[1]["high"] and rows[2]["low"] is None  # one seed: no t band


# ---------------------------------------------------------------------------- the analysis of a hand-made grid
def hand_grid():
    """Five seeds: delta = 10 x ETS's zero share - 3, in points, exactly (so r = rho = 1, slope 10 points per unit of
    share, intercept -3); GMTS's effective answers are the same for every seed; the rollouts agree on step 0 and then
    on a seed-dependent share."""
    zero = {1: 0.2, 2: 0.3, 3: 0.25, 4: 0.4, 5: 0.35}
    deltas = {s: (10 * z - 3) / 100 for s, z in zero.items()}
    arms_by_seed = {}
    for s, z in zero.items():
        first = [f"s{s}r{i}" for i in range(4)]
        later = first[:s % 4] + ["other"] * (4 - s % 4)
        arms_by_seed[s] = {"ets": arm(z, effective=50 - s, digests={"0": first, "1": first}),
                           "gmts": arm(0.0, effective=33.0, digests={"0": first, "1": later})}
    return deltas, arms_by_seed


def by_variable(analysis: dict) -> dict:
    return {row["variable"]: row for row in analysis["associations"]}


def test_analyse_recovers_an_exact_line_and_names_what_it_cannot_compute():
    deltas, arms_by_seed = hand_grid()
    a = m.analyse(deltas, arms_by_seed, planned_seeds=[1, 2, 3, 4, 5, 6, 7])
    assert a["status"] == "interim" and a["seeds"] == [1, 2, 3, 4, 5] and a["planned_seeds"] == [1, 2, 3, 4, 5, 6, 7]
    rows = by_variable(a)
    assert [r["variable"] for r in a["associations"]] == [m.variable_name(arm, key) for arm, key in m.VARIABLES]
    zero = rows["ets selection/zero_advantage_kept_share"]
    assert zero["n"] == 5 and zero["seeds"] == [1, 2, 3, 4, 5]
    assert zero["pearson"] == pytest.approx(1) and zero["spearman"] == pytest.approx(1)
    assert zero["slope"] == pytest.approx(10) and zero["intercept"] == pytest.approx(-3)
    assert (zero["x_min"], zero["x_max"]) == (0.2, 0.4)
    # ETS's effective answers 50 - seed: delta against them is the zero share's line seen through the seed order
    effective = rows["ets selection/effective_answers"]
    assert effective["spearman"] == pytest.approx(-0.8)  # ranks of (49, 48, 47, 46, 45) against (1, 3, 2, 5, 4)
    flat = rows["gmts selection/effective_answers"]
    assert flat["pearson"] is None and "x is the same" in flat["note"]
    agree = rows["rollout_agreement"]
    means = {s: (1 + (s % 4) / 4) / 2 for s in deltas}  # step 0 all agree, step 1 s % 4 of 4
    assert agree["n"] == 5 and agree["x_min"] == min(means.values()) and agree["x_max"] == max(means.values())
    assert [r["rollout_agreement_mean"] for r in a["per_seed"]] == pytest.approx([means[s] for s in sorted(means)])
    assert [r["step"] for r in a["agreement_by_step"]] == [0, 1]
    assert [r["mean"] for r in a["agreement_by_step"]] == pytest.approx([1.0, (1 + 2 + 3 + 0 + 1) / 4 / 5])
    assert m.analyse(deltas, arms_by_seed, planned_seeds=[5, 4, 3, 2, 1])["status"] == "complete"


def test_analyse_keeps_a_seed_without_a_variable_and_counts_it_out():
    deltas, arms_by_seed = hand_grid()
    for row in arms_by_seed[2]["ets"]["train_log"]:
        del row[m.ZERO]  # logged only from a later seed on, as on the qwen grid
    for entry in arms_by_seed[3].values():
        del entry["rollout_digests"]
    rows = by_variable(m.analyse(deltas, arms_by_seed, planned_seeds=list(deltas)))
    assert rows[m.variable_name("ets", m.ZERO)]["seeds"] == [1, 3, 4, 5]
    assert rows[m.variable_name("ets", m.ZERO)]["pearson"] == pytest.approx(1)
    assert rows["rollout_agreement"]["seeds"] == [1, 2, 4, 5] and rows[m.variable_name("ets", m.GRAD)]["n"] == 5
    none = m.analyse({1: 0.0}, {1: {"ets": arm(0.1), "gmts": arm(0.0)}}, planned_seeds=[1, 2])
    assert by_variable(none)["rollout_agreement"]["note"] == "not logged for these seeds"


def test_analyse_refuses_inputs_that_do_not_fit():
    deltas, arms_by_seed = hand_grid()
    with pytest.raises(m.MechanismError, match="differ"):
        m.analyse({**deltas, 9: 0.0}, arms_by_seed, planned_seeds=[1, 2, 3, 4, 5, 9])
    with pytest.raises(m.MechanismError, match=r"seeds \[5\] ran but are not among the planned"):
        m.analyse(deltas, arms_by_seed, planned_seeds=[1, 2, 3, 4])
    with pytest.raises(m.MechanismError, match="no seed"):
        m.analyse({}, {}, planned_seeds=[1])


# ---------------------------------------------------------------------------- which seeds are the test
def test_setting_of_test_reads_the_primary_test_or_the_one_setting_that_runs_both_arms():
    summary = {"primary": {"variant": "paper", "learning_rate": 1e-4, "comparison": "gmts - ets", "seeds": [1, 2, 3],
                           "seeds_done": [1, 2], "per_seed": [0.01, -0.02]}, "pooled": []}
    assert m.setting_of_test(summary, {}) == ("paper", 1e-4, [1, 2, 3], {1: 0.01, 2: -0.02})
    block = {"variant": "c", "learning_rates": [1e-4]}
    grid = {"blocks": [{"name": "a", **block, "arms": ["ets", "gmts"], "seeds": [5, 4]},
                       {"name": "b", **block, "arms": ["gmts", "ets"], "seeds": [6]},
                       {"name": "grpo", "arms": ["grpo"], "learning_rates": [2e-5], "seeds": [1]}]}
    row = {"variant": "c", "learning_rate": 1e-4}
    pooled = [{**row, "comparison": "gmts - ets", "seeds": [4, 5], "per_seed": [0.1, 0.2]},
              {**row, "comparison": "ets - grpo", "seeds": [4], "per_seed": [0.3]}]
    assert m.setting_of_test({"pooled": pooled}, grid) == ("c", 1e-4, [4, 5, 6], {4: 0.1, 5: 0.2})
    grid["blocks"].append({"name": "edge", "arms": ["ets", "gmts"], "learning_rates": [2e-4], "seeds": [1]})
    with pytest.raises(m.MechanismError, match="2 settings run both arms"):
        m.setting_of_test({"pooled": pooled}, grid)
    with pytest.raises(m.MechanismError, match="compares ets - grpo"):
        m.setting_of_test({"primary": {**summary["primary"], "comparison": "ets - grpo"}}, {})


def write_grid(root: Path) -> Path:
    """A two-seed grid on disk: sweep.json (sealed with its digest), grid.yaml and the cells' results files."""
    folder = root / "g"
    cells, deltas = [], {100: 0.02, 101: -0.01}
    for seed in deltas:
        name = f"coupled-lr0.0001-s{seed}"
        results = {"arms": {"ets": arm(0.3), "gmts": arm(0.0)}}
        results["digest"] = digest(results)
        (folder / name).mkdir(parents=True)
        (folder / name / "results.json").write_text(json.dumps(results))
        cells.append({"cell": name, "variant": "coupled", "learning_rate": 1e-4, "seed": seed,
                      "path": f"{name}/results.json", "digest": results["digest"]})
    summary = {"kind": "sweep", "name": "g", "cells": cells,
               "pooled": [{"variant": "coupled", "learning_rate": 1e-4, "comparison": "gmts - ets",
                           "seeds": list(deltas), "per_seed": list(deltas.values())}]}
    summary["digest"] = digest(summary)
    (folder / "sweep.json").write_text(json.dumps(summary))
    (folder / "grid.yaml").write_text(yaml.safe_dump({"name": "g", "blocks": [
        {"name": "pilot", "variant": "coupled", "arms": ["ets", "gmts"], "learning_rates": [1e-4],
         "seeds": [100, 101, 102]}]}))
    return folder / "sweep.json"


def test_read_grid_checks_every_cell_against_the_summary(tmp_path):
    sweep = write_grid(tmp_path)
    a = m.grid_analysis(sweep)
    assert (a["grid"], a["variant"], a["learning_rate"], a["status"]) == ("g", "coupled", 1e-4, "interim")
    assert [r["delta_points"] for r in a["per_seed"]] == pytest.approx([2.0, -1.0])
    cell = sweep.parent / "coupled-lr0.0001-s101" / "results.json"
    edited = json.loads(cell.read_text())
    edited["arms"]["ets"]["train_log"][0]["grad_norm"] = 9.0
    cell.write_text(json.dumps(edited))
    with pytest.raises(m.MechanismError, match="not the file sweep.json summarized"):
        m.grid_analysis(sweep)
    summary = json.loads(sweep.read_text())
    summary["name"] = "h"
    sweep.write_text(json.dumps(summary))
    with pytest.raises(m.MechanismError, match="edited after sweep.py wrote it"):
        m.grid_analysis(sweep)
    with pytest.raises(m.MechanismError, match="not a sweep.json"):
        m.grid_analysis(cell)


def test_plots_subcommand_writes_the_results_file_and_the_figure(tmp_path, capsys):
    from gmts_recipe import plots

    sweep = write_grid(tmp_path)
    out = tmp_path / "out"
    assert plots.main(["mechanism", str(sweep), "--out", str(out)]) == 0
    assert json.loads((out / "mechanism.json").read_text())["seeds"] == [100, 101]
    assert (out / "mechanism.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.main(["mechanism", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot analyse" in err


def test_figure_titles_carry_r_and_its_interval():
    from gmts_recipe.plots import mechanism_figure

    deltas, arms_by_seed = hand_grid()
    analysis = {"grid": "hand", "variant": "v", "learning_rate": 1e-4,
                **m.analyse(deltas, arms_by_seed, planned_seeds=[1, 2, 3, 4, 5, 6])}
    fig = mechanism_figure(analysis)
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(titles) == len(m.VARIABLES) + 1
    assert titles[0].startswith("ETS: share of kept tokens in zero-advantage answers\nr +1.00 [+1.00, +1.00], n 5")
    assert "undefined" in titles[2]  # GMTS's effective answers: the same for every seed
    assert titles[-1].startswith("identical rollouts, ETS vs GMTS, per step")
    assert "interim: 5 of 6 planned seeds" in fig._suptitle.get_text()


# ---------------------------------------------------------------------------- the committed files
@pytest.mark.parametrize("grid", ["qwen", "coupled", "confirm"])
def test_committed_mechanism_json_is_what_the_code_computes(grid):
    """results/<grid>/mechanism.json is regenerated, not typed: recomputed from the committed sweep.json and cells,
    equal up to the last digits a machine's floating point may change (records.numbers_close: a correlation can
    differ in its 17th significant digit between two CPUs)."""
    from gmts_recipe.records import first_difference, numbers_close

    committed = json.loads((ROOT / "results" / grid / "mechanism.json").read_text())
    recomputed = json.loads(json.dumps(m.grid_analysis(ROOT / "results" / grid / "sweep.json")))
    assert numbers_close(recomputed, committed), (f"stale ({first_difference(recomputed, committed, 'mechanism')}): "
                                                  f"run python -m gmts_recipe.plots mechanism results/<grid>/sweep.json")
    summary = json.loads((ROOT / "results" / grid / "sweep.json").read_text())
    row = next(r for r in summary["pooled"] if r["comparison"] == "gmts - ets"
               and (r["variant"], r["learning_rate"]) == (committed["variant"], committed["learning_rate"]))
    assert committed["seeds"] == row["seeds"]
    assert [r["delta_points"] for r in committed["per_seed"]] == pytest.approx([100 * d for d in row["per_seed"]])


@pytest.mark.parametrize("grid", ["coupled", "confirm"])
def test_grid_is_interim_until_its_planned_seeds_have_run(grid):
    """A grid's planned seeds are those of its blocks that run both ETS and GMTS in configs/sweeps/<grid>.yaml."""
    committed = json.loads((ROOT / "results" / grid / "mechanism.json").read_text())
    config = yaml.safe_load((ROOT / "configs" / "sweeps" / f"{grid}.yaml").read_text())
    planned = sorted(s for b in config["blocks"] if {"ets", "gmts"} <= set(b["arms"]) for s in b["seeds"])
    assert committed["planned_seeds"] == planned
    assert committed["status"] == ("interim" if len(committed["seeds"]) < len(planned) else "complete")
    assert all(math.isfinite(r["delta_points"]) for r in committed["per_seed"])
