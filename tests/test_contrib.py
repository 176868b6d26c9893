"""Seeds from anyone's GPU: claims (who runs which seeds), the pace per card read from timing logs, and an archive of
cells (--pack) merged only when every cell passes the checks (--merge ARCHIVE), on synthetic cells with samples in a
small git repository that holds the plan."""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

import sweep
from gmts_recipe.code_digest import code_digest
from gmts_recipe.verify.file import load, verify
from gmts_recipe.sweep import claims, pace
from gmts_recipe.sweep.grid import SweepError, load_grid
from test_check import with_samples
from test_sweep import EVAL_HASH, seal, tree_cell

H100 = "NVIDIA H100 80GB HBM3"
CONFIG = "max_steps: 10\nper_device_train_batch_size: 8\nn_heldout: 0\n"
FIRST = """name: first
config: t.yaml
results_dir: results
blocks:
  - {name: main, arms: [ets, gmts], learning_rates: [1.0e-4], seeds: [1, 2]}
primary: {fixed_on: "before", variant: paper, comparison: gmts - ets, learning_rate: 1.0e-4, seeds: [1, 2],
          reproduced_above_points: 0.0, refuted_below_points: 1.3}
"""
MORE = """name: more
config: t.yaml
results_dir: results
blocks:
  - {name: main, arms: [ets, gmts], learning_rates: [1.0e-4], seeds: [3, 4, 5, 6]}
sequential:
  fixed_on: "after the first test"
  continues: first.yaml
  variant: paper
  comparison: gmts - ets
  learning_rate: 1.0e-4
  seeds: [3, 4, 5, 6]
  looks: [4, 6]
  error_per_direction: 0.05
  critical: {reproduced: 2.5, refuted: 3.0}
  reproduced_above_points: 0.0
  refuted_below_points: 1.3
  cards: [H100, H200]
  contamination: {rate: 0.02, jump_sds: 6.0}
  failures: {machine_fault_retries: 1, arm_failure: base}
  sensitivity: [card, commit, day]
  design: none.json
  simulation: {seed: 1, paths: 10, contaminated_paths: 10, resampled_paths: 10, sensitivity_paths: 10,
               outcome_paths: 10, conditional_paths: 10}
"""
NOW = datetime.datetime(2026, 12, 8, 12, 0, tzinfo=datetime.timezone.utc)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def plan_repo(tmp_path: Path) -> Path:
    """A repository holding one code file, the config and the two plans, committed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name, text in (("code.py", "X = 1\n"), ("t.yaml", CONFIG), ("first.yaml", FIRST), ("more.yaml", MORE)):
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the plan")
    return repo


def ran(folder: Path, seed: int, repo: Path, cards: tuple[str, str] = (H100, H100), digest: str | None = None,
        edit=None) -> Path:
    """Cell `seed` of the plan as a machine writes it: both arms with samples (the base's in ../base-evals), each arm's
    provenance naming the repository's commit, its code's digest and its card."""
    name = f"paper-lr0.0001-s{seed}"
    results = tree_cell(folder, name, {"ets": 0.5, "gmts": 0.55}, seed=seed)
    results = with_samples(results, folder / name, folder / "base-evals")
    head = git(repo, "rev-parse", "HEAD").strip()
    for (arm, entry), card in zip(results["arms"].items(), cards):
        entry["provenance"] = {"commit": head, "dirty": False, "code_digest": digest or code_digest(repo),
                               "started": "2026-12-08T10:00:00+00:00", "finished": "2026-12-08T10:04:00+00:00",
                               "host": "rented", "gpu": card, "gpus": 1}
    if edit is not None:
        edit(results)
    (folder / name / "results.json").write_text(json.dumps(seal(results)))
    (folder / "logs").mkdir(exist_ok=True)
    (folder / "logs" / f"{name}-ets+gmts.log").write_text(f"seed {seed}\n")
    with open(folder / "logs" / "timing.jsonl", "a") as out:
        out.write(json.dumps({"cell": name, "arms": ["ets", "gmts"], "gpu": "0", "workers_on_gpu": 1,
                              "start": 100.0 * seed, "end": 100.0 * seed + 60, "exit_code": 0, "host": "rented"})
                  + "\n")
    return folder / name / "results.json"


def with_base_cache(repo: Path, elsewhere: Path) -> None:
    """The plan's sweep folder in the repository with the shared base evaluations (the cache and its samples) the
    cells were paired with, committed, as a sweep folder is before anyone runs its seeds."""
    local = repo / "results" / "more" / "base-evals"
    local.mkdir(parents=True)
    cells = sorted(elsewhere.glob("*/results.json"))
    evals = json.loads(cells[0].read_text())["base"]["evals"]
    (local / f"{EVAL_HASH}.json").write_text(json.dumps({"eval_hash": EVAL_HASH,
                                                         "eval_config": {"heldout": load(cells[0])["data"]["heldout"]},
                                                         "evals": evals}))
    for path in (elsewhere / "base-evals").glob("*.jsonl.xz"):
        (local / path.name).write_bytes(path.read_bytes())
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base evaluations")


@pytest.fixture
def setting(tmp_path, monkeypatch):
    """(repository, the machine's sweep folder outside it) with cells 3 and 4 run there, honest."""
    repo = plan_repo(tmp_path)
    elsewhere = tmp_path / "elsewhere" / "more"
    for seed in (3, 4):
        ran(elsewhere, seed, repo)
    with_base_cache(repo, elsewhere)
    monkeypatch.chdir(repo)
    return repo, elsewhere


def packed(elsewhere: Path, out: Path, who: str = "me") -> Path:
    assert sweep.main(["more.yaml", "--results_dir", str(elsewhere.parent), "--pack", str(out), "--who", who]) == 0
    (archive,) = out.glob("*.tar.gz")
    return archive


def test_claims_take_the_next_free_seeds_and_runs_follow_them(setting, capsys):
    repo, _ = setting
    folder = repo / "results" / "more"
    grid = load_grid(repo / "more.yaml")
    mine = claims.claim(grid, folder, 2, "me", hours=24, now=NOW)
    theirs = claims.claim(grid, folder, 1, "you", hours=1, now=NOW)
    assert (mine.seeds, theirs.seeds) == ((3, 4), (5,))
    assert json.loads(mine.path.read_text()) == {"seeds": [3, 4], "who": "me", "claimed": "2026-12-08T12:00:00Z",
                                                 "until": "2026-12-09T12:00:00Z"}
    run, said = claims.runnable(grid, folder, "me", now=NOW)
    assert [c.seed for c in run.cells()] == [3, 4] and said == ["running only the seeds claimed by me: 3-4"]
    run, said = claims.runnable(grid, folder, None, now=NOW)
    assert [c.seed for c in run.cells()] == [6] and "seeds 3-4 claimed by me" in said[0]
    later = NOW + datetime.timedelta(hours=2)  # "you"'s claim has expired: seed 5 is free again
    assert [c.seed for c in claims.runnable(grid, folder, None, now=later)[0].cells()] == [5, 6]
    assert claims.claim(grid, folder, 5, "them", now=later).seeds == (5, 6)
    with pytest.raises(SweepError, match=r"no claim of you holds now \(expired: seeds 5 claimed by you"):
        claims.runnable(grid, folder, "you", now=later)
    with pytest.raises(SweepError, match="no free seed to claim: every seed left is claimed"):
        claims.claim(grid, folder, 1, "late", now=later)
    lines = claims.plan_lines(grid, folder, now=later)
    assert "the next seed in the plan's order, 3, is claimed: the look that counts it waits for its cell until " \
           "2026-12-09T12:00:00Z" in lines
    with pytest.raises(SweepError, match="--who 'a b'"):
        claims.claim(grid, folder, 1, "a b", now=NOW)
    assert sweep.main(["more.yaml", "--claim", "1"]) == 2
    assert "--claim N needs --who NAME" in capsys.readouterr().err


def test_an_archive_of_honest_cells_merges_and_each_cell_verifies(setting, tmp_path, capsys):
    repo, elsewhere = setting
    claims.claim(load_grid(repo / "more.yaml"), repo / "results" / "more", 2, "me")
    archive = packed(elsewhere, tmp_path / "out")
    assert archive.name == "more-s3-s4-me.tar.gz"
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    assert "pack.json" in names and "more/logs/timing.jsonl" in names and "more/paper-lr0.0001-s3/results.json" in names
    assert sum(n.startswith("more/base-evals/") for n in names) == 3  # no repository there: its base goes along
    assert sweep.main(["more.yaml", "--merge", str(archive)]) == 0
    out = capsys.readouterr().out
    assert "2 cell(s) packed by me" in out and "paper-lr0.0001-s4: added arm(s) ets, gmts" in out
    local = repo / "results" / "more"
    for seed in (3, 4):
        results, report = verify(local / f"paper-lr0.0001-s{seed}" / "results.json")
        assert list(results["arms"]) == ["ets", "gmts"] and report["samples"] > 0
    assert len((local / "logs" / "timing.jsonl").read_text().splitlines()) == 2


def _other_settings(results: dict) -> None:
    results["config"]["max_steps"] = 12
    results["config_hash"] = None  # seal (rehash) recomputes it from the edited config


def test_a_forged_archive_is_refused_whole_one_line_per_cell(setting, tmp_path, capsys):
    repo, elsewhere = setting
    grid = load_grid(repo / "more.yaml")
    claims.claim(grid, repo / "results" / "more", 2, "me")
    claims.claim(grid, repo / "results" / "more", 1, "you")  # seed 5
    ran(elsewhere, 5, repo)  # a seed someone else holds
    ran(elsewhere, 6, repo, edit=_other_settings)
    shutil.rmtree(elsewhere / "paper-lr0.0001-s4")
    ran(elsewhere, 4, repo, cards=(H100, "NVIDIA A100-SXM4-80GB"))  # its arms on two cards
    archive = packed(elsewhere, tmp_path / "out")
    before = sorted(p.relative_to(repo) for p in (repo / "results").rglob("*"))
    assert sweep.main(["more.yaml", "--merge", str(archive)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"sweep.py: --merge {archive}: refused whole, nothing merged: 3 of 4 cell(s) fail the checks:"
    assert err[1].startswith("  paper-lr0.0001-s4: seed 4's arms ran on 2 cards")
    assert err[2] == ("  paper-lr0.0001-s5: seed 5 is claimed by you until "
                      f"{claims.stamp(claims.read_claims(repo / 'results' / 'more')[-1].until)} (5-5-you.json): its "
                      f"cells merge from its claimant only")
    assert err[3].startswith("  paper-lr0.0001-s6: its settings differ from the plan's: max_steps 12 (the plan: 10)")
    assert len(err) == 4  # cell 3 passes: it is not named
    assert sorted(p.relative_to(repo) for p in (repo / "results").rglob("*")) == before  # nothing written


def test_cells_of_other_cards_code_or_partial_runs_are_named(setting, tmp_path, capsys):
    repo, elsewhere = setting
    ran(elsewhere, 5, repo, cards=("NVIDIA A100-SXM4-80GB",) * 2)
    ran(elsewhere, 6, repo, digest="f" * 64)
    archive = packed(elsewhere, tmp_path / "out", who="me")
    assert sweep.main(["more.yaml", "--merge", str(archive)]) == 2
    err = capsys.readouterr().err
    assert "paper-lr0.0001-s5: seed 5 ran on 'NVIDIA A100-SXM4-80GB', not a card the plan names" in err
    assert "paper-lr0.0001-s6: arm ets ran code that no commit of this repository's history holds" in err


def test_pack_leaves_out_a_cell_cut_short_and_committed_cells(setting, tmp_path, capsys):
    repo, elsewhere = setting
    def one_arm(results: dict) -> None:
        del results["arms"]["gmts"]
    ran(elsewhere, 5, repo, edit=one_arm)
    archive = packed(elsewhere, tmp_path / "out")
    assert "paper-lr0.0001-s5: not packed, it ran ets of ets, gmts" in capsys.readouterr().out
    assert archive.name == "more-s3-s4-me.tar.gz"
    # in the repository, committed cells are not this machine's: nothing to send
    assert sweep.main(["more.yaml", "--merge", str(archive)]) == 0
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "cells 3 and 4")
    assert sweep.main(["more.yaml", "--pack", str(tmp_path / "again")]) == 0
    assert "no cell of more in results/more to send" in capsys.readouterr().out


def test_an_archive_that_climbs_out_or_is_another_plans_is_refused(setting, tmp_path, capsys):
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        (tmp_path / "x").write_text("x")
        tar.add(tmp_path / "x", "more/../../x")
    assert sweep.main(["more.yaml", "--merge", str(bad)]) == 2
    assert "is not a file of plan more's cells" in capsys.readouterr().err


def timing_line(cell: str, start: float, seconds: float, job: int, arms=("ets", "gmts"), **extra) -> dict:
    return {"cell": cell, "arms": list(arms), "gpu": "0", "workers_on_gpu": 1, "start": start, "end": start + seconds,
            "exit_code": 0, "host": "vm", "warm": True, "job_in_process": job, **extra}


def test_pace_per_card_reads_first_seeds_from_the_process_start_and_steady_seeds_after(tmp_path):
    """Two warm processes on an H100: one read the base from its cache (5 s) and paid the model's conversion and
    compile in its first seed (389 s); the other evaluated the base there (204 s), then 260 s. Later seeds 239-260 s.
    A failed cell and a shared GPU's cell are left out; an H200 cell is another card's."""
    folder = tmp_path / "results" / "more"
    for seed, card in ((303, H100), (304, H100), (305, H100), (306, H100), (307, H100), (308, "NVIDIA H200")):
        (folder / f"coupled-lr0.0001-s{seed}").mkdir(parents=True)
        (folder / f"coupled-lr0.0001-s{seed}" / "results.json").write_text(json.dumps(
            {"arms": {"ets": {"provenance": {"gpu": card}}, "gmts": {"provenance": {"gpu": card}}}}))
    lines = [timing_line("coupled-lr0.0001-s303", 0, 5, 1, arms=["base"]),
             timing_line("coupled-lr0.0001-s303", 5, 389, 2),
             timing_line("coupled-lr0.0001-s304", 394, 250, 3),
             timing_line("coupled-lr0.0001-s305", 644, 100, 4, exit_code=1),
             timing_line("coupled-lr0.0001-s305", 1000, 204, 1, arms=["base"]),
             timing_line("coupled-lr0.0001-s305", 1204, 260, 2),
             timing_line("coupled-lr0.0001-s306", 1464, 239, 3),
             timing_line("coupled-lr0.0001-s307", 1703, 500, 4, workers_on_gpu=2),
             timing_line("coupled-lr0.0001-s308", 0, 190, 1)]
    (folder / "logs").mkdir()
    (folder / "logs" / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines) + "not json\n")
    paces = pace.card_paces([folder])
    h100 = paces[H100]
    assert h100.first == [(394, 2), (464, 2)] and h100.steady == [(250, 2), (239, 2)]
    assert h100.per_arm(2) == pytest.approx(122.25) and h100.seed_range(2) == (239, 250, 2)
    assert h100.startup(2) == pytest.approx((394 + 464) / 2 - 244.5)
    assert h100.seeds_in(1800, 2) == int((1800 - h100.startup(2)) // 244.5) == 6
    assert paces["NVIDIA H200"].first == [(190, 2)] and paces["NVIDIA H200"].per_arm(2) is None


CONTINUED_BY = ("Continued by confirm-extension, a sequential plan: this test's seeds are its first look, new seeds "
                "300-459 its later ones; where it stands: python check.py results/confirm-extension/sweep.json")


def test_a_finished_test_is_named_by_the_sequential_plan_that_continues_it(monkeypatch):
    """The line check.py prints for the confirmatory test (plan.continued_by; check.py on that sweep itself, which reads
    its 100 cells: the slow test below)."""
    from gmts_recipe.verify.plan import continued_by

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    assert continued_by(Path("results/confirm/sweep.json"), "confirm") == [CONTINUED_BY]
    assert continued_by(root / "results" / "qwen" / "sweep.json", "qwen") == []


@pytest.mark.slow
def test_check_on_a_finished_test_names_the_sequential_plan_that_continues_it(committed_sweeps_verified_once,
                                                                              monkeypatch, capsys):
    import check

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)
    assert check.main(["results/confirm/sweep.json"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert CONTINUED_BY in said
    from gmts_recipe.verify.plan import continued_by

    assert continued_by(root / "results" / "qwen" / "sweep.json", "qwen") == []


def test_plan_prints_each_cards_pace_and_what_a_machine_of_the_time_limit_runs(setting, capsys):
    """--plan on a sequential plan reads the pace of the test it continues too (the same cells): a first seed from the
    process's start, each seed after it, the time the claimed seeds take and the seeds a 30-minute machine runs."""
    repo, _ = setting
    first = repo / "results" / "first"
    for seed in (1, 2):
        (first / f"paper-lr0.0001-s{seed}").mkdir(parents=True)
        (first / f"paper-lr0.0001-s{seed}" / "results.json").write_text(json.dumps(
            {"arms": {"ets": {"provenance": {"gpu": H100}}, "gmts": {"provenance": {"gpu": H100}}}}))
    lines = [timing_line("paper-lr0.0001-s1", 0, 5, 1, arms=["base"]), timing_line("paper-lr0.0001-s1", 5, 389, 2),
             timing_line("paper-lr0.0001-s2", 394, 250, 3), timing_line("paper-lr0.0001-s1", 1000, 204, 1,
                                                                         arms=["base"]),
             timing_line("paper-lr0.0001-s1", 1204, 260, 2), timing_line("paper-lr0.0001-s2", 1464, 239, 3)]
    (first / "logs").mkdir()
    (first / "logs" / "timing.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines))
    claims.claim(load_grid(repo / "more.yaml"), repo / "results" / "more", 2, "me")
    assert sweep.main(["more.yaml", "--plan", "--who", "me", "--time_limit", "30"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[sweep] claims: running only the seeds claimed by me: 3-4"
    assert [line.split()[0] for line in out[1:5]] == ["paper-lr0.0001-s3"] * 2 + ["paper-lr0.0001-s4"] * 2
    assert (f"[sweep] at the pace of {H100} (2 process(es) timed): first seed 7.2 min from the start, then 4.1 min a "
            f"seed; the 2 seed(s) left take 0.2 GPU-hours in one worker; a 30-minute machine runs 6") in out


def test_the_contributors_page_says_what_the_code_does():
    """docs/contribute-seeds.md names the plan's cards by the exact names the check takes, the claims' span, options
    sweep.py has, and its pace table is generated; the README links it beside the continued test's next step."""
    from gmts_recipe.verify.plan import CARDS

    root = Path(__file__).resolve().parent.parent
    page = (root / "docs" / "contribute-seeds.md").read_text()
    flat = " ".join(page.split())
    plan = load_grid(root / "configs" / "sweeps" / "confirm-extension.yaml")
    assert all(f"**{name}**" in flat for name, kind in CARDS.items() if kind in plan.sequential["cards"])
    assert f"({claims.HOURS:g} hours;" in flat
    options = {o for a in sweep.parser()._actions for o in a.option_strings}
    used = set(re.findall(r"(?<![\w-])--[a-z_]+", " ".join(re.findall(r"python sweep\.py [^\n`]*", page))))
    assert used - {"--gsm8k_path"} <= options and {"--claim", "--who", "--pack", "--merge"} <= used
    assert "<!-- BEGIN generated: python -m gmts_recipe.sweep.pace configs/sweeps/confirm-extension.yaml" in page
    readme = (root / "README.md").read_text()
    after = readme.split("<!-- BEGIN generated: python update_readme.py --sequential", 1)[1].split(
        "<!-- END generated -->", 1)[1]
    assert "(docs/contribute-seeds.md)" in after.strip().splitlines()[0]
