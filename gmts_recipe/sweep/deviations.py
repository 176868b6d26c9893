"""Where a planned test's cells departed from its plan's text, read from the records and the cells' logs: which
process trained each arm, execution options that changed between cells or between one cell's arms, cells missing
from the timing log. check.py prints it under a sweep's tables; update_readme.py puts it beside the result."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gmts_recipe.arms import short_name
from gmts_recipe.verify.file import read_results


LOG_START = re.compile(r"^=== (\d{4})-(\d\d-\d\d \d\d:\d\d)", re.M)  # a process's first line in a cell's log
LOG_FINISHED = re.compile(r"\[recipe\] (\w+): pass@1")  # an arm that process trained and evaluated


def arm_processes(logs: Path, cell: str) -> dict[str, tuple[str, str]]:
    """For each arm of a cell, the process that trained and evaluated it, from the cell's logs (one file per process
    the sweep started, named <cell>-<arms>.log, opened by a line with its start time): arm -> (start, log name)."""
    out = {}
    for log in sorted(logs.glob(f"{cell}-*.log")):
        text = log.read_text(errors="replace")
        start = LOG_START.search(text)
        for arm in LOG_FINISHED.findall(text):
            out[arm] = (start.group(2) if start else "?", log.name)
    return out


def seed_runs(seeds: list[int]) -> str:
    """Seeds as runs of consecutive ones: 201-212, 298-299."""
    runs, start = [], None
    for i, seed in enumerate(seeds):
        start = seed if start is None else start
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            runs.append(str(seed) if seed == start else f"{start}-{seed}")
            start = None
    return ", ".join(runs)


def deviations(summary: dict, root: Path) -> str:
    """Where the primary test's cells departed from its plan's text, read from the records: execution options that
    changed between cells or between the arms of one cell, the compared arms run in separate processes (the cells'
    logs), and cells missing from the timing log (logs/timing.jsonl)."""
    p = summary["primary"]
    a, b = p["comparison"].split(" - ")
    options, mixed, split = {}, [], []
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) != (p["variant"], p["learning_rate"]) or cell["seed"] not in p["seeds"]:
            continue
        results = read_results(root / cell["path"])  # of any format, as this one holds it
        per_arm = {arm: entry.get("generation_options", {}) for arm, entry in results["arms"].items()}
        options[cell["seed"]] = per_arm[b]
        if any(o != per_arm[b] for o in per_arm.values()):
            mixed.append((cell["seed"], sorted(arm for arm, o in per_arm.items() if o != per_arm[b])))
        procs = arm_processes(root / "logs", cell["cell"])
        if a in procs and b in procs and procs[a][1] != procs[b][1]:
            split.append(cell["seed"])
    varying = sorted({k for o in options.values() for k in o if len({str(x.get(k)) for x in options.values()}) > 1})
    lines = []
    if varying:
        groups: dict[str, list[int]] = {}
        for seed, o in sorted(options.items()):
            said = (f"{k} {o[k]}" if k in o else f"{k} not recorded (the option did not exist yet)" for k in varying)
            groups.setdefault(", ".join(said), []).append(seed)
        lines.append("- Execution options changed between cells (the recorded options of the "
                     f"{short_name(b)} arm): " + "; ".join(f"{text} for seed{'s' if len(seeds) > 1 else ''} {seed_runs(seeds)}"
                                             for text, seeds in groups.items()))
    for seed, arms in mixed:
        lines.append(f"- Seed {seed}: the {', '.join(short_name(x) for x in arms)} arm ran with other execution "
                     f"options than its {short_name(b)} arm")
    if split:
        lines.append(f"- {short_name(a)} and {short_name(b)} ran in separate processes (the cells' logs) for seeds "
                     f"{', '.join(map(str, split))}")
    timing = root / "logs" / "timing.jsonl"
    if timing.is_file():
        timed = {json.loads(line)["cell"] for line in timing.read_text().splitlines() if line.strip()}
        missing = [c["seed"] for c in summary["cells"] if c["cell"] not in timed and c["seed"] in p["seeds"]]
        if missing:
            lines.append(f"- Not in the timing log (logs/timing.jsonl): seed{'s' if len(missing) > 1 else ''} "
                         f"{seed_runs(sorted(missing))}")
    return "\n".join(lines or ["- none found in the records"]) + "\n"
