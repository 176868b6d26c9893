"""Check a results.json and print its result tables.

    python check.py results/offline/results.json             # the tables; exit 0 on a valid file
    python check.py results/offline/results.json --markdown  # the README tables

Exits 2 with a one-line reason when the file is missing or malformed, when its records cannot be paired (every
evaluation must hold the same tasks, by task hash, each once, with k scores in [0, 1], and every arm must be evaluated
with the base's first sampling seed), or when a summary number differs from the one recomputed here from the
per-task records (pass@1, paired deltas and their bootstrap intervals, noise floor, verdicts).

What the digest proves, and what it does not: it is a plain SHA-256 of the file's canonical JSON, which `seal`
recomputes for anyone. A matching digest shows the file was not edited by hand after it was written, unless the
editor re-sealed it; the recomputed summaries show every summary number follows from the records in the file. Neither
shows that the records came from a run: a forger who writes records and calls `seal` passes both checks.

Verdicts (stats.verdict: the same evidence in both directions), each arm against the untrained base on the same tasks
and sampling seed, and between arms (GMTS vs ETS, ETS vs GRPO, GMTS vs GRPO; with the control arm, GMTS vs ETS-nz
and ETS-nz vs ETS):
- moved: the interval lies above zero and the delta exceeds the noise floor.
- collapsed (vs the base) / regressed (between arms): the interval lies below zero and the delta is below minus the
  noise floor.
- flat otherwise; a dip that has only one of the two (interval below zero, or delta below minus the floor) carries
  the flag `dip`.
- two arms that both collapsed read "both collapsed; X less" (or "both collapsed; flat"), never moved.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from gmts_recipe.stats import compare, noise_floor, paired_delta, pass_at_1, verdict

SCHEMA = 1
ARMS = ("grpo", "ets", "gmts", "ets_nz")  # ets_nz: the control (ETS, omega == 0 tokens ranked last), when it ran
ARM_LABELS = {"grpo": "GRPO (all tokens)", "ets": "ETS (top-20% entropy)", "gmts": "GMTS (top-20% |entropy x omega|)",
              "ets_nz": "ETS-nz (top-20% entropy, omega != 0 first)"}
SHORT_NAMES = {"grpo": "GRPO", "ets": "ETS", "gmts": "GMTS", "ets_nz": "ETS-nz"}
# (a, b): delta = a - b, for the pairs a file holds (sweep.py pools the same pairs over seeds). GMTS - ETS-nz: the
# |advantage| weighting at one kept count without zero-omega slots; ETS-nz - ETS: what skipping the zero-omega slots
# (a larger effective step) alone does.
COMPARISONS = (("gmts", "ets"), ("ets", "grpo"), ("gmts", "grpo"), ("gmts", "ets_nz"), ("ets_nz", "ets"))


class ResultsError(ValueError):
    """A results file that cannot be trusted; the message is the one-line reason."""


def digest(results: dict) -> str:
    """SHA-256 of the canonical JSON without the digest: anyone can recompute it (see the module docstring)."""
    body = {k: v for k, v in results.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _is_score(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1  # NaN fails both comparisons


def task_scores(evaluation: dict, where: str) -> dict[str, float]:
    """Per-task mean score keyed by the task's identity "index:hash" (the hash of its question and its index in the
    test pool: a generated pool can hold the same question twice, as results/offline does). Refuses a task seen
    twice, a score outside [0, 1], a sample count other than the evaluation's k, and a stored pass@1 that is not the
    records' own."""
    k = evaluation["k"]
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ResultsError(f"{where}: k={k!r} is not a positive sample count")
    scores: dict[str, float] = {}
    for record in evaluation["records"]:
        h, s = f"{record['task']}:{record['hash']}", record["scores"]
        if h in scores:
            raise ResultsError(f"{where}: task {h} appears twice")
        if not isinstance(s, list) or len(s) != k:
            raise ResultsError(f"{where}: task {h} has {len(s) if isinstance(s, list) else s!r} samples, k is {k}")
        if not all(_is_score(x) for x in s):
            raise ResultsError(f"{where}: task {h} has a score outside [0, 1]: {s}")
        scores[h] = statistics.fmean(s)
    stored, own = evaluation["pass@1"], pass_at_1(evaluation["records"])
    if not _close(stored, own):
        raise ResultsError(f"{where}: pass@1 is {stored!r} but its records give {own!r}")
    return scores


def paired(scores: dict[str, float], reference: list[str], where: str) -> list[float]:
    """The scores in the reference's task order; refuses a missing or an extra task."""
    missing, extra = set(reference) - set(scores), set(scores) - set(reference)
    if missing or extra:
        raise ResultsError(f"{where}: tasks differ from the base's first evaluation ({len(missing)} missing, "
                           f"{len(extra)} extra, e.g. {sorted(missing or extra)[0]})")
    return [scores[h] for h in reference]


