"""The local pool: cells on this machine's GPUs, one process per cell or one warm process per worker."""

from __future__ import annotations

import os
import queue
import shlex
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gmts_recipe.sequential import cards  # the card a failed cell ran on
from gmts_recipe.sequential.failures import record_exit  # a sequential plan's failed cell, from its log
from gmts_recipe.sweep.grid import Cell, Grid, SweepError, by_cell, cell_command, jobs, jobs_to_start, log_name
from gmts_recipe.sweep.schedule import (INTERRUPTED, arms_that_fit, failure_line, recorded_pace, seconds_per_arm,
                                        time_left, write_timing)
from gmts_recipe.worker import WarmWorker  # --warm_workers: one process runs a worker's cells


def mps_running(env: dict | None = None) -> bool:
    """Whether a CUDA MPS control daemon answers here (its pipe directory holds the `control` pipe): without it,
    several processes on one GPU take turns (time-slicing) and gain little; with it they run at once (measurements:
    bench/docs/scaling.md)."""
    env = os.environ if env is None else env
    return (Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps") / "control").exists()


def shares_gpus(workers: list[str | None]) -> bool:
    """Whether two local workers are given one GPU id."""
    ids = [w for w in workers if w is not None]
    return len(ids) != len(set(ids))


def expand_workers(gpus: list[str], runs_per_gpu: int = 1) -> list[str | None]:
    """The local pool's workers: `runs_per_gpu` per listed GPU id (an id listed twice already gives two), None for
    the one device of a run without --gpus. Several cells share a GPU well only under CUDA MPS (docs/scale.md)."""
    return [gpu for gpu in (gpus or [None]) for _ in range(runs_per_gpu)]


def commands(grid: Grid, extra: list[str], only: str | None = None) -> list[str]:
    """One shell line per missing cell process, the base evaluations first: the exact commands `run` starts, for a
    scheduler's job array (run the first line alone, then the rest in any order: docs/scale.md)."""
    todo = jobs(grid, only)
    if not todo:
        return []
    units = [(todo[0][0], ("base",)), *by_cell(todo)]
    return [shlex.join(cell_command(grid, cell, arms, extra)) for cell, arms in units]


def environment(gpu: str | None) -> dict:
    """This process's environment, with CUDA_VISIBLE_DEVICES set to the worker's GPU where it has one."""
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


@dataclass
class Pace:
    """The seconds each finished cell process took, for the time left and the arms that fit before a limit."""

    recorded: float | None  # seconds per arm of earlier runs run the same way (recorded_pace), None: none yet
    took: list[tuple[float, int]] = field(default_factory=list)  # (seconds, arms) of each finished cell process
    warm_up: list[tuple[float, int]] = field(default_factory=list)  # the same, of a warm process's first training cell

    def now(self) -> float:
        return seconds_per_arm(self.took, self.warm_up, self.recorded)

    def before_start(self, first_in_process: bool) -> float | None:
        """The pace a cell about to start is expected to keep: a warm process's first cell pays its start, like the
        others of `warm_up`; None before anything has run."""
        if first_in_process and self.warm_up:
            return seconds_per_arm(self.warm_up)
        return seconds_per_arm(self.took, self.warm_up, self.recorded) if self.took or self.warm_up or \
            self.recorded else None


class LocalPool:
    """The local pool's state while a sweep runs: its queue of cell processes, its workers (a thread each, with a
    warm process each under --warm_workers), what they finished and how fast."""

    def __init__(self, grid: Grid, gpus: list[str], extra: list[str], todo: list[tuple[Cell, str]],
                 runs_per_gpu: int = 1, warm_workers: bool = False, time_limit: float | None = None,
                 left: list[str] | None = None):
        self.grid, self.extra, self.left = grid, extra, left
        self.deadline = None if time_limit is None else time.time() + 60 * time_limit
        self.log_dir = Path(grid.results_dir) / grid.name / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.workers = expand_workers(gpus, runs_per_gpu)
        self.host = socket.gethostname()
        self.pending: queue.Queue = queue.Queue()
        for unit in by_cell(todo):
            self.pending.put(unit)
        self.lock = threading.Lock()
        self.total, self.done = len(todo), 0
        self.failed: list[str] = []
        before = recorded_pace(self.log_dir, warm=warm_workers)  # (seconds per arm, arm-runs) of earlier runs
        self.pace = Pace(before[0] if before else None)
        self.trained_in: dict[int, int] = {}  # worker slot -> which of its processes (WarmWorker.started) last trained
        self.running: dict[int, tuple[float, int]] = {}  # worker thread -> (start time, arms) of its cell process
        self.skipped_whole = False  # a cell has been left whole for the next run (its line printed)
        self.stop = threading.Event()  # an interrupted cell (Ctrl-C reaches every process of the terminal): take none
        self.warm = [WarmWorker(environment(gpu), cwd=Path.cwd()) for gpu in self.workers] if warm_workers else None

    def launch(self, cell: Cell, arms: tuple[str, ...], slot: int) -> int:
        """Run one cell process on the worker's GPU (or in its warm process), its output in its log; its exit code."""
        gpu = self.workers[slot]
        command = cell_command(self.grid, cell, arms, self.extra)
        start = time.time()
        log = self.log_dir / log_name(cell, arms)
        where = "" if self.warm is None else f"  # in warm worker {slot}'s process"
        part = log.stat().st_size if log.is_file() else 0  # where this process's part of the log begins
        if self.grid.whole_seeds and arms != ("base",):  # a sequential plan's cell: one process's arms, none older
            (self.log_dir.parent / cell.name / "results.json").unlink(missing_ok=True)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}{where}\n")
            out.flush()
            if self.warm is None:
                code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, env=environment(gpu))
        if self.warm is not None:
            code = self.warm[slot].run(command[1:], log)  # the worker's own Python runs recipe.py
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n=== exit {code}\n")
        if code != 0 and self.grid.whole_seeds and arms != ("base",):  # a sequential plan's cell: its failures
            record_exit(self.log_dir.parent, cell.name, cell.seed, log, part, cards.card_name(gpu))
        write_timing(self.log_dir, cell, arms, gpu, self.workers.count(gpu), start, time.time(), code, self.host,
                     warm=self.warm is not None, job_in_process=None if self.warm is None else self.warm[slot].jobs)
        return code

    def first_in_process(self, slot: int) -> bool:
        """Whether the worker's next (or just finished) cell is the first its warm process trains: that one pays the
        process's model load and compilation, so its pace is kept apart (`Pace.warm_up`)."""
        return self.warm is not None and self.trained_in.get(slot) != self.warm[slot].started

    def arms_to_start(self, cell: Cell, arms: tuple[str, ...], slot: int, t0: float) -> tuple[str, ...]:
        """The arms of the cell that end before the deadline (all without one; under Grid.whole_seeds all or none);
        the others go to `left`, with one line for the cells not started (not one per cell). Called under the lock."""
        if self.deadline is None:
            return arms
        pace = self.pace.before_start(self.first_in_process(slot))
        n = arms_that_fit(len(arms), pace, self.deadline - t0)
        if self.grid.whole_seeds and n < len(arms):  # a part would run again whole: start none of it
            n = 0
        if n == len(arms):
            return arms
        if self.left is not None:
            self.left.extend(f"{cell.name} {arm}" for arm in arms[n:])
        at = "" if pace is None else f", {pace / 60:.1f} min per arm so far"
        if n > 0 or not self.skipped_whole:
            rest = "" if n > 0 else ", and every later cell that does not fit"
            print(f"[sweep] time limit: {cell.name} {','.join(arms[n:])}{rest} left for the next run "
                  f"({max(0.0, self.deadline - t0) / 60:.1f} min left{at})", flush=True)
        if n == 0:
            self.skipped_whole = True
        return arms[:n]

    def finished(self, cell: Cell, arms: tuple[str, ...], slot: int, t0: float, code: int) -> None:
        """A cell process ended: its pace counted, its line printed, a failure kept. Called under the lock."""
        del self.running[threading.get_ident()]
        self.done += len(arms)
        (self.pace.warm_up if self.first_in_process(slot) else self.pace.took).append((time.time() - t0, len(arms)))
        if self.warm is not None:
            self.trained_in[slot] = self.warm[slot].started
        now = time.time()
        eta = time_left(self.pace.now(), [(now - r, n) for r, n in self.running.values()],
                        [len(a) for _, a in list(self.pending.queue)], len(self.workers))
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"[sweep] {self.done}/{self.total} {cell.name} {','.join(arms)} on gpu {self.workers[slot]}: {status}, "
              f"{(time.time() - t0) / 60:.1f} min; about {eta / 60:.0f} min left", flush=True)
        if code != 0:
            self.failed.append(failure_line(cell, arms, self.log_dir / log_name(cell, arms)))
        if code in INTERRUPTED:
            self.stop.set()

    def worker(self, slot: int) -> None:
        """One worker's thread: cell processes from the queue, one at a time, until it is empty or a cell is
        interrupted."""
        while not self.stop.is_set():
            try:
                cell, arms = self.pending.get_nowait()
            except queue.Empty:
                return
            t0 = time.time()
            with self.lock:
                if self.stop.is_set():  # interrupted while this cell was being taken: it never started
                    return
                arms = self.arms_to_start(cell, arms, slot, t0)
                if not arms:
                    continue
                self.running[threading.get_ident()] = (t0, len(arms))
            code = self.launch(cell, arms, slot)
            with self.lock:
                self.finished(cell, arms, slot, t0, code)

    def run_workers(self) -> None:
        """Every worker's thread, waited for in short joins: a Ctrl-C delivered to a worker thread runs its handler
        here only when this thread wakes, which a join without timeout does when the cell ends."""
        threads: list[threading.Thread] = []
        try:
            for slot in range(len(self.workers)):
                threads.append(threading.Thread(target=self.worker, args=(slot,)))
                threads[-1].start()
            for t in threads:
                while t.is_alive():
                    t.join(0.1)
        except KeyboardInterrupt:
            self.stop.set()
            print("[sweep] interrupted: waiting for the running cells to stop (each keeps its finished arms)",
                  file=sys.stderr, flush=True)
            for t in threads:
                if t.ident is not None:  # started
                    t.join()
            raise

    def close(self) -> None:
        for w in self.warm or []:
            w.close()


