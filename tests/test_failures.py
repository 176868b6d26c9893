"""A sequential plan's failures as its `failures:` keys fix them, recorded by the runner and never by hand: what raised
decides the kind; an arm's own failure is an outcome, never run again, scored as the base model only where the arm
holds no results, and the other arm of its seed still runs; a machine fault runs the cell again once, whole, then
counts as the arm's own; check.py refuses a record the committed log does not bear out."""

import contextlib
import inspect
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import recipe
import sweep
from gmts_recipe.records import task_scores
from gmts_recipe.sequential import cards, failures
from gmts_recipe.sweep import local
from gmts_recipe.sweep.grid import SweepError, cell_command, jobs, load_grid
from gmts_recipe.sweep.report import render, write_summary
from gmts_recipe.sequential.looks import continued_test, sequential_test
from gmts_recipe.sweep.summary import continued_summary, summarize
from gmts_recipe.verify.sweep import verify
from test_sweep import fake_cell, sequential_trees
from tiny import write_tiny_config

H100 = "NVIDIA H100 80GB HBM3"
SCORES = {"ets": 0.5, "gmts": 0.9}  # a seed GMTS wins by about 40 points


def name(seed: int) -> str:
    return f"paper-lr0.0001-s{seed}"


def write_arms(root: Path, seed: int, arms: list[str]) -> None:
    """The cell's results.json with these arms, as recipe.py leaves it after them (test_sweep's fake cell)."""
    scratch = root.parent / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    fake_cell(scratch, name(seed), {a: SCORES[a] for a in arms}, seed=seed)
    (root / name(seed)).mkdir(parents=True, exist_ok=True)
    shutil.copy(scratch / name(seed) / "results.json", root / name(seed) / "results.json")


def stand_in(fails: str | None = None, killed_in: str | None = None, error: BaseException | None = None):
    """A recipe.py process as the runner sees it: each arm starts (its console line), then raises (`fails`: reported
    by recipe.py's own code, the next arm runs), is killed (`killed_in`: the process ends by SIGKILL) or finishes."""
    def process(root: Path, seed: int, arms: list[str]) -> int:
        done = []
        for arm in arms:
            print(f"[recipe] training {arm} ({arms.index(arm) + 1} of {len(arms)}): 10 steps")
            if arm == killed_in:
                return -9
            if arm == fails:
                try:
                    raise error or FloatingPointError("the loss is not finite")
                except BaseException as e:  # noqa: BLE001 - as recipe.py's loop
                    if failures.report(arm, e) == "machine":
                        return 1
                continue
            done.append(arm)
            write_arms(root, seed, done)
        return 2 if fails in arms else 0
    return process


def sweep_once(grid, monkeypatch, cells: dict) -> list[list[str]]:
    """One run of sweep.py's local pool whose cell processes are stand-ins (`cells`: seed -> stand_in; any other seed
    finishes every arm), on an H100 by its recorded name; the arms each cell process was started with."""
    root = Path(grid.results_dir) / grid.name
    started, raised = [], []

    def fake_call(command, stdout, stderr, env):
        arms = command[command.index("--arm") + 1].split(",")
        if arms == ["base"]:
            return 0
        seed = int(command[command.index("--seed") + 1])
        started.append([seed, *arms])
        try:
            with contextlib.redirect_stdout(stdout):
                return cells.get(seed, stand_in())(root, seed, arms)
        except Exception as e:  # noqa: BLE001 - a worker thread's: raised below, not lost
            raised.append(e)
            return 1

    monkeypatch.setattr(subprocess, "call", fake_call)
    monkeypatch.setattr(cards, "card_name", lambda gpu: H100)
    local.run(grid, [], [])
    if raised:
        raise raised[0]
    return started


@pytest.fixture
def plan(tmp_path):
    path = sequential_trees(tmp_path)
    return path, load_grid(path), tmp_path / "results" / "more"


