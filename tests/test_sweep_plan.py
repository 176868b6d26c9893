"""A sweep's plan held against git (gmts_recipe.verify.plan): the forgeries that re-seal a summary after dropping a seed
from its grid are refused, whether the committed plan was left alone, edited without a commit, edited and committed
after the sweep's cells, or committed under a new name; a plan may only grow; a plan without a repository is said to
be uncompared; every planned cell is present or named; a sequential plan's cards are read by their exact names."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gmts_recipe.verify import plan
from gmts_recipe.verify.sweep import read_sweep
from gmts_recipe.sweep.grid import SweepError, load_grid

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


def report(path: Path, summary: dict) -> list[str]:
    """verify.plan.report on a summary as given (no digest: the plan's checks alone), its grid beside it."""
    return plan.report(path, summary, load_grid(path.parent / "grid.yaml"))


def test_the_committed_plan_passes_and_says_so(repo):
    assert summary_of(repo)["plan"]["commit"] is not None
    lines = report(repo / "results/demo/sweep.json", summary_of(repo))
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
        report(repo / "results/demo/sweep.json", summary_of(repo))


def test_a_missing_planned_cell_is_named(repo):
    s = summary_of(repo)
    s["cells"] = s["cells"][:2]
    assert report(repo / "results/demo/sweep.json", s)[1] == \
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


GROWN = GRID.replace("primary:", "  - {{name: more, arms: [ets, gmts, grpo], learning_rates: [1.0e-4, 2.0e-4], "
                     "seeds: [7, 8]}}\nprimary:")


def regrid(root: Path, text: str, name: str = "configs/sweeps/demo.yaml") -> dict:
    """The plan rewritten in `name` and copied to the sweep folder, committed; the summary's record of it."""
    for p in {name, "results/demo/grid.yaml"}:
        (root / p).write_text(text)
    commit(root, f"plan {name}")
    return {**summary_of(root), "plan": plan.record(root / name)}


def test_a_plan_that_grows_passes(repo):
    grown = GRID.replace("blocks:\n", "variants:\n  more: {{max_steps: 2}}\nblocks:\n")
    grown = grown.replace("seeds: [{seeds}]}}", "seeds: [{seeds}, 4]}}\n  - {{name: more, variant: more, arms: [ets], "
                          "learning_rates: [1.0e-4], seeds: [1]}}")
    lines = plan.check(repo / "results/demo/sweep.json", regrid(repo, grown.format(seeds=SEEDS)))
    assert "decision rules unchanged since that cell" in lines[0]


def test_a_plan_committed_under_a_new_name_keeps_its_history(repo):
    forged = GRID.format(seeds=SEEDS).replace("reproduced_above_points: 0.0", "reproduced_above_points: -0.5")
    s = regrid(repo, forged, "configs/sweeps/demo-final.yaml")
    with pytest.raises(SweepError, match=r"plan configs/sweeps/demo-final.yaml: changed its primary after the "
                                         r"sweep's first cell \(\w+\): reproduced_above_points differ"):
        plan.check(repo / "results/demo/sweep.json", s)


def test_a_plan_recorded_as_the_folders_own_copy_keeps_its_history(repo):
    forged = GRID.format(seeds=SEEDS).replace("refuted_below_points: 1.3", "refuted_below_points: 5.0")
    s = regrid(repo, forged, "results/demo/grid.yaml")
    with pytest.raises(SweepError, match="changed its primary after the sweep's first cell"):
        plan.check(repo / "results/demo/sweep.json", s)


def test_cells_dropped_with_their_seeds_are_refused(repo):
    """A block's seed and its cell removed together, the rules left alone (the plan has no primary seed there)."""
    text = GROWN.format(seeds=SEEDS)
    s = regrid(repo, text)
    (repo / "results/demo" / cell(7)).mkdir()
    (repo / "results/demo" / cell(7) / "results.json").write_text("{}")
    commit(repo, "cell 7")
    s = regrid(repo, text.replace("seeds: [7, 8]", "seeds: [8]"))
    shutil.rmtree(repo / "results/demo" / cell(7))
    commit(repo, "cell 7 gone")
    with pytest.raises(SweepError, match=r"dropped 6 planned run\(s\) after the sweep's first cell \(\w+\): seed\(s\) "
                                         r"7 of block\(s\) more"):
        plan.check(repo / "results/demo/sweep.json", s)


@pytest.mark.parametrize("edit, what", [
    (lambda t: t.replace("max_steps: 1", "max_steps: 5"), "changed variant 'v'"),
    (lambda t: t.replace("config: configs/demo.yaml", "config: configs/other.yaml"), "changed its config"),
    (lambda t: t.replace("arms: [ets, gmts], learning_rates: [1.0e-4], seeds: [1, 2, 3]",
                         "arms: [gmts], learning_rates: [1.0e-4], seeds: [1, 2, 3]"), "dropped 3 planned run(s)"),
])
def test_growth_refuses_what_is_not_growth(edit, what):
    before = GRID.format(seeds=SEEDS).replace("blocks:\n", "variants:\n  v: {max_steps: 1}\nblocks:\n")
    assert plan.growth(plan._mapping(before), plan._mapping(before)) is None
    assert plan.growth(plan._mapping(before), plan._mapping(edit(before)))[0] == what


def test_cells_without_a_plan_committed_with_them_are_refused(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs/demo.yaml").write_text("max_steps: 1\n")
    for seed in (1, 2, 3):
        (tmp_path / "results/demo" / cell(seed)).mkdir(parents=True)
        (tmp_path / "results/demo" / cell(seed) / "results.json").write_text("{}")
    commit(tmp_path, "cells")
    (tmp_path / "configs/sweeps").mkdir()
    for p in ("configs/sweeps/demo.yaml", "results/demo/grid.yaml"):
        (tmp_path / p).write_text(GRID.format(seeds=SEEDS))
    commit(tmp_path, "a plan after the cells")
    s = {"name": "demo", "cells": [{"cell": cell(s)} for s in (1, 2, 3)],
         "plan": plan.record(tmp_path / "configs/sweeps/demo.yaml")}
    with pytest.raises(SweepError, match="no plan committed with or before the sweep's first cell"):
        plan.check(tmp_path / "results/demo/sweep.json", s)


@pytest.mark.parametrize("cards, problem", [
    ({"300": ["NVIDIA H200"], "301": ["NVIDIA H100 80GB HBM3"]}, None),
    ({"300": ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]}, "seed 300's arms ran on 2 cards"),
    ({"300": ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]}, "seed 300's arms ran on 2 cards"),
    ({"300": ["NVIDIA GH200 480GB"]}, "seed 300 ran on 'NVIDIA GH200 480GB', not a card the plan names (H100, H200"),
    ({"300": ["NVIDIA A100-SXM4-80GB"]}, "seed 300 ran on 'NVIDIA A100-SXM4-80GB'"),
    ({"300": ["NVIDIA H100 PCIe"]}, "seed 300 ran on 'NVIDIA H100 PCIe'"),
    ({"300": ["CPU"]}, "seed 300 ran on 'CPU'"),
])
def test_cards_are_read_by_their_exact_names(cards, problem):
    found = plan.card_problem(["H100", "H200"], cards)
    assert found == problem if problem is None else found.startswith(problem)


