"""The warm worker (gmts_recipe.worker): jobs run one after another in one process, each job's output in its own log
(file descriptors included), each exit code answered; a failed or dead process is replaced for the next job. And
sweep.py --warm_workers gives the cells the fresh-process pool gives."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import sweep
from gmts_recipe.sweep.grid import cell_command
from gmts_recipe.sweep.schedule import TIMING, seconds_per_arm
from test_sweep import GRID, write_grid

from gmts_recipe.worker import WarmWorker

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import os, sys
import tally  # a module: what a process keeps between its jobs
tally.jobs += 1
print(f"job {tally.jobs} of pid {os.getpid()}: {sys.argv[1:]}", flush=True)  # first in the log, buffered or not
print("to stderr", file=sys.stderr)
os.write(1, b"straight to file descriptor 1\\n")
mode = sys.argv[1]
if mode == "fail":
    sys.exit(3)
if mode == "raise":
    raise ValueError("boom")
if mode == "die":
    os._exit(9)
if mode == "read":  # a job that waits for input gets none (its stdin is not the control channel)
    input()
if mode == "wide":  # a fresh process's status is the code modulo 256
    sys.exit(256 + 4)
if mode == "interrupt":
    raise KeyboardInterrupt
if mode == "thread":
    import threading, time
    threading.Thread(target=time.sleep, args=(0.5,), name="late-writer").start()
"""


