"""A sequential plan's design, computed and written: `python -m gmts_recipe.sweep.design PLAN.yaml --out
DESIGN.json` reads the plan's `sequential:` keys and the per-seed deltas of the test it continues (recomputed from
that test's cells), and writes stats.design's boundaries and outcomes, reproducible from the plan's seed (bit for bit:
numpy Generators seeded from the plan, their draws in a fixed order). On 2 shared cores it takes a few minutes,
most of it reading the continued test's 100 cells and the 4,000,000 normal null paths. A plan whose critical value
lies below what the design requires exits 1 (the file written, its "required" saying why)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gmts_recipe.records import write_json
from gmts_recipe.sequential import stats as sequential
from gmts_recipe.sequential.looks import continued_test, seed_minutes
from gmts_recipe.sweep.grid import SweepError, load_grid
from gmts_recipe.sweep.summary import continued_summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Compute a sequential plan's boundary and its outcomes by simulation "
                                             "(reproducible from the plan's simulation seed).")
    ap.add_argument("plan", help="the sweep file with a `sequential:` section")
    ap.add_argument("--out", required=True, help="the design file to write (JSON)")
    args = ap.parse_args(argv)
    try:
        grid = load_grid(args.plan)
        if grid.sequential is None:
            raise SweepError(f"{args.plan}: no sequential: section")
        continued = continued_test(continued_summary(grid), grid)
        minutes = seed_minutes(continued, grid.sequential["comparison"])
    except SweepError as e:
        print(f"design: {e}", file=sys.stderr)
        return 2
    out = sequential.design(grid.sequential, [100 * v for v in continued["per_seed"]], minutes)
    write_json(Path(args.out), out)
    print(json.dumps({k: out[k] for k in ("looks", "first_critical", "boundaries", "boundary_se", "required",
                                          "critical", "errors", "minutes_per_seed")}))
    short = [d for d, ok in out["meets"].items() if not ok]
    if short:  # written all the same: the file says why (its "required")
        print(f"design: the plan's critical value for {', '.join(short)} lies below the design's required "
              f"{', '.join(str(out['required'][d]) for d in short)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
