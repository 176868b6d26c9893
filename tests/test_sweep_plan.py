"""A sweep's plan held against git (gmts_recipe.sweep.plan): the forgeries that re-seal a summary after dropping a seed
from its grid are refused, whether the committed plan was left alone, edited without a commit, or edited and committed
after the sweep's cells; a plan without a repository is said to be uncompared; every planned cell is present or named."""

import json
import subprocess
from pathlib import Path

import pytest

from gmts_recipe.sweep import plan
from gmts_recipe.sweep.grid import SweepError

GRID = """name: demo
config: configs/demo.yaml
results_dir: results
blocks:
  - {{name: main, arms: [ets, gmts], learning_rates: [1.0e-4], seeds: [{seeds}]}}
primary:
  fixed_on: "before any cell"
  variant: paper
  comparison: gmts - ets
  learning_rate: 1.0e-4
  seeds: [{seeds}]
  reproduced_above_points: 0.0
  refuted_below_points: 1.3
"""
SEEDS = "1, 2, 3"
ENV = ["-c", "user.name=t", "-c", "user.email=t@t"]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *ENV, *args], check=True, capture_output=True)


def commit(root: Path, message: str) -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


def cell(seed: int) -> str:
    return f"paper-lr0.0001-s{seed}"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository whose plan was committed first, then its three cells, then the sweep folder's grid and summary."""
    monkeypatch.chdir(tmp_path)
    git(tmp_path, "init", "-q")
    (tmp_path / "configs/sweeps").mkdir(parents=True)
    (tmp_path / "configs/demo.yaml").write_text("max_steps: 1\n")
    (tmp_path / "configs/sweeps/demo.yaml").write_text(GRID.format(seeds=SEEDS))
    commit(tmp_path, "plan")
    for seed in (1, 2, 3):
        (tmp_path / "results/demo" / cell(seed)).mkdir(parents=True)
        (tmp_path / "results/demo" / cell(seed) / "results.json").write_text("{}")
        commit(tmp_path, f"cell {seed}")
    folder = tmp_path / "results/demo"
    (folder / "grid.yaml").write_text(GRID.format(seeds=SEEDS))
    summary = {"name": "demo", "cells": [{"cell": cell(s)} for s in (1, 2, 3)],
               "plan": plan.record(tmp_path / "configs/sweeps/demo.yaml")}
    (folder / "sweep.json").write_text(json.dumps(summary))
    commit(tmp_path, "summary")
    return tmp_path


def summary_of(root: Path) -> dict:
    return json.loads((root / "results/demo/sweep.json").read_text())


def test_the_committed_plan_passes_and_says_so(repo):
    assert summary_of(repo)["plan"]["commit"] is not None
    lines = plan.report(repo / "results/demo/sweep.json", summary_of(repo))
    assert "as committed" in lines[0] and "before the first of its cells" in lines[0]
    assert lines[1] == "Planned cells: 3 of 3 have a results file."


def test_a_seed_dropped_from_grid_yaml_alone_is_refused(repo):
    (repo / "results/demo/grid.yaml").write_text(GRID.format(seeds="1, 3"))
    s = summary_of(repo)
    s["plan"]["sha256"] = plan.sha256(GRID.format(seeds="1, 3"))  # re-sealed with the forged grid's hash
    with pytest.raises(SweepError, match="differs from the committed plan"):
        plan.check(repo / "results/demo/sweep.json", s)


def test_a_grid_that_is_not_the_recorded_one_is_refused(repo):
    (repo / "results/demo/grid.yaml").write_text(GRID.format(seeds="1, 3"))
    with pytest.raises(SweepError, match="SHA-256 differs"):
        plan.check(repo / "results/demo/sweep.json", summary_of(repo))


def test_a_plan_edited_in_the_tree_but_not_committed_is_refused(repo):
    for p in ("results/demo/grid.yaml", "configs/sweeps/demo.yaml"):
        (repo / p).write_text(GRID.format(seeds="1, 3"))
    s = {**summary_of(repo), "plan": None}  # a summary that records no plan: held against the file by convention
    with pytest.raises(SweepError, match="differs from the committed plan"):
        plan.check(repo / "results/demo/sweep.json", s)


def test_a_decision_rule_changed_and_committed_after_the_cells_is_refused(repo):
    for p in ("results/demo/grid.yaml", "configs/sweeps/demo.yaml"):
        (repo / p).write_text(GRID.format(seeds="1, 3"))
    commit(repo, "drop seed 2")
    s = {**summary_of(repo), "plan": plan.record(repo / "configs/sweeps/demo.yaml")}
    with pytest.raises(SweepError, match="changed its primary after the sweep's first cell"):
        plan.check(repo / "results/demo/sweep.json", s)


def test_a_comment_changed_after_the_cells_is_not_a_rule_change(repo):
    text = "# the plan, unchanged in substance\n" + GRID.format(seeds=SEEDS)
    for p in ("results/demo/grid.yaml", "configs/sweeps/demo.yaml"):
        (repo / p).write_text(text)
    commit(repo, "comment")
    s = {**summary_of(repo), "plan": plan.record(repo / "configs/sweeps/demo.yaml")}
    assert "unchanged since" in plan.check(repo / "results/demo/sweep.json", s)[0]


def test_a_cell_folder_the_plan_does_not_list_is_refused(repo):
    (repo / "results/demo" / cell(9)).mkdir()
    (repo / "results/demo" / cell(9) / "results.json").write_text("{}")
    with pytest.raises(SweepError, match="does not list"):
        plan.report(repo / "results/demo/sweep.json", summary_of(repo))


def test_a_missing_planned_cell_is_named(repo):
    s = summary_of(repo)
    s["cells"] = s["cells"][:2]
    assert plan.report(repo / "results/demo/sweep.json", s)[1] == \
        f"Planned cells: 2 of 3 have a results file; not yet: {cell(3)}."


def test_without_a_repository_only_the_hash_is_compared(repo, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("copy") / "demo"
    elsewhere.mkdir()
    for name in ("grid.yaml", "sweep.json"):
        (elsewhere / name).write_text((repo / "results/demo" / name).read_text())
    assert "not compared with git" in plan.check(elsewhere / "sweep.json", summary_of(repo))[0]
    (elsewhere / "grid.yaml").write_text(GRID.format(seeds="1, 3"))
    with pytest.raises(SweepError, match="SHA-256 differs"):
        plan.check(elsewhere / "sweep.json", summary_of(repo))


def test_an_uncommitted_plan_is_recorded_without_a_commit(repo):
    (repo / "configs/sweeps/demo.yaml").write_text(GRID.format(seeds="1, 2"))
    assert plan.record(repo / "configs/sweeps/demo.yaml")["commit"] is None