@pytest.fixture
def worker(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    (tmp_path / "tally.py").write_text("jobs = 0\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    w = WarmWorker(env, cwd=tmp_path)
    yield w
    w.close()


def _job(line: str) -> tuple[int, int]:
    """(job number in its process, pid) from the script's first line."""
    words = line.split()
    return int(words[1]), int(words[4].rstrip(":"))


def test_jobs_share_one_process_and_each_log_gets_its_own_output(worker, tmp_path):
    logs = [tmp_path / f"{i}.log" for i in range(3)]
    logs[0].write_text("=== header\n")
    assert [worker.run(["job.py", "ok", str(i)], log) for i, log in enumerate(logs)] == [0, 0, 0]
    texts = [log.read_text() for log in logs]
    assert texts[0].startswith("=== header\njob 1 of pid ")  # appended after what the sweep wrote
    jobs = [_job(next(x for x in t.splitlines() if x.startswith("job "))) for t in texts]
    assert [n for n, _ in jobs] == [1, 2, 3] and len({pid for _, pid in jobs}) == 1 and worker.started == 1
    assert worker.jobs == 3
    for i, text in enumerate(texts):  # Python's streams and the raw descriptor, each job's own
        assert f"['ok', '{i}']" in text and "to stderr" in text and "straight to file descriptor 1" in text
        assert text.count("job ") == 1


@pytest.mark.parametrize("mode,code,in_log", [("fail", 3, None), ("raise", 1, "ValueError: boom"), ("die", 9, None),
                                              ("read", 1, "EOFError"), ("wide", 4, None), ("interrupt", 130, None)])
def test_a_failed_job_ends_its_process_and_the_next_job_gets_a_fresh_one(worker, tmp_path, mode, code, in_log):
    assert worker.run(["job.py", "ok"], tmp_path / "a.log") == 0
    assert worker.run(["job.py", mode], tmp_path / "b.log") == code
    assert worker.run(["job.py", "ok"], tmp_path / "c.log") == 0
    first, failed, after = (_job((tmp_path / f"{x}.log").read_text().splitlines()[0]) for x in "abc")
    assert failed == (2, first[1]) and after[0] == 1 and after[1] != first[1] and worker.started == 2
    assert worker.jobs == 1  # the job in the fresh process paid its start
    if in_log:
        assert in_log in (tmp_path / "b.log").read_text()


def test_a_thread_a_job_leaves_running_is_named_in_its_log(worker, tmp_path):
    assert worker.run(["job.py", "thread"], tmp_path / "a.log") == 0
    assert "[gmts-worker] threads this job started still run: late-writer" in (tmp_path / "a.log").read_text()
    assert worker.run(["job.py", "ok"], tmp_path / "b.log") == 0 and worker.started == 1


def test_between_jobs_the_last_cells_decode_buffers_are_dropped():
    """A fresh process holds no static cache; a warm one must not carry the last cell's (gigabytes at 880 rows)."""
    from gmts_recipe.generation import decode_loop
    from gmts_recipe.worker import between_jobs

    decode_loop._BUFFERS.append(("model", "key", "cache", "state"))
    between_jobs()
    assert decode_loop._BUFFERS == []


def test_a_missing_script_is_a_failed_job_with_its_error_in_the_log(worker, tmp_path):
    assert worker.run(["nowhere.py"], tmp_path / "a.log") == 1
    assert "nowhere.py" in (tmp_path / "a.log").read_text()


@pytest.fixture
def fake_recipe(monkeypatch):
    """Every cell command as sweep builds it, with tests/fake_recipe.py in place of recipe.py."""
    real = cell_command
    monkeypatch.setattr("gmts_recipe.sweep.local.cell_command",
                        lambda *a: [real(*a)[0], "tests/fake_recipe.py", *real(*a)[2:]])


def _grid(folder: Path) -> Path:
    folder.mkdir(parents=True)
    shutil.copy("configs/smoke.yaml", folder / "config.yaml")
    return write_grid(folder, GRID.replace("configs/smoke.yaml", str(folder / "config.yaml")))


def test_warm_workers_give_the_cells_fresh_processes_give(tmp_path, fake_recipe, capsys):
    fresh, warm = _grid(tmp_path / "fresh"), _grid(tmp_path / "warm")
    (tmp_path / "warm" / "fail-paper-lr0.0002-s1").write_text("")  # one cell fails: its worker's process is replaced
    (tmp_path / "fresh" / "fail-paper-lr0.0002-s1").write_text("")
    assert sweep.main([str(fresh)]) == 1
    assert sweep.main([str(warm), "--warm_workers"]) == 1
    assert "worker(s) (warm: one process each)" in capsys.readouterr().out
    demo = {d: tmp_path / d / "results" / "demo" for d in ("fresh", "warm")}
    names = sorted(p.parent.name for p in demo["fresh"].glob("*/results.json"))
    assert names == sorted(p.parent.name for p in demo["warm"].glob("*/results.json")) and len(names) >= 2
    for name in names:
        a, b = (json.loads((demo[d] / name / "results.json").read_text()) for d in ("fresh", "warm"))
        assert a == b
    timing = [json.loads(x) for x in (demo["warm"] / "logs" / TIMING).read_text().splitlines()]
    assert all(t["warm"] for t in timing) and {t["exit_code"] for t in timing} == {0, 5}
    # one worker: its jobs counted in its process, from 1 again after the failed cell's process was replaced
    assert [(t["job_in_process"], t["exit_code"]) for t in timing] == [(1, 0), (2, 0), (3, 5), (1, 0), (2, 0)]
    assert "warm" not in json.loads((demo["fresh"] / "logs" / TIMING).read_text().splitlines()[0])
    log = (demo["warm"] / "logs" / "paper-lr0.0002-s1-ets+gmts.log").read_text()
    assert "in warm worker 0's process" in log and "failing as told" in log


def test_the_time_left_takes_each_warm_process_s_first_training_cell_apart(tmp_path, fake_recipe, monkeypatch):
    """The cell after a process starts (the worker's first, and the first after a failed cell replaced it) pays the
    model's load and compilation; the estimate takes its pace from the others (seconds_per_arm)."""
    calls, real = [], seconds_per_arm
    monkeypatch.setattr("gmts_recipe.sweep.local.seconds_per_arm",
                        lambda took, warm_up=(), recorded=None: calls.append((len(took), len(warm_up)))
                        or real(took, warm_up, recorded))
    warm, fresh = _grid(tmp_path / "warm"), _grid(tmp_path / "fresh")
    for grid in (warm, fresh):
        (grid.parent / "fail-paper-lr0.0002-s1").write_text("")
    assert sweep.main([str(warm), "--warm_workers"]) == 1
    # jobs: base (process 1), cell (its first training cell), the failing cell; then a fresh process: two cells
    assert calls == [(0, 1), (1, 1), (1, 2), (2, 2)]
    calls.clear()
    assert sweep.main([str(fresh)]) == 1  # fresh processes: every cell pays its start
    assert calls == [(1, 0), (2, 0), (3, 0), (4, 0)]


def test_warm_workers_with_ray_is_one_line(tmp_path, capsys):
    assert sweep.main([str(_grid(tmp_path / "g")), "--warm_workers", "--ray"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--warm_workers is for the local pool" in err


def test_warm_workers_refuse_a_grid_whose_cells_differ_in_deterministic_kernels(tmp_path, capsys):
    """One process can turn PyTorch's deterministic kernels on only before its first CUDA work (cuBLAS's workspace)."""
    path = _grid(tmp_path / "g")
    path.write_text(path.read_text().replace("small: {per_device_train_batch_size: 4}",
                                             "small: {per_device_train_batch_size: 4, deterministic_kernels: true}"))
    assert sweep.main([str(path), "--warm_workers"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a variant sets deterministic_kernels" in err
