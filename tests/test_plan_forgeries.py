"""Forgeries of a committed sweep's plan, tried as a forger would in a clone of this repository (its history as
committed): an edited plan committed under a new name, cells dropped together with their seeds, a sequential plan's
boundary lowered before any of its cells, the test it continues edited in the working tree beside stray cells. Each is
refused by check.py in one line before a cell is read (gmts_recipe.verify.plan); the committed sweeps' plans pass, from
any current directory.

A clone checks out only the files the plan checks read (configs/, the sweeps' grid.yaml and sweep.json): a forged
summary is re-sealed with its digest, not recomputed from cells, since the plan is refused before the cells are read.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from forge import refused, reseal_summary
from gmts_recipe.stats import plan_decision
from gmts_recipe.verify import plan
from gmts_recipe.verify.sweep import read_sweep
from gmts_recipe.sweep.grid import load_grid

ROOT = Path(__file__).resolve().parent.parent
ENV = ["-c", "user.name=t", "-c", "user.email=t@t"]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *ENV, *args], check=True, capture_output=True, text=True).stdout


def _history_at_hand() -> bool:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True,
                             text=True)
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == "false"


pytestmark = pytest.mark.skipif(not _history_at_hand(), reason="needs this repository's full git history")


def clone(tmp_path: Path, *extra: str) -> Path:
    """This repository at HEAD in <tmp>/repo, sharing its objects, with configs/ and the committed sweeps' grid.yaml
    and sweep.json checked out (and `extra` paths)."""
    dst = tmp_path / "repo"
    _git(tmp_path, "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(dst))
    sweeps = [f"/results/{s}/{f}" for s in ("qwen", "coupled", "confirm", "confirm-extension")
              for f in ("grid.yaml", "sweep.json")]
    _git(dst, "sparse-checkout", "set", "--no-cone", "/configs/", *sweeps, *extra)
    _git(dst, "checkout", "-q", "--detach", _git(ROOT, "rev-parse", "HEAD").strip())
    return dst


def commit(root: Path, message: str) -> None:
    _git(root, "add", "-A", "--sparse")
    _git(root, "commit", "-qm", message)


def test_the_committed_plans_pass_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here: every path the plans name is found from the sweep's folder
    for name in ("qwen", "coupled", "confirm", "confirm-extension"):
        lines = plan.report(ROOT / "results" / name / "sweep.json", *read_sweep(ROOT / "results" / name / "sweep.json"))
        assert lines[0].startswith("Plan: ") and " as committed" in lines[0]
    assert any(line.startswith("Look 0: configs/sweeps/confirm.yaml and results/confirm as committed")
               for line in lines)
    assert load_grid(ROOT / "results/confirm-extension/grid.yaml").sequential["continues"] == \
        "configs/sweeps/confirm.yaml"


def test_an_edited_plan_committed_under_a_new_name_is_refused(tmp_path, capsys):
    """configs/sweeps/confirm-final.yaml, copied to results/confirm/grid.yaml, with reproduced_above_points -0.5:
    the confirmatory test's +0.9 [-0.1, +1.9] would read "reproduced"."""
    repo = clone(tmp_path)
    text = (repo / "configs/sweeps/confirm.yaml").read_text()
    assert text.count("reproduced_above_points: 0.0") == 1
    forged = text.replace("reproduced_above_points: 0.0", "reproduced_above_points: -0.5")
    (repo / "configs/sweeps/confirm-final.yaml").write_text(forged)
    (repo / "results/confirm/grid.yaml").write_text(forged)
    commit(repo, "the confirmatory plan, final")
    sweep = repo / "results/confirm/sweep.json"
    summary = json.loads(sweep.read_text())
    p = summary["primary"]
    p["reproduced_above_points"] = -0.5
    p["decision"] = plan_decision(100 * p["t_low"], 100 * p["t_high"], -0.5, p["refuted_below_points"])
    assert p["decision"] == "reproduced"
    summary["plan"] = plan.record(repo / "configs/sweeps/confirm-final.yaml")
    reseal_summary(sweep, summary)
    commit(repo, "summary")
    refused(sweep, capsys, "plan configs/sweeps/confirm-final.yaml: changed its primary after the sweep's first cell",
            "reproduced_above_points differ, against results/confirm/grid.yaml at e3a066580f")


def test_the_pilots_worst_cells_dropped_with_their_seeds_are_refused(tmp_path, capsys):
    """The pilot's 4 worst seeds (GMTS - ETS) deleted from results/coupled and from its plan, committed: the pilot
    would move from +1.5 [-1.9, +4.9] to about +4.4 [+1.8, +7.2]."""
    repo = clone(tmp_path, "/results/coupled/")
    sweep = repo / "results/coupled/sweep.json"
    summary = json.loads(sweep.read_text())
    row = next(r for r in summary["pooled"] if r["comparison"] == "gmts - ets")
    worst = sorted(sorted(zip(row["per_seed"], row["seeds"]))[:4], key=lambda x: x[1])
    seeds = [s for _, s in worst]
    text = (repo / "configs/sweeps/coupled.yaml").read_text()
    kept = ", ".join(str(s) for s in row["seeds"] if s not in seeds)
    forged = text.replace(", ".join(map(str, row["seeds"])), kept)
    assert forged != text
    for name in ("configs/sweeps/coupled.yaml", "results/coupled/grid.yaml"):
        (repo / name).write_text(forged)
    for s in seeds:
        shutil.rmtree(repo / "results/coupled" / f"coupled-lr0.0001-s{s}")
    summary["cells"] = [c for c in summary["cells"] if c["seed"] not in seeds]
    reseal_summary(sweep, summary)
    commit(repo, "the pilot without four seeds")
    refused(sweep, capsys, "dropped 8 planned run(s) after the sweep's first cell",
            f"seed(s) {', '.join(map(str, seeds))} of block(s) pilot")


