"""sweep.py --ray: a grid's cells as Ray tasks on a local cluster with fake GPU resources, against the local pool.
The fast tests run tests/fake_recipe.py in place of recipe.py (the exact command otherwise); the slow one runs the
tiny model through recipe.py itself."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from gmts_recipe.verify.file import load
from gmts_recipe.sweep.grid import cell_command
from gmts_recipe.sweep.ray_tasks import ray_init_kwargs
from gmts_recipe.verify.sweep import verify
import sweep
from test_sweep import write_grid

# `pip install -e ".[test]"` has no Ray: the skip says which extra brings it, so a skipped module is not mistaken for
# a passed one (CI installs [test,ray])
RAY_MISSING = 'Ray is not installed: pip install -e ".[test,ray]" to run the sweep.py --ray tests'
ray = pytest.importorskip("ray", reason=RAY_MISSING)

GRID = """
name: demo
config: CONFIG
results_dir: RESULTS
blocks:
  - name: lr
    arms: [ets, gmts]
    learning_rates: [1.0e-4, 2.0e-4]
    seeds: [1]
  - name: seeds
    arms: [ets]
    learning_rates: [1.0e-4]
    seeds: [2]
"""
CELLS = ["paper-lr0.0001-s1", "paper-lr0.0002-s1", "paper-lr0.0001-s2"]


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: 4 CPUs and 2 GPUs that are only resources (no GPU here), the tree as
    its working_dir as `--ray` gives it."""
    ray.init(**{**ray_init_kwargs(None), "address": "local"}, num_cpus=4, num_gpus=2)
    yield
    ray.shutdown()


@pytest.fixture
def fake_recipe(monkeypatch):
    """Every cell command as sweep builds it, with tests/fake_recipe.py in place of recipe.py."""
    real = cell_command

    def command(grid, cell, arms, extra):
        out = real(grid, cell, arms, extra)
        return [out[0], "tests/fake_recipe.py", *out[2:]]

    monkeypatch.setattr("gmts_recipe.sweep.local.cell_command", command)
    monkeypatch.setattr("gmts_recipe.sweep.ray_tasks.cell_command", command)