def run(grid: Grid, gpus: list[str], extra: list[str], only: str | None = None, base_only: bool = False,
        runs_per_gpu: int = 1, warm_workers: bool = False, time_limit: float | None = None,
        left: list[str] | None = None) -> list[str]:
    """Run every missing job, `runs_per_gpu` workers per GPU id (an id given twice: two workers on that GPU), one
    process per cell (`by_cell`), or with `warm_workers` one process per worker that runs its cells one after
    another (gmts_recipe.worker: imports, CUDA context and compiled graphs paid once per worker); returns the failed
    jobs (their logs are next to their results). With `time_limit` (minutes from now) a worker starts only the arms
    that end within it at the pace measured so far (`arms_that_fit`) and appends the others to `left`."""
    todo = jobs_to_start(grid, only, base_only)
    if not todo:
        return []
    pool = LocalPool(grid, gpus, extra, todo, runs_per_gpu, warm_workers, time_limit, left)
    first_cell = todo[0][0]
    print(f"[sweep] {grid.name}: {pool.total} job(s) in {pool.pending.qsize()} cell process(es) on "
          f"{len(pool.workers)} worker(s){' (warm: one process each)' if pool.warm else ''}; base evaluations first")
    try:
        # The base evaluations first, alone: every cell reuses them, and two cells must not compute them twice.
        if pool.launch(first_cell, ("base",), 0) != 0:
            return [failure_line(first_cell, ("base",), pool.log_dir / log_name(first_cell, ("base",)))]
        if base_only:
            return []
        pool.run_workers()
    finally:
        pool.close()
    return pool.failed


def parse_gpus(text: str | None, visible: int | None = None) -> list[str]:
    """The --gpus list, checked before anything runs: a typo would otherwise start every cell's process with a
    CUDA_VISIBLE_DEVICES that hides every GPU, and each would fail (or run on the CPU) only after its start-up.
    Ids are indices below the visible count (repeat one for two workers) or GPU-/MIG- UUIDs, passed through."""
    if text is None:
        return []
    ids = [g.strip() for g in text.split(",")]
    if visible is None:
        import torch  # only to count the GPUs, and only when --gpus names them

        visible = torch.cuda.device_count()
    for g in ids:
        if g.startswith(("GPU-", "MIG-")):
            continue
        if not g.isdigit():
            raise SweepError(f"--gpus {text}: {g!r} is not a GPU index (e.g. --gpus 0,1)")
        if int(g) >= visible:
            raise SweepError(f"--gpus {text}: GPU {g} is not visible here ("
                             + (f"{visible} GPU(s): 0-{visible - 1})" if visible else
                                "no GPU: leave out --gpus for one worker on this machine)"))
    return ids
