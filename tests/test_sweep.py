"""sweep.py: grid files, job order and resume, and a summary that check.py recomputes from the cells."""

import copy
import hashlib
import json
import math
import random
import re
import statistics
import subprocess
import time
from pathlib import Path

import pytest

import sweep
from gmts_recipe.verify.file import verify as verify_results
from gmts_recipe.verify.cell import Recorded, check_together, recorded
from gmts_recipe.sweep.grid import Cell, SweepError, by_cell, cell_command, jobs, load_grid
from gmts_recipe.sweep.local import expand_workers, mps_running, parse_gpus, run, shares_gpus
from gmts_recipe.sweep.merge import merge
from gmts_recipe.sweep.ray_tasks import CellFailed
from gmts_recipe.sweep.report import FEW_SEEDS, render, secondary_line, write_summary
from gmts_recipe.sweep.schedule import TIMING, arms_that_fit, recorded_pace, seconds_per_arm, time_left
from gmts_recipe.sweep.summary import CLAIMED, MAX_SEEDS, continued_summary, summarize, training_reward_fell
from gmts_recipe.verify.sweep import verify
from gmts_recipe.arms import arm_named
from results_files import rehash, seal_format_1


def seal(results: dict) -> dict:
    """Seal a test's cell as format 1 did (records in the file: these cells keep no samples, except where a test adds
    them), its config hash the one its config gives."""
    return seal_format_1(rehash(results))


CONFIG = "configs/smoke.yaml"


def write_grid(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(text.replace("RESULTS", str(tmp_path / "results")))
    return path


GRID = f"""
name: demo
config: {CONFIG}
results_dir: RESULTS
variants:
  small: {{per_device_train_batch_size: 4}}
blocks:
  - name: lr
    arms: [ets, gmts]
    learning_rates: [1.0e-4, 2.0e-4]
    seeds: [1]
  - name: seeds
    arms: [ets, gmts, grpo]
    learning_rates: [1.0e-4]
    seeds: [1, 2]
  - name: other
    variant: small
    arms: [gmts]
    learning_rates: [1.0e-4]
    seeds: [1]
"""


def test_jobs_follow_the_grid_and_shared_cells_run_once(tmp_path):
    grid = load_grid(write_grid(tmp_path, GRID))
    names = [f"{c.name}:{arm}" for c, arm in jobs(grid)]
    assert names == ["paper-lr0.0001-s1:ets", "paper-lr0.0001-s1:gmts", "paper-lr0.0002-s1:ets",
                     "paper-lr0.0002-s1:gmts", "paper-lr0.0001-s1:grpo", "paper-lr0.0001-s2:ets",
                     "paper-lr0.0001-s2:gmts", "paper-lr0.0001-s2:grpo", "small-lr0.0001-s1:gmts"]
    small = [c for c in grid.cells() if c.variant == "small"][0]
    assert small.recipe_args() == ["--learning_rate", "0.0001", "--seed", "1", "--per_device_train_batch_size", "4"]
    assert [f"{c.name}:{a}" for c, a in jobs(grid, only="other")] == ["small-lr0.0001-s1:gmts"]
    # several blocks: theirs in the grid's order, whatever order they are named in
    assert [f"{c.name}:{a}" for c, a in jobs(grid, only="other,lr")] == [
        "paper-lr0.0001-s1:ets", "paper-lr0.0001-s1:gmts", "paper-lr0.0002-s1:ets", "paper-lr0.0002-s1:gmts",
        "small-lr0.0001-s1:gmts"]


def test_an_unknown_block_name_among_several_gives_one_line(tmp_path, capsys):
    grid = write_grid(tmp_path, GRID)
    assert sweep.main([str(grid), "--only", "lr,nope", "--plan"]) == 2
    assert capsys.readouterr().err.strip() == "sweep.py: no block named 'nope'; blocks: lr, seeds, other"
    assert sweep.main([str(grid), "--only", "seeds,lr", "--plan"]) == 0


@pytest.mark.parametrize("text,match", [
    ("name: x\nconfig: configs/nope.yaml\nblocks: []\n", "config 'configs/nope.yaml' not found"),
    (f"config: {CONFIG}\nblocks: []\n", "no blocks"),
    (f"config: {CONFIG}\nblock: []\n", "unknown key"),
    (f"config: {CONFIG}\nblocks:\n  - name: a\n    arms: [etss]\n    learning_rates: [1]\n    seeds: [1]\n",
     "unknown arm"),
    (f"config: {CONFIG}\nblocks:\n  - name: a\n    arms: [ets]\n    learning_rates: [x]\n    seeds: [1]\n",
     "must be numbers"),
    (f"config: {CONFIG}\nblocks:\n  - name: a\n    arms: [ets]\n    learning_rates: [1]\n    seeds: [1]\n"
     "    variant: nope\n", "variant 'nope' is not defined"),
    ("{{{", "not valid YAML"),
    (f"config: {CONFIG}\nblocks:\n  - name: a\n    arms: [ets]\n    learning_rate: [1]\n    seeds: [1]\n",
     "block 'a': unknown key\\(s\\) learning_rate \\(did you mean learning_rates\\?\\); a block has name, arms, "),
])
def test_bad_grid_files_give_one_line(tmp_path, text, match):
    with pytest.raises(SweepError, match=match):
        load_grid(write_grid(tmp_path, text))


def test_main_reports_grid_errors_in_one_line(tmp_path, capsys):
    assert sweep.main([str(tmp_path / "missing.yaml")]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    # a mistyped name: the sweeps beside it are named (here the only one in its folder)
    grid = write_grid(tmp_path, GRID)
    assert sweep.main([str(grid.with_name("gird.yaml")), "--plan"]) == 2
    assert capsys.readouterr().err == f"sweep.py: sweep file {grid.with_name('gird.yaml')} not found (sweeps: {grid})\n"
    # a recipe.py option without the -- before it: one line that shows where it goes, nothing runs
    assert sweep.main([str(grid), "--gsm8k_path", "DIR"]) == 2
    assert capsys.readouterr().err == ("sweep.py: unrecognized arguments: --gsm8k_path DIR (recipe.py's options go "
                                       "after --: python sweep.py GRID [options] -- --gsm8k_path DIR)\n")


@pytest.mark.parametrize("flags", [["--plan"], ["--commands"], []])
def test_a_misspelt_recipe_key_in_a_variant_or_after_dashes_is_one_line_before_anything_runs(tmp_path, capsys, flags):
    grid = write_grid(tmp_path, GRID.replace("per_device_train_batch_size: 4", "per_device_train_batch_sise: 4"))
    assert sweep.main([str(grid), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sweep.py: variant 'small': unknown recipe.py key 'per_device_train_batch_sise' (did you "
                          "mean per_device_train_batch_size, ") and err.count("\n") == 1
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("results.json"))
    assert sweep.main([str(write_grid(tmp_path, GRID)), *flags, "--", "--gsm8k_pth", "DIR"]) == 2
    assert capsys.readouterr().err.startswith("sweep.py: after --: unknown recipe.py key 'gsm8k_pth' (did you mean "
                                              "gsm8k_path")


@pytest.mark.parametrize("gpus, visible, match", [
    ("x", 2, "'x' is not a GPU index"), ("0,2", 2, "GPU 2 is not visible here \\(2 GPU\\(s\\): 0-1\\)"),
    ("0", 0, "no GPU: leave out --gpus")])
def test_a_bad_gpu_list_is_refused_before_anything_runs(gpus, visible, match):
    with pytest.raises(SweepError, match=match):
        parse_gpus(gpus, visible)


def test_gpu_lists_that_run(tmp_path, monkeypatch, capsys):
    assert parse_gpus("0,0,1", 2) == ["0", "0", "1"]  # an id twice: two workers on that GPU
    assert parse_gpus("GPU-8f2a,MIG-1c", 0) == ["GPU-8f2a", "MIG-1c"]  # UUIDs pass through
    assert parse_gpus(None, 0) == []
    launched = []
    monkeypatch.setattr(sweep, "run", lambda *a, **k: launched.append(a) or [])
    assert sweep.main([str(write_grid(tmp_path, GRID)), "--gpus", "x"]) == 2  # main: one line, nothing launched
    assert launched == [] and "not a GPU index" in capsys.readouterr().err


# ---------------------------------------------------------------- summary from fake cells
TASKS = [f"{i:016x}" for i in range(40)]
POOLS = {"train_pool": 40, "test_pool": 40}  # the whole test split held out (the config's n_heldout 0)


def evaluation(p: float, seed: int, rng: random.Random) -> dict:
    records = [{"task": i, "hash": h, "scores": [float(rng.random() < p) for _ in range(4)], "lengths": [10] * 4}
               for i, h in enumerate(TASKS)]
    return {"seed": 0, "k": 4, "pass@1": sum(sum(r["scores"]) / 4 for r in records) / len(records),
            "records": records, "hack_scan": {}}


def base_evals(base_seed: int = 0) -> list[dict]:
    """The base evaluations (seeds 0, 1, 2) every cell shares; another base_seed: the base evaluated again elsewhere
    (bf16 is not bit-exact), the same tasks with other scores."""
    rng = random.Random(base_seed)
    return [{**evaluation(0.3, 0, rng), "seed": s} for s in (0, 1, 2)]


VARIANTS = {"paper": {}, "small": {"per_device_train_batch_size": 4}}  # GRID's variants


def recorded_config(name: str) -> tuple[dict, float]:
    """The config record and learning rate recipe.py writes for the cell `name` (variant-lr<lr>-s<seed>) of GRID: the
    base config's fields, its variant's settings, the training seed (the learning rate is in each arm's entry)."""
    match = re.fullmatch(r"(?P<variant>.+)-lr(?P<lr>.+)-s(?P<seed>\d+)", name)
    config = {"max_steps": 10, "per_device_train_batch_size": 8, "n_heldout": 0, **VARIANTS[match["variant"]],
              "seed": int(match["seed"])}
    return config, float(match["lr"])


def fake_cell(root: Path, name: str, arms: dict[str, float], seed: int, reward: float = 0.5,
              base_seed: int = 0, rewards: list[float] | None = None) -> None:
    """A cell's results.json: `seed` draws its scores (the cell's training seed is in its name, as in a sweep); every
    arm's training log has the reward `reward` at each of 10 steps, or the per-step `rewards`."""
    rng = random.Random(seed)
    config, lr = recorded_config(name)
    rewards = rewards or [reward] * 10
    config["max_steps"] = max(config["max_steps"], len(rewards))  # a training log within its run's steps
    results = {"config_name": name, "config": config, "base": {"evals": base_evals(base_seed)},
               "data": {"task": "gsm8k", **POOLS, "heldout": [[i, h] for i, h in enumerate(TASKS)]},
               "arms": {arm: {"eval": evaluation(p, seed, rng), "learning_rate": lr,
                              "token_selection": arm_named(arm).rule,
                              "train_log": [{"step": i, "loss": 0.0, "reward": r} for i, r in enumerate(rewards, 1)]}
                        for arm, p in arms.items()}}
    (root / name).mkdir(parents=True)
    (root / name / "results.json").write_text(json.dumps(seal(results)))


def test_summary_pools_seeds_and_check_recomputes_every_cell(tmp_path):
    grid_path = write_grid(tmp_path, GRID)
    grid = load_grid(grid_path)
    root = tmp_path / "results" / "demo"
    fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.6, "grpo": 0.5}, seed=1, reward=0.6)
    fake_cell(root, "paper-lr0.0001-s2", {"ets": 0.5, "gmts": 0.6, "grpo": 0.4}, seed=2, reward=0.6)
    fake_cell(root, "paper-lr0.0002-s1", {"ets": 0.5, "gmts": 0.5}, seed=3, reward=0.7)
    assert [f"{c.name}:{a}" for c, a in jobs(grid)] == ["small-lr0.0001-s1:gmts"]  # resume skips the rest
    path = write_summary(grid, grid_path)
    summary = verify(path)
    gmts_ets = [p for p in summary["pooled"] if p["comparison"] == "gmts - ets" and p["learning_rate"] == 1e-4][0]
    assert gmts_ets["seeds"] == [1, 2] and gmts_ets["low"] <= gmts_ets["delta"] <= gmts_ets["high"]
    best = {row["arm"]: row["learning_rate"] for row in summary["best_stable"]}
    assert best == {"ets": 2e-4, "gmts": 2e-4, "grpo": 1e-4}  # by late training reward, never by test scores
    assert (root / "sweep.png").is_file()
    import check

    # check.py verifies a sweep too, and prints its tables (these cells keep no samples)
    assert check.main([str(path), "--markdown", "--allow-unsampled"]) == 0
    from test_check import check_in_a_fresh_process

    assert check_in_a_fresh_process(str(path)) == []  # and imports neither torch nor transformers for it
    # a cell edited after the summary was written (and re-sealed) no longer matches
    cell = json.loads((root / "paper-lr0.0001-s2" / "results.json").read_text())
    ev = cell["arms"]["gmts"]["eval"]
    ev["records"][0]["scores"] = [0.0, 0.0, 0.0, 1.0] if ev["records"][0]["scores"] != [0.0, 0.0, 0.0, 1.0] else [1.0] * 4
    ev["pass@1"] = sum(sum(r["scores"]) / 4 for r in ev["records"]) / len(ev["records"])
    (root / "paper-lr0.0001-s2" / "results.json").write_text(json.dumps(seal(cell)))
    with pytest.raises(SweepError, match="sweep.cells"):
        verify(path)
    # and the summary itself cannot be edited
    summary["pooled"][0]["delta"] = 0.5
    path.write_text(json.dumps(summary))
    with pytest.raises(SweepError, match="digest mismatch"):
        verify(path)
    assert check.main([str(path)]) == 2


def test_held_out_scores_cannot_change_the_best_stable_learning_rate(tmp_path):
    """The same training logs, and the 2e-4 cell's held-out scores from far below the base (collapsed) to far above:
    the choice stays the one the late training reward makes. (It used to drop a learning rate where a seed's
    held-out verdict was collapsed.)"""
    chosen = []
    for held_out in (0.0, 0.5, 0.9):
        (tmp_path / str(held_out)).mkdir()
        grid_path = write_grid(tmp_path / str(held_out), GRID)
        root = tmp_path / str(held_out) / "results" / "demo"
        fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.5}, seed=1, reward=0.6)
        fake_cell(root, "paper-lr0.0001-s2", {"ets": 0.5, "gmts": 0.5}, seed=2, reward=0.6)
        fake_cell(root, "paper-lr0.0002-s1", {"ets": held_out, "gmts": held_out}, seed=3, reward=0.7)
        summary = summarize(load_grid(grid_path))
        verdicts = {c["arms"]["gmts"]["verdict"] for c in summary["cells"] if c["learning_rate"] == 2e-4}
        assert verdicts == {"collapsed" if held_out == 0.0 else "moved"}
        chosen.append(summary["best_stable"])
    assert chosen[0] == chosen[1] == chosen[2]
    assert {row["arm"]: row["learning_rate"] for row in chosen[0]} == {"ets": 2e-4, "gmts": 2e-4}