def optional_seconds(entry: dict, key: str, where: str) -> None:
    """A time field a file may lack (written before the field existed) is, where present, a finite number >= 0:
    `compile_seconds` of every evaluation and `train_compile_seconds` of every arm (recipe.compile_seconds: the
    process's torch.compile time during that phase, CUDA-graph recording not included)."""
    x = entry.get(key, 0.0)
    if not (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0):
        raise ResultsError(f"{where}: {key} is {x!r}, not a number of seconds >= 0")


def _grad_norm_summary(train_log: list[dict]) -> dict:
    norms = [row["grad_norm"] for row in train_log if "grad_norm" in row]
    finite = [x for x in norms if isinstance(x, (int, float)) and math.isfinite(x)]
    return {"median": statistics.median(finite) if finite else None, "max": max(finite) if finite else None,
            "nonfinite": len(norms) - len(finite), "steps": len(norms)}


def _mean_of(train_log: list[dict], key: str) -> float | None:
    values = [row[key] for row in train_log if isinstance(row.get(key), (int, float))]
    return statistics.fmean(values) if values else None


def summarize(results: dict) -> dict:
    """Every summary number, recomputed from the per-task records (paired by task hash) and the per-step logs."""
    base_evals = results["base"]["evals"]
    reference = base_evals[0]  # the arms are evaluated with the first base seed: same tasks, same samples
    ref_scores = task_scores(reference, "base eval 0")
    order = list(ref_scores)
    for i, ev in enumerate(base_evals[1:], 1):
        paired(task_scores(ev, f"base eval {i}"), order, f"base eval {i}")
    for i, ev in enumerate(base_evals):
        optional_seconds(ev, "compile_seconds", f"base eval {i}")
    base_scores = [pass_at_1(e["records"]) for e in base_evals]
    floor = noise_floor(base_scores)
    summary: dict[str, Any] = {"base": {"pass@1": base_scores, "mean": statistics.fmean(base_scores),
                                        "noise_floor": floor, "seed": reference["seed"]}, "arms": {}}
    unknown = set(results.get("arms", {})) - set(ARMS)
    if unknown:
        raise ResultsError(f"unknown arm {sorted(unknown)[0]!r} (known: {', '.join(ARMS)})")
    arm_scores = {}
    for arm in ARMS:
        if arm not in results.get("arms", {}):
            continue
        entry = results["arms"][arm]
        ev = entry["eval"]
        if ev["seed"] != reference["seed"]:
            raise ResultsError(f"arm {arm}: evaluated with seed {ev['seed']!r}, the base's first seed is "
                               f"{reference['seed']!r} (the pairing needs the same samples' seed)")
        arm_scores[arm] = paired(task_scores(ev, f"arm {arm}"), order, f"arm {arm}")
        optional_seconds(ev, "compile_seconds", f"arm {arm}")
        optional_seconds(entry, "train_compile_seconds", f"arm {arm}")
        vs_base = paired_delta(arm_scores[arm], [ref_scores[h] for h in order])
        v, flags = verdict(vs_base, floor, down="collapsed")
        log = entry.get("train_log", [])
        summary["arms"][arm] = {
            "pass@1": pass_at_1(ev["records"]), "vs_base": vs_base, "verdict": v, "flags": flags,
            "grad_norm": _grad_norm_summary(log), "overlap": _mean_of(log, "selection/overlap"),
            "kept_fraction": _mean_of(log, "selection/kept_fraction"),
            "learning_rate": entry.get("learning_rate"),
        }
    summary["comparisons"] = {
        f"{a}_vs_{b}": compare(arm_scores[a], arm_scores[b], floor, names=(SHORT_NAMES[a], SHORT_NAMES[b]),
                               collapsed=tuple(summary["arms"][x]["verdict"] == "collapsed" for x in (a, b)))
        for a, b in COMPARISONS if a in arm_scores and b in arm_scores}
    return summary


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _first_difference(a: Any, b: Any, path: str = "summary") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b or not _close(a[k], b[k]):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}")
    return f"{path} is {b!r} in the file but {a!r} recomputed from the records"


def load(path: str | Path) -> dict:
    """Load and verify a results file; raise ResultsError with a one-line reason."""
    p = Path(path)
    if not p.is_file():
        raise ResultsError(f"{p}: no such file")
    try:
        results = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultsError(f"{p}: not valid JSON ({e.msg if hasattr(e, 'msg') else e})") from None
    if not isinstance(results, dict) or results.get("schema") != SCHEMA:
        raise ResultsError(f"{p}: not a results file of schema {SCHEMA}")
    if results.get("digest") != digest(results):
        raise ResultsError(f"{p}: digest mismatch: the file was edited after it was sealed")
    try:
        recomputed = summarize(results)
    except ResultsError as e:
        raise ResultsError(f"{p}: {e}") from None
    except (KeyError, TypeError, ValueError, IndexError, statistics.StatisticsError) as e:
        raise ResultsError(f"{p}: malformed records ({type(e).__name__}: {e})") from None
    if not _close(recomputed, results.get("summary")):
        raise ResultsError(f"{p}: {_first_difference(recomputed, results.get('summary') or {})}")
    return results


