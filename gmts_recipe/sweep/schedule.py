"""When cells run: the lines of logs/timing.jsonl, the pace (seconds per arm) read from them, and the time left and
arms that fit before a limit, for the local pool and the Ray tasks alike."""

from __future__ import annotations

import heapq
import json
from pathlib import Path

from gmts_recipe.sweep.grid import Cell


def refusal(log_text: str) -> str | None:
    """recipe.py's own one-line refusal (exit 2: a typo in a field, a file not found), if the log ends with one (before
    the runner's exit line): the failure line then says why, and a typo in a grid's variant is read where the sweep
    stops, not in a log."""
    lines = [line for line in log_text.splitlines() if line.strip() and not line.startswith("=== exit ")]
    return lines[-1].removeprefix("recipe.py: ") if lines and lines[-1].startswith("recipe.py: ") else None


def failure_line(cell: Cell, arms: tuple[str, ...], log: Path) -> str:
    """A failed cell process, for the sweep's last line: the cell, its arms, the recipe's refusal if any, its log."""
    why = refusal(log.read_text(encoding="utf-8", errors="replace")[-4000:]) if log.is_file() else None
    return f"{cell.name} {','.join(arms)}{f': {why}' if why else ''} (see {log})"


INTERRUPTED = (130, -2)  # recipe.py's exit code after Ctrl-C, and a process ended by SIGINT
TIMING = "timing.jsonl"  # one JSON line per cell process, in the sweep's logs folder


def write_timing(log_dir: Path, cell: Cell, arms: tuple[str, ...], gpu: str | None, workers_on_gpu: int,
                 start: float, end: float, exit_code: int | None, host: str, warm: bool = False,
                 job_in_process: int | None = None) -> None:
    """One line of logs/timing.jsonl: which cell process ran where and how long (unix seconds), so cells per
    GPU-hour come from committed files; `warm`: the cell ran in a warm worker's process (its startup paid once per
    worker), `job_in_process` its place there (1: the job that paid the process's start and first compile). One
    write call per line in append mode: concurrent workers never interleave."""
    record = {"cell": cell.name, "arms": list(arms), "gpu": gpu, "workers_on_gpu": workers_on_gpu,
              "start": round(start, 3), "end": round(end, 3), "exit_code": exit_code, "host": host}
    if warm:
        record["warm"] = True
        if job_in_process is not None:
            record["job_in_process"] = job_in_process
    line = json.dumps(record)
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / TIMING, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def time_left(arm_s: float, running: list[tuple[float, int]], queued: list[int], slots: int) -> float:
    """Seconds until the last cell process ends, if each takes `arm_s` per arm (the finished processes' seconds over
    their arms: a grid's cells may run 4 arms, then 2): the running ones ((seconds run, arms)) end when they reach
    theirs, and each queued one (its arms) takes the first slot that frees. Cells run `slots` at a time, so the work
    left divided by one worker's pace would overstate it `slots`-fold."""
    free = sorted([max(0.0, arms * arm_s - r) for r, arms in running] + [0.0] * max(0, slots - len(running)))
    if not free:
        return 0.0 if not queued else float("inf")
    end = max(free) if running else 0.0
    for arms in queued:
        t = heapq.heappop(free) + arms * arm_s
        heapq.heappush(free, t)
        end = max(end, t)
    return end


def seconds_per_arm(took: list[tuple[float, int]], warm_up: list[tuple[float, int]] = (),
                    recorded: float | None = None) -> float:
    """`time_left`'s pace: the finished cell processes' seconds over their arms ((seconds, arms) each). A warm
    worker's first training cell also pays its process's model load and compilation, much longer than a steady
    cell: those go in `warm_up` and count only until a steady cell has finished, after the pace recorded by earlier
    runs (`recorded_pace`) where there is one; counted like the others they put the first estimates too high
    (measurements: bench/docs/scaling.md, "What a new process costs a sweep")."""
    if not took and recorded is not None:
        return recorded
    cells = took or warm_up
    if not cells:
        raise ValueError("no finished cell to take a pace from")
    return sum(t for t, _ in cells) / sum(n for _, n in cells)


def arms_that_fit(arms: int, seconds_per_arm: float | None, seconds_left: float) -> int:
    """How many of a cell process's `arms` to start with `seconds_left` before a time limit (`--time_limit`), at
    `seconds_per_arm`: all when they fit, else as many as fit, so that an arm is left whole for the next run instead of
    cut midway by the end of the allocation (with checkpoints off a cut arm keeps nothing). None: no pace measured yet
    (nothing has run), so every arm starts while time is left."""
    if seconds_left <= 0:
        return 0
    if seconds_per_arm is None or seconds_per_arm <= 0:
        return arms
    return max(0, min(arms, int(seconds_left // seconds_per_arm)))


def recorded_pace(log_dir: Path, warm: bool = False, steady: bool = True) -> tuple[float, int] | None:
    """(seconds per arm, arm-runs) of the cell processes in logs/timing.jsonl that trained arms, ended well and had
    their GPU to themselves, those of fresh processes (each with its start and compile) or, with `warm`, those that
    ran in warm workers; None where there are none. With `steady` (what `--plan` and the sweep's time-left estimate
    use, the worker's start counted apart) a warm worker's first training job is left out: it loaded the model and
    compiled (job 1, or job 2 after a job 1 of base evaluations alone, its worker known by host and GPU; lines from
    before `job_in_process` was recorded count). Without it every training job counts: the arm-runs per GPU-hour that
    warm workers gave, their start included (bench/costs.py)."""
    seconds = arms = 0
    try:
        lines = (log_dir / TIMING).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    began_with_base: dict[tuple, bool] = {}  # (host, gpu): whether that worker's job 1 was the base evaluations
    for line in lines:
        try:
            t = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(t, dict):
            continue
        job, worker = t.get("job_in_process"), (t.get("host"), t.get("gpu"))
        if job == 1:
            began_with_base[worker] = t.get("arms") == ["base"]
        first_training = job == 1 or (job == 2 and began_with_base.get(worker, False))
        if (t.get("exit_code") == 0 and t.get("arms") and t["arms"] != ["base"] and t.get("workers_on_gpu") == 1
                and bool(t.get("warm")) == warm and not (warm and steady and first_training)):
            seconds += t["end"] - t["start"]
            arms += len(t["arms"])
    return (seconds / arms, arms) if arms else None