def test_a_learning_rate_whose_training_reward_fell_is_not_stable(tmp_path):
    """2e-4 ends with the higher training reward (0.7 against 0.6) but fell from 0.9 while 1e-4 rose from 0.3: the
    best stable learning rate is 1e-4, whatever the held-out scores say (here they favour 2e-4)."""
    rose, fell = [0.3] * 10 + [0.6] * 10, [0.9] * 10 + [0.7] * 10
    grid_path = write_grid(tmp_path, GRID)
    root = tmp_path / "results" / "demo"
    fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.4, "gmts": 0.4}, seed=1, rewards=rose)
    fake_cell(root, "paper-lr0.0002-s1", {"ets": 0.8, "gmts": 0.8}, seed=3, rewards=fell)
    best = summarize(load_grid(grid_path))["best_stable"]
    assert [(row["arm"], row["learning_rate"]) for row in best] == [("ets", 1e-4), ("gmts", 1e-4)]
    assert [row["late_reward"] for row in best] == pytest.approx([0.6, 0.6])
    assert not training_reward_fell([{"reward": r} for r in rose])
    assert training_reward_fell([{"reward": r} for r in fell])


@pytest.mark.parametrize("n, text", [(1, "interval over tasks only"), (2, "too few for the seed level"),
                                     (3, "few: the bootstrap understates the seed spread; read t"), (5, "5")])
def test_the_seeds_column_says_what_an_interval_covers(n, text):
    summary = {"name": "demo", "best_stable": [], "cells": [{"variant": "paper", "learning_rate": 1e-4, "seed": 1,
               "arms": {}, "base_mean": 0.3, "noise_floor": 0.01}],
               "pooled": [{"variant": "paper", "comparison": "gmts - ets", "comparison_kind": "shared learning rate",
                           "learning_rate": 1e-4, "seeds": list(range(n)), "delta": 0.02, "low": -0.01,
                           "high": 0.05, "per_seed": [0.02] * n}]}
    row = [line for line in render(summary).splitlines() if "gmts - ets" in line][0]
    assert text in row and (n >= FEW_SEEDS) == ("(" not in row.split("shared learning rate")[1].split("+")[0])


def test_the_arms_of_a_cell_share_one_process_in_the_order_of_first_appearance(tmp_path):
    grid = load_grid(write_grid(tmp_path, GRID))
    units = [(c.name, arms) for c, arms in by_cell(jobs(grid))]
    assert units == [("paper-lr0.0001-s1", ("ets", "gmts", "grpo")), ("paper-lr0.0002-s1", ("ets", "gmts")),
                     ("paper-lr0.0001-s2", ("ets", "gmts", "grpo")), ("small-lr0.0001-s1", ("gmts",))]
    cell = units[0]
    command = cell_command(grid, by_cell(jobs(grid))[0][0], cell[1], ["--gsm8k_path", "X"])
    assert command[command.index("--arm") + 1] == "ets,gmts,grpo" and command[-2:] == ["--gsm8k_path", "X"]
    assert command[command.index("--figures") + 1] == "false"  # a cell draws none: gmts_recipe.plots CELL_DIR does


def test_a_sweep_runs_each_cell_in_one_process(tmp_path, monkeypatch):
    """sweep.run starts one recipe process for the base evaluations and one per cell, whatever its arms."""
    grid = load_grid(write_grid(tmp_path, GRID))
    calls = []

    def fake_call(command, stdout, stderr, env):
        calls.append((command[command.index("--experiment") + 1], command[command.index("--arm") + 1]))
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    assert run(grid, ["0", "0"], []) == []
    assert calls[0] == ("paper-lr0.0001-s1", "base")
    assert sorted(calls[1:]) == sorted([("paper-lr0.0001-s1", "ets,gmts,grpo"), ("paper-lr0.0002-s1", "ets,gmts"),
                                        ("paper-lr0.0001-s2", "ets,gmts,grpo"), ("small-lr0.0001-s1", "gmts")])
    logs = sorted(p.name for p in (tmp_path / "results" / "demo" / "logs").glob("*.log"))
    assert "paper-lr0.0001-s1-ets+gmts+grpo.log" in logs and "paper-lr0.0001-s1-base.log" in logs


