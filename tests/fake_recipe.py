"""A stand-in for recipe.py in sweep tests (seconds, no torch): it takes a cell's command line and writes what recipe.py
would, with test_sweep's fake cells: the shared base-evals cache for `--arm base`, else the cell's results.json, which
needs that cache (a node without it would have evaluated the base again: exit 3).

A file `kill-<cell>` beside the config makes the first attempt of that cell write half a results.json and kill the
process that started it (a Ray worker lost midway), as a preempted node does; the file is removed, so a retry runs.
`fail-<cell>`: every attempt exits 5. `forge-<cell>`: the cell's file records another training seed (re-sealed)."""

import argparse
import json
import os
import signal
import sys
import zlib
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from test_sweep import EVAL_HASH, HELDOUT, base_evals, tree_cell  # noqa: E402

ap = argparse.ArgumentParser()
for name in ("--config", "--arm", "--experiment", "--results_dir", "--seed", "--learning_rate"):
    ap.add_argument(name)
args, _ = ap.parse_known_args()
root = Path(args.results_dir)
cache = root / "base-evals" / f"{EVAL_HASH}.json"
if args.arm == "base":
    if not cache.is_file():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps({"eval_hash": EVAL_HASH, "eval_config": {"heldout": HELDOUT},
                                     "evals": base_evals(0)}))
        print("[fake recipe] base evals computed")
    sys.exit(0)
if not cache.is_file():
    print(f"[fake recipe] no base evals in {cache}: they would be computed again here")
    sys.exit(3)
kill = Path(args.config).parent / f"kill-{args.experiment}"
if kill.exists():
    kill.unlink()
    (root / args.experiment).mkdir(parents=True)
    (root / args.experiment / "results.json").write_text('{"config": {')  # half a file, then the worker is lost
    (kill.parent / f"killed-{args.experiment}").write_text(str(root))
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(1)
# the scores drawn from the cell's name: two cells never hold the same records, a cell run twice the same ones
if (kill.parent / f"fail-{args.experiment}").exists():
    print(f"[fake recipe] {args.experiment}: failing as told")
    sys.exit(5)
results = tree_cell(root, args.experiment, {arm: 0.5 for arm in args.arm.split(",")},
                    seed=zlib.crc32(args.experiment.encode()))
if (kill.parent / f"forge-{args.experiment}").exists():
    from gmts_recipe.records import seal

    results["config"]["seed"] += 100
    (root / args.experiment / "results.json").write_text(json.dumps(seal(results)))
print(f"[fake recipe] {args.experiment}: {args.arm}")
