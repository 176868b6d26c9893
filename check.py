"""Check a results.json and print its result table.

    python check.py results/offline/results.json             # the table; exit 0 on a valid file
    python check.py results/offline/results.json --markdown  # the README table

Exits 2 with a one-line reason when the file is missing, malformed or tampered with. Tamper evidence: the file
carries a SHA-256 digest over its canonical JSON, and every summary number is recomputed here from the per-task
records (pass@1, paired deltas and their bootstrap intervals, noise floor, verdicts) and must match.

Verdicts (arm vs the untrained base, on the same tasks and sampling seed):
- moved: the confidence interval excludes zero on the positive side and the delta exceeds the noise floor.
- flat: the interval covers zero or the delta is within the floor.
- flag `regressed`: the mirror of moved (interval below zero and delta below minus the floor); the verdict says flat.
- collapsed: the arm ends below the base by more than the floor. It replaces flat, so a collapse never reads like a
  null result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from stats import noise_floor, paired_delta, pass_at_1

SCHEMA = 1
ARMS = ("ets", "gmts")
ARM_LABELS = {"ets": "ETS (top-20% entropy)", "gmts": "GMTS (top-20% |entropy x omega|)"}


class ResultsError(ValueError):
    """A results file that cannot be trusted; the message is the one-line reason."""


def digest(results: dict) -> str:
    body = {k: v for k, v in results.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _scores(evaluation: dict) -> list[float]:
    return [statistics.fmean(r["scores"]) for r in evaluation["records"]]


def verdict(delta: dict, floor: float, collapse_check: bool = True) -> tuple[str, list[str]]:
    moved = delta["low"] > 0 and delta["delta"] > floor
    regressed = delta["high"] < 0 and delta["delta"] < -floor
    flags = ["regressed"] if regressed else []
    if collapse_check and delta["delta"] < -floor:
        return "collapsed", flags
    return ("moved" if moved else "flat"), flags


def _grad_norm_summary(train_log: list[dict]) -> dict:
    norms = [row["grad_norm"] for row in train_log if "grad_norm" in row]
    finite = [x for x in norms if isinstance(x, (int, float)) and math.isfinite(x)]
    return {"median": statistics.median(finite) if finite else None, "max": max(finite) if finite else None,
            "nonfinite": len(norms) - len(finite), "steps": len(norms)}


def _mean_of(train_log: list[dict], key: str) -> float | None:
    values = [row[key] for row in train_log if isinstance(row.get(key), (int, float))]
    return statistics.fmean(values) if values else None


def summarize(results: dict) -> dict:
    """Every summary number, recomputed from the per-task records and the per-step logs."""
    base_evals = results["base"]["evals"]
    base_scores = [e["pass@1"] for e in base_evals]
    floor = noise_floor(base_scores)
    reference = base_evals[0]  # the arms are evaluated with the first base seed: same tasks, same samples
    summary: dict[str, Any] = {"base": {"pass@1": base_scores, "mean": statistics.fmean(base_scores),
                                        "noise_floor": floor, "seed": reference["seed"]}, "arms": {}}
    for arm in ARMS:
        if arm not in results.get("arms", {}):
            continue
        entry = results["arms"][arm]
        ev = entry["eval"]
        vs_base = paired_delta(_scores(ev), _scores(reference))
        v, flags = verdict(vs_base, floor)
        log = entry.get("train_log", [])
        summary["arms"][arm] = {
            "pass@1": pass_at_1(ev["records"]), "vs_base": vs_base, "verdict": v, "flags": flags,
            "grad_norm": _grad_norm_summary(log), "overlap": _mean_of(log, "selection/overlap"),
            "kept_fraction": _mean_of(log, "selection/kept_fraction"),
            "learning_rate": entry.get("learning_rate"),
        }
    if all(a in summary["arms"] for a in ARMS):
        d = paired_delta(_scores(results["arms"]["gmts"]["eval"]), _scores(results["arms"]["ets"]["eval"]))
        v, flags = verdict(d, floor, collapse_check=False)
        summary["gmts_vs_ets"] = {**d, "verdict": v, "flags": flags}
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
        raise ResultsError(f"{p}: digest mismatch: the file was edited after the run wrote it")
    try:
        recomputed = summarize(results)
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


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _delta(d: dict | None) -> str:
    if not d:
        return "-"
    return f"{100 * d['delta']:+.1f} pts [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def table_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    s = results["summary"]
    header = ["arm", "pass@1", "vs base (95% CI)", "GMTS vs ETS (95% CI)", "verdict", "grad norm median / max",
              "overlap with other ranking", "lr"]
    rows = [["base (untrained)", f"{_pct(s['base']['mean'])} (3 seeds: " + ", ".join(_pct(x) for x in s["base"]["pass@1"])
             + ")", "-", "-", f"noise floor {100 * s['base']['noise_floor']:.1f} pts", "-", "-", "-"]]
    for arm, a in s["arms"].items():
        g = a["grad_norm"]
        grad = "-" if g["median"] is None else f"{g['median']:.3g} / {g['max']:.3g}"
        if g["nonfinite"]:
            grad += f" ({g['nonfinite']} non-finite)"
        verdict_text = a["verdict"] + "".join(f", {f}" for f in a["flags"])
        versus = _delta(s.get("gmts_vs_ets")) if arm == "gmts" else "-"
        if arm == "gmts" and "gmts_vs_ets" in s:
            versus += f" {s['gmts_vs_ets']['verdict']}" + "".join(f", {f}" for f in s["gmts_vs_ets"]["flags"])
        rows.append([ARM_LABELS.get(arm, arm), _pct(a["pass@1"]), _delta(a["vs_base"]), versus, verdict_text, grad,
                     _pct(a["overlap"]), "-" if a["learning_rate"] is None else f"{a['learning_rate']:g}"])
    return header, rows


def render(results: dict, markdown: bool = False) -> str:
    header, rows = table_rows(results)
    if markdown:
        cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731 - a pipe inside a cell would split it
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        lines = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [header, *rows]]
    n = results["summary"]["base"]
    tasks = len(results["base"]["evals"][0]["records"])
    k = results["base"]["evals"][0].get("k")
    lines.append("")
    lines.append(f"{results.get('config_name', '?')}: {tasks} held-out tasks x {k} samples, "
                 f"model {results.get('config', {}).get('model_name_or_path', '?')}, "
                 f"config {results.get('config_hash', '?')[:12]}, eval seed {n['seed']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Verify a results.json and print its result table.")
    ap.add_argument("results", help="path to results.json")
    ap.add_argument("--markdown", action="store_true", help="print the README table")
    args = ap.parse_args(argv)
    try:
        results = load(args.results)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(render(results, markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