def seal(results: dict) -> dict:
    """Add the summary and the digest: the last step of writing a results file."""
    results["schema"] = SCHEMA
    results["summary"] = summarize(results)
    results["digest"] = digest(results)
    return results


def json_text(obj: Any, width: int = 120, _level: int = 0) -> str:
    """JSON with one indent per level, except that a value whose one-line form fits in `width` stays on one line: a
    per-task record is one line. Half the size of `indent=1` (which puts every score on its own line), so the results
    in the repository stay small, and still readable. Formatting only: the digest is over canonical JSON."""
    flat = json.dumps(obj)
    if not isinstance(obj, (dict, list)) or not obj or len(flat) + _level <= width:
        return flat
    pad = " " * (_level + 1)
    if isinstance(obj, dict):
        items = [f"{pad}{json.dumps(str(k))}: {json_text(v, width, _level + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * _level + "}"
    return "[\n" + ",\n".join(pad + json_text(v, width, _level + 1) for v in obj) + "\n" + " " * _level + "]"


def write_json(path: Path, obj: Any) -> None:
    """Atomic: a temporary file per process, renamed over the target; an interrupted write never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json_text(obj) + "\n", encoding="utf-8")
    tmp.replace(path)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _delta(d: dict | None) -> str:
    if not d:
        return "-"
    return f"{100 * d['delta']:+.1f} pts [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _verdict_text(entry: dict) -> str:
    return entry["verdict"] + "".join(f", {f}" for f in entry["flags"])


def table_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """The arm table: the base's noise floor, then each arm against the base."""
    s = results["summary"]
    header = ["arm", "pass@1", "vs base (95% CI)", "verdict", "grad norm median / max", "overlap with other ranking",
              "lr"]
    seeds = s["base"]["pass@1"]
    rows = [["base (untrained)", f"{_pct(s['base']['mean'])} ({len(seeds)} seeds: " + ", ".join(map(_pct, seeds))
             + ")", "-", f"noise floor {100 * s['base']['noise_floor']:.1f} pts", "-", "-", "-"]]
    for arm, a in s["arms"].items():
        g = a["grad_norm"]
        grad = "-" if g["median"] is None else f"{g['median']:.3g} / {g['max']:.3g}"
        if g["nonfinite"]:
            grad += f" ({g['nonfinite']} non-finite)"
        rows.append([ARM_LABELS.get(arm, arm), _pct(a["pass@1"]), _delta(a["vs_base"]), _verdict_text(a), grad,
                     _pct(a["overlap"]), "-" if a["learning_rate"] is None else f"{a['learning_rate']:g}"])
    return header, rows


def comparison_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """The comparison table: arm a minus arm b on the same tasks, for every pair of COMPARISONS in the file."""
    header = ["comparison", "delta (95% CI)", "verdict"]
    rows = []
    for key, c in results["summary"].get("comparisons", {}).items():
        a, b = key.split("_vs_")
        rows.append([f"{SHORT_NAMES.get(a, a)} vs {SHORT_NAMES.get(b, b)}", _delta(c), _verdict_text(c)])
    return header, rows


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> list[str]:
    if markdown:
        cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731 - a pipe inside a cell would split it
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(cell(x) for x in r) + " |" for r in rows)]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    return ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in [header, *rows]]


DIGEST_NOTE = ("Digest: a plain SHA-256 anyone can recompute (check.seal); it shows the file was not edited by hand "
               "without re-sealing and that every summary matches its records, not that the records came from a run.")


def render(results: dict, markdown: bool = False) -> str:
    lines = _table(*table_rows(results), markdown)
    header, rows = comparison_rows(results)
    if rows:
        lines += ["", *_table(header, rows, markdown)]
    n = results["summary"]["base"]
    tasks = len(results["base"]["evals"][0]["records"])
    k = results["base"]["evals"][0].get("k")
    lines.append("")
    lines.append(f"{results.get('config_name', '?')}: {tasks} held-out tasks x {k} samples, "
                 f"model {results.get('config', {}).get('model_name_or_path', '?')}, "
                 f"config {results.get('config_hash', '?')[:12]}, eval seed {n['seed']}.")
    lines.append(DIGEST_NOTE)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Verify a results.json (one experiment) or a sweep.json (a grid of them, "
                                             "every cell re-verified) and print its result tables.")
    ap.add_argument("results", help="path to results.json or sweep.json")
    ap.add_argument("--markdown", action="store_true", help="print the README tables")
    args = ap.parse_args(argv)
    if _is_sweep(args.results):
        import sweep

        try:
            summary = sweep.verify(args.results)
        except (ResultsError, sweep.SweepError) as e:
            print(f"check.py: {e}", file=sys.stderr)
            return 2
        print(sweep.render(summary, markdown=args.markdown))
        return 0
    try:
        results = load(args.results)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(render(results, markdown=args.markdown))
    return 0


def _is_sweep(path: str) -> bool:
    """A sweep summary says so (kind: sweep); anything unreadable goes to `load`, which explains."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")).get("kind") == "sweep"
    except (OSError, ValueError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(main())