def test_what_raised_decides_the_kind():
    machine = [torch.OutOfMemoryError("CUDA out of memory"),
               torch.AcceleratorError("CUDA error: uncorrectable ECC error encountered"),
               torch.cuda.CudaError.__new__(torch.cuda.CudaError),  # its __init__ asks the CUDA runtime for the text
               torch.distributed.DistBackendError("NCCL error: unhandled system error"),
               torch.distributed.DistStoreError("timed out"),
               torch._dynamo.exc.FailOnRecompileLimitHit("recompile limit")]
    for error in machine:
        assert failures.kind_of(error) == "machine", error
    try:
        try:
            raise torch.OutOfMemoryError("CUDA out of memory")
        except torch.OutOfMemoryError as oom:
            raise ValueError("generation failed") from oom
    except ValueError as wrapped:
        assert failures.kind_of(wrapped) == "machine"  # what it was raised from
    arm = [FloatingPointError("the loss is not finite"), ValueError("refused: the records disagree"),
           RuntimeError("CUDA error: an illegal memory access"),  # by class, never by its text
           MemoryError(), KeyError("reward"), recipe.ResultsError("a training log above the learning rate")]
    for error in arm:
        assert failures.kind_of(error) == "arm", error


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


def test_recipe_reports_an_arms_own_failure_and_trains_the_next_arm(tiny_config, tmp_path, monkeypatch, capsys):
    """ETS raises: GMTS still trains and is recorded, the run exits 2 in one line, and the log holds the report the
    runner reads; a machine fault ends the run at once (the card is suspect), reported as such."""
    train = recipe.Run.train_arm

    def failing(error):
        def train_arm(self, arm, *args):
            if arm == "ets":
                raise error
            return train(self, arm, *args)
        return train_arm

    argv = ["--arm", "ets,gmts", "--config", str(tiny_config), "--results_dir", str(tmp_path)]
    monkeypatch.setattr(recipe.Run, "train_arm", failing(FloatingPointError("the loss is not finite")))
    assert recipe.main(argv) == 2
    out, err = capsys.readouterr()
    assert set(json.loads((tmp_path / "tiny" / "results.json").read_text())["arms"]) == {"gmts"}
    assert "FloatingPointError: the loss is not finite\n" in err  # its traceback, then the run's one line
    assert err.endswith("\nrecipe.py: arm(s) ets failed on their own (tracebacks above); the other arms ran\n")
    shown = failures.attempts_in(f"\n=== 2026-12-08 python recipe.py --arm ets,gmts\n{out}\n=== exit 2\n")
    assert [(a["arm"], a["kind"], a["error"][-1]) for a in shown] == [
        ("ets", "arm", "FloatingPointError: the loss is not finite")]
    monkeypatch.setattr(recipe.Run, "train_arm", failing(torch.OutOfMemoryError("CUDA out of memory")))
    with pytest.raises(torch.OutOfMemoryError):
        recipe.main([*argv, "--experiment", "again"])
    out = capsys.readouterr().out
    assert [(a["arm"], a["kind"]) for a in failures.attempts_in(out)] == [("ets", "machine")]
    assert "gmts" not in json.loads((tmp_path / "again" / "results.json").read_text())["arms"]  # never started


def test_an_arms_own_failure_is_recorded_by_the_runner_scored_as_the_base_and_never_run_again(plan, monkeypatch):
    path, grid, root = plan
    started = sweep_once(grid, monkeypatch, {5: stand_in(fails="ets")})
    assert started == [[5, "ets", "gmts"], [6, "ets", "gmts"], [7, "ets", "gmts"], [8, "ets", "gmts"]]
    rec = json.loads((root / name(5) / "failure.json").read_text())
    [attempt] = rec["attempts"]
    assert rec["seed"] == 5 and (attempt["arm"], attempt["kind"], attempt["card"]) == ("ets", "arm", H100)
    assert attempt["error"][-1] == "FloatingPointError: the loss is not finite"
    assert attempt["log"] == f"logs/{name(5)}-ets+gmts.log"
    assert jobs(grid) == []  # never run again: the seed is done
    assert sweep_once(grid, monkeypatch, {}) == []
    q = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert q["seeds_done"] == [5, 6, 7, 8] and q["scored_as_base"] == {"5": "ets"} and q["retrying"] == []
    results = json.loads((root / name(5) / "results.json").read_text())
    base = task_scores(results["base"]["evals"][0], "base")
    gmts = task_scores(results["arms"]["gmts"]["eval"], "gmts")
    assert q["per_seed"][4] == pytest.approx(sum(gmts[k] - base[k] for k in base) / len(base))
    flat = " ".join(render(summarize(grid, continued=continued_summary(grid))).split())
    assert "scored as the base model (the plan's failures): seed 5 ets" in flat
    assert verify(write_summary(grid, path))["sequential"]["scored_as_base"] == {"5": "ets"}


