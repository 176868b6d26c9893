"""Does a complete run repeat? The results.json of runs of one configuration (same seed, same machine and software),
compared field by field against the first: each base evaluation's and each arm's evaluation records (every task's
per-sample scores and completion lengths), each arm's training log (every logged metric but wall-clock times) and its
rollouts (`rollout_digests`, a digest of every completion of every step).

    python bench/repeat.py --out bench/repeat-h200.json cold=A/results.json warm=B/results.json \
        after-another=C/results.json
    python bench/repeat.py --markdown bench/repeat-h200.json   # a comparison as a table
    python bench/repeat.py --determinism bench/determinism-h200.json bench/determinism-h200-on.json   # that table

A later run may be of the base evaluations alone (`recipe.py --arm base`): its base evaluations are compared. A run
may use other execution options (e.g. `--gradient_checkpointing false`): the file lists each run's, per arm, so a
comparison says whether an option changed any number, and each arm's median training step (`step_time_s`) what it
bought. Writes the comparison (one entry per later run: what differs from the first, counted) and `identical`, true
when every later run equals the first in all of it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from gmts_recipe.records import current_record  # noqa: E402 - a file of any format, as today's holds it
from gmts_recipe.records import json_file  # noqa: E402
from gmts_recipe.markdown import fill_lines  # noqa: E402 - the documentation's wrapped prose
from tables import markdown_row, markdown_table  # noqa: E402 - bench/tables.py, beside this script
from complete_run import median_step_s  # noqa: E402 - the median step after the compiling first, written once there

WALL_CLOCK = ("runtime", "per_second", "time", "seconds")  # a training log's timing fields: not expected to repeat


def _records_differ(a: list[dict], b: list[dict]) -> int:
    """Tasks whose records (scores and completion lengths of every sample) differ; a task missing on one side too."""
    key = _task_key(a, b)
    by_task = {r[key]: r for r in b}
    return sum(by_task.get(r[key], {}).get("scores") != r["scores"]
               or by_task.get(r[key], {}).get("lengths") != r["lengths"] for r in a) + abs(len(a) - len(b))


def _task_key(a: list[dict], b: list[dict]) -> str:
    """What pairs two runs' records: the task's index in its dataset where both record it (it holds across the
    versions of the task key: a run keyed by question and gold answer beside one keyed by the question alone), else
    the task's hash."""
    return "task" if all("task" in r for r in (*a, *b)) else "hash"


def _log(entry: dict) -> list[dict]:
    return [{k: v for k, v in row.items() if not any(w in k for w in WALL_CLOCK)} for row in entry["train_log"]]


def _first_step_differing(log_a: list[dict], log_b: list[dict]) -> dict | None:
    """The first training step (the log's `step`, 1 = the first) whose metrics differ, with each differing metric's
    two values: where a difference starts tells the update (same rollouts, other metrics) from the generation."""
    for i, (x, y) in enumerate(zip(log_a, log_b)):
        if x != y:
            return {"step": x.get("step", i + 1),
                    "fields": {k: [x.get(k), y.get(k)] for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)}}
    return None if len(log_a) == len(log_b) else {"step": min(len(log_a), len(log_b)) + 1, "fields": {}}


def _first_rollouts_differing(a: dict | None, b: dict | None) -> int | None:
    """The first training step (1 = the first) whose rollouts differ: `rollout_digests` is keyed by the global step
    the rollouts were drawn at, before that step's update (0 for the first step)."""
    if a is None or b is None:
        return None
    differing = [int(s) for s in set(a) | set(b) if a.get(s) != b.get(s)]
    return min(differing) + 1 if differing else None


def compare(first: dict, other: dict) -> dict:
    """What of `other` differs from `first` (two results.json of one configuration), counted per part: every base
    evaluation, and the arms `other` ran (a process that ran only the base evaluations compares those)."""
    base = {}
    for a, b in zip(first["base"]["evals"], other["base"]["evals"], strict=True):
        base[str(a["seed"])] = {"tasks_differing": _records_differ(a["records"], b["records"]),
                                "pass@1": [a["pass@1"], b["pass@1"]]}
    arms = {}
    for arm in sorted(other["arms"]):
        if arm not in first["arms"] or arm not in other["arms"]:
            arms[arm] = {"missing": True}
            continue
        a, b = first["arms"][arm], other["arms"][arm]
        log_a, log_b = _log(a), _log(b)
        digests_a, digests_b = a.get("rollout_digests"), b.get("rollout_digests")
        arms[arm] = {
            "train_steps_differing": sum(x != y for x, y in zip(log_a, log_b)) + abs(len(log_a) - len(log_b)),
            "rollout_steps_differing": (None if digests_a is None or digests_b is None else
                                        sum(digests_a.get(s) != digests_b.get(s) for s in set(digests_a) | set(digests_b))),
            "first_train_step_differing": _first_step_differing(log_a, log_b),
            "first_rollout_step_differing": _first_rollouts_differing(digests_a, digests_b),
            "eval_tasks_differing": _records_differ(a["eval"]["records"], b["eval"]["records"]),
            "pass@1": [a["eval"]["pass@1"], b["eval"]["pass@1"]],
        }
    same = (all(v["tasks_differing"] == 0 for v in base.values())
            and all(not v.get("missing") and v["train_steps_differing"] == 0 and v["eval_tasks_differing"] == 0
                    and v["rollout_steps_differing"] in (0, None) for v in arms.values()))
    deltas = {key: [first.get("summary", {}).get("comparisons", {}).get(key, {}).get("delta"), d.get("delta")]
              for key, d in other.get("summary", {}).get("comparisons", {}).items()}
    return {"identical": same, "base": base, "arms": arms, "deltas": deltas}


