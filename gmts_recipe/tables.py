"""The result tables of a results file: the arms against the base, the compared pairs, and an eval-only file's table
(what check.py prints and update_readme.py puts in the README). Here, not in check.py, so that eval.py's command prints
its file's table without importing a script.
"""

from __future__ import annotations

from gmts_recipe.arms import ARMS, DEFAULT_RATIO, arm_named, short_name
from gmts_recipe.records import ResultsError, agreement_line, task_scores
from gmts_recipe.stats import mean_interval


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _delta(d: dict | None) -> str:
    if not d:
        return "-"
    return f"{100 * d['delta']:+.1f} pts [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _verdict_text(entry: dict) -> str:
    return entry["verdict"] + "".join(f", {f}" for f in entry["flags"])


def _label(arm: str, results: dict) -> str:
    """The arm's label at the file's ratio of kept tokens (the config records it only when set)."""
    if arm not in ARMS:
        return arm
    return arm_named(arm).label(results.get("config", {}).get("selection_ratio", DEFAULT_RATIO))


NOT_RESCORED = " (not re-scored)"


def table_rows(results: dict, unsampled: tuple[str, ...] = ()) -> tuple[list[str], list[list[str]]]:
    """The arm table: the base's noise floor, then each arm against the base. `unsampled`: the evaluations (as
    samples.evaluations names them) that keep no samples, whose pass@1 the table marks as not re-scored."""
    s = results["summary"]
    mark = lambda where: NOT_RESCORED if where in unsampled else ""  # noqa: E731
    header = ["arm", "pass@1", "vs base (95% CI)", "verdict", "grad norm median / max", "overlap with other ranking",
              "lr"]
    seeds = s["base"]["pass@1"]
    base_mark = NOT_RESCORED if any(w.startswith("base eval") for w in unsampled) else ""
    rows = [["base (untrained)", f"{_pct(s['base']['mean'])} ({len(seeds)} seeds: " + ", ".join(map(_pct, seeds))
             + ")" + base_mark, "-", f"noise floor {100 * s['base']['noise_floor']:.1f} pts", "-", "-", "-"]]
    for arm, a in s["arms"].items():
        g = a["grad_norm"]
        grad = "-" if g["median"] is None else f"{g['median']:.3g} / {g['max']:.3g}"
        if g["nonfinite"]:
            grad += f" ({g['nonfinite']} non-finite)"
        rows.append([_label(arm, results), _pct(a["pass@1"]) + mark(f"arm {arm}"), _delta(a["vs_base"]),
                     _verdict_text(a), grad,
                     _pct(a["overlap"]), "-" if a["learning_rate"] is None else f"{a['learning_rate']:g}"])
    return header, rows


def comparison_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """The comparison table: arm a minus arm b on the same tasks, for every compared pair in the file."""
    header = ["comparison", "delta (95% CI)", "verdict"]
    rows = []
    for key, c in results["summary"].get("comparisons", {}).items():
        a, b = key.split("_vs_")
        rows.append([f"{short_name(a)} vs {short_name(b)}", _delta(c), _verdict_text(c)])
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


def evaluation_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """An eval-only file (eval.py: one model's evaluations, no trained arms): its pass@1 over every seed with a
    bootstrap interval over tasks (each task's mean over all its seeds' samples), and each seed's pass@1."""
    s = results["summary"]["base"]
    evals = results["base"]["evals"]
    per_seed = [task_scores(ev, f"evaluation {i}") for i, ev in enumerate(evals)]
    order = list(per_seed[0])
    interval = mean_interval([sum(scores[t] for scores in per_seed) / len(per_seed) for t in order])
    shown = "-" if interval["low"] is None else f"[{_pct(interval['low'])}, {_pct(interval['high'])}]"
    model = results.get("model", {})
    name = model.get("name", "?") + (f" (adapter on {model['base']})" if model.get("adapter") else "")
    header = ["model", "pass@1", "95% CI (tasks)", "per seed", "spread over seeds"]
    return header, [[name, _pct(s["mean"]), shown, ", ".join(f"{ev['seed']}: {_pct(p)}" for ev, p in
                                                              zip(evals, s["pass@1"])),
                     f"{100 * s['noise_floor']:.1f} pts"]]


def _heldout(results: dict) -> str:
    """'held-out tasks', naming the set where a task has several (MATH: MATH-500, or Minerva OCW apart)."""
    from gmts_recipe.math_data import HELDOUT_SETS

    named = HELDOUT_SETS.get((results.get("data") or {}).get("heldout_set"))
    return f"held-out tasks ({named})" if named else "held-out tasks"


def render_evaluation(results: dict, markdown: bool = False) -> str:
    """The table of an eval-only file; one that also holds trained arms is not what eval.py writes, and is refused."""
    if results.get("arms"):
        raise ResultsError(f"an evaluation-only file (kind: evaluation) holds trained arms: {', '.join(results['arms'])}")
    ev = results["base"]["evals"][0]
    lines = _table(*evaluation_rows(results), markdown)
    about = (f"{results.get('config_name', '?')}: {len(ev['records'])} {_heldout(results)} x {ev.get('k')} samples "
             f"per seed, config {results.get('config_hash', '?')[:12]}; an evaluation only, no trained arms.")
    lines += ["", about, DIGEST_NOTE]
    return "\n".join(lines)


def render(results: dict, markdown: bool = False, unsampled: tuple[str, ...] = ()) -> str:
    if results.get("kind") == "evaluation":  # eval.py's file: one model, no arms
        return render_evaluation(results, markdown)
    lines = _table(*table_rows(results, unsampled), markdown)
    header, rows = comparison_rows(results)
    if rows:
        lines += ["", *_table(header, rows, markdown)]
    n = results["summary"]["base"]
    tasks = len(results["base"]["evals"][0]["records"])
    k = results["base"]["evals"][0].get("k")
    lines.append("")
    lines.append(f"{results.get('config_name', '?')}: {tasks} {_heldout(results)} x {k} samples, "
                 f"model {results.get('config', {}).get('model_name_or_path', '?')}, "
                 f"config {results.get('config_hash', '?')[:12]}, eval seed {n['seed']}.")
    agreement = agreement_line(results)
    if agreement:
        lines.append(agreement)
    lines.append(DIGEST_NOTE)
    if markdown:  # the documentation's prose lines wrapped (gmts_recipe.markdown); a table row stays one line
        from gmts_recipe.markdown import fill_lines

        return fill_lines("\n".join(lines))
    return "\n".join(lines)
