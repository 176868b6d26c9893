"""A sequential plan's seeds run in the plan's order whatever the number of GPUs, and a machine taken back mid-cell
leaves no gap: the cells a run had started but not finished run again whole, first, at the next run (and are not
merged in part), so every look reads the plan's first seeds."""

import random
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gmts_recipe.sequential import cards
from gmts_recipe.sweep import local
from gmts_recipe.sweep.grid import cell_command, jobs, load_grid
from gmts_recipe.sweep.local import run
from gmts_recipe.sweep.merge import merge
from test_sweep import CONTINUED, EXTENSION, tree_cell

SEEDS = list(range(5, 41))
PLAN = EXTENSION.replace("seeds: [5, 6, 7, 8]", f"seeds: {SEEDS}").replace("looks: [6, 8]", "looks: [20, 40]")


def plan(tmp_path: Path, results: str = "results") -> Path:
    continued = tmp_path / "continued.yaml"
    continued.write_text(CONTINUED.replace("RESULTS", str(tmp_path / results)))
    path = tmp_path / f"{results}.yaml"
    path.write_text(PLAN.replace("RESULTS", str(tmp_path / results)).replace("CONTINUED", str(continued)))
    return path


def name(seed: int) -> str:
    return f"paper-lr0.0001-s{seed}"


def write_cell(root: Path, seed: int, arms: list[str]) -> None:
    shutil.rmtree(root / name(seed), ignore_errors=True)  # --overwrite: the cell is written anew
    tree_cell(root, name(seed), {arm: 0.5 for arm in arms}, seed=seed)


def state(root: Path) -> tuple[list[int], list[int]]:
    """(seeds whose cell holds both arms, seeds whose cell holds only ETS), each sorted."""
    import json

    whole, cut = [], []
    for seed in SEEDS:
        path = root / name(seed) / "results.json"
        if path.is_file():
            arms = set(json.loads(path.read_text())["arms"])
            (whole if arms == {"ets", "gmts"} else cut).append(seed)
    return whole, cut


def run_until_cut(grid, monkeypatch, gpus: int, cut_at: int | None, rng: random.Random) -> list[str]:
    """One sweep run on `gpus` workers whose cells take random times; when the `cut_at`-th cell starts, the machine
    is taken back: that cell and every cell still running write their first arm only (ETS ended, GMTS cut) and exit
    as killed, and nothing starts after. Returns the commands' resume flags."""
    root = Path(grid.results_dir) / grid.name
    lock, started, flags = threading.Lock(), [0], []
    cut = threading.Event()

    def fake_call(command, stdout, stderr, env):
        arms = command[command.index("--arm") + 1].split(",")
        if arms == ["base"]:
            return 0
        seed = int(command[command.index("--seed") + 1])
        with lock:
            if cut.is_set():
                return -9  # the machine is gone: this cell never started
            started[0] += 1
            flags.append(command[command.index("--results_dir") + 2])
            if started[0] == cut_at:
                cut.set()
        time.sleep(rng.uniform(0.0, 0.02))
        if cut.is_set():  # running when the machine was taken back
            write_cell(root, seed, arms[:1])
            return -9
        write_cell(root, seed, arms)
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    # the machine taken back takes the sweep's own process with it: no runner is left to record a fault
    monkeypatch.setattr(local, "record_exit", lambda *args: None)
    monkeypatch.setattr(cards, "card_name", lambda gpu: "NVIDIA H100 80GB HBM3")
    run(grid, [str(g) for g in range(gpus)], [])
    return flags


@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_runs_cut_at_any_point_on_any_number_of_gpus_fill_the_plan_in_order(tmp_path, monkeypatch, gpus):
    grid = load_grid(plan(tmp_path))
    root = tmp_path / "results" / "more"
    rng = random.Random(gpus)
    for cut_at in (7, 5, 9, None):
        before_whole, before_cut = state(root)
        todo = [cell.seed for cell, _ in jobs(grid)][::2]  # each seed's two jobs
        gaps = [s for s in SEEDS[:SEEDS.index(max(before_whole, default=SEEDS[0])) + 1] if s not in before_whole]
        assert todo[:len(gaps)] == gaps  # what an earlier cut left runs first, whole
        flags = run_until_cut(grid, monkeypatch, gpus, cut_at, rng)
        assert set(flags) == {"--overwrite"}
        whole, partial = state(root)
        last = SEEDS.index(max(whole + partial))
        # behind the last seed touched, what is not whole is a cell the cut caught (running, or taken from the queue
        # but not yet started): at most one per worker; the next run starts with them (checked above)
        gaps = [s for s in SEEDS[:last + 1] if s not in whole]
        assert set(partial) <= set(gaps) and len(gaps) <= gpus
    assert state(root) == (SEEDS, [])


def test_a_cut_cell_runs_again_whole_and_first(tmp_path):
    grid = load_grid(plan(tmp_path))
    root = tmp_path / "results" / "more"
    write_cell(root, 5, ["ets", "gmts"])
    write_cell(root, 6, ["ets"])  # cut after ETS
    write_cell(root, 7, ["ets", "gmts"])
    todo = jobs(grid)
    assert [(c.seed, a) for c, a in todo[:4]] == [(6, "ets"), (6, "gmts"), (8, "ets"), (8, "gmts")]
    command = cell_command(grid, todo[0][0], ("ets", "gmts"), [])
    assert "--overwrite" in command and "--resume" not in command


def test_a_plan_without_a_sequential_test_keeps_resuming_a_cut_cell(tmp_path):
    path = plan(tmp_path)
    path.write_text(path.read_text().split("sequential:")[0])
    grid = load_grid(path)
    root = tmp_path / "results" / "more"
    write_cell(root, 5, ["ets"])
    todo = jobs(grid)
    assert [(c.seed, a) for c, a in todo[:2]] == [(5, "gmts"), (6, "ets")]
    assert "--resume" in cell_command(grid, todo[0][0], ("gmts",), [])


def test_a_cell_that_ran_in_part_elsewhere_is_not_merged(tmp_path, capsys):
    grid = load_grid(plan(tmp_path))
    incoming = tmp_path / "there" / "more"
    write_cell(incoming, 5, ["ets", "gmts"])
    write_cell(incoming, 6, ["ets"])
    lines = merge(grid, incoming)
    assert any(line.startswith(f"{name(6)}: ran in part (ets of ets, gmts): a seed of this plan runs whole")
               for line in lines), lines
    assert state(tmp_path / "results" / "more") == ([5], [])


def test_a_time_limit_starts_a_sequential_plans_cell_whole_or_not_at_all(tmp_path, monkeypatch):
    """A fake clock: the base 10 s, every arm 60 s, 3.2 minutes: the first cell (no pace yet) starts whole; the
    second would fit one arm only, so it is left whole for the next run, as every later cell."""
    now, calls = [1000.0], []

    def fake_call(command, stdout, stderr, env):
        arms = command[command.index("--arm") + 1]
        calls.append((command[command.index("--experiment") + 1], arms))
        now[0] += 10.0 if arms == "base" else 60.0 * len(arms.split(","))
        return 0

    monkeypatch.setattr(subprocess, "call", fake_call)
    monkeypatch.setattr(time, "time", lambda: now[0])
    left: list[str] = []
    run(load_grid(plan(tmp_path)), [], [], time_limit=3.2, left=left)
    assert calls == [(name(5), "base"), (name(5), "ets,gmts")]
    assert left[:2] == [f"{name(6)} ets", f"{name(6)} gmts"]