def test_a_machine_fault_runs_the_cell_again_once_whole_then_counts_as_the_arms_own(plan, monkeypatch):
    path, grid, root = plan
    sweep_once(grid, monkeypatch, {5: stand_in(killed_in="gmts")})  # ETS finished, then the card was lost
    [attempt] = json.loads((root / name(5) / "failure.json").read_text())["attempts"]
    assert (attempt["arm"], attempt["kind"], attempt["error"]) == ("gmts", "machine", ["the process ended by signal 9"])
    todo = jobs(grid)
    assert [(c.seed, a) for c, a in todo] == [(5, "ets"), (5, "gmts")]  # whole, on any card
    assert "--overwrite" in cell_command(grid, todo[0][0], ("ets", "gmts"), [])
    q = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert q["retrying"] == [5] and q["seeds_done"] == [] and q["seeds_waiting"] == [6, 7, 8]
    assert "waiting for their retry: seed 5" in render(summarize(grid, continued=continued_summary(grid)))
    assert sweep_once(grid, monkeypatch, {5: stand_in(killed_in="gmts")}) == [[5, "ets", "gmts"]]  # it recurred
    assert jobs(grid) == []
    q = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert q["retrying"] == [] and q["seeds_done"] == [5, 6, 7, 8] and q["scored_as_base"] == {"5": "gmts"}
    flat = " ".join(render(summarize(grid, continued=continued_summary(grid))).split())
    assert "scored as the base model (the plan's failures): seed 5 gmts" in flat
    # the sensitivity comparison at the look at 8 seeds: the scored-as-base arm a collapse, its attempts by card
    assert "Sensitivity comparison at 8 seeds" in flat and "new by card CPU 4" in flat
    assert "Failed attempts of the new seeds (failure.json), by card: H100 ETS 0, GMTS 2." in flat
    verify(write_summary(grid, path))


def test_a_fault_retried_well_counts_the_retrys_arms_and_an_arm_failing_then_waits_for_no_one(plan, monkeypatch):
    """The retry finishes both arms: the seed counts as any other. An arm's own failure beside a machine fault of the
    other arm: only the other runs again."""
    path, grid, root = plan
    sweep_once(grid, monkeypatch, {5: stand_in(killed_in="ets"), 6: stand_in(fails="ets", killed_in="gmts")})
    assert [(c.seed, a) for c, a in jobs(grid)] == [(5, "ets"), (5, "gmts"), (6, "gmts")]
    assert sweep_once(grid, monkeypatch, {}) == [[5, "ets", "gmts"], [6, "gmts"]]
    q = summarize(grid, continued=continued_summary(grid))["sequential"]
    assert q["seeds_done"] == [5, 6, 7, 8] and q["scored_as_base"] == {"6": "ets"}
    verify(write_summary(grid, path))


def test_an_arm_with_results_is_never_scored_as_the_base_and_check_refuses_the_cell(plan, monkeypatch):
    """A cell run again by hand after an arm's own failure, both arms now finished: its real +40-point delta is never
    replaced by the base's, and the cell is refused (an arm's own failure is never run again)."""
    path, grid, root = plan
    sweep_once(grid, monkeypatch, {5: stand_in(fails="ets")})
    rec = failures.read(root / name(5))
    write_arms(root, 5, ["ets", "gmts"])
    with pytest.raises(SweepError, match=r"s5/failure.json: attempt 1 \(ets, arm\): the cell holds ets's results"):
        summarize(grid, continued=continued_summary(grid))
    scores = {("paper", 1e-4, 5, arm): task_scores(json.loads((root / name(5) / "results.json").read_text())["arms"]
                                                   [arm]["eval"], arm) for arm in ("ets", "gmts")}
    base = {k: 0.0 for k in next(iter(scores.values()))}
    q = sequential_test(grid.sequential, scores, {}, continued_test(continued_summary(grid), grid), {5: rec}, base)
    assert q["scored_as_base"] == {} and q["seeds_done"] == [5]
    gmts, ets = scores[("paper", 1e-4, 5, "gmts")], scores[("paper", 1e-4, 5, "ets")]
    assert q["per_seed"][4] == pytest.approx(sum(gmts[k] - ets[k] for k in gmts) / len(gmts)) and q["per_seed"][4] > 0.3