def test_gmts_minus_ets_rows_say_how_many_seeds_the_papers_gains_need(tmp_path):
    """From 3 seeds on, the spread of the per-seed deltas says how many seeds 80% power needs at each of the gains
    the GMTS paper reports; fewer seeds give no estimate of that spread, and other comparisons have no claimed gain."""
    from gmts_recipe.stats import seeds_for_power

    grid_path = write_grid(tmp_path, GRID.replace("seeds: [1, 2]", "seeds: [1, 2, 3]"))
    grid = load_grid(grid_path)
    root = tmp_path / "results" / "demo"
    for seed, gmts in ((1, 0.6), (2, 0.5), (3, 0.55)):
        fake_cell(root, f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": gmts, "grpo": 0.5}, seed=seed)
    summary = summarize(grid)
    rows = {p["comparison"]: p for p in summary["pooled"]}
    want = {f"{100 * e:+.1f}": seeds_for_power(rows["gmts - ets"]["per_seed"], e) for e in CLAIMED["gmts - ets"]}
    assert rows["gmts - ets"]["seeds"] == [1, 2, 3] and rows["gmts - ets"]["seeds_for_power"] == want
    assert want["+3.4"] is not None and (want["+1.3"] is None or want["+1.3"] > want["+3.4"])
    assert "seeds_for_power" not in rows["ets - grpo"]
    line = [x for x in render(summary).splitlines() if "gmts - ets" in x][0]
    shown = {e: f">{MAX_SEEDS}" if n is None else str(n) for e, n in want.items()}
    assert f"{shown['+1.3']} at +1.3 / {shown['+3.4']} at +3.4" in line
    two_seeds = tmp_path / "two-seeds.yaml"  # the same cells, seeds 1 and 2 only
    two_seeds.write_text(GRID.replace("RESULTS", str(tmp_path / "results")))
    two = summarize(load_grid(two_seeds))
    assert two["pooled"] and all("seeds_for_power" not in p for p in two["pooled"])


CONTROL_BLOCK = """  - name: control
    arms: [ets_nz]
    learning_rates: [1.0e-4]
    seeds: [1, 2]
"""


def test_the_control_arm_joins_existing_cells_and_leaves_their_summary_as_it_was(tmp_path):
    """A block that adds ets_nz to cells that already have results: the resume runs only the new arm; until it has
    run, every number and table is the same as without the block; after, the cells that have it gain a column and
    the rows gmts - ets_nz and ets_nz - ets, and no other row changes."""
    grid_path = write_grid(tmp_path, GRID)
    root = tmp_path / "results" / "demo"
    for seed, gmts in ((1, 0.6), (2, 0.5)):
        fake_cell(root, f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": gmts, "grpo": 0.5}, seed=seed)
    before = summarize(load_grid(grid_path))
    with_block = tmp_path / "with-control.yaml"
    with_block.write_text(grid_path.read_text().replace("  - name: other", CONTROL_BLOCK + "  - name: other"))
    grid = load_grid(with_block)
    todo = [f"{c.name}:{a}" for c, a in jobs(grid)]
    assert [j for j in todo if j.startswith("paper-lr0.0001")] == ["paper-lr0.0001-s1:ets_nz",
                                                                    "paper-lr0.0001-s2:ets_nz"]
    units = {c.name: arms for c, arms in by_cell(jobs(grid))}
    assert units["paper-lr0.0001-s1"] == ("ets_nz",)  # one process per cell, the missing arm only
    unchanged = summarize(grid)
    assert unchanged == before and render(unchanged) == render(before)
    assert "ETS-nz" not in render(before)
    # seed 1 gains the arm (as recipe.py --resume merges it into the cell's results.json)
    cell = json.loads((root / "paper-lr0.0001-s1" / "results.json").read_text())
    cell["arms"]["ets_nz"] = {**copy.deepcopy(cell["arms"]["ets"]), "token_selection": "entropy_nonzero_omega"}
    (root / "paper-lr0.0001-s1" / "results.json").write_text(json.dumps(seal(cell)))
    after = summarize(grid)
    rows = {(p["comparison"], p["learning_rate"]): p for p in after["pooled"]}
    assert rows[("gmts - ets_nz", 1e-4)]["seeds"] == [1] and rows[("ets_nz - ets", 1e-4)]["delta"] == 0.0
    old = [p for p in after["pooled"] if "ets_nz" not in p["comparison"]]
    assert old == before["pooled"]
    assert [c["arms"].get("ets") for c in after["cells"]] == [c["arms"].get("ets") for c in before["cells"]]
    table = render(after).splitlines()
    assert "ETS-nz (top-20% by entropy, omega != 0 first)" in table[0] and table[0].startswith(render(before).splitlines()[0])
    path = write_summary(grid, with_block)
    written = verify(path)  # the summary as computed, with the record of the plan it was made from
    assert {k: v for k, v in written.items() if k not in ("plan", "digest")} == \
        {k: v for k, v in after.items() if k != "digest"}
    assert written["plan"]["sha256"] == hashlib.sha256(with_block.read_bytes()).hexdigest()


PRIMARY = """primary:
  fixed_on: 2026-11-30
  variant: paper
  comparison: gmts - ets
  learning_rate: 1.0e-4
  seeds: SEEDS
  reproduced_above_points: 0.0
  refuted_below_points: 1.3
"""


def test_the_primary_test_is_interim_until_every_planned_seed_has_run(tmp_path):
    """The plan's test over its own seeds: an interval as seeds arrive, a decision only when all have run, computed
    by code (and verified by check.py), so the README cannot state it by hand or early."""
    root = tmp_path / "results" / "demo"
    for seed, gmts in ((1, 0.6), (2, 0.65)):
        fake_cell(root, f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": gmts, "grpo": 0.5}, seed=seed)
    planned = write_grid(tmp_path, GRID + PRIMARY.replace("SEEDS", "[1, 2, 3]"))
    interim = summarize(load_grid(planned))["primary"]
    assert interim["seeds_done"] == [1, 2] and interim["decision"] == "interim"
    assert interim["t_low"] < interim["delta"] < interim["t_high"]
    pooled = [p for p in summarize(load_grid(planned))["pooled"]
              if p["comparison"] == "gmts - ets" and p["learning_rate"] == 1e-4][0]
    assert (interim["delta"], interim["t_low"], interim["t_high"]) == (pooled["delta"], pooled["t_low"],
                                                                       pooled["t_high"])  # the same seeds here
    line = render(summarize(load_grid(planned))).splitlines()[0]
    assert line.startswith("Primary test (analysis plan fixed 2026-11-30") and "over seeds 1-3" in line
    assert "So far 2 of 3 seeds" in line and "interim, no decision until every planned seed has run" in line
    complete = tmp_path / "complete.yaml"
    complete.write_text(planned.read_text().replace("seeds: [1, 2, 3]\n  reproduced", "seeds: [1, 2]\n  reproduced"))
    done = summarize(load_grid(complete))["primary"]
    from gmts_recipe.stats import plan_decision

    assert done["decision"] == plan_decision(100 * done["t_low"], 100 * done["t_high"], 0.0, 1.3) != "interim"
    assert f"**{done['decision']}**" in render(summarize(load_grid(complete)))
    path = write_summary(load_grid(complete), complete)
    assert verify(path)["primary"] == done  # the copy of the grid in results keeps the plan: check.py sees it


@pytest.mark.parametrize("edit, match", [
    (("comparison: gmts - ets", "comparison: gmts - base"), "comparison 'gmts - base' is not one of"),
    (("  refuted_below_points: 1.3\n", ""), "primary: missing refuted_below_points"),
    (("fixed_on: 2026-11-30", "fixed_on: 2026-11-30\n  alpha: 0.05"), "primary: unknown key\\(s\\) alpha"),
    (("seeds: SEEDS", "seeds: [1]"), "at least 2 seeds"),
    (("seeds: SEEDS", "seeds: [one, two]"), "seeds a list of integers"),
])
def test_a_bad_primary_block_is_one_line(tmp_path, edit, match):
    text = GRID + PRIMARY.replace(*edit).replace("SEEDS", "[1, 2]")
    with pytest.raises(SweepError, match=match):
        load_grid(write_grid(tmp_path, text))


SECONDARY = """secondary:
  - {comparison: gmts - grpo, seeds: [1, 2]}
  - {comparison: ets - grpo, seeds: SEEDS2}
"""


def test_secondary_comparisons_are_intervals_over_their_own_planned_seeds_never_a_decision(tmp_path):
    root = tmp_path / "results" / "demo"
    for seed, gmts, grpo in ((1, 0.6, 0.55), (2, 0.65, 0.5)):
        fake_cell(root, f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": gmts, "grpo": grpo}, seed=seed)
    planned = write_grid(tmp_path, GRID + PRIMARY.replace("SEEDS", "[1, 2]") + SECONDARY.replace("SEEDS2", "[1, 2]"))
    summary = summarize(load_grid(planned))
    first, second = summary["secondary"]
    pooled = {p["comparison"]: p for p in summary["pooled"] if p["learning_rate"] == 1e-4}
    for entry in (first, second):  # the same seeds as the pooled rows here: the same numbers
        assert entry["status"] == "complete" and entry["seeds_done"] == [1, 2] and "decision" not in entry
        row = pooled[entry["comparison"]]
        assert (entry["delta"], entry["t_low"], entry["t_high"]) == (row["delta"], row["t_low"], row["t_high"])
    assert first["delta"] > 0 > second["delta"]  # GMTS above GRPO on both seeds, ETS below
    lines = render(summary).split("\n\n")
    assert lines[1].startswith("Secondary (planned, interval only): gmts - grpo over seeds 1-2: 2 of 2 seeds, "
                               f"{100 * first['delta']:+.1f} points, t [")
    assert "interim" not in lines[1] and "reproduced" not in lines[1]
    path = write_summary(load_grid(planned), planned)
    assert verify(path)["secondary"] == summary["secondary"]
    # seeds still to run: interim, over the seeds that have run
    more = write_grid(tmp_path, GRID.replace("seeds: [1, 2]", "seeds: [1, 2, 3]") + PRIMARY.replace("SEEDS", "[1, 2]")
                      + SECONDARY.replace("SEEDS2", "[1, 2, 3]"))
    interim = summarize(load_grid(more))["secondary"][1]
    assert interim["status"] == "interim" and interim["seeds_done"] == [1, 2]
    assert "so far 2 of 3 seeds" in secondary_line(interim) and "(interim)" in secondary_line(interim)


@pytest.mark.parametrize("secondary, match", [
    ("secondary:\n  - {comparison: gmts - ets, seeds: [1, 2]}\n", "gmts - ets is the primary test"),
    ("secondary:\n  - {comparison: gmts - base, seeds: [1, 2]}\n", "is not 'A - B' of two of"),
    ("secondary:\n  - {comparison: gmts - ets_nz, seeds: [1, 2]}\n", "no block runs both arms of gmts - ets_nz"),
    ("secondary:\n  - {comparison: ets - grpo, seeds: [1, 2], alpha: 1}\n", "exactly comparison, seeds"),
    ("secondary:\n  - {comparison: ets - grpo, seeds: [1]}\n", "at least 2 seeds"),
    ("secondary: []\n", "non-empty list"),
])
def test_a_bad_secondary_list_is_one_line(tmp_path, secondary, match):
    with pytest.raises(SweepError, match=match):
        load_grid(write_grid(tmp_path, GRID + PRIMARY.replace("SEEDS", "[1, 2]") + secondary))
    with pytest.raises(SweepError, match="needs a primary test"):
        load_grid(write_grid(tmp_path, GRID + "secondary:\n  - {comparison: ets - grpo, seeds: [1, 2]}\n"))


# ---------------------------------------------------------------- --merge: cells run on another machine
EVAL_HASH = "e" * 64
HELDOUT = [[i, h] for i, h in enumerate(TASKS)]


def tree_cell(root: Path, name: str, arms: dict[str, float], seed: int, base_seed: int = 0) -> dict:
    """A cell as recipe.py writes it: its held-out tasks and its base's evaluation hash beside fake_cell's fields."""
    fake_cell(root, name, arms, seed, base_seed=base_seed)
    path = root / name / "results.json"
    results = json.loads(path.read_text())
    results["data"], results["base"]["eval_hash"] = {"task": "gsm8k", **POOLS, "heldout": HELDOUT}, EVAL_HASH
    path.write_text(json.dumps(seal(results)))
    return results


def write_cache(root: Path) -> dict:
    """The shared base-evals cache (recipe.py _main_base_evals), with base seed 0: the base every local cell has."""
    cache = {"eval_hash": EVAL_HASH, "eval_config": {"heldout": HELDOUT}, "evals": base_evals(0)}
    (root / "base-evals").mkdir(parents=True)
    (root / "base-evals" / f"{EVAL_HASH}.json").write_text(json.dumps(cache))
    return cache


def write_log(root: Path, name: str, text: str) -> None:
    (root / "logs").mkdir(parents=True, exist_ok=True)
    (root / "logs" / name).write_text(text)


# The merge trees' grid: GRID with GRPO at both learning rates (the incoming paper-lr0.0002-s1 brings a GRPO arm, and a
# cell holds only arms its blocks run).
TREES_GRID = GRID.replace("  - name: lr\n    arms: [ets, gmts]\n", "  - name: lr\n    arms: [ets, gmts, grpo]\n")


def trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(grid file, local sweep folder, incoming sweep folder). Local: the cache and paper-lr0.0001-s1 with ETS.
    Incoming (another machine that lacked the cache): s1 with ETS and GMTS on the same base; paper-lr0.0001-s2 (new)
    and paper-lr0.0002-s1 (local has ETS, GMTS; incoming GRPO) with their base evaluated again (base_seed 7)."""
    assert TREES_GRID != GRID
    grid_path = write_grid(tmp_path, TREES_GRID)
    local, incoming = tmp_path / "results" / "demo", tmp_path / "other" / "demo"
    write_cache(local)
    tree_cell(local, "paper-lr0.0001-s1", {"ets": 0.5}, seed=1)
    tree_cell(local, "paper-lr0.0002-s1", {"ets": 0.5, "gmts": 0.5}, seed=3)
    write_log(local, "paper-lr0.0001-s1-ets.log", "local")
    tree_cell(incoming, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.6}, seed=1)
    tree_cell(incoming, "paper-lr0.0001-s2", {"ets": 0.5, "gmts": 0.6}, seed=2, base_seed=7)
    tree_cell(incoming, "paper-lr0.0002-s1", {"grpo": 0.4}, seed=4, base_seed=7)
    for name in ("paper-lr0.0001-s1-ets.log", "paper-lr0.0001-s1-ets+gmts.log", "paper-lr0.0001-s2-ets+gmts.log",
                 "paper-lr0.0001-s20-ets.log", "h200-run.log"):
        write_log(incoming, name, "incoming")
    return grid_path, local, incoming


def files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


def test_merge_adds_the_incoming_arms_and_the_file_verifies(tmp_path, capsys):
    from gmts_recipe.verify.file import load

    grid_path, local, incoming = trees(tmp_path)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("[sweep] merge paper-lr0.0001-s1: added arm(s) gmts; base kept (shared cache); 1 log(s) copied;"
                        " 1 log(s) appended")
    merged, theirs = load(local / "paper-lr0.0001-s1" / "results.json"), load(incoming / "paper-lr0.0001-s1" /
                                                                               "results.json")
    assert list(merged["arms"]) == ["ets", "gmts"] and merged["arms"] == theirs["arms"]
    assert merged["base"] == theirs["base"] and merged["summary"] == theirs["summary"]
    assert merged["merges"] == [{"arms": ["gmts"], "incoming_digest": theirs["digest"], "versions": None,
                                 "base": "shared cache"}]
    assert not list((local / "paper-lr0.0001-s1").glob("*.png"))  # a sweep's cell carries no figures
    # the absent log of the cell is copied; a local log keeps its text and gets the incoming one after it, once;
    # other cells' logs stay out
    assert (local / "logs" / "paper-lr0.0001-s1-ets+gmts.log").read_text() == "incoming"
    appended = (local / "logs" / "paper-lr0.0001-s1-ets.log").read_text()
    assert appended.startswith("local\n[sweep] merged from ") and appended.endswith(":\nincoming")
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert "log(s)" not in capsys.readouterr().out  # merged before: nothing copied or appended again
    assert (local / "logs" / "paper-lr0.0001-s1-ets.log").read_text() == appended
    assert sorted(p.name for p in (local / "logs").iterdir()) == [
        "paper-lr0.0001-s1-ets+gmts.log", "paper-lr0.0001-s1-ets.log", "paper-lr0.0001-s2-ets+gmts.log"]
    assert not (local / "sweep.json").exists() and not (local / "sweep.png").exists()  # --summarize writes those


def test_merge_pairs_a_recomputed_base_with_the_shared_cache_and_records_it(tmp_path, capsys):
    from gmts_recipe.verify.file import load

    grid_path, local, incoming = trees(tmp_path)
    replaced = [e["pass@1"] for e in base_evals(7)]
    assert replaced != [e["pass@1"] for e in base_evals(0)]
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = f"base replaced by the shared cache (incoming pass@1 {', '.join(f'{p:.4f}' for p in replaced)})"
    assert lines[1:] == [f"[sweep] merge paper-lr0.0002-s1: added arm(s) grpo; {said}",
                         f"[sweep] merge paper-lr0.0001-s2: added arm(s) ets, gmts; {said}; 1 log(s) copied"]
    cache = json.loads((local / "base-evals" / f"{EVAL_HASH}.json").read_text())
    for name, arms in (("paper-lr0.0002-s1", ["ets", "gmts", "grpo"]), ("paper-lr0.0001-s2", ["ets", "gmts"])):
        merged, theirs = load(local / name / "results.json"), load(incoming / name / "results.json")
        assert list(merged["arms"]) == arms and all(merged["arms"][a] == theirs["arms"][a] for a in theirs["arms"])
        assert merged["base"] == {"evals": cache["evals"], "eval_hash": EVAL_HASH}
        assert merged["merges"] == [{"arms": list(theirs["arms"]), "incoming_digest": theirs["digest"],
                                     "versions": None, "base": "shared cache", "replaced_base_pass@1": replaced}]
        assert merged["summary"]["base"]["pass@1"] == [e["pass@1"] for e in cache["evals"]]
    assert load(local / "paper-lr0.0002-s1" / "results.json")["data"] == {"task": "gsm8k", **POOLS, "heldout": HELDOUT,
                                                                           "task_key": "question"}


def test_summarize_needs_the_merge_after_a_base_was_evaluated_again(tmp_path):
    import shutil

    grid_path, local, incoming = trees(tmp_path)
    copied = tmp_path / "copied" / "demo"  # the incoming cell copied in as it is: its base is not the others'
    shutil.copytree(local, copied)
    shutil.copytree(incoming / "paper-lr0.0001-s2", copied / "paper-lr0.0001-s2")
    unmerged = load_grid(grid_path)
    unmerged.results_dir = str(copied.parent)
    with pytest.raises(SweepError, match="cells disagree on the base evaluation"):
        summarize(unmerged)
    grid = load_grid(grid_path)
    merge(grid, incoming)
    summary = verify(write_summary(grid, grid_path))
    rows = {(p["comparison"], p["learning_rate"]): p for p in summary["pooled"]}
    assert rows[("gmts - ets", 1e-4)]["seeds"] == [1, 2] and rows[("gmts - ets", 2e-4)]["seeds"] == [1]


def test_merging_the_same_folder_again_changes_nothing(tmp_path, capsys):
    grid_path, local, incoming = trees(tmp_path)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    before = files(local)
    capsys.readouterr()
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert files(local) == before
    assert capsys.readouterr().out.splitlines() == [f"[sweep] merge {name}: unchanged" for name in
                                                    ("paper-lr0.0001-s1", "paper-lr0.0002-s1", "paper-lr0.0001-s2")]


def test_an_incoming_cell_without_a_finished_arm_merges_nothing_and_says_so(tmp_path, capsys):
    """A cell process stopped during its first arm leaves a results file with the base only: the merge says so
    rather than calling the cell unchanged, writes no cell, and still brings the log in."""
    grid_path, local, incoming = trees(tmp_path)
    path = incoming / "paper-lr0.0001-s2" / "results.json"
    results = json.loads(path.read_text())
    results["arms"] = {}
    path.write_text(json.dumps(seal(results)))
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("[sweep] merge paper-lr0.0001-s2: no finished arm there (a run stopped before its first arm "
                       "ended), nothing merged; 1 log(s) copied")
    assert not (local / "paper-lr0.0001-s2").exists()
    assert [p.name for p in (local / "logs").glob("paper-lr0.0001-s2-*.log")] != []


def test_a_log_merged_while_it_was_written_is_continued_not_repeated(tmp_path, capsys):
    """The same process's log merged twice, cut while its cell ran and then whole: the second merge appends the rest
    only, so the local log reads as the process wrote it; a log of another process still comes after a marker."""
    grid_path, local, incoming = trees(tmp_path)
    log = incoming / "logs" / "paper-lr0.0001-s2-ets+gmts.log"
    whole = log.read_text() + "\nstep 1\nstep 2\ndone\n"
    (local / "logs" / log.name).unlink(missing_ok=True)
    log.write_text(whole[: len(whole) - 12])  # cut
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    log.write_text(whole)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert (local / "logs" / log.name).read_text() == whole
    other = "=== another process\n"  # another machine's run of the cell, merged after a mark
    (local / "logs" / log.name).write_text(whole + f"\n[sweep] merged from X:\n{other}")
    log.write_text(other + "its next line\n")
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert (local / "logs" / log.name).read_text() == whole + f"\n[sweep] merged from X:\n{other}its next line\n"
    log.write_text("=== a third process\n")
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    text = (local / "logs" / log.name).read_text()
    assert text.count("[sweep] merged from ") == 2 and text.endswith(":\n=== a third process\n")
    # an incoming log that itself holds a merge mark (the other machine merged too): continued after the first mark
    log.write_text(f"{other}its next line\n\n[sweep] merged from Y:\nz\n")
    merged_twice = f"{whole}\n[sweep] merged from X:\n{other}its next line\n\n[sweep] merged from Y:\n"
    (local / "logs" / log.name).write_text(merged_twice)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert (local / "logs" / log.name).read_text().endswith("[sweep] merged from Y:\nz\n")
    assert (local / "logs" / log.name).read_text().count("its next line") == 1
    capsys.readouterr()


def test_a_cell_from_before_gradient_checkpointing_moved_merges_and_pools_with_a_current_one(tmp_path, capsys):
    """The local cell's file predates the move (its config record holds gradient_checkpointing, its arms do not); the
    incoming one is as recipe.py writes it today, resumed from that file with the option off for its new arm: the
    merge adds the arm, writes the file as today's, and the cells pool (check_together) with an old-style one."""
    from gmts_recipe.records import config_hash, current_record

    grid_path, local, incoming = trees(tmp_path)
    for path in (local / "paper-lr0.0001-s1" / "results.json", local / "paper-lr0.0002-s1" / "results.json"):
        r = json.loads(path.read_text())
        r["config"]["gradient_checkpointing"] = True
        path.write_text(json.dumps(seal(r)))
    path = incoming / "paper-lr0.0001-s1" / "results.json"
    r = json.loads(path.read_text())
    r["config_hash"] = config_hash(r["config"])
    r["arms"]["ets"]["generation_options"] = {"gradient_checkpointing": True}
    r["arms"]["gmts"]["generation_options"] = {"gradient_checkpointing": False}
    path.write_text(json.dumps(seal(r)))
    old_style = json.loads((local / "paper-lr0.0002-s1" / "results.json").read_text())
    for cell in ("paper-lr0.0001-s2", "paper-lr0.0002-s1"):  # as today's recipe.py wrote them (the same hash)
        path = incoming / cell / "results.json"
        other = json.loads(path.read_text())
        other["config_hash"] = config_hash(other["config"])
        path.write_text(json.dumps(seal(other)))
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert "paper-lr0.0001-s1: added arm(s) gmts" in capsys.readouterr().out
    merged = json.loads((local / "paper-lr0.0001-s1" / "results.json").read_text())
    assert "gradient_checkpointing" not in merged["config"] and merged["config_hash"] == r["config_hash"]
    assert {a: e["generation_options"] for a, e in merged["arms"].items()} == {
        "ets": {"gradient_checkpointing": True}, "gmts": {"gradient_checkpointing": False}}
    grid = load_grid(grid_path)
    cells = {c.name: c for c in grid.cells()}
    old_style = current_record(old_style)  # as verify.file.load reads it
    check_together([recorded(cells["paper-lr0.0001-s1"], merged),
                          recorded(cells["paper-lr0.0002-s1"], old_style)])  # today's and an old-style cell
    with pytest.raises(SweepError, match="records gradient_checkpointing = True where"):
        check_together([Recorded(c.cell, {**c.config, "gradient_checkpointing": True}, c.arms) if i else c
                              for i, c in enumerate([recorded(cells["paper-lr0.0001-s1"], merged),
                                                     recorded(cells["paper-lr0.0002-s1"], old_style)])])


def _other_arm(r: dict) -> None:
    r["arms"]["ets"]["train_log"][0]["loss"] = 1.0


def _other_learning_rate(r: dict) -> None:
    """An arm trained at 1e-4 in a file of a 2e-4 cell (the learning rate is not in the config hash)."""
    for entry in r["arms"].values():
        entry["learning_rate"] = 1e-4


def _other_seed(r: dict) -> None:
    r["config"]["seed"] = 1


def _other_config(r: dict) -> None:
    r["config"]["max_steps"] = 11


def _other_heldout(r: dict) -> None:
    r["data"]["heldout"] = HELDOUT[::-1]


def _other_eval_hash(r: dict) -> None:
    r["base"]["eval_hash"] = "f" * 64


@pytest.mark.parametrize("cell, edit, reseal, match", [
    ("paper-lr0.0001-s1", _other_arm, True, "paper-lr0.0001-s1: arm ets differs from the local one"),
    ("paper-lr0.0001-s1", _other_config, True, "paper-lr0.0001-s1: config_hash \\w{12} differs from the local cell's "
     "\\w{12}"),
    ("paper-lr0.0001-s1", _other_heldout, True, "paper-lr0.0001-s1: held-out tasks differ from the local cell's"),
    ("paper-lr0.0001-s1", _other_eval_hash, True,
     "paper-lr0.0001-s1: base eval hash ffffffffffff differs from the local cell's eeeeeeeeeeee"),
    ("paper-lr0.0001-s2", _other_eval_hash, True,
     "paper-lr0.0001-s2: base eval hash ffffffffffff is not the local shared cache's \\(eeeeeeeeeeee in "),
    ("paper-lr0.0001-s2", _other_arm, False, "paper-lr0.0001-s2: .*results.json: digest mismatch"),
    ("paper-lr0.0002-s1", _other_learning_rate, True,
     "paper-lr0.0002-s1: results.json: arm grpo trained at learning rate 0.0001, the cell's is 0.0002$"),
    ("paper-lr0.0001-s2", _other_seed, True, "paper-lr0.0001-s2: results.json records training seed 1, the cell's "
     "is 2$"),
])
def test_a_merge_that_cannot_be_exact_is_refused_in_one_line_and_writes_nothing(tmp_path, capsys, cell, edit,
                                                                                 reseal, match):
    """Every cell is checked before any is written: paper-lr0.0002-s1 (fine, earlier in the grid) is not merged
    either."""
    import re

    grid_path, local, incoming = trees(tmp_path)
    path = incoming / cell / "results.json"
    results = json.loads(path.read_text())
    edit(results)
    path.write_text(json.dumps(seal(results) if reseal else results))
    before = files(local)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and re.match(f"sweep.py: --merge: {match}", err), err
    assert files(local) == before


def test_merge_needs_an_existing_folder(tmp_path, capsys):
    grid_path = write_grid(tmp_path, GRID)
    assert sweep.main([str(grid_path), "--merge", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith(f"sweep.py: --merge {tmp_path / 'nowhere'}: no such folder")


def test_a_merge_that_would_hold_one_run_in_two_cells_is_refused(tmp_path, capsys):
    """An incoming cell whose arms are another cell's (its file copied, the seed in its config edited and the file
    re-sealed) is refused before anything is written."""
    grid_path, local, incoming = trees(tmp_path)
    copied = json.loads((incoming / "paper-lr0.0001-s1" / "results.json").read_text())
    copied["config"]["seed"] = 2
    (incoming / "paper-lr0.0001-s2" / "results.json").write_text(json.dumps(seal(copied)))
    before = files(local)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 2
    assert capsys.readouterr().err == ("sweep.py: --merge: paper-lr0.0001-s2: arm ets holds the same evaluation "
                                       "records and training log as arm ets of paper-lr0.0001-s1 (a copied results "
                                       "file)\n")
    assert files(local) == before


# ---------------------------------------------------------------- a cell is what its file records, not its folder name
def _copy_into(root: Path, source: str, target: str, edit=None) -> None:
    results = json.loads((root / source / "results.json").read_text())
    if edit is not None:
        edit(results)
    (root / target).mkdir(exist_ok=True)
    (root / target / "results.json").write_text(json.dumps(seal(results)))


def _lr_of(name: str, lr: float):
    def edit(r: dict) -> None:
        r["arms"]["gmts"]["learning_rate"] = lr
    return lambda root: _copy_into(root, name, name, edit)


@pytest.mark.parametrize("tamper, message", [
    (_lr_of("paper-lr0.0002-s1", 1e-4),
     "paper-lr0.0002-s1: results.json: arm gmts trained at learning rate 0.0001, the cell's is 0.0002"),
    (lambda root: _copy_into(root, "paper-lr0.0001-s1", "paper-lr0.0001-s2"),
     "paper-lr0.0001-s2: results.json records training seed 1, the cell's is 2"),
    (lambda root: _copy_into(root, "paper-lr0.0001-s1", "paper-lr0.0001-s2", lambda r: r["config"].update(seed=2)),
     "paper-lr0.0001-s2: arm ets holds the same evaluation records and training log as arm ets of paper-lr0.0001-s1 "
     "(a copied results file)"),
    (lambda root: _copy_into(root, "small-lr0.0001-s1", "small-lr0.0001-s1",
                             lambda r: r["config"].update(per_device_train_batch_size=8)),
     "small-lr0.0001-s1: results.json records per_device_train_batch_size = 8, variant small sets 4"),
    (lambda root: _copy_into(root, "paper-lr0.0001-s2", "paper-lr0.0001-s2",
                             lambda r: r["config"].update(max_steps=20)),
     "paper-lr0.0001-s2: results.json records max_steps = 20 where paper-lr0.0001-s1 records 10 (cells differ only "
     "in the training seed and their variant's settings)"),
], ids=["learning rate", "seed", "copied file", "variant", "other field"])
def test_summary_and_check_refuse_a_cell_whose_file_is_not_that_cell(tmp_path, capsys, monkeypatch, tamper, message):
    """Every cell's arms must match its learning rate, seed and variant as its results.json records them, and no two
    cells may hold the same run: the summary refuses in one line naming the cell, and a sweep.json sealed without
    these checks no longer passes check.py."""
    import check

    grid_path = write_grid(tmp_path, GRID)
    root = tmp_path / "results" / "demo"
    fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.6}, seed=1)
    fake_cell(root, "paper-lr0.0001-s2", {"ets": 0.5, "gmts": 0.6}, seed=2)
    fake_cell(root, "paper-lr0.0002-s1", {"ets": 0.5, "gmts": 0.5}, seed=3)
    fake_cell(root, "small-lr0.0001-s1", {"gmts": 0.5}, seed=4)
    grid = load_grid(grid_path)
    path = write_summary(grid, grid_path)
    tamper(root)
    with pytest.raises(SweepError) as refused:
        summarize(grid)
    assert str(refused.value) == message
    assert sweep.main([str(grid_path), "--summarize"]) == 2
    assert capsys.readouterr().err == f"sweep.py: {message}\n"
    with monkeypatch.context() as unchecked:  # the summary as it was sealed before these checks existed
        unchecked.setattr("gmts_recipe.sweep.summary.recorded", lambda cell, results, *_: Recorded(cell, {}, {}))
        path = write_summary(grid, grid_path)
    assert check.main([str(path)]) == 2
    assert capsys.readouterr().err == f"check.py: {message}\n"


# ---------------------------------------------------------------- --merge carries the samples files
def sample_trees(tmp_path: Path) -> tuple[Path, Path, Path]:
    """trees() with every evaluation's samples, as recipe.py writes them: the arms' in each cell's folder, the base's
    in the tree's base-evals folder (the local cache naming the same files as its cells)."""
    from test_check import with_samples

    grid_path, local, incoming = trees(tmp_path)
    for root in (local, incoming):
        for path in root.glob("*/results.json"):
            results = with_samples(json.loads(path.read_text()), path.parent, root / "base-evals")
            path.write_text(json.dumps(results))
    cache_path = local / "base-evals" / f"{EVAL_HASH}.json"
    cache = json.loads(cache_path.read_text())
    cache["evals"] = json.loads((local / "paper-lr0.0001-s1" / "results.json").read_text())["base"]["evals"]
    cache_path.write_text(json.dumps(cache))
    return grid_path, local, incoming


def test_merge_carries_the_samples_and_the_merged_cells_re_score(tmp_path, capsys):
    import check

    grid_path, local, incoming = sample_trees(tmp_path)
    base_files = sorted(p.name for p in (local / "base-evals").glob("*.jsonl.xz"))
    assert len(base_files) == 3
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    for name, arms in (("paper-lr0.0001-s1", ["ets", "gmts"]), ("paper-lr0.0002-s1", ["ets", "gmts", "grpo"]),
                       ("paper-lr0.0001-s2", ["ets", "gmts"])):
        results, report = verify_results(local / name / "results.json")
        assert {k: report[k] for k in ("evaluations", "with_samples", "samples", "without")} == {
            "evaluations": 3 + len(arms), "with_samples": 3 + len(arms), "samples": 160 * (3 + len(arms)), "without": []}
        assert sorted(p.name.split("-")[1] for p in (local / name).glob("*.jsonl.xz")) == arms
    # the base is this tree's: the incoming base evaluated again (base_seed 7) brings no samples files
    assert sorted(p.name for p in (local / "base-evals").glob("*.jsonl.xz")) == base_files
    summary = write_summary(load_grid(grid_path), grid_path)
    capsys.readouterr()
    assert check.main([str(summary)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "Samples: 2,560 in 16 evaluation(s) re-scored with the recipe's reward, every score as recorded." in out
    where = out.index("Where the cells ran (project commit, card):")  # each cell's commit and card, grouped
    assert out[where + 1].startswith("  commit not recorded, CPU: seeds 1-2 (3 cells)"), out[where:where + 3]


def test_a_cell_stripped_of_its_samples_beside_cells_that_keep_them_is_refused(tmp_path, capsys):
    """Cells of the first format with samples (reward version unrecorded, keys over the question) record nothing that
    came after samples: one stripped of them, its scores raised, would pass on its own with --allow-unsampled, but
    not in a sweep whose other cells keep their samples."""
    import check
    from test_check import with_samples

    grid_path = write_grid(tmp_path, GRID)
    root = tmp_path / "results" / "demo"
    for name, seed in (("paper-lr0.0001-s1", 1), ("paper-lr0.0001-s2", 2)):
        fake_cell(root, name, {"ets": 0.5, "gmts": 0.6}, seed=seed)
        path = root / name / "results.json"
        if seed == 1:  # the base's samples files shared by the cells, as recipe.py keeps them
            results = with_samples(json.loads(path.read_text()), path.parent, root / "base-evals", reward=None)
            base = results["base"]["evals"]
        else:
            results = with_samples(json.loads(path.read_text()), path.parent, reward=None)
            results["base"]["evals"] = base
            results = seal(results)
        path.write_text(json.dumps(results))
    summary = write_summary(load_grid(grid_path), grid_path)
    assert check.main([str(summary)]) == 0
    path = root / "paper-lr0.0001-s2" / "results.json"
    results = json.loads(path.read_text())
    for ev in [*results["base"]["evals"], *(e["eval"] for e in results["arms"].values())]:
        ev.pop("samples")
    gmts = results["arms"]["gmts"]["eval"]
    gmts["records"] = [dict(r, scores=[1.0] * 4) for r in gmts["records"]]
    gmts["pass@1"] = 1.0
    path.write_text(json.dumps(seal(results)))
    capsys.readouterr()
    assert check.main([str(path), "--allow-unsampled"]) == 0  # alone, it reads as a file of before samples
    summary = write_summary(load_grid(grid_path), grid_path)
    assert check.main([str(summary), "--allow-unsampled"]) == 2
    assert capsys.readouterr().err.strip().endswith("cell paper-lr0.0001-s2 keeps no samples files where cell "
                                                    "paper-lr0.0001-s1 does: the cells of one sweep keep them all or "
                                                    "none")


def test_a_merge_without_local_cache_copies_the_incoming_base_samples(tmp_path):
    import shutil

    import check

    grid_path, local, incoming = sample_trees(tmp_path)
    shutil.rmtree(local)
    merge(load_grid(grid_path), incoming)
    for name in ("paper-lr0.0001-s1", "paper-lr0.0001-s2", "paper-lr0.0002-s1"):
        assert verify_results(local / name / "results.json")[1]["with_samples"] > 3
    assert len(list((local / "base-evals").glob("*.jsonl.xz"))) == 6  # two incoming bases (base seeds 0 and 7)


def _flip_a_sample(incoming: Path) -> None:
    """A forger's incoming cell: one score of its GMTS arm flipped in the samples file and the records, re-sealed."""
    from test_check import reseal, rewrite_samples

    path = incoming / "paper-lr0.0001-s1" / "results.json"
    rewrite_samples(path, "arm gmts", lambda log: log[2]["scores"].__setitem__(0, 1.0 - log[2]["scores"][0]))
    reseal(path, lambda r: r["arms"]["gmts"]["eval"]["records"][2]["scores"].__setitem__(
        0, 1.0 - r["arms"]["gmts"]["eval"]["records"][2]["scores"][0]))


def _drop_an_arm_file(incoming: Path) -> None:
    next((incoming / "paper-lr0.0001-s2").glob("samples-ets-*.jsonl.xz")).unlink()


def _other_local_bytes(incoming: Path) -> None:
    """A file of the same name here with other bytes (it is never overwritten)."""
    source = next((incoming / "paper-lr0.0001-s1").glob("samples-gmts-*.jsonl.xz"))
    target = incoming.parent.parent / "results" / "demo" / "paper-lr0.0001-s1" / source.name
    target.write_bytes(b"other")


@pytest.mark.parametrize("edit, match", [
    (_flip_a_sample, r"paper-lr0.0001-s1: arm gmts: samples-gmts-seed0-\w+.jsonl.xz: task 2:0000000000000002 sample 0: "
                     r"scored .* by the reward now"),
    (_drop_an_arm_file, r"paper-lr0.0001-s2: arm ets: samples file .*other/demo/paper-lr0.0001-s2/samples-ets-[\w-]+.jsonl.xz "
                        r"is missing"),
    (_other_local_bytes, r"paper-lr0.0001-s1: arm gmts: samples file .*results/demo/paper-lr0.0001-s1/samples-gmts-[\w-]+"
                         r".jsonl.xz has SHA-256"),
])
def test_a_merge_whose_samples_do_not_verify_is_refused_and_writes_nothing(tmp_path, capsys, edit, match):
    import re

    grid_path, local, incoming = sample_trees(tmp_path)
    edit(incoming)
    before = files(local)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and re.match(f"sweep.py: --merge: {match}", err), err
    assert files(local) == before


def test_a_refused_merge_says_how_to_merge_the_other_cells(tmp_path, capsys):
    """A cell that came back incomplete (an arm's samples file missing) is refused and nothing is merged; doing what
    the message says (its folder moved out of the incoming tree) merges the rest, and the cell runs again later."""
    import shutil

    grid_path, local, incoming = sample_trees(tmp_path)
    _drop_an_arm_file(incoming)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 2
    err = capsys.readouterr().err
    hint = f"nothing merged (to merge the other cells, move {incoming / 'paper-lr0.0001-s2'} out of {incoming})\n"
    assert err.endswith(hint), err
    shutil.move(incoming / "paper-lr0.0001-s2", tmp_path / "set-aside")
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    out = capsys.readouterr().out
    assert "paper-lr0.0001-s1: added arm(s)" in out and "paper-lr0.0001-s2" not in out


# ---------------------------------------------------------------- --merge: a base evaluated again under another hash
def rebase(root: Path, names: list[str], evals: list[dict], folder: Path) -> str:
    """The cells `names` of the sweep folder `root` paired with the base evaluations `evals` (their samples files in
    `folder`) evaluated again under another evaluation hash, as recipe.py keys one by its eval_config (here: the
    held-out tasks keyed anew and another device): the same texts, each samples file's lines in reverse order (other
    bytes, the same texts task by task) named for the new hash, base-evals/<hash>.json beside them; the hash."""
    import lzma

    from gmts_recipe.records import config_hash
    from gmts_recipe.samples import write_samples

    config = {"heldout": HELDOUT, "device": "cuda", "task_key": "question+gold"}
    key = config_hash(config)
    again = []
    for ev in copy.deepcopy(evals):
        lines = lzma.decompress((folder / Path(ev["samples"]["path"]).name).read_bytes()).splitlines()
        path, sha = write_samples(root / "base-evals", f"{key[:16]}-seed{ev['seed']}",
                                  [json.loads(line) for line in lines][::-1])
        again.append({**ev, "records": ev["records"][::-1],
                      "samples": {**ev["samples"], "path": f"../base-evals/{path.name}", "sha256": sha}})
    for name in names:
        path = root / name / "results.json"
        results = json.loads(path.read_text())
        results["base"] = {"evals": again, "eval_hash": key}
        path.write_text(json.dumps(seal(results)))
    (root / "base-evals" / f"{key}.json").write_text(json.dumps({"eval_hash": key, "eval_config": config,
                                                                 "evals": again}))
    return key


def rebased_trees(tmp_path: Path, same_texts: bool = True) -> tuple[Path, Path, Path, str]:
    """sample_trees() whose incoming folder holds one new cell, paper-lr0.0001-s2, paired there with a base of
    another evaluation hash that this tree lacks: the local cache's texts evaluated again (`same_texts`), else its own
    base's (evaluated elsewhere: other texts). (grid file, local, incoming, the new hash)."""
    import shutil

    grid_path, local, incoming = sample_trees(tmp_path)
    for name in ("paper-lr0.0001-s1", "paper-lr0.0002-s1"):
        shutil.rmtree(incoming / name)
    source, folder = ((local / "base-evals" / f"{EVAL_HASH}.json", local / "base-evals") if same_texts else
                      (incoming / "paper-lr0.0001-s2" / "results.json", incoming / "base-evals"))
    evals = json.loads(source.read_text())["evals" if same_texts else "base"]
    key = rebase(incoming, ["paper-lr0.0001-s2"], evals["evals"] if not same_texts else evals, folder)
    return grid_path, local, incoming, key


def test_a_base_evaluated_again_under_another_hash_comes_in_with_its_cells(tmp_path, capsys):
    """The merge that met cells whose base the held-out tasks' new keys had hashed anew: the incoming base-evals
    record and its samples come in with the cell, verified; the sweep's cells then hold two hashes of one base (the
    same texts task by task), which the summary's rule and check.py's (an evaluation belongs to one cell) accept."""
    import check

    grid_path, local, incoming, key = rebased_trees(tmp_path)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"[sweep] merge paper-lr0.0001-s2: added arm(s) ets, gmts; base kept (incoming shared cache {key[:12]}); 1 "
        f"log(s) copied"]
    brought = sorted(p.name for p in (incoming / "base-evals").glob(f"{key[:16]}-seed*.jsonl.xz"))
    assert len(brought) == 3 and all((local / "base-evals" / name).read_bytes() ==
                                     (incoming / "base-evals" / name).read_bytes() for name in brought)
    assert (local / "base-evals" / f"{key}.json").read_bytes() == (incoming / "base-evals" / f"{key}.json").read_bytes()
    merged = json.loads((local / "paper-lr0.0001-s2" / "results.json").read_text())
    assert merged["base"]["eval_hash"] == key and merged["merges"][0]["base"] == "incoming shared cache"
    summary = write_summary(load_grid(grid_path), grid_path)
    assert check.main([str(summary)]) == 0
    capsys.readouterr()
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0  # again: the record is this tree's now
    assert capsys.readouterr().out == "[sweep] merge paper-lr0.0001-s2: unchanged\n"


@pytest.mark.parametrize("copied_arm", [False, True], ids=["own-arms", "arm-copied"])
def test_a_sweep_whose_base_is_another_sweeps_evaluated_again_checks_and_a_copied_arm_does_not(tmp_path, capsys,
                                                                                                copied_arm):
    """Two sweeps of one results folder: `beside`, merged from another machine, holds the base of `demo` evaluated
    again under another hash (the same texts): each sweep checks beside the other. An arm evaluation of demo copied
    into a cell of beside (its samples file and records; the cell re-sealed) still belongs to one cell."""
    import shutil

    import check
    from test_check import with_samples

    grid_path, demo, _ = sample_trees(tmp_path)
    write_summary(load_grid(grid_path), grid_path)
    beside_grid = tmp_path / "beside.yaml"
    beside_grid.write_text(GRID.replace("name: demo", "name: beside").replace("RESULTS", str(tmp_path / "results")))
    incoming = tmp_path / "elsewhere" / "beside"
    for name, seed in (("paper-lr0.0001-s1", 21), ("paper-lr0.0001-s2", 22)):
        tree_cell(incoming, name, {"ets": 0.5, "gmts": 0.6}, seed=seed)
        path = incoming / name / "results.json"
        path.write_text(json.dumps(with_samples(json.loads(path.read_text()), path.parent, incoming / "base-evals")))
    for old in (incoming / "base-evals").glob("*"):
        old.unlink()
    cache = json.loads((demo / "base-evals" / f"{EVAL_HASH}.json").read_text())
    key = rebase(incoming, ["paper-lr0.0001-s1", "paper-lr0.0001-s2"], cache["evals"], demo / "base-evals")
    if copied_arm:
        source = json.loads((demo / "paper-lr0.0002-s1" / "results.json").read_text())["arms"]["gmts"]["eval"]
        shutil.copy(demo / "paper-lr0.0002-s1" / source["samples"]["path"], incoming / "paper-lr0.0001-s1")
        path = incoming / "paper-lr0.0001-s1" / "results.json"
        results = json.loads(path.read_text())
        results["arms"]["gmts"]["eval"] = source
        path.write_text(json.dumps(seal(results)))
    assert sweep.main([str(beside_grid), "--merge", str(incoming)]) == 0  # the merge sees its own sweep only
    assert (tmp_path / "results" / "beside" / "base-evals" / f"{key}.json").is_file()
    beside = write_summary(load_grid(beside_grid), beside_grid)
    capsys.readouterr()
    if not copied_arm:
        assert check.main([str(beside)]) == 0 and check.main([str(demo / "sweep.json")]) == 0
        return
    assert check.main([str(beside)]) == 2
    assert capsys.readouterr().err == (
        f"check.py: {beside}: beside/paper-lr0.0001-s1 arms.gmts.eval holds the evaluation of demo/paper-lr0.0002-s1 "
        f"arms.gmts.eval (its samples file, SHA-256 {source['samples']['sha256'][:12]}...): an evaluation belongs to "
        f"one cell\n")


def _conflicting_record(local: Path, incoming: Path, key: str) -> str:
    """The incoming folder's record under the local cache's hash, with other evaluation settings."""
    cache = json.loads((local / "base-evals" / f"{EVAL_HASH}.json").read_text())
    cache["eval_config"]["device"] = "cpu"
    (incoming / "base-evals" / f"{EVAL_HASH}.json").write_text(json.dumps(cache))
    return (f"{incoming / 'base-evals' / EVAL_HASH}.json records other evaluation settings than "
            f"{local / 'base-evals' / EVAL_HASH}.json under the same evaluation hash \\(one hash, two records\\); "
            f"nothing merged$")


def _misnamed_record(local: Path, incoming: Path, key: str) -> str:
    """A record whose eval_config is not the one its hash was computed from (edited after the run)."""
    path = incoming / "base-evals" / f"{key}.json"
    record = json.loads(path.read_text())
    record["eval_config"]["device"] = "cpu"
    path.write_text(json.dumps(record))
    return f"{path}: its evaluation hash is not the hash of the eval_config it records"


def _changed_base_samples(local: Path, incoming: Path, key: str) -> str:
    path = next((incoming / "base-evals").glob(f"{key[:16]}-seed1-*.jsonl.xz"))
    path.write_bytes(path.read_bytes()[:-8])
    return f"paper-lr0.0001-s2: base eval 1: samples file {path} has SHA-256 "


def _other_texts(local: Path, incoming: Path, key: str) -> str:
    return ""  # rebased_trees(same_texts=False): the incoming base is another base, under its new hash


@pytest.mark.parametrize("edit", [_conflicting_record, _misnamed_record, _changed_base_samples, _other_texts])
def test_an_incoming_base_record_that_does_not_verify_is_refused_in_one_line(tmp_path, capsys, edit):
    """A record under a hash this tree holds with other content (one hash, two bases), one whose hash is not its
    eval_config's, one whose samples were changed, or a base of other texts beside the sweep's cells: refused in one
    line, nothing written."""
    import re

    grid_path, local, incoming, key = rebased_trees(tmp_path, same_texts=edit is not _other_texts)
    match = edit(local, incoming, key) or (
        f"paper-lr0.0001-s2: its base \\(evaluation hash {key[:12]}, brought in\\) differs task by task from the base "
        f"of paper-lr0.0001-s1 \\(hash eeeeeeeeeeee\\): the cells of a sweep share one base evaluation; nothing merged")
    before = files(local)
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and re.match(f"sweep.py: --merge: {match}", err), err
    assert files(local) == before


@pytest.mark.parametrize("evaluated_again", [False, True], ids=["a-copy", "evaluated-again"])
def test_an_incoming_record_of_a_hash_the_tree_holds_is_passed_over(tmp_path, capsys, evaluated_again):
    """The incoming folder's record under the local cache's hash and settings: a copy of it, or the base evaluated
    again there (the cache left behind; other scores, as bf16 is not bit-exact). The merge goes on as without it: the
    cells keep, or are paired with, the local cache, and the record stays this tree's."""
    grid_path, local, incoming = trees(tmp_path)
    cache = json.loads((local / "base-evals" / f"{EVAL_HASH}.json").read_text())
    (incoming / "base-evals").mkdir()
    there = {**cache, "evals": base_evals(7)} if evaluated_again else {**cache, "gpu_peak_memory_gib": 3.0}
    (incoming / "base-evals" / f"{EVAL_HASH}.json").write_text(json.dumps(there))
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[sweep] merge paper-lr0.0001-s1: added arm(s) gmts; base kept (shared cache)")
    assert lines[1].startswith("[sweep] merge paper-lr0.0002-s1: added arm(s) grpo; base replaced by the shared cache "
                               "(incoming pass@1 ")
    assert json.loads((local / "base-evals" / f"{EVAL_HASH}.json").read_text()) == cache


# ---------------------------------------------------------------- scheduling: workers per GPU, timing, --commands
def test_runs_per_gpu_expands_the_workers_and_each_process_writes_a_timing_line(tmp_path, monkeypatch):
    import threading

    assert expand_workers(["0", "1"], 2) == ["0", "0", "1", "1"]
    assert expand_workers(["0", "0"]) == ["0", "0"]  # an id repeated in --gpus: two workers, as before
    assert expand_workers([], 3) == [None, None, None]
    grid = load_grid(write_grid(tmp_path, GRID))
    seen, together = [], threading.Barrier(4, timeout=20)  # the 4 cells run at once, or the barrier breaks

    def fake_call(command, stdout, stderr, env):
        seen.append((command[command.index("--experiment") + 1], command[command.index("--arm") + 1],
                     env.get("CUDA_VISIBLE_DEVICES")))
        if "base" not in command:
            together.wait()
        return 1 if command[command.index("--experiment") + 1] == "small-lr0.0001-s1" else 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    failed = run(grid, ["0", "1"], [], runs_per_gpu=2)
    assert len(failed) == 1 and failed[0].startswith("small-lr0.0001-s1 gmts")
    assert seen[0][2] == "0" and sorted(gpu for _, _, gpu in seen[1:]) == ["0", "0", "1", "1"]  # 2 workers per GPU
    lines = [json.loads(x) for x in (tmp_path / "results" / "demo" / "logs" / TIMING).read_text().splitlines()]
    assert [(x["cell"], x["arms"]) for x in lines][0] == ("paper-lr0.0001-s1", ["base"])
    assert sorted(x["cell"] for x in lines[1:]) == sorted(c.name for c in grid.cells())
    assert sorted((x["cell"], ",".join(x["arms"]), x["gpu"]) for x in lines) == sorted(seen)
    assert all(x["workers_on_gpu"] == 2 for x in lines)
    assert {x["exit_code"] for x in lines if x["cell"] == "small-lr0.0001-s1"} == {1}
    assert all(x["host"] and x["start"] <= x["end"] for x in lines)


def test_a_cell_the_recipe_refuses_says_why_in_the_last_line(tmp_path, monkeypatch):
    """recipe.py refuses a typo in one line and exits 2; the sweep's failure line carries that line, for the base
    (a typo in the grid's variant stops the sweep there) and for a cell; any other failure names only its log."""
    grid = load_grid(write_grid(tmp_path, GRID))
    logs = tmp_path / "results" / "demo" / "logs"
    typo = "recipe.py: unknown key 'sampling_nois' in the command line: did you mean sampling_noise?"

    def refuse(command, stdout, stderr, env):
        stdout.write(f"[recipe] loading\n{typo}\n\n")
        return 2

    monkeypatch.setattr(subprocess, "call", refuse)
    assert run(grid, [], []) == [f"paper-lr0.0001-s1 base: {typo.removeprefix('recipe.py: ')} "
                                       f"(see {logs}/paper-lr0.0001-s1-base.log)"]

    def cell_fails(command, stdout, stderr, env):
        if "base" in command:
            return 0
        stdout.write(typo + "\n" if "paper-lr0.0001-s1" in command else "Traceback ...\nRuntimeError: CUDA\n")
        return 2 if "paper-lr0.0001-s1" in command else 1

    monkeypatch.setattr(subprocess, "call", cell_fails)
    failed = run(grid, [], [])
    assert failed[0] == (f"paper-lr0.0001-s1 ets,gmts,grpo: {typo.removeprefix('recipe.py: ')} "
                         f"(see {logs}/paper-lr0.0001-s1-ets+gmts+grpo.log)")
    assert all(f.split(" (see ")[0].count(":") == 0 for f in failed[1:]) and len(failed) > 1
    assert str(CellFailed(2, f"x\n{typo}\n", {"host": "node3"})) == (
        f"recipe.py exited with code 2 on node3: {typo.removeprefix('recipe.py: ')}")
    assert str(CellFailed(5, "failing\n", {"host": "node3"})) == "recipe.py exited with code 5 on node3"


def test_an_interrupted_cell_stops_the_pool_and_ctrl_c_is_one_line(tmp_path, monkeypatch, capsys):
    """Ctrl-C reaches every process of the terminal: a cell that exits as interrupted (recipe.py's 130) makes the pool
    take no other cell; an interrupt of sweep.py itself ends in one line that says how to resume."""
    grid_path = write_grid(tmp_path, GRID)
    started = []

    def fake_call(command, stdout, stderr, env):
        started.append(command[command.index("--experiment") + 1])
        return 130 if len(started) == 2 else 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    logs = tmp_path / "results" / "demo" / "logs"
    assert run(load_grid(grid_path), [], []) == [
        f"paper-lr0.0001-s1 ets,gmts,grpo (see {logs}/paper-lr0.0001-s1-ets+gmts+grpo.log)"]
    assert len(started) == 2  # the base, then the interrupted cell; none after it

    import os
    import signal
    import time

    started.clear()

    def ctrl_c(command, stdout, stderr, env):  # Ctrl-C while two cells run: only sweep.py's main thread gets it
        started.append(command[command.index("--experiment") + 1])
        if len(started) == 3:  # sent from a worker thread: the kernel may deliver it to that thread
            os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)
        return 0  # the cell ended well: only the interrupt of sweep.py itself stops the pool

    monkeypatch.setattr(subprocess, "call", ctrl_c)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)  # an earlier test (Ray) may have set another
    try:
        with pytest.raises(KeyboardInterrupt):
            run(load_grid(grid_path), ["0", "0"], [])
    finally:
        signal.signal(signal.SIGINT, handler)
    assert len(started) == 3 and "waiting for the running cells to stop" in capsys.readouterr().err  # base + 2

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run", interrupted)
    capsys.readouterr()
    assert sweep.main([str(grid_path)]) == 130
    err = capsys.readouterr().err
    assert err == "sweep.py: interrupted; run the same command again to resume (finished arms are kept)\n"


def test_several_cells_per_gpu_without_mps_are_warned_once(tmp_path, capsys, monkeypatch):
    import os

    pipes = tmp_path / "mps"
    pipes.mkdir()
    assert not mps_running({"CUDA_MPS_PIPE_DIRECTORY": str(pipes)})
    os.mkfifo(pipes / "control")  # what nvidia-cuda-mps-control -d leaves while it runs
    assert mps_running({"CUDA_MPS_PIPE_DIRECTORY": str(pipes)})
    assert shares_gpus(["0", "0"]) and not shares_gpus(["0", "1"]) and not shares_gpus([None])

    grid = str(write_grid(tmp_path, GRID))
    monkeypatch.setattr(sweep, "run", lambda *a, **k: [])
    monkeypatch.setattr(sweep, "write_summary", lambda grid, path: tmp_path / "sweep.json")
    monkeypatch.setattr(sweep, "parse_gpus", lambda text: text.split(",") if text else [])
    for argv, warned in ((["--runs_per_gpu", "2"], True), (["--gpus", "0,0"], True), (["--gpus", "0,1"], False)):
        monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "none"))
        assert sweep.main([grid, *argv]) == 0
        assert ("without CUDA MPS" in capsys.readouterr().err) is warned
        monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipes))  # MPS answers: no warning
        assert sweep.main([grid, *argv]) == 0
        assert "without CUDA MPS" not in capsys.readouterr().err