def grid_in(folder: Path, config: str = "configs/smoke.yaml") -> Path:
    """GRID with its results in `folder` and a copy of `config` beside it (where fake_recipe looks for kill-<cell>)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(config, folder / "config.yaml")
    return write_grid(folder, GRID.replace("CONFIG", str(folder / "config.yaml")))


def cells(folder: Path) -> dict[str, dict]:
    return {name: json.loads((folder / "results" / "demo" / name / "results.json").read_text()) for name in CELLS}


def timing(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "results" / "demo" / "logs" / "timing.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_ray_gives_the_cells_the_local_pool_gives(tmp_path, cluster, fake_recipe, capsys):
    local, remote = grid_in(tmp_path / "local"), grid_in(tmp_path / "ray")
    assert sweep.main([str(local), "--runs_per_gpu", "2"]) == 0  # two workers on this machine's one device
    assert sweep.main([str(remote), "--ray", "--runs_per_gpu", "2"]) == 0
    out = capsys.readouterr().out
    assert "as Ray tasks on 4 CPU(s), 2 GPU(s), {'num_gpus': 0.5}" in out
    a, b = cells(tmp_path / "local"), cells(tmp_path / "ray")
    for name in CELLS:  # the same runs; the Ray cell says it came in through the merge, and with which base
        assert b[name]["config"] == a[name]["config"] and b[name]["arms"] == a[name]["arms"]
        assert b[name]["base"] == a[name]["base"] and "merges" not in a[name]
        assert b[name]["merges"] == [{"arms": list(a[name]["arms"]), "incoming_digest": b[name]["merges"][0][
            "incoming_digest"], "versions": None, "base": "shared cache"}]
    for folder in (tmp_path / "local", tmp_path / "ray"):
        summary = verify(folder / "results" / "demo" / "sweep.json")
        assert [c["cell"] for c in summary["cells"]] == CELLS
        assert not (folder / "results" / "demo" / ".incoming").exists()
    lines = timing(tmp_path / "ray")  # the base once, then one line per cell, on the fake GPUs, 2 per GPU
    assert [(t["cell"], t["arms"]) for t in lines][0] == ("paper-lr0.0001-s1", ["base"])
    assert sorted((t["cell"], tuple(t["arms"])) for t in lines[1:]) == sorted(
        [("paper-lr0.0001-s1", ("ets", "gmts")), ("paper-lr0.0002-s1", ("ets", "gmts")), ("paper-lr0.0001-s2", ("ets",))])
    assert all(t["gpu"] in ("0", "1") and t["workers_on_gpu"] == 2 and t["exit_code"] == 0 and t["end"] > t["start"]
               for t in lines)
    logs = tmp_path / "ray" / "results" / "demo" / "logs"
    assert "base evals computed" in (logs / "paper-lr0.0001-s1-base.log").read_text()
    assert "[fake recipe] paper-lr0.0002-s1: ets,gmts" in (logs / "paper-lr0.0002-s1-ets+gmts.log").read_text()
    capsys.readouterr()
    assert sweep.main([str(remote), "--ray"]) == 0  # done cells are skipped
    assert "nothing to run" in capsys.readouterr().out and len(timing(tmp_path / "ray")) == 4


def test_a_task_killed_midway_is_retried_and_leaves_no_half_cell(tmp_path, cluster, fake_recipe):
    grid = grid_in(tmp_path)
    (tmp_path / "kill-paper-lr0.0002-s1").write_text("")  # its first attempt kills its Ray worker
    assert sweep.main([str(grid), "--ray", "--retries", "1"]) == 0
    killed = Path((tmp_path / "killed-paper-lr0.0002-s1").read_text())  # that attempt's half-written cell ...
    assert (killed / "paper-lr0.0002-s1" / "results.json").read_text() == '{"config": {'
    shutil.rmtree(killed.parent)  # ... stayed in its temporary folder on the worker
    summary = verify(tmp_path / "results" / "demo" / "sweep.json")
    assert [c["cell"] for c in summary["cells"]] == CELLS and list(cells(tmp_path)["paper-lr0.0002-s1"]["arms"]) == [
        "ets", "gmts"]
    assert [t["cell"] for t in timing(tmp_path)].count("paper-lr0.0002-s1") == 1  # the lost attempt never reported


def test_failed_lost_and_refused_cells_are_reported_and_never_written(tmp_path, cluster, fake_recipe, capsys):
    """Without retries: a cell whose recipe.py exits 5, one whose worker is lost, one whose file records another
    seed (refused by --merge's checks, its files kept aside). Only what passed enters the grid."""
    grid = grid_in(tmp_path)
    for trigger in ("fail-paper-lr0.0001-s1", "kill-paper-lr0.0002-s1", "forge-paper-lr0.0001-s2"):
        (tmp_path / trigger).write_text("")
    assert sweep.main([str(grid), "--ray", "--retries", "0"]) == 1
    failed = dict(line.split(": ", 1) for line in capsys.readouterr().err.split("[sweep] failed: ")[1].split("; "))
    assert failed["paper-lr0.0001-s1 ets,gmts"].startswith("recipe.py exited with code 5 on ")
    assert "paper-lr0.0002-s1 ets,gmts" in failed  # the lost worker, in Ray's words
    assert failed["paper-lr0.0001-s2 ets"].startswith("refused: --merge: paper-lr0.0001-s2: results.json records "
                                                      "training seed 102, the cell's is 2 (its files: ")
    root = tmp_path / "results" / "demo"
    assert not any((root / name).exists() for name in CELLS)
    kept = list((root / ".incoming").iterdir())
    assert len(kept) == 1 and (kept[0] / "paper-lr0.0001-s2" / "results.json").is_file()
    assert "failing as told" in (root / "logs" / "paper-lr0.0001-s1-ets+gmts.log").read_text()
    assert sorted((t["cell"], ",".join(t["arms"]), t["exit_code"]) for t in timing(tmp_path)) == [
        ("paper-lr0.0001-s1", "base", 0), ("paper-lr0.0001-s1", "ets,gmts", 5), ("paper-lr0.0001-s2", "ets", 0)]
    shutil.rmtree(Path((tmp_path / "killed-paper-lr0.0002-s1").read_text()).parent)
    assert verify(root / "sweep.json")["cells"] == []


@pytest.mark.slow
def test_the_tiny_model_through_ray_and_the_local_pool(tmp_path, cluster):
    """recipe.py itself (tiny model, CPU): the same recorded configs, and check.py accepts both sweeps."""
    import check
    from tiny import write_tiny_config

    tiny_config = write_tiny_config(tmp_path / "tiny")

    local, remote = grid_in(tmp_path / "local", tiny_config), grid_in(tmp_path / "ray", tiny_config)
    for grid in (local, remote):
        grid.write_text(grid.read_text().replace("arms: [ets, gmts]", "arms: [ets]").replace(
            "learning_rates: [1.0e-4, 2.0e-4]", "learning_rates: [1.0e-4]"))
    assert sweep.main([str(local)]) == 0
    assert sweep.main([str(remote), "--ray"]) == 0
    names = ["paper-lr0.0001-s1", "paper-lr0.0001-s2"]
    a, b = ({n: load(f / "results" / "demo" / n / "results.json") for n in names}
            for f in (tmp_path / "local", tmp_path / "ray"))
    for n in names:
        assert a[n]["config"] == b[n]["config"] and a[n]["config_hash"] == b[n]["config_hash"]
        assert a[n]["base"]["eval_hash"] == b[n]["base"]["eval_hash"] and b[n]["merges"][0]["base"] == "shared cache"
        assert list(a[n]["arms"]) == list(b[n]["arms"]) == ["ets"]
    for folder in (tmp_path / "local", tmp_path / "ray"):
        assert check.main([str(folder / "results" / "demo" / "sweep.json"), "--allow-unsampled"]) == 0