def _where_it_starts(arm: str, v: dict) -> str:
    """One arm's first differing training step, its differing metrics (the two values, the first three) and the
    first step whose rollouts differ; '-' where nothing differs (files from before these fields: '?')."""
    if "first_train_step_differing" not in v:
        return f"{arm} ?"
    first, rollouts = v["first_train_step_differing"], v["first_rollout_step_differing"]
    if first is None and rollouts is None:
        return f"{arm} -"
    parts = []
    if first is not None:
        shown = [f"{k} {_value(a)} vs {_value(b)}" for k, (a, b) in list(first["fields"].items())[:3]]
        more = len(first["fields"]) - len(shown)
        parts.append(f"metrics at step {first['step']} ({', '.join(shown)}{f', {more} more' if more > 0 else ''})")
    if rollouts is not None:
        parts.append(f"rollouts from step {rollouts}")
    return f"{arm}: {'; '.join(parts)}"


def step_time_s(results: dict) -> dict[str, float | None]:
    """Each arm's median training step in seconds, its first step left out (a fresh process compiles there): what an
    execution option buys, beside whether it changed any number (wall-clock times are never compared for that)."""
    return {arm: median_step_s(entry["train_log"]) if len(entry.get("train_log", [])) > 1 else None
            for arm, entry in results.get("arms", {}).items()}


def _comparison_name(key: str) -> str:
    """A summary's comparison key as the tables write it: gmts_vs_ets -> GMTS - ETS."""
    return " - ".join(part.upper().replace("_NZ", "-nz") for part in key.split("_vs_"))


def _points(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:+.1f}"


def _value(x: object) -> str:
    return format(x, ".7g") if isinstance(x, float) else str(x)


def markdown(comparison: dict) -> str:
    """The comparison file as a table: one row per later run, what differs from the reference, counted, and where
    in training it starts (training steps numbered from 1; wall-clock times are never compared)."""
    rows = markdown_table(["run", "vs", "base evaluations: tasks differing", "training steps differing",
                           "rollout steps differing", "evaluation tasks differing", "identical",
                           "where a difference starts"])
    starts = []  # listed below the table: a cell of them outgrows a page's line
    for label, c in comparison["compared"].items():
        base = ", ".join(str(v["tasks_differing"]) for v in c["base"].values())
        arms = c["arms"]
        per_arm = lambda key: ", ".join(f"{a} {v[key]}" for a, v in arms.items()) or "(base only)"  # noqa: E731
        where = "; ".join(_where_it_starts(a, v) for a, v in arms.items() if not v.get("missing")) or "-"
        if len(where) > 40:
            starts.append(f"- {label} vs {comparison['reference']}: {where}")
            where = "below"
        rows.append(markdown_row([label, comparison["reference"], base, per_arm("train_steps_differing"),
                                  per_arm("rollout_steps_differing"), per_arm("eval_tasks_differing"),
                                  "yes" if c["identical"] else "no", where]))
    if starts:
        rows += ["", "Where a difference starts:", "", *starts]
    deltas = [f"{label} {_comparison_name(key)} {_points(b)} against {_points(a)}"
              for label, c in comparison["compared"].items() for key, (a, b) in c.get("deltas", {}).items()
              if a != b]  # files from before this field have none; equal ones need no line
    if deltas:
        rows += ["", f"Paired deltas that differ from {comparison['reference']}'s, points: " + "; ".join(deltas) + "."]
    times = comparison.get("step_time_s")
    if times:  # files from before this field have none
        rows.append("")
        rows.append("Median training step, its first left out: " + "; ".join(
            f"{label} " + ", ".join(f"{arm} {'?' if t is None else f'{t:.2f} s'}" for arm, t in arms.items())
            for label, arms in times.items()) + ".")
    return "\n".join(rows)