def test_a_card_the_plan_names_exactly_passes():
    assert plan.card_problem(["NVIDIA H100 PCIe"], {"300": ["NVIDIA H100 PCIe"]}) is None
    assert plan.card_problem(["H100 PCIe"], {"300": ["NVIDIA H100 PCIe"]}).startswith("seed 300 ran on")


def test_a_sequential_sweeps_cells_on_a_card_the_plan_does_not_name_are_refused(tmp_path, capsys):
    """A sequential plan naming H100 and H200, its first new seeds run on a CPU (the card recorded: "CPU"): check.py
    refuses the sweep in one line before its cells are read; a plan naming that card exactly passes the card check."""
    import check
    from gmts_recipe.sweep.report import write_summary
    from test_sweep import fake_cell, sequential_trees

    path = sequential_trees(tmp_path)
    for seed in (5, 6):
        fake_cell(tmp_path / "results/more", f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": 0.9}, seed=seed)
    sweep = write_summary(load_grid(path), path)
    with pytest.raises(SweepError, match=r"sequential: cards: seed 5 ran on 'CPU', not a card the plan names"):
        plan.report(sweep, *read_sweep(sweep))
    assert check.main([str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "cards: seed 5 ran on 'CPU'" in err
    path.write_text(path.read_text().replace("cards: [H100, H200]", "cards: [CPU]"))
    sweep = write_summary(load_grid(path), path)
    with pytest.raises(SweepError, match="design file none.json is missing"):  # past the cards: its design next
        plan.report(sweep, *read_sweep(sweep))


def test_a_sequential_sweep_whose_continued_test_has_no_sweep_json_is_refused(tmp_path, monkeypatch):
    """Look 0 is checked as the continued test's own sweep: where that test has no sweep.json, check.py refuses the
    sequential sweep in one line (after the plan's checks, set aside here: they need git and a design file)."""
    from gmts_recipe.sweep.report import write_summary
    from gmts_recipe.verify import sweep as verify_sweep
    from test_sweep import sequential_trees

    path = sequential_trees(tmp_path)
    sweep = write_summary(load_grid(path), path)
    monkeypatch.setattr(verify_sweep, "plan_report", lambda *args: [])
    with pytest.raises(SweepError, match=r"the test it continues has no sweep\.json \(.*first/sweep\.json\)"):
        verify_sweep.check_sweep(sweep)


def test_the_summary_notes_cards_by_the_same_exact_names(tmp_path):
    """sweep.py's note on a sequential sweep's cards reads them as check.py does: a GH200 is no H200, two cards for
    one seed are noted, an H100 and an H200 are not."""
    from gmts_recipe.sequential.report import sequential_parts
    from gmts_recipe.sweep.report import write_summary
    from test_sweep import fake_cell, sequential_trees

    path = sequential_trees(tmp_path)
    for seed in (5, 6):
        fake_cell(tmp_path / "results/more", f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": 0.9}, seed=seed)
    q = json.loads(write_summary(load_grid(path), path).read_text())["sequential"]
    q["cell_cards"] = {"5": ["NVIDIA H200"], "6": ["NVIDIA H100 80GB HBM3"]}
    assert sequential_parts(q)["notes"] == []
    q["cell_cards"] = {"5": ["NVIDIA GH200 480GB"], "6": ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]}
    assert sequential_parts(q)["notes"] == ["Cells on a card the plan does not name: seed 5 NVIDIA GH200 480GB; seed 6 "
                                            "NVIDIA H200, NVIDIA H100 80GB HBM3."]


def test_a_sweep_folder_moved_keeps_its_plans_history(repo):
    """results/demo moved to results/demo2 with a plan of that name whose threshold moved: the cells' first commit
    (followed through the rename) is the original one, and so is the plan they ran under."""
    git(repo, "mv", "results/demo", "results/demo2")
    forged = GRID.format(seeds=SEEDS).replace("name: demo", "name: demo2").replace(
        "reproduced_above_points: 0.0", "reproduced_above_points: -0.5")
    (repo / "configs/sweeps/demo2.yaml").write_text(forged)
    (repo / "results/demo2/grid.yaml").write_text(forged)
    commit(repo, "the sweep under a new name")
    s = {**summary_of_folder(repo, "demo2"), "name": "demo2", "plan": plan.record(repo / "configs/sweeps/demo2.yaml")}
    with pytest.raises(SweepError, match=r"changed its primary after the sweep's first cell \(\w+\): "
                                         r"reproduced_above_points differ, against configs/sweeps/demo.yaml at"):
        plan.check(repo / "results/demo2/sweep.json", s)


def summary_of_folder(root: Path, name: str) -> dict:
    return json.loads((root / "results" / name / "sweep.json").read_text())
