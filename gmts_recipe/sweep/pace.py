"""The pace of a plan's cells per card, from the committed timing logs: how long a machine takes to its first seed
(the model's load, or its conversion, and the first compile are paid there), each seed after it, and how many seeds
a machine of a given number of minutes runs.

Each line of <sweep folder>/logs/timing.jsonl is one cell process (gmts_recipe.sweep.schedule.write_timing); the card
is not in it, but in the cell's results.json (each arm's provenance, else the file's versions:
sequential.cards.recorded_cards). A process is one warm worker's process (its lines from `job_in_process` 1 on, per host
and GPU) or one fresh process (a line without `warm`). Its *first* training cell is timed from the process's start, so a
job of base evaluations run before it in that process counts towards it (evaluated there, or read from the cache);
every later training cell is *steady*. Only processes that had their GPU to themselves and ended well count.

    python -m gmts_recipe.sweep.pace configs/sweeps/confirm-extension.yaml --minutes 30   # the table of
                                                                                         # docs/contribute-seeds.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gmts_recipe.markdown import fill
from gmts_recipe.sweep.grid import Grid, SweepError, load_grid
from gmts_recipe.sweep.schedule import TIMING


@dataclass
class CardPace:
    """What the timing lines of one card say: per process, the seconds from its start to the end of its first
    training cell and that cell's arms; every later training cell's (seconds, arms); the files they came from."""

    card: str
    first: list[tuple[float, int]] = field(default_factory=list)
    steady: list[tuple[float, int]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def per_arm(self, arms: int) -> float | None:
        """Seconds per arm of the steady cells of `arms` arms (of all steady cells where none has that many)."""
        same = [(t, n) for t, n in self.steady if n == arms] or self.steady
        return sum(t for t, _ in same) / sum(n for _, n in same) if same else None

    def seed_range(self, arms: int) -> tuple[float, float, int] | None:
        """(shortest, longest, count) of the steady cells of `arms` arms, in seconds; None where there is none."""
        same = [t for t, n in self.steady if n == arms]
        return (min(same), max(same), len(same)) if same else None

    def startup(self, arms: int) -> float | None:
        """The median over processes of what their first cell took beyond a steady cell of its arms: the model's
        load or conversion, the first compile, base evaluations run there."""
        pace = self.per_arm(arms)
        if pace is None or not self.first:
            return None
        return max(0.0, statistics.median(t - n * pace for t, n in self.first))

    def seeds_in(self, seconds: float, arms: int) -> int | None:
        """Seeds (cells of `arms` arms) one machine runs whole in `seconds` of its own time, from its start."""
        pace, start = self.per_arm(arms), self.startup(arms)
        if pace is None or start is None:
            return None
        left = seconds - start
        return 0 if left < arms * pace else int(left // (arms * pace))


def cell_cards(folder: Path) -> dict[str, str]:
    """Each cell folder's card, as its results.json records it (two names joined where its arms differ)."""
    from gmts_recipe.sequential.cards import recorded_cards

    out = {}
    for path in sorted(folder.glob("*/results.json")):
        try:
            out[path.parent.name] = " + ".join(recorded_cards(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, AttributeError, TypeError):
            continue
    return out


def read_lines(path: Path) -> list[dict]:
    """The timing file's records, in file order; a line that is not a JSON object is left out."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and {"cell", "arms", "start", "end"} <= set(record):
            out.append(record)
    return out


def card_paces(folders: list[Path]) -> dict[str, CardPace]:
    """Every card's pace over the timing logs of `folders` (sweep folders), in the order cards first appear."""
    out: dict[str, CardPace] = {}
    for folder in folders:
        cards = cell_cards(folder)
        started: dict[tuple, float] = {}  # a warm worker (host, gpu) -> its process's start
        trained: set[tuple] = set()  # warm workers whose process has had its first training cell
        for t in read_lines(folder / "logs" / TIMING):
            worker, job = (t.get("host"), t.get("gpu")), t.get("job_in_process")
            warm = bool(t.get("warm"))
            if warm and job == 1:
                started[worker] = t["start"]
                trained.discard(worker)
            ok = t.get("exit_code") == 0 and t.get("workers_on_gpu", 1) == 1
            if not ok or t["arms"] == ["base"] or not t["arms"]:
                if warm and not ok:  # a failed cell ends its process: the next one starts afresh
                    started.pop(worker, None)
                continue
            pace = out.setdefault(cards.get(t["cell"], "unrecorded"), CardPace(cards.get(t["cell"], "unrecorded")))
            source = str(folder / "logs" / TIMING)
            if source not in pace.sources:
                pace.sources.append(source)
            seconds, arms = t["end"] - t["start"], len(t["arms"])
            if not warm:  # a fresh process: its start and compile are in this cell
                pace.first.append((seconds, arms))
            elif worker in started and worker not in trained:
                pace.first.append((t["end"] - started[worker], arms))
                trained.add(worker)
            elif job is None or worker in trained:  # lines from before job_in_process was recorded count as steady
                pace.steady.append((seconds, arms))
    return out


def plan_folders(grid: Grid) -> list[Path]:
    """The sweep folders whose cells run what this plan's cells run: its own, and for a sequential plan the test it
    continues (the same config and variant)."""
    folders = [Path(grid.results_dir) / grid.name]
    if grid.sequential is not None:
        continued = load_grid(grid.path(grid.sequential["continues"]))
        folders.append(Path(grid.results_dir) / continued.name)
    return folders


def cell_arms(grid: Grid) -> int:
    """The arms of the plan's cells (the most any cell runs)."""
    return max((len(a) for a in grid.planned_arms().values()), default=1)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def rows(grid: Grid, minutes: float) -> list[dict]:
    """One row per card with a pace: the first seed, each later seed, seeds per `minutes`, the files read."""
    arms = cell_arms(grid)
    out = []
    for card, pace in card_paces(plan_folders(grid)).items():
        per_arm, start = pace.per_arm(arms), pace.startup(arms)
        if per_arm is None or start is None:
            continue
        spread = pace.seed_range(arms)
        out.append({"card": card, "processes": len(pace.first), "first_s": start + arms * per_arm,
                    "seed_s": arms * per_arm, "range": spread, "seeds": pace.seeds_in(60 * minutes, arms),
                    "sources": pace.sources})
    return out


def table(grid: Grid, minutes: float) -> str:
    """The markdown table of `rows`, with what it counts below it."""
    found = rows(grid, minutes)
    if not found:
        return f"No timed cell of {grid.name} or the test it continues yet (logs/{TIMING}).\n"
    arms = cell_arms(grid)
    lines = [f"| card | processes timed | first seed, from the process's start | each later seed ({arms} arm"
             f"{'s' * (arms > 1)}) | seeds in {minutes:g} min |", "|---|---|---|---|---|"]
    for r in found:
        spread = "" if r["range"] is None else (f" ({_minutes(r['range'][0])} to {_minutes(r['range'][1])}, "
                                                f"{r['range'][2]} cells)")
        lines.append(f"| {r['card']} | {r['processes']} | {_minutes(r['first_s'])} | {_minutes(r['seed_s'])}{spread}"
                     f" | {r['seeds']} |")
    files = sorted({s for r in found for s in r["sources"]})
    return "\n".join(lines) + "\n\n" + fill(
            f"From {', '.join(files)} and each cell's card (its results.json): the first seed is the median over "
            f"processes of what the first cell took beyond a steady one (the model's load or conversion, the first "
            f"compile, any base evaluations run there) plus a steady cell; a later seed is the mean steady cell. "
            f"Seeds in {minutes:g} min count from the sweep's start, after the machine's setup (install, model "
            f"download), which these logs do not time.") + "\n"


def plan_lines(grid: Grid, seeds_left: int, minutes: float = 30.0) -> list[str]:
    """--plan's lines: per card, the time the seeds left take in one worker, and what a machine of `minutes` runs."""
    out = []
    for r in rows(grid, minutes):
        total = r["first_s"] + max(0, seeds_left - 1) * r["seed_s"]
        out.append(f"at the pace of {r['card']} ({r['processes']} process(es) timed): first seed "
                   f"{_minutes(r['first_s'])} from the start, then {_minutes(r['seed_s'])} a seed; the {seeds_left} "
                   f"seed(s) left take {total / 3600:.1f} GPU-hours in one worker; a {minutes:g}-minute machine runs "
                   f"{r['seeds']}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The pace of a plan's cells per card, from its committed timing logs.")
    ap.add_argument("grid", help="sweep file (configs/sweeps/*.yaml)")
    ap.add_argument("--minutes", type=float, default=30.0, help="a machine's time, for the seeds it runs (30)")
    args = ap.parse_args(argv)
    try:
        print(table(load_grid(args.grid), args.minutes), end="")
    except SweepError as e:
        print(f"pace: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
