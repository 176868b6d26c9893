"""A sequential plan's failed cells, fixed in advance (its `failures:` keys): what is run again, and what a failure
counts as, so that a failed seed never stalls the looks after it and "run it again" never repeats a deterministic
failure for ever.

A cell that fails leaves `failure.json` in its folder (`record`, or `python -m gmts_recipe.sweep.failures`): the seed,
the arm that failed, and one entry per attempt with its kind and card:
- "machine": the card, driver or host failed (a lost or preempted task, an ECC or NCCL error, an out-of-memory that
  the same cell does not raise elsewhere). Run again `machine_fault_retries` times (once), on any card the plan
  allows; a fault that recurs on its retry is taken for the arm's own.
- "arm": the arm's own run failed (an exception of the recipe, a loss that is not finite, a refusal of its records):
  an outcome, never retried. The plan scores it as `arm_failure: base`: the failed arm's held-out scores are the
  untrained base model's (its first sampling seed's per-task scores, the ones every arm is paired with). A run that
  fails leaves the model it started from: scored as the base, it counts as a collapse to the base, a loss of the
  arm's whole gain (~20 points here), never as a 0 pass@1 that no evaluated model came near and whose 50-point
  outlier would swamp every standard error; both arms are scored by the same rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gmts_recipe.records import write_json
from gmts_recipe.sweep.grid import SweepError

FILE = "failure.json"
KINDS = ("machine", "arm")


def read(cell_dir: Path) -> dict | None:
    """A cell's failure record, checked; None where the cell has none. One-line SweepError naming the file."""
    path = Path(cell_dir) / FILE
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        ok = (isinstance(rec["seed"], int) and isinstance(rec["arm"], str) and rec["attempts"]
              and all(a["kind"] in KINDS and isinstance(a["card"], str) and isinstance(a["error"], str)
                      for a in rec["attempts"]))
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise SweepError(f"{path}: a failure record holds seed (an integer), arm, and attempts (each with kind "
                         f"{' or '.join(KINDS)}, card and error)")
    return rec


def outcome(rec: dict, retries: int) -> str:
    """What a failure record counts as under the plan: "arm" (an outcome: the arm scored as the plan says), or
    "retry" (a machine fault with a retry left: the seed waits for it)."""
    kinds = [a["kind"] for a in rec["attempts"]]
    if "arm" in kinds or len(kinds) > retries:  # its own failure, or a fault that recurred on its retry
        return "arm"
    return "retry"


def record(cell_dir: Path, seed: int, arm: str, kind: str, card: str, error: str) -> dict:
    """Add one failed attempt to a cell's failure record (written by code, never by hand)."""
    if kind not in KINDS:
        raise SweepError(f"failure kind {kind!r}: one of {', '.join(KINDS)}")
    cell_dir = Path(cell_dir)
    rec = read(cell_dir) or {"seed": seed, "arm": arm, "attempts": []}
    if (rec["seed"], rec["arm"]) != (seed, arm):
        raise SweepError(f"{cell_dir / FILE}: records seed {rec['seed']} arm {rec['arm']}, not seed {seed} arm {arm}")
    rec["attempts"].append({"kind": kind, "card": card, "error": error})
    cell_dir.mkdir(parents=True, exist_ok=True)
    write_json(cell_dir / FILE, rec)
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Record a failed attempt of a sequential plan's cell (its failure.json).")
    ap.add_argument("cell_dir", help="the cell's folder, e.g. results/confirm-extension/coupled-lr0.0001-s300")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--arm", required=True)
    ap.add_argument("--kind", choices=KINDS, required=True)
    ap.add_argument("--card", required=True, help="the card it ran on, as the cell would record it")
    ap.add_argument("--error", required=True, help="the error's last line, from the cell's log")
    args = ap.parse_args(argv)
    try:
        record(Path(args.cell_dir), args.seed, args.arm, args.kind, args.card, args.error)
    except SweepError as e:
        print(f"failures: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
