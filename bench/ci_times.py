"""How long the test suites take: the wall times of `.ci/run` logs (a clean clone, installed from scratch), read back.

    bash .ci/run 2>&1 | tee bench/logs/ci-run-DATE-COMMIT.log
    python bench/ci_times.py --markdown bench/logs     # one row per run: each phase, each suite's count
    python bench/ci_times.py --summary bench/logs      # one sentence on the unit suite's time, above the table

A folder stands for every ci-run-*.log in it, oldest run first: in name order, then stably by each run's date (its
header's date and time), since the names of one day sort by commit, not by time. Files are read in the order given.

`.ci/run` prints `== commit SHA, DATE, N cores` first and `== PHASE (after Ns)` as each phase starts; pytest's closing
line ("898 passed, 7 deselected, 15 warnings in 404.16s") gives each suite's counts. Logs from before the header
existed name their date and commit in the file name (ci-run-YYYY-MM-DD-SHA.log). `.ci/run` stops at the first
failing phase: a log that ends with a test suite's failures is a run that failed there (its later phases did not
run, and the table says so); any other log without `== done` is refused, its phases are not a run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
from gmts_recipe.markdown import fill  # noqa: E402 - the documentation's wrapped prose
from tables import markdown_row, markdown_table  # noqa: E402 - bench/tables.py, beside this script

HEADER = re.compile(r"^== commit (?P<commit>\S+), (?P<date>[^,]+), (?P<cores>\d+) cores")
PHASE = re.compile(r"^== (?P<name>.+?) \(after (?P<after>\d+)s\)$")
NAME = re.compile(r"ci-run-(?P<date>\d{4}-\d{2}-\d{2})-(?P<commit>[0-9a-f]{7,40})\.log$")
PYTEST_END = re.compile(r"^(?:=+ )?(?P<counts>\d+ \w+(?:, \d+ \w+)*) in (?P<seconds>[\d.]+)s\b")
SUITES = {"unit tests": "unit", "slow tests": "slow"}  # a phase name's start -> the suite it runs


class CiLogError(ValueError):
    """A log that is not a finished `.ci/run`."""


def read_log(path: Path) -> dict:
    """One `.ci/run` log: commit, date, cores, each phase's seconds, and each suite's counts and pytest seconds."""
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    header = next((m for m in map(HEADER.match, text) if m), None)
    named = NAME.search(path.name)
    run = {"log": path.name, "commit": header["commit"] if header else named["commit"] if named else None,
           "date": header["date"].strip() if header else named["date"] if named else None,
           "cores": int(header["cores"]) if header else None, "phases": {}, "suites": {}}
    marks: list[tuple[str, int]] = []
    suite = None
    for line in text:
        if m := PHASE.match(line):
            marks.append((m["name"], int(m["after"])))
            suite = next((s for prefix, s in SUITES.items() if m["name"].startswith(prefix)), None)
        elif suite is not None and (m := PYTEST_END.match(line.strip())):
            counts = {w.rstrip("s"): int(n) for n, w in (c.split(" ", 1) for c in m["counts"].split(", "))}
            run["suites"][suite] = {"passed": counts.get("passed", 0), "failed": counts.get("failed", 0),
                                    "errors": counts.get("error", 0), "seconds": float(m["seconds"])}
    run["stopped_at"] = None
    if not marks or marks[-1][0] != "done":
        last = next((s for prefix, s in SUITES.items() if marks and marks[-1][0].startswith(prefix)), None)
        if last is None or not _failing(run["suites"].get(last)):
            raise CiLogError(f"{path}: no '== done' line: not a finished .ci/run (nor one stopped by failing tests)")
        run["stopped_at"] = last  # .ci/run's set -e: the phases after it never ran
    for (name, start), (_, end) in zip(marks, marks[1:]):
        run["phases"][name.split(" (")[0].split(":")[0]] = end - start
    run["total_s"] = marks[-1][1] if run["stopped_at"] is None else None
    ran = list(SUITES.values())
    ran = ran if run["stopped_at"] is None else ran[:ran.index(run["stopped_at"]) + 1]
    missing = [s for s in ran if s not in run["suites"]]
    if missing:
        raise CiLogError(f"{path}: no pytest summary for the {', '.join(missing)} tests")
    return run


def _failing(suite: dict | None) -> int:
    return 0 if suite is None else suite["failed"] + suite["errors"]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f}"


def _suite(s: dict | None, stopped_at: str | None = None) -> str:
    if s is None:
        return f"not run (the {stopped_at} tests failed)"
    bad = "".join(f", {s[k]} {k}" for k in ("failed", "errors") if s[k])
    return f"{s['passed']} passed{bad} in {_minutes(s['seconds'])} min"


def markdown(runs: list[dict]) -> str:
    lines = markdown_table(["log", "commit", "date", "cores", "install (min)", "unit tests", "slow tests (-m slow)",
                            "smoke run (min)", "total (min)"])
    for r in runs:
        p = r["phases"]
        stopped = r["stopped_at"]
        smoke = _minutes(p["smoke run"]) if "smoke run" in p else "not run"
        total = _minutes(r["total_s"]) if r["total_s"] is not None else f"stopped: {stopped} tests failing"
        lines.append(markdown_row([r["log"], r["commit"] or "-", r["date"] or "-", r["cores"] or "-",
                                   _minutes(p.get("install", 0)), _suite(r["suites"].get("unit"), stopped),
                                   _suite(r["suites"].get("slow"), stopped), smoke, total]))
    return "\n".join(lines)


def summary(runs: list[dict]) -> str:
    """One sentence: the unit suite's time over the runs given, with its test count, and any failure."""
    unit = [r["suites"]["unit"] for r in runs]
    low, high = min(s["seconds"] for s in unit), max(s["seconds"] for s in unit)
    span = _minutes(low) if _minutes(low) == _minutes(high) else f"{_minutes(low)}-{_minutes(high)}"
    counts = sorted({s["passed"] for s in unit})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    failing = [(r["commit"] or r["log"], _failing(r["suites"]["unit"])) for r in runs if _failing(r["suites"]["unit"])]
    cores = sorted({r["cores"] for r in runs if r["cores"]})
    dates = sorted({r["date"][:10] for r in runs if r["date"]})
    where = ", ".join(f"{c}: {k} test{'s' if k > 1 else ''}" for c, k in failing)
    return fill(f"`python -m pytest -q` (the unit suite; the slow end-to-end tests are left to `-m slow`): {span} min for "
            f"{n} tests{' on ' + '/'.join(map(str, cores)) + ' cores' if cores else ''} over {len(runs)} `.ci/run`s on "
            f"clean clones{' (' + ', '.join(dates) + ')' if dates else ''}, "
            f"{'none failing' if not failing else f'failing in {len(failing)} of them ({where})'}"
            f"{_last_passing(runs) if failing else ''}.")


