"""The contributor's path, walked on the tiny model on the CPU (docs/contribute-seeds.md): a clone of a repository
holding a sequential plan; a claim of the next two seeds, committed and sent; a sweep that runs only those seeds; the
cells packed; the archive merged into a fresh clone of the repository (accepted, every merged cell verifying). Then a
forged archive, refused whole: a cell relabelled as run on another card, a cell of a seed someone else's claim holds,
and a cell run with other settings, each named in its own line, nothing written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sweep
from forge import sealed
from gmts_recipe.records import read_samples, write_results
from gmts_recipe.samples import write_samples
from gmts_recipe.stats import hack_scan, pass_at_1
from gmts_recipe.sweep import claims
from gmts_recipe.sweep.grid import load_grid
from gmts_recipe.verify.file import load, seal, verify
from tiny import write_tiny_config

ROOT = Path(__file__).resolve().parent.parent
FIRST = """name: first
config: configs/tiny.yaml
results_dir: results
blocks:
  - {name: main, arms: [ets, gmts], learning_rates: [1.0e-3], seeds: [1, 2]}
primary: {fixed_on: "before", variant: paper, comparison: gmts - ets, learning_rate: 1.0e-3, seeds: [1, 2],
          reproduced_above_points: 0.0, refuted_below_points: 1.3}
"""
MORE = """name: more
config: configs/tiny.yaml
results_dir: results
blocks:
  - {name: main, arms: [ets, gmts], learning_rates: [1.0e-3], seeds: [3, 4, 5, 6]}
sequential:
  fixed_on: "after the first test"
  continues: configs/sweeps/first.yaml
  variant: paper
  comparison: gmts - ets
  learning_rate: 1.0e-3
  seeds: [3, 4, 5, 6]
  looks: [4, 6]
  error_per_direction: 0.05
  critical: {reproduced: 2.5, refuted: 3.0}
  reproduced_above_points: 0.0
  refuted_below_points: 1.3
  cards: [CPU]
  contamination: {rate: 0.02, jump_sds: 6.0}
  failures: {machine_fault_retries: 1, arm_failure: base}
  sensitivity: [card, commit, day]
  design: configs/sweeps/none.json
  simulation: {seed: 1, paths: 10, contaminated_paths: 10, resampled_paths: 10, sensitivity_paths: 10,
               outcome_paths: 10, conditional_paths: 10}
"""
PLAN = "configs/sweeps/more.yaml"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                          capture_output=True, text=True).stdout


def origin(tmp_path: Path) -> Path:
    """The project's code and configs with the tiny model's config and the two plans, the continued test's cells
    committed. Those cells are run by the first plan's sweep (a sequential plan's new seeds are held to the continued
    test's recipe, as its cells record it), then one GMTS answer of seed 2 rewritten to its gold: the tiny model scores
    0 in every arm, and deltas with no spread have no t statistic."""
    repo = tmp_path / "origin"
    for path in [*ROOT.glob("*.py"), *(ROOT / "gmts_recipe").rglob("*.py")]:
        target = repo / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    config = write_tiny_config(tmp_path / "model")
    (repo / "configs" / "sweeps").mkdir(parents=True)
    (repo / "configs" / "tiny.yaml").write_text(config.read_text())
    (repo / "configs" / "sweeps" / "first.yaml").write_text(FIRST)
    (repo / PLAN).write_text(MORE)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the plans")
    sweep_run(repo, "--warm_workers", plan="configs/sweeps/first.yaml")
    (repo / "results" / "first" / "sweep.json").unlink()  # summarized again from the cells below
    answer_first_task(repo / "results" / "first" / "paper-lr0.001-s2", "gmts")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the continued test's cells")
    return repo


def answer_first_task(cell: Path, arm: str) -> None:
    """The first sample of the first task of an arm's evaluation rewritten to its gold answer: its samples file written
    again (named by its new SHA-256, as eval.py names it), the record's score, length, pass@1 and hack_scan as the
    texts give them, the file sealed again."""
    results = load(cell / "results.json")
    evaluation = results["arms"][arm]["eval"]
    old = cell / evaluation["samples"]["path"]
    log = read_samples(old, evaluation["samples"]["sha256"], arm)
    text = f"The answer is {log[0]['gold']}."
    log[0]["samples"][0], log[0]["scores"][0] = text, 1.0
    record = evaluation["records"][0]
    record["scores"][0], record["lengths"][0] = 1.0, len(text)
    path, sha = write_samples(cell, old.name.rsplit("-", 1)[0], log)
    old.unlink()
    evaluation["samples"].update(path=path.name, sha256=sha)
    evaluation["pass@1"] = pass_at_1(evaluation["records"])
    evaluation["hack_scan"] = hack_scan([t for line in log for t in line["samples"]])
    write_results(cell / "results.json", seal({k: v for k, v in results.items() if k not in ("summary", "digest")}))


def clone(repo: Path, where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", str(repo), str(where)], check=True)
    return where


def sweep_run(clone_dir: Path, *args: str, code: int = 0, plan: str = PLAN) -> str:
    """sweep.py as its user runs it, in the clone (its own code), on the CPU; its output (`code`: its exit status)."""
    env = dict(os.environ, PYTHONPATH=str(clone_dir), OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run([sys.executable, "sweep.py", plan, *args], cwd=clone_dir, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout + done.stderr


def in_clone(monkeypatch, where: Path, *args: str) -> int:
    monkeypatch.chdir(where)
    return sweep.main([PLAN, *args])


def on_another_card(cell: Path) -> None:
    """The cell's arms relabelled as run on an A100, the file sealed again (its digest recomputed)."""
    results = load(cell / "results.json")
    for entry in results["arms"].values():
        entry["provenance"]["gpu"], entry["provenance"]["gpus"] = "NVIDIA A100-SXM4-80GB", 1
    unsealed = {k: v for k, v in results.items() if k not in ("summary", "digest")}
    write_results(cell / "results.json", sealed(unsealed))