@pytest.mark.parametrize("edit, match", [
    (lambda a: a.update(kind="arm"), r"\(gmts, arm\): its log's part shows gmts machine"),  # a kind chosen by hand
    (lambda a: a.update(card="NVIDIA A100-SXM4-80GB"), "card 'NVIDIA A100-SXM4-80GB' is not one the plan names"),
    (lambda a: a.update(arm="grpo"), r"not an arm of the plan's comparison \(gmts, ets\)"),
    (lambda a: a.update(log_sha256="0" * 64), "holds no logs/.* that begins with the bytes the runner read"),
    (lambda a: a.update(log="elsewhere.log"), "holds no elsewhere.log"),
    (lambda a: a.update(error=["ValueError: something else"]), "its log's part shows gmts machine"),
    (lambda a: a.pop("log_sha256"), "a failure record holds seed .* and attempts, each with arm, kind, card, error"),
])
def test_check_refuses_a_failure_record_the_runner_did_not_write(plan, monkeypatch, edit, match):
    path, grid, root = plan
    sweep_once(grid, monkeypatch, {5: stand_in(killed_in="gmts")})
    sweep_once(grid, monkeypatch, {5: stand_in(killed_in="gmts")})
    written = write_summary(grid, path)
    file = root / name(5) / "failure.json"
    rec = json.loads(file.read_text())
    edit(rec["attempts"][-1])
    file.write_text(json.dumps(rec))
    with pytest.raises(SweepError, match=match):
        verify(written)
    with pytest.raises(SweepError, match=match):  # nor does the runner act on it
        jobs(grid)
    assert "kind" not in inspect.signature(failures.record_exit).parameters  # nobody passes a kind to the writer
    assert not hasattr(failures, "main")  # nor chooses one on a command line


def test_check_refuses_another_seeds_record_and_a_log_that_grew_other_than_by_appending(plan, monkeypatch):
    path, grid, root = plan
    sweep_once(grid, monkeypatch, {5: stand_in(fails="ets")})
    written = write_summary(grid, path)
    (root / name(7) / "failure.json").write_bytes((root / name(5) / "failure.json").read_bytes())
    with pytest.raises(SweepError, match="s7/failure.json: records seed 5, in the folder of seed 7"):
        verify(written)
    (root / name(7) / "failure.json").unlink()
    log = root / "logs" / f"{name(5)}-ets+gmts.log"
    log.write_text(log.read_text() + "\n=== a later process\n")  # logs grow: the record still holds
    verify(written)
    log.write_text(log.read_text().replace("the loss is not finite", "the loss is not finit"))
    with pytest.raises(SweepError, match="begins with the bytes the runner read"):
        verify(written)


def test_a_sequential_plan_runs_only_where_its_runner_records_failures(plan, capsys):
    """Ray retries a failed task (an arm's own failure included) and its node's failures reach no failure.json."""
    path, grid, root = plan
    assert sweep.main([str(path), "--ray"]) == 2
    assert capsys.readouterr().err.startswith("sweep.py: --ray: a sequential plan's cells run in the local pool")


def test_deltas_with_no_spread_stop_the_look_in_one_line(plan):
    """Every seed's delta the same (a tiny model scoring 0 everywhere): no t statistic, so the look is refused as a
    SweepError line (sweep.py and check.py print it), never a ValueError traceback."""
    _, grid, _ = plan
    continued = {"seeds": [1, 2, 3, 4], "per_seed": [0.0] * 4}
    with pytest.raises(SweepError, match=r"cannot read its look: the 4 per-seed deltas have no spread \(each \+0\.00"):
        sequential_test(grid.sequential, {}, {}, continued)