def extension_forged(repo: Path, edit) -> Path:
    """The extension's plan edited by `edit` (text to text) in configs/sweeps/confirm-extension.yaml and its copy,
    committed, the summary re-sealed with the new plan's record."""
    path = repo / "configs/sweeps/confirm-extension.yaml"
    forged = edit(path.read_text())
    path.write_text(forged)
    (repo / "results/confirm-extension/grid.yaml").write_text(forged)
    commit(repo, "the extension's plan")
    sweep = repo / "results/confirm-extension/sweep.json"
    summary = json.loads(sweep.read_text())
    summary["sequential"]["critical"] = load_grid(path).sequential["critical"]
    summary["plan"] = plan.record(path)
    reseal_summary(sweep, summary)
    return sweep


def lower_reproduced(text: str) -> str:
    """The plan's reproduced boundary lowered to 1.50, whatever the committed one is."""
    forged, n = re.subn(r"reproduced: [0-9.]+", "reproduced: 1.50", text, count=1)
    assert n == 1
    return forged


def test_a_boundary_lowered_after_the_freeze_is_refused(tmp_path, capsys):
    repo = clone(tmp_path)
    sweep = extension_forged(repo, lower_reproduced)
    refused(sweep, capsys, "froze the sequential plan", "critical differ since")


def test_a_boundary_lowered_with_the_freeze_removed_is_refused(tmp_path, capsys):
    """The freeze lives in history: a later commit that drops frozen_on and lowers the boundary is held against the
    committed frozen version all the same."""
    repo = clone(tmp_path)
    sweep = extension_forged(repo, lambda text: re.sub(r"\n  frozen_on: [^\n]*", "", lower_reproduced(text)))
    refused(sweep, capsys, "froze the sequential plan", "frozen_on, critical differ since")


def test_a_design_file_edited_after_the_freeze_is_refused(tmp_path, capsys):
    repo = clone(tmp_path)
    design = repo / "configs/sweeps/confirm-extension-design.json"
    forged = json.loads(design.read_text())
    forged["conditional"]["reproduced"]["collapse_down"]["error"] = 0.01
    design.write_text(json.dumps(forged, indent=1))
    sweep = extension_forged(repo, lambda text: text)
    refused(sweep, capsys, "its design file configs/sweeps/confirm-extension-design.json differs from the one "
                           "committed with it")


def test_a_plan_below_its_designs_requirement_is_refused():
    """The design check itself (a plan not yet frozen): a critical value under the largest boundary plus 2 Monte Carlo
    SEs, or a design whose required value does not follow from its own boundaries, is named."""
    summary = json.loads((ROOT / "results/confirm-extension/sweep.json").read_text())
    spec = summary["sequential"]
    design = json.loads((ROOT / spec["design"]).read_text())
    assert plan.design_problem(spec, design) is None
    low = {**spec, "critical": {**spec["critical"], "reproduced": 2.79}}
    assert "critical.reproduced" in plan.design_problem(low, {**design, "critical": low["critical"]})
    assert "lies below 2.8645" in plan.design_problem(low, {**design, "critical": low["critical"]})
    forged = json.loads(json.dumps(design))
    forged["required"]["reproduced"] = 2.70
    assert plan.design_problem(spec, forged).startswith("required.reproduced")


def test_an_uncommitted_edit_of_the_continued_plan_is_refused(tmp_path, capsys):
    """configs/sweeps/confirm.yaml edited in the working tree only (3 of its seeds replaced): look 0 would read it."""
    repo = clone(tmp_path)
    path = repo / "configs/sweeps/confirm.yaml"
    path.write_text(path.read_text().replace("297, 298, 299]", "600, 601, 602]"))
    refused(repo / "results/confirm-extension/sweep.json", capsys,
            "configs/sweeps/confirm.yaml, the test it continues, differs from its committed plan")


def test_stray_cells_beside_the_continued_test_are_refused(tmp_path, capsys):
    """3 cells copied into results/confirm under seeds the committed plan lacks, not committed."""
    repo = clone(tmp_path)
    for seed in (600, 601, 602):
        cell = repo / "results/confirm" / f"coupled-lr0.0001-s{seed}"
        cell.mkdir()
        (cell / "results.json").write_text("{}")
    refused(repo / "results/confirm-extension/sweep.json", capsys,
            "results/confirm, the test it continues, has 3 file(s) that differ from HEAD or are not committed")


def test_the_continued_plan_edited_and_committed_with_its_cells_is_refused(tmp_path, capsys):
    repo = clone(tmp_path)
    for name in ("configs/sweeps/confirm.yaml", "results/confirm/grid.yaml"):
        path = repo / name
        path.write_text(path.read_text().replace("297, 298, 299]", "600, 601, 602]"))
    for seed in (600, 601, 602):
        cell = repo / "results/confirm" / f"coupled-lr0.0001-s{seed}"
        cell.mkdir()
        (cell / "results.json").write_text("{}")
    commit(repo, "three seeds replaced")
    refused(repo / "results/confirm-extension/sweep.json", capsys, "is not the plan it continued at the plan's commit")