def _last_passing(runs: list[dict]) -> str:
    """Where some run failed: whether the last one given (the newest, as the commands list them) passed."""
    last = runs[-1]
    bad = any(_failing(s) for s in last["suites"].values()) or last["stopped_at"] is not None
    return "" if bad else f", the last ({last['commit'] or last['log']}) passing"


def read_folder(folder: Path) -> list[dict]:
    """Every ci-run-*.log of a folder, oldest run first (see the module's docstring); a folder without one is an
    error, not an empty table."""
    runs = [read_log(p) for p in sorted(folder.glob("ci-run-*.log"))]
    if not runs:
        raise CiLogError(f"{folder}: no ci-run-*.log in this folder")
    return sorted(runs, key=lambda run: run["date"] or "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--markdown", action="store_true", help="one table row per log")
    what.add_argument("--summary", action="store_true", help="one sentence on the unit suite's time over the runs")
    ap.add_argument("logs", nargs="+", type=Path,
                    help="logs of `bash .ci/run` (stdout and stderr), or a folder of ci-run-*.log files")
    args = ap.parse_args(argv)
    try:
        runs = [run for p in args.logs for run in (read_folder(p) if p.is_dir() else [read_log(p)])]
    except (OSError, CiLogError) as e:
        print(f"ci_times.py: {e}", file=sys.stderr)
        return 2
    print(markdown(runs) if args.markdown else summary(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