def test_a_bad_runs_per_gpu_or_gpus_with_ray_is_one_line(tmp_path, capsys):
    grid = str(write_grid(tmp_path, GRID))
    assert sweep.main([grid, "--runs_per_gpu", "0"]) == 2
    assert capsys.readouterr().err == "sweep.py: --runs_per_gpu must be 1 or more and --retries 0 or more\n"
    assert sweep.main([grid, "--ray", "--gpus", "0"]) == 2
    assert capsys.readouterr().err.startswith("sweep.py: --gpus picks this machine's GPUs for the local pool")


def test_ray_not_installed_is_one_line(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert sweep.main([str(write_grid(tmp_path, GRID)), "--ray"]) == 2
    assert capsys.readouterr().err == ('sweep.py: --ray needs Ray, which is not installed here: '
                                       'pip install -e ".[ray]"\n')


def test_commands_print_the_base_line_then_one_line_per_missing_cell(tmp_path, capsys):
    import shlex

    grid_path = write_grid(tmp_path, GRID)
    grid = load_grid(grid_path)
    fake_cell(tmp_path / "results" / "demo", "paper-lr0.0001-s2", {"ets": 0.5, "gmts": 0.6, "grpo": 0.5}, seed=2)
    assert sweep.main([str(grid_path), "--commands", "--", "--gsm8k_path", "X"]) == 0
    lines = capsys.readouterr().out.splitlines()
    cells = {c.name: c for c in grid.cells()}
    want = [cell_command(grid, cells["paper-lr0.0001-s1"], ("base",), ["--gsm8k_path", "X"])] + [
        cell_command(grid, cell, arms, ["--gsm8k_path", "X"]) for cell, arms in by_cell(jobs(grid))]
    assert [shlex.split(line) for line in lines] == want  # the exact commands the local pool starts
    assert [c[c.index("--experiment") + 1] for c in want] == ["paper-lr0.0001-s1", "paper-lr0.0001-s1",
                                                             "paper-lr0.0002-s1", "small-lr0.0001-s1"]
    for name in ("paper-lr0.0001-s1", "paper-lr0.0002-s1", "small-lr0.0001-s1"):
        fake_cell(tmp_path / "results" / "demo", name, {"ets": 0.5, "gmts": 0.6, "grpo": 0.5}, seed=len(name))
    assert sweep.main([str(grid_path), "--commands"]) == 0
    assert capsys.readouterr().out == "# nothing to run: every job has finished\n"


def test_an_address_where_no_ray_head_answers_is_one_line(tmp_path, capsys):
    """Checked before ray.init, which would wait minutes (Ray itself: test_sweep_ray.py)."""
    pytest.importorskip("ray", reason='Ray is not installed: pip install -e ".[test,ray]" to run this test')
    assert sweep.main([str(write_grid(tmp_path, GRID)), "--ray", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sweep.py: --ray 127.0.0.1:1: no Ray head answers there") and err.count("\n") == 1


def test_time_left_counts_cells_running_at_once():
    # four slots, four cells of one arm running for 10 of their 11 minutes, nothing queued: about a minute, not 3 x 11
    assert time_left(660.0, [(600.0, 1)] * 3, [], 4) == pytest.approx(60.0)
    # one slot: the work left, one cell after another
    assert time_left(100.0, [(40.0, 1)], [1, 1, 1], 1) == pytest.approx(60.0 + 300.0)
    # two slots, two queued behind two running: each queued one takes the first slot that frees
    assert time_left(100.0, [(90.0, 1), (20.0, 1)], [1, 1], 2) == pytest.approx(180.0)  # free at 10, 80
    # a running cell past its time is taken to end now; idle slots start queued cells at once
    assert time_left(100.0, [(150.0, 1)], [1, 1], 4) == pytest.approx(100.0)
    assert time_left(100.0, [], [], 4) == 0.0


def test_seconds_per_arm_leaves_a_warm_workers_first_cell_out_once_a_steady_one_has_finished():
    assert seconds_per_arm([(300.0, 2), (100.0, 2)]) == pytest.approx(100.0)
    # only the first cell, which loaded and compiled: the recorded pace of earlier runs, else that cell
    assert seconds_per_arm([], [(312.0, 2)], recorded=105.0) == pytest.approx(105.0)
    assert seconds_per_arm([], [(312.0, 2)]) == pytest.approx(156.0)
    # a steady cell: its pace alone, whatever was recorded before
    assert seconds_per_arm([(186.0, 2)], [(312.0, 2)], recorded=105.0) == pytest.approx(93.0)
    with pytest.raises(ValueError):
        seconds_per_arm([], [])


def test_time_left_scales_each_cell_by_its_arms():
    """A grid whose first cells run four arms and the rest two (the confirmatory grid): per arm, not per process, or
    the estimate doubles. One slot, 100 s per arm: a 4-arm cell 50 s in, then 4-, 2- and 2-arm cells."""
    assert time_left(100.0, [(50.0, 4)], [4, 2, 2], 1) == pytest.approx(350.0 + 400.0 + 200.0 + 200.0)
    # two slots free at 400 and 200: the first queued 2-arm cell ends at 400, the second at 600
    assert time_left(100.0, [(0.0, 4), (0.0, 2)], [2, 2], 2) == pytest.approx(600.0)


def _timing(log_dir: Path, *rows: dict) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "timing.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _row(cell: str, arms: list[str], seconds: float, workers: int = 1, code: int = 0) -> dict:
    return {"cell": cell, "arms": arms, "gpu": "0", "workers_on_gpu": workers, "start": 1000.0,
            "end": 1000.0 + seconds, "exit_code": code, "host": "h"}


def test_recorded_pace_is_seconds_per_arm_of_the_alone_processes_that_trained(tmp_path):
    _timing(tmp_path, _row("c-s1", ["base"], 20.0), _row("c-s1", ["ets", "gmts", "ets_nz", "grpo"], 520.0),
            _row("c-s2", ["ets", "gmts"], 280.0), _row("c-s3", ["ets", "gmts"], 900.0, workers=2),
            _row("c-s4", ["ets"], 5.0, code=1))
    assert recorded_pace(tmp_path) == (pytest.approx(800.0 / 6), 6)
    assert recorded_pace(tmp_path / "nowhere") is None
    assert recorded_pace(tmp_path, warm=True) is None
    _timing(tmp_path, _row("c-s1", ["ets", "gmts"], 280.0), {**_row("c-s2", ["ets", "gmts"], 200.0), "warm": True})
    assert recorded_pace(tmp_path) == (140.0, 2) and recorded_pace(tmp_path, warm=True) == (100.0, 2)
    # a warm worker's first job paid the process's start: not the warm pace (lines from before the field count)
    _timing(tmp_path, {**_row("c-s1", ["ets", "gmts"], 300.0), "warm": True, "job_in_process": 1},
            {**_row("c-s2", ["ets", "gmts"], 180.0), "warm": True, "job_in_process": 2},
            {**_row("c-s3", ["ets"], 120.0), "warm": True})
    assert recorded_pace(tmp_path, warm=True) == (100.0, 3)


def test_recorded_warm_pace_leaves_out_the_first_training_job_after_a_base_job(tmp_path):
    """A warm worker that began with the base evaluations loads the model and compiles in its job 2, the first that
    trains: that job is not the steady pace. Another worker (another GPU) that began with a cell keeps its job 2."""
    def warm(cell, arms, seconds, job, gpu="0"):
        return {**_row(cell, arms, seconds), "gpu": gpu, "warm": True, "job_in_process": job}

    _timing(tmp_path, warm("c-s1", ["base"], 20.0, 1), warm("c-s9", ["ets", "gmts"], 400.0, 1, gpu="1"),
            warm("c-s1", ["ets", "gmts"], 320.0, 2), warm("c-s9b", ["ets", "gmts"], 180.0, 2, gpu="1"),
            warm("c-s2", ["ets", "gmts"], 190.0, 3), warm("c-s3", ["ets"], 90.0, 4))
    assert recorded_pace(tmp_path, warm=True) == (pytest.approx(460.0 / 5), 5)
    # what the workers gave per GPU-hour, their starts included: every training job (the base job is no arm-run)
    assert recorded_pace(tmp_path, warm=True, steady=False) == (pytest.approx(1180.0 / 9), 9)
    # a new process on GPU 0 that begins with a cell: its job 2 is steady again
    _timing(tmp_path, warm("c-s1", ["base"], 20.0, 1), warm("c-s1", ["ets", "gmts"], 320.0, 2),
            warm("c-s2", ["ets", "gmts"], 300.0, 1), warm("c-s3", ["ets", "gmts"], 200.0, 2))
    assert recorded_pace(tmp_path, warm=True) == (100.0, 2)


def test_plan_estimates_the_jobs_left_from_the_recorded_pace(tmp_path, capsys):
    grid_path, local, _ = trees(tmp_path)
    assert sweep.main([str(grid_path), "--plan"]) == 0
    without = capsys.readouterr().out.splitlines()[-1]
    n = int(without.split()[1])
    assert without == f"[sweep] {n} job(s) to run"
    _timing(local / "logs", _row("paper-lr0.0001-s1", ["ets"], 120.0))
    assert sweep.main([str(grid_path), "--plan"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"[sweep] {n} job(s) to run; about {2 * n:.0f} GPU-min at the pace of logs/timing.jsonl (1 arm-runs alone on "
        "their GPU, 2.0 min each with their cell's startup)")
    _timing(local / "logs", _row("paper-lr0.0001-s1", ["ets"], 120.0),
            {**_row("paper-lr0.0001-s2", ["ets"], 90.0), "warm": True})
    assert sweep.main([str(grid_path), "--plan"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"[sweep] {n} job(s) to run; about {2 * n:.0f} GPU-min at the pace of logs/timing.jsonl (1 arm-runs alone on "
        f"their GPU, 2.0 min each with their cell's startup); about {1.5 * n:.0f} GPU-min in warm workers (1 "
        "arm-runs, 1.5 min each, plus each worker's start)")


def test_merge_brings_the_merged_cells_timing_lines_once(tmp_path, capsys):
    grid_path, local, incoming = trees(tmp_path)
    _timing(local / "logs", _row("paper-lr0.0001-s1", ["ets"], 100.0))
    _timing(incoming / "logs", _row("paper-lr0.0001-s1", ["ets"], 100.0), _row("paper-lr0.0001-s1", ["gmts"], 90.0),
            _row("paper-lr0.0001-s2", ["ets", "gmts"], 200.0), _row("paper-lr0.0001-s20", ["ets"], 50.0))
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("; 1 timing line(s)") and "paper-lr0.0001-s2: added" in out[2]
    assert out[2].endswith("; 1 timing line(s)") and "timing" not in out[1]
    lines = (local / "logs" / "timing.jsonl").read_text().splitlines()
    assert [(json.loads(x)["cell"], json.loads(x)["arms"]) for x in lines] == [
        ("paper-lr0.0001-s1", ["ets"]), ("paper-lr0.0001-s1", ["gmts"]), ("paper-lr0.0001-s2", ["ets", "gmts"])]
    assert sweep.main([str(grid_path), "--merge", str(incoming)]) == 0  # again: nothing new
    assert (local / "logs" / "timing.jsonl").read_text().splitlines() == lines


# ---------------------------------------------------------------- a variant's speed lever is recorded per arm
def _lever_results(**per_arm: dict) -> dict:
    return {"config": {"seed": 200, "sampling_noise": "counter"},
            "arms": {arm: {"learning_rate": 1e-4, "eval": {"records": []}, "train_log": [],
                           "generation_options": options} for arm, options in per_arm.items()}}


LEVER_CELL = Cell("coupled", (("sampling_noise", "counter"), ("generation_compile_regions", True)), 1e-4, 200)


def test_a_variant_lever_left_out_of_the_config_record_is_checked_in_every_arm_options():
    """recipe.py leaves rounding-only levers out of the hashed config and records them per arm (generation_options):
    a cell whose arms all ran with the variant's value is that cell."""
    results = _lever_results(ets={"generation_compile_regions": True}, gmts={"generation_compile_regions": True})
    assert recorded(LEVER_CELL, results).config["sampling_noise"] == "counter"
    assert recorded(LEVER_CELL, _lever_results()).arms == {}  # a cell whose first arm has not ended yet


@pytest.mark.parametrize("per_arm, message", [
    ({"ets": {"generation_compile_regions": True}, "gmts": {"generation_compile_regions": False}},
     "coupled-lr0.0001-s200: results.json: arm gmts ran with generation_compile_regions = False, variant coupled "
     "sets True"),
    ({"ets": {"generation_compile_regions": True}, "gmts": {}},
     "coupled-lr0.0001-s200: results.json records no generation_compile_regions (variant coupled sets True)"),
], ids=["other value", "one arm silent"])
def test_a_variant_lever_an_arm_ran_without_is_refused(per_arm, message):
    with pytest.raises(SweepError) as refused:
        recorded(LEVER_CELL, _lever_results(**per_arm))
    assert str(refused.value) == message


def test_check_py_says_each_cells_commit_and_card_grouped():
    """Each arm's provenance (commit, uncommitted changes, card), else the file's card; cells of one origin are one
    line with their seeds as spans; a cell whose arms ran apart on two cards names them."""
    from gmts_recipe.verify.provenance import cell_origin, origin_lines

    def cell(*arms):
        return {"versions": {"gpu": "NVIDIA H200"},
                "arms": {a: ({"provenance": p} if p else {}) for a, p in zip(("ets", "gmts"), arms)}}

    h100 = {"commit": "5ebb12168df5f5dd", "dirty": False, "gpu": "NVIDIA H100 80GB HBM3"}
    h200 = {"commit": "5ebb12168df5f5dd", "dirty": True, "gpu": "NVIDIA H200"}
    assert cell_origin(cell(None, None)) == "commit not recorded, NVIDIA H200"
    assert cell_origin(cell(h100, h100)) == "5ebb121, NVIDIA H100 80GB HBM3"
    assert cell_origin(cell(h100, h200)) == ("ETS 5ebb121, NVIDIA H100 80GB HBM3; GMTS 5ebb121 (uncommitted changes), "
                                             "NVIDIA H200")
    origins = [(s, cell_origin(cell(None, None))) for s in (200, 201, 202, 298, 299)] + [
        (300, cell_origin(cell(h100, h100))), (301, cell_origin(cell(h100, h100))), (303, cell_origin(cell(h100, h100)))]
    assert origin_lines(origins) == ["Where the cells ran (project commit, card):",
                                     "  commit not recorded, NVIDIA H200: seeds 200-202, 298-299 (5 cells)",
                                     "  5ebb121, NVIDIA H100 80GB HBM3: seeds 300-301, 303 (3 cells)"]
    assert origin_lines([]) == []  # a sweep with no cell yet prints no empty heading


PINNED_CELL = Cell("coupled", (("reward_version", 1), ("sampling_noise", "counter")), 1e-4, 300)


def test_a_variant_s_reward_version_is_checked_in_every_arm_s_own_record():
    """A pinned reward version is in no config record (version 1 is hash-free) and no generation_options: each
    arm's "reward_version" (else its evaluation's reward) is the cell's, else the cell is refused in one line."""
    def results(*versions):
        return {"config": {"seed": 300, "sampling_noise": "counter"},
                "arms": {arm: {"learning_rate": 1e-4, "eval": {"records": [], "samples": {"reward": v}},
                               "train_log": [], "reward_version": v} for arm, v in zip(("ets", "gmts"), versions)}}

    assert set(recorded(PINNED_CELL, results(1, 1)).arms) == {"ets", "gmts"}
    with pytest.raises(SweepError) as refused:
        recorded(PINNED_CELL, results(1, 3))
    assert str(refused.value) == ("coupled-lr0.0001-s300: results.json: arm gmts trained with reward version 3, "
                                  "variant coupled sets 1")


def test_arms_that_fit_start_whole_arms_only():
    assert arms_that_fit(2, 90.0, 200.0) == 2
    assert arms_that_fit(2, 90.0, 179.9) == 1  # the second arm would end past the limit: left whole
    assert arms_that_fit(3, 90.0, 89.0) == 0
    assert arms_that_fit(2, None, 1.0) == 2  # no pace measured yet: start while time is left
    assert arms_that_fit(2, None, 0.0) == 0 and arms_that_fit(2, 90.0, -5.0) == 0
    for arms in range(1, 5):
        for left in (0.0, 45.0, 90.0, 135.0, 1000.0):
            n = arms_that_fit(arms, 45.0, left)
            assert 0 <= n <= arms and n * 45.0 <= max(left, 0.0) and (n == arms or (n + 1) * 45.0 > left)


def run_on_a_fake_clock(grid, monkeypatch, arm_seconds: float, time_limit: float) -> tuple[list, list[str]]:
    """sweep.run with a clock that only the fake cells move: the base takes 10 s, every arm `arm_seconds`; returns
    the (cell, arms) processes started and the jobs left for the next run."""
    now, calls = [1000.0], []

    def fake_call(command, stdout, stderr, env):
        arms = command[command.index("--arm") + 1]
        calls.append((command[command.index("--experiment") + 1], arms))
        now[0] += 10.0 if arms == "base" else arm_seconds * len(arms.split(","))
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    monkeypatch.setattr(time, "time", lambda: now[0])
    left: list[str] = []
    assert run(grid, [], [], time_limit=time_limit, left=left) == []
    return calls, left


def test_a_time_limit_starts_only_the_arms_that_end_within_it(tmp_path, monkeypatch, capsys):
    """A fake clock: the base takes 10 s and every arm 60 s. With 6.5 minutes the first cell starts (no pace yet),
    the second fits whole, the third has time for its first arm only, the fourth for none; what is left is listed
    and runs when the same command runs again."""
    calls, left = run_on_a_fake_clock(load_grid(write_grid(tmp_path, GRID)), monkeypatch, 60.0, 6.5)
    assert calls == [("paper-lr0.0001-s1", "base"), ("paper-lr0.0001-s1", "ets,gmts,grpo"),
                     ("paper-lr0.0002-s1", "ets,gmts"), ("paper-lr0.0001-s2", "ets")]
    assert left == ["paper-lr0.0001-s2 gmts", "paper-lr0.0001-s2 grpo", "small-lr0.0001-s1 gmts"]
    out = capsys.readouterr().out
    assert "[sweep] time limit: paper-lr0.0001-s2 gmts,grpo left for the next run (1.3 min left, 1.0 min per arm" in out
    lines = [json.loads(x) for x in (tmp_path / "results" / "demo" / "logs" / TIMING).read_text().splitlines()]
    assert lines[-1]["end"] <= 1000.0 + 6.5 * 60  # nothing started ends past the limit

    capsys.readouterr()
    grid_path = str(write_grid(tmp_path, GRID))
    monkeypatch.setattr(sweep, "run", lambda *a, **k: k["left"].extend(left) or [])
    monkeypatch.setattr(sweep, "write_summary", lambda grid, path: tmp_path / "sweep.json")
    assert sweep.main([grid_path, "--time_limit", "6.5"]) == 0
    assert ("[sweep] time limit: 3 job(s) not started (paper-lr0.0001-s2 gmts; paper-lr0.0001-s2 grpo; "
            "small-lr0.0001-s1 gmts); run the same command again to run them") in capsys.readouterr().out


def test_the_cells_a_time_limit_leaves_whole_take_one_line(tmp_path, monkeypatch, capsys):
    """2.5 minutes, the base 10 s, every arm 60 s: the first cell (no pace yet) ends past the limit, so the three
    cells after it are all left whole; the console says so once, not once per cell, and the end lists every job."""
    calls, left = run_on_a_fake_clock(load_grid(write_grid(tmp_path, GRID)), monkeypatch, 60.0, 2.5)
    assert calls == [("paper-lr0.0001-s1", "base"), ("paper-lr0.0001-s1", "ets,gmts,grpo")]
    assert left == ["paper-lr0.0002-s1 ets", "paper-lr0.0002-s1 gmts", "paper-lr0.0001-s2 ets",
                    "paper-lr0.0001-s2 gmts", "paper-lr0.0001-s2 grpo", "small-lr0.0001-s1 gmts"]
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("[sweep] time limit:")]
    assert lines == ["[sweep] time limit: paper-lr0.0002-s1 ets,gmts, and every later cell that does not fit left "
                     "for the next run (0.0 min left, 1.0 min per arm so far)"]


@pytest.mark.parametrize("argv, match", [(["--time_limit", "0"], "--time_limit must be a number of minutes above 0"),
                                         (["--time_limit", "-3"], "--time_limit must be a number of minutes above 0"),
                                         (["--time_limit", "nan"], "--time_limit must be a number of minutes above 0"),
                                         (["--time_limit", "10", "--ray"], "--time_limit is for the local pool")])
def test_a_bad_time_limit_is_one_line(tmp_path, capsys, argv, match):
    assert sweep.main([str(write_grid(tmp_path, GRID)), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sweep.py: {match}") and err.count("\n") == 1


def test_a_time_limit_takes_the_pace_of_earlier_runs_before_a_cell_has_finished(tmp_path, monkeypatch):
    """Earlier runs' fresh processes took 120 s per arm (logs/timing.jsonl): with 3 minutes and the base taking
    10 s, the first cell has time for one of its three arms, and it starts that one alone."""
    grid = load_grid(write_grid(tmp_path, GRID))
    logs = tmp_path / "results" / "demo" / "logs"
    logs.mkdir(parents=True)
    earlier = {"cell": "x", "arms": ["ets", "gmts"], "gpu": "0", "workers_on_gpu": 1, "start": 0.0, "end": 240.0,
               "exit_code": 0, "host": "h"}
    (logs / TIMING).write_text(json.dumps(earlier) + "\n")
    calls, left = run_on_a_fake_clock(grid, monkeypatch, 120.0, 3.0)
    assert calls == [("paper-lr0.0001-s1", "base"), ("paper-lr0.0001-s1", "ets")]
    assert left[:2] == ["paper-lr0.0001-s1 gmts", "paper-lr0.0001-s1 grpo"] and len(left) == 8


CONTINUED = f"""
name: first
config: {CONFIG}
results_dir: RESULTS
blocks:
  - {{name: main, arms: [ets, gmts], learning_rates: [1.0e-4], seeds: [1, 2, 3, 4]}}
primary:
  fixed_on: "before any cell"
  variant: paper
  comparison: gmts - ets
  learning_rate: 1.0e-4
  seeds: [1, 2, 3, 4]
  reproduced_above_points: 0.0
  refuted_below_points: 1.3
"""
EXTENSION = f"""
name: more
config: {CONFIG}
results_dir: RESULTS
blocks:
  - {{name: main, arms: [ets, gmts], learning_rates: [1.0e-4], seeds: [5, 6, 7, 8]}}
sequential:
  fixed_on: "after the first test"
  continues: CONTINUED
  variant: paper
  comparison: gmts - ets
  learning_rate: 1.0e-4
  seeds: [5, 6, 7, 8]
  looks: [6, 8]
  error_per_direction: 0.05
  critical: {{reproduced: 2.5, refuted: 3.0}}
  reproduced_above_points: 0.0
  refuted_below_points: 1.3
  cards: [H100, H200]
  contamination: {{rate: 0.02, jump_sds: 6.0}}
  failures: {{machine_fault_retries: 1, arm_failure: base}}
  sensitivity: [card, commit, day]
  design: none.json
  simulation: {{seed: 1, paths: 10, contaminated_paths: 10, resampled_paths: 10, sensitivity_paths: 10,
               outcome_paths: 10, conditional_paths: 10}}
"""


def sequential_trees(tmp_path: Path) -> Path:
    """A finished four-seed test of GMTS - ETS (deltas 0, +5, -5, +10 points) and a sequential grid continuing it over
    seeds 5-8 with looks at 6 and 8 seeds."""
    continued = tmp_path / "continued.yaml"
    continued.write_text(CONTINUED.replace("RESULTS", str(tmp_path / "results")))
    path = tmp_path / "more.yaml"
    path.write_text(EXTENSION.replace("RESULTS", str(tmp_path / "results")).replace("CONTINUED", str(continued)))
    for seed, gap in ((1, 0.0), (2, 0.05), (3, -0.05), (4, 0.1)):
        fake_cell(tmp_path / "results" / "first", f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": 0.5 + gap},
                  seed=seed)
    return path


def test_a_sequential_summary_counts_new_seeds_in_order_and_reads_decisions_only_at_looks(tmp_path):
    path = sequential_trees(tmp_path)
    grid = load_grid(path)
    root = tmp_path / "results" / "more"
    first = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert first["continued_seeds"] == [1, 2, 3, 4] and first["seeds_done"] == []
    assert first["state"]["next_look"] == 6 and [lk["seeds"] for lk in first["state"]["looks"]] == [4]
    fake_cell(root, "paper-lr0.0001-s6", {"ets": 0.5, "gmts": 0.9}, seed=6)  # seed 6 before seed 5
    q = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert q["seeds_done"] == [] and q["seeds_waiting"] == [6] and q["state"]["seeds_done"] == 4
    assert "waiting for an earlier one: 6" in render(summarize(grid, continued=continued_summary(grid)))
    fake_cell(root, "paper-lr0.0001-s5", {"ets": 0.5, "gmts": 0.9}, seed=5)
    q = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert q["seeds_done"] == [5, 6] and q["seeds_waiting"] == []
    assert [lk["seeds"] for lk in q["state"]["looks"]] == [4, 6]
    assert len(q["per_seed"]) == 6 and q["cell_cards"] == {"5": ["CPU"], "6": ["CPU"]}
    line = render(summarize(grid, continued=continued_summary(grid))).split("\n\n")[0]
    assert line.startswith("Sequential extension (plan fixed after the first test)")
    assert "Look 1 of 2 at 6 seeds" in line and "Cells on a card the plan does not name" in line
    written = write_summary(grid, path)
    assert verify(written)["sequential"] == summarize(grid, continued=continued_summary(grid))["sequential"]


def test_a_sequential_line_says_what_its_verdicts_mean_and_what_to_run_next(tmp_path):
    """Every printed verdict carries its meaning (computed), the next look's boundaries in points and the command that
    runs its seeds; a sweep with no finished cell prints no empty table."""
    path = sequential_trees(tmp_path)
    summary = summarize(grid := load_grid(path), continued=continued_summary(grid))
    q = summary["sequential"]
    m = q["meaning"]
    assert m["continued_error"] == pytest.approx(0.025) and m["error_per_direction"] == 0.05
    sd = statistics.stdev(100 * d for d in q["per_seed"])
    assert m["sd"] == pytest.approx(sd) and m["smaller_needs_seeds"] == math.ceil((sd * 5.5 / 1.3) ** 2) + 1
    assert not m["smaller_possible"] and m["whole_sequence"] is None and m["conditional"] is None  # no design file
    assert m["claimed"] == pytest.approx([1.3, 3.4]) and m["between_thresholds"] is False
    text = render(summary)
    se = sd / 6 ** 0.5
    assert f"reproduced if the mean exceeds {2.5 * se:+.2f} points, refuted if it lies below {1.3 - 3.0 * se:+.2f}" \
        in text.replace("\n", " ")
    flat = " ".join(text.split())
    assert "Next: `python sweep.py" in flat and "seeds 5-6 reach it" in flat
    assert '"reproduced" = a gain above 0 points, not the paper\'s +1.3 to +3.4' in flat
    assert "gets no verdict by 8 seeds" in flat and "repeated confidence interval" in flat
    assert "the confirmatory test spent its 0.025 at its look" in flat
    assert q["sensitivity_comparison"] is None  # read at looks only, as the verdict
    assert "Sensitivity comparison (planned, never a decision): at the next look (6 seeds)." in flat
    assert "GRPO (all tokens)" not in text and "Per training step" not in text  # no empty table


@pytest.mark.parametrize("old, new, match", [
    ("arm_failure: base", "arm_failure: zero", "failures.arm_failure must be one of base"),
    ("sensitivity: [card, commit, day]", "sensitivity: [gpu]", "sensitivity must list"),
    ("contamination: {rate: 0.02, jump_sds: 6.0}", "contamination: {rate: 0.7, jump_sds: 6.0}",
     "contamination.rate must lie in"),
    ("contamination: {rate: 0.02, jump_sds: 6.0}", "contamination: {rate: 0.02}", "contamination of rate, jump_sds"),
])
def test_a_sequential_plan_fixes_its_error_model_failures_and_sensitivity(tmp_path, old, new, match):
    path = sequential_trees(tmp_path)
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(SweepError, match=match):
        load_grid(path)


def test_a_sequential_grid_must_continue_a_finished_test_of_the_same_comparison(tmp_path):
    path = sequential_trees(tmp_path)
    (tmp_path / "results" / "first" / "paper-lr0.0001-s4" / "results.json").unlink()
    with pytest.raises(SweepError, match="not complete"):
        summarize(grid := load_grid(path), continued=continued_summary(grid))
    other = tmp_path / "other.yaml"
    other.write_text(path.read_text().replace("refuted_below_points: 1.3", "refuted_below_points: 2.0"))
    with pytest.raises(SweepError, match="refuted_below_points differ"):
        load_grid(other)
    other.write_text(path.read_text().replace("looks: [6, 8]", "looks: [6, 7]"))
    with pytest.raises(SweepError, match="must count every seed"):
        load_grid(other)
    other.write_text(path.read_text().replace("seeds: [5, 6, 7, 8]\n  looks", "seeds: [4, 6, 7, 8]\n  looks"))
    with pytest.raises(SweepError, match="none of"):
        load_grid(other)


def test_sweep_refuses_a_damaged_cell_file_in_one_line(tmp_path, capsys):
    """A cell's results.json that check.py would refuse (here: its digest no longer matches) stops the summary with the
    file's one-line reason, not a traceback."""
    grid_path = write_grid(tmp_path, GRID)
    root = tmp_path / "results" / "demo"
    fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.6}, seed=1)
    path = root / "paper-lr0.0001-s1" / "results.json"
    path.write_text(path.read_text().replace('"pass@1": ', '"pass@1": 0.0, "was": ', 1))
    assert sweep.main([str(grid_path), "--summarize"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sweep.py: ") and "paper-lr0.0001-s1/results.json" in err and err.count("\n") == 1, err
