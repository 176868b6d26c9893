"""What one sweep cell takes in git: as committed, and as recipe.py writes a cell today.

    python bench/cell_size.py results/confirm --every 10 --out bench/cell-size-confirm.json
    python bench/cell_size.py --markdown bench/cell-size-confirm.json

Each chosen cell of the sweep folder is rewritten, in a temporary folder, the way a cell is written now: results
format 2 (records.write_results: no per-task records beside a samples file, since the samples file holds them), each
arm's samples file without the questions (the shared base evaluations' samples keep them), and no figures (sweep.py
runs its cells with --figures false; `python -m gmts_recipe.plots CELL_DIR` draws them). The rewritten file is then
verified as check.py verifies a cell (verify.file.load, verify.file.verify), so the bytes counted are a file that
checks. The shared base evaluations (base-evals/) are stored once per sweep and counted apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gmts_recipe.markdown import fill  # noqa: E402 - the documentation's wrapped prose
from gmts_recipe.records import ResultsError, current_record, read_samples, write_results  # noqa: E402
from gmts_recipe.samples import write_samples  # noqa: E402
from gmts_recipe.verify.file import seal, verify  # noqa: E402

MB = 1e6


def committed_bytes(cell: Path) -> dict[str, int]:
    """The cell's files as committed, by kind."""
    sizes = {"results.json": 0, "samples": 0, "figures": 0}
    for f in cell.iterdir():
        kind = "results.json" if f.name == "results.json" else "figures" if f.suffix == ".png" else \
            "samples" if f.name.endswith(".jsonl.xz") else None
        if kind:
            sizes[kind] += f.stat().st_size
    return sizes


def rewritten_bytes(cell: Path, out: Path) -> tuple[dict[str, int], list[str]]:
    """The cell rewritten into `out` as recipe.py writes one today (module docstring), verified: its bytes by kind,
    and its arms."""
    raw = json.loads((cell / "results.json").read_text())
    results = current_record(raw, cell)  # format 2 in memory: per-task records rebuilt from the samples
    out.mkdir()
    for arm, entry in results["arms"].items():
        ev = entry["eval"]
        log = read_samples(cell / ev["samples"]["path"], ev["samples"]["sha256"], f"arm {arm}")
        log = [{k: v for k, v in line.items() if k != "question"} for line in log]
        path, sha = write_samples(out, f"samples-{arm}-seed{ev['seed']}", log)
        ev["samples"] = {**ev["samples"], "path": path.name, "sha256": sha}
    write_results(out / "results.json", seal(results))
    verify(str(out / "results.json"))  # the rewritten cell checks as a committed one does
    return ({"results.json": (out / "results.json").stat().st_size,
             "samples": sum(f.stat().st_size for f in out.glob("*.jsonl.xz")), "figures": 0}, sorted(results["arms"]))


def measure(folder: Path, every: int) -> dict:
    cells = sorted(p.parent for p in folder.glob("*/results.json"))
    chosen = cells[::every]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / folder.name).mkdir()
        if (folder / "base-evals").is_dir():  # the shared base evaluations, where the cells' records name them
            (Path(tmp) / folder.name / "base-evals").symlink_to((folder / "base-evals").resolve())
        for cell in chosen:
            t0 = time.time()
            before = committed_bytes(cell)
            after, arms = rewritten_bytes(cell, Path(tmp) / folder.name / cell.name)
            rows.append({"cell": cell.name, "committed": before, "today": after, "arms": arms})
            print(f"[cell_size] {cell.name}: {sum(before.values()) / MB:.2f} -> {sum(after.values()) / MB:.2f} MB "
                  f"({time.time() - t0:.0f} s)", file=sys.stderr)
    base = sum(f.stat().st_size for f in (folder / "base-evals").glob("*")) if (folder / "base-evals").is_dir() else 0
    return {"folder": str(folder), "cells": len(cells), "every": every, "measured": rows, "base_evals_bytes": base}


def markdown(report: dict) -> str:
    rows = report["measured"]
    lines = ["| cell | arms | committed: results.json / samples / figures (MB) | today (MB) |", "|---|---|---|---|"]
    for r in rows:
        c, t = r["committed"], r["today"]
        lines.append(f"| {r['cell']} | {', '.join(r['arms'])} | {c['results.json'] / MB:.2f} / {c['samples'] / MB:.2f} / "
                     f"{c['figures'] / MB:.2f} = {sum(c.values()) / MB:.2f} | {t['results.json'] / MB:.2f} / "
                     f"{t['samples'] / MB:.2f} = {sum(t.values()) / MB:.2f} |")
    before = [sum(r["committed"].values()) / MB for r in rows]
    after = [sum(r["today"].values()) / MB for r in rows]
    lines.append("")
    lines.append(fill(f"{len(rows)} of the {report['cells']} cells of {report['folder']} (every {report['every']}th): "
                      f"{sum(before) / len(rows):.2f} MB a cell as committed (largest {max(before):.2f}), "
                      f"{sum(after) / len(rows):.2f} MB as written today (largest {max(after):.2f}); the shared base "
                      f"evaluations, once per sweep: {report['base_evals_bytes'] / MB:.2f} MB."))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", help="a sweep folder (results/NAME) whose cells to measure")
    ap.add_argument("--every", type=int, default=10, help="measure every Nth cell, in name order (default 10)")
    ap.add_argument("--out", help="write the measurement here (JSON)")
    ap.add_argument("--markdown", metavar="JSON", help="print a measurement's table")
    args = ap.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())), end="")
        return 0
    if not args.folder or not Path(args.folder).is_dir():
        print(f"cell_size.py: give a sweep folder (results/NAME); {args.folder!r} is not one", file=sys.stderr)
        return 2
    if args.every < 1:
        print(f"cell_size.py: --every {args.every}: a positive count", file=sys.stderr)
        return 2
    try:
        report = measure(Path(args.folder), args.every)
    except ResultsError as e:
        print(f"cell_size.py: {e}", file=sys.stderr)
        return 2
    if not report["measured"]:
        print(f"cell_size.py: {args.folder} holds no cell (<cell>/results.json)", file=sys.stderr)
        return 2
    text = json.dumps(report, indent=1) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(markdown(report), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