# ---------------------------------------------------------------------------- deterministic_kernels, shared GPU
# One run alone, then two at once on one GPU, per setting of deterministic_kernels: measured once, by a script
# bench/README.md names by commit; its files' table stays here.
def _mean_median_step_s(records: dict | list | None) -> float | None:
    """The mean over a setting's runs (one alone, or the two at once) of each run's median step (its steps after the
    first, which compiles); None when no run of them finished."""
    records = records if isinstance(records, list) else [records]
    values = [r["median_step_s"] for r in records if r and r.get("status") == "ok" and r["median_step_s"]]
    return statistics.mean(values) if values else None


def _verdict(c: dict) -> str:
    if c.get("identical") is None:
        return "not compared (a run failed)"
    if c["identical"]:
        return f"identical ({len(c['steps'])} steps)"
    rollouts = c["first_step_rollouts_differ"]
    return (f"differs from step {c['first_step_metrics_differ']} ("
            + (f"rollouts from step {rollouts})" if rollouts is not None else "rollouts the same)"))


def determinism_markdown(paths: list[str]) -> str:
    """The table of a measurement of `deterministic_kernels` under a shared GPU (bench/determinism-h200*.json): per
    results file and setting (off, on), each run's status, the median step alone and per run when two runs share the
    GPU, and each shared run against the run alone (the first step where its rollouts or logged metrics differ)."""
    rows = markdown_table(["file", "deterministic_kernels", "measured", "median step alone (s)",
                           "median step, two at once (s)", "shared-1 vs alone", "shared-2 vs alone", "failed run"])
    fmt = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-"  # noqa: E731
    reasons = []
    for path in paths:
        result = json.loads(Path(path).read_text())
        for setting, runs in result["runs"].items():
            comparison = result.get("comparison", {}).get(setting, {})
            failed = [r.get("reason", "") for r in [runs.get("alone"), *runs.get("shared", [])]
                      if r and r.get("status") != "ok"]
            if failed:  # the reason below the table: a cell of it outgrows a page's line
                reasons.append(f"- {Path(path).name}, {setting}: {failed[0][:160]}"
                               + (f" ({len(failed)} runs)" if len(failed) > 1 else ""))
            rows.append(markdown_row([Path(path).name, setting, result["measured"],
                                      fmt(_mean_median_step_s(runs.get("alone"))),
                                      fmt(_mean_median_step_s(runs.get("shared"))),
                                      _verdict(comparison.get("shared-1 vs alone", {})),
                                      _verdict(comparison.get("shared-2 vs alone", {})), "below" if failed else "-"]))
    return "\n".join(rows + (["", "Failed runs:", "", *reasons] if reasons else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="LABEL=results.json, the first is the reference")
    parser.add_argument("--out", help="the comparison, as JSON")
    parser.add_argument("--markdown", metavar="COMPARISON", type=json_file,
                        help="print a comparison file written by --out as a table")
    parser.add_argument("--determinism", nargs="+", metavar="FILE", type=json_file,
                        help="print the table of deterministic_kernels files (bench/determinism-h200*.json)")
    args = parser.parse_args(argv)
    if args.determinism:
        print(fill_lines(determinism_markdown(args.determinism)))
        return 0
    if args.markdown:
        print(fill_lines(markdown(json.loads(Path(args.markdown).read_text()))))
        return 0
    if not args.out:
        print("repeat.py: give --out FILE and the runs, or --markdown FILE", file=sys.stderr)
        return 2
    runs = []
    for spec in args.runs:
        label, sep, path = spec.partition("=")
        if not sep or not Path(path).is_file():
            print(f"repeat.py: {spec!r}: expected LABEL=PATH to an existing results.json", file=sys.stderr)
            return 2
        runs.append((label, path, current_record(json.loads(Path(path).read_text()), Path(path).parent)))
    if len(runs) < 2:
        print("repeat.py: give at least two runs", file=sys.stderr)
        return 2
    (ref_label, ref_path, ref), rest = runs[0], runs[1:]
    pairs = {label: compare(ref, results) for label, _, results in rest}
    out = {"reference": ref_label, "runs": {label: path for label, path, _ in runs},
           "config_hash": {label: r.get("config_hash") for label, _, r in runs},
           "generation_options": {label: {arm: e.get("generation_options", {}) for arm, e in r.get("arms", {}).items()}
                                  for label, _, r in runs},
           "step_time_s": {label: step_time_s(r) for label, _, r in runs},
           "versions": ref.get("versions"), "identical": all(p["identical"] for p in pairs.values()),
           "compared": pairs}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"{'identical' if out['identical'] else 'DIFFERENT'}: " + ", ".join(
        f"{label} vs {ref_label}: {'same' if p['identical'] else 'differs'}" for label, p in pairs.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