@pytest.mark.slow
def test_a_contributor_claims_runs_packs_and_the_merge_takes_only_what_verifies(tmp_path, monkeypatch, capsys):
    repo = origin(tmp_path)
    mine = clone(repo, tmp_path / "ada")
    # claim the next two free seeds, commit the claim and send it (here: the repository pulls it, as a merged PR)
    assert in_clone(monkeypatch, mine, "--claim", "2", "--who", "ada") == 0
    assert "claim written: seeds 3-4 claimed by ada until" in capsys.readouterr().out
    git(mine, "add", "results/more/claims")
    git(mine, "commit", "-q", "-m", "claim seeds 3-4")
    git(repo, "pull", "-q", str(mine), "main")
    # the sweep runs only the claimed seeds, in one warm worker
    out = sweep_run(mine, "--who", "ada", "--warm_workers")
    assert "[sweep] claims: running only the seeds claimed by ada: 3-4" in out
    folder = mine / "results" / "more"
    assert sorted(p.parent.name for p in folder.glob("*/results.json")) == ["paper-lr0.001-s3", "paper-lr0.001-s4"]
    assert in_clone(monkeypatch, mine, "--pack", str(tmp_path / "out"), "--who", "ada") == 0
    archive = tmp_path / "out" / "more-s3-s4-ada.tar.gz"
    assert archive.is_file()
    # merged into a fresh clone of the repository: accepted, each cell verifying there
    fresh = clone(repo, tmp_path / "fresh")
    assert in_clone(monkeypatch, fresh, "--merge", str(archive)) == 0
    said = capsys.readouterr().out
    assert "2 cell(s) packed by ada" in said and "paper-lr0.001-s4: added arm(s) ets, gmts" in said
    for seed in (3, 4):
        results, report = verify(fresh / "results" / "more" / f"paper-lr0.001-s{seed}" / "results.json")
        assert list(results["arms"]) == ["ets", "gmts"] and report["samples"] > 0
    assert in_clone(monkeypatch, fresh, "--summarize") == 0

    # a forged archive: bob's claim of seed 5 reached the repository first; ada runs 5 anyway, 6 with other settings,
    # and relabels seed 4's card
    claims.claim(load_grid(repo / PLAN), repo / "results" / "more", 1, "bob")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "bob claims seed 5")
    assert in_clone(monkeypatch, mine, "--claim", "1", "--who", "ada") == 0  # her copy does not know bob's yet
    sweep_run(mine, "--who", "ada", "--warm_workers")
    assert in_clone(monkeypatch, mine, "--claim", "1", "--who", "ada") == 0
    said = sweep_run(mine, "--who", "ada", "--warm_workers", "--", "--max_steps", "1", code=2)
    assert "paper-lr0.001-s6 ets,gmts on gpu None: ok" in said  # the cell ran; her own summary then refuses it:
    assert ("paper-lr0.001-s6/results.json: config.max_steps is 1, the continued test's 2 (a sequential plan's seeds "
            "run the continued test's recipe" in said)
    on_another_card(folder / "paper-lr0.001-s4")
    shutil.rmtree(tmp_path / "out")
    assert in_clone(monkeypatch, mine, "--pack", str(tmp_path / "out"), "--who", "ada") == 0
    (forged,) = (tmp_path / "out").glob("*.tar.gz")
    again = clone(repo, tmp_path / "fresh2")
    before = sorted(str(p.relative_to(again)) for p in again.rglob("*") if ".git" not in p.parts)
    capsys.readouterr()
    assert in_clone(monkeypatch, again, "--merge", str(forged)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("refused whole, nothing merged: 3 of 4 cell(s) fail the checks:")
    assert err[1].startswith("  paper-lr0.001-s4: seed 4 ran on 'NVIDIA A100-SXM4-80GB', not a card the plan names")
    assert err[2].startswith("  paper-lr0.001-s5: seed 5 is claimed by bob until ")
    assert err[3].startswith("  paper-lr0.001-s6: its settings differ from the plan's: max_steps 1 (the plan: 2)")
    assert len(err) == 4
    assert sorted(str(p.relative_to(again)) for p in again.rglob("*") if ".git" not in p.parts) == before
