"""Check a results.json and print its result tables.

    python check.py results/offline/results.json             # the tables; exit 0 on a valid file
    python check.py results/offline/results.json --markdown  # the README tables
    python check.py runs/quickstart/results.json --show 3     # what the model wrote for task 3, each sample's score

Exits 2 with a one-line reason when the file is missing or malformed, when its records cannot be paired (every
evaluation must hold the same tasks, by task hash, each once, with k scores in [0, 1], and every arm must be evaluated
with the base's first sampling seed), or when a summary number differs from the one recomputed here from the
per-task records (pass@1, paired deltas and their bootstrap intervals, noise floor, verdicts).

An evaluation-only file (`python eval.py MODEL`: one model's evaluations over the recipe's seeds, kind "evaluation",
no trained arms) is verified the same way, samples included, and printed as the model's pass@1 with a 95%
bootstrap interval over tasks.

What the digest proves, and what it does not: it is a plain SHA-256 of the file's canonical JSON, which `seal`
recomputes for anyone. A matching digest shows the file was not edited by hand after it was written, unless the
editor re-sealed it; the recomputed summaries show every summary number follows from the records in the file. Neither
shows that the records came from a run: a forger who writes records and calls `seal` passes both checks.

What was scored: every evaluation keeps its completions in a samples file beside results.json (recipe.py writes it;
one xz-compressed JSON line per task: index, question hash, gold answer, the k texts, their scores), its path and
SHA-256 recorded in the evaluation, inside the digest. check.py refuses a samples file whose SHA-256 differs, that
does not hold exactly the evaluation's tasks and k texts per task, or whose scores differ from the records' or from
what the recipe's reward (eval.sample_scores) gives its texts now, in one line naming file, evaluation, task and
sample. So flipping a score and re-sealing is refused, and a forger must now write texts whose answers earn the
scores, texts anyone can read (--show). A file written before evaluations kept their samples is checked as above,
and check.py says in one line that its scores were not re-scored.

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
import json
import sys
from pathlib import Path

from gmts_recipe.stats import (compare, mean_interval, noise_floor, paired_delta, pass_at_1,  # noqa: F401
                               verdict)  # the names as before, for callers
from gmts_recipe.records import (ARM_LABELS, ARMS, COMPARISONS, SCHEMA, SHORT_NAMES, ResultsError,  # noqa: F401
                                 _close, _first_difference, digest, json_text, load, optional_seconds, paired, seal,
                                 summarize, task_scores, write_json, agreement_line,
                                 current_record)  # a results file's model, verification and writing
from gmts_recipe.samples import (SAMPLES_PRESET, _samples_of, check_samples, evaluations,  # noqa: F401
                                 read_samples, samples_bytes, samples_line, samples_path, show, verify, verify_samples,
                                 write_samples)  # what each evaluation scored


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


def render_evaluation(results: dict, markdown: bool = False) -> str:
    """The table of an eval-only file; one that also holds trained arms is not what eval.py writes, and is refused."""
    if results.get("arms"):
        raise ResultsError(f"an evaluation-only file (kind: evaluation) holds trained arms: {', '.join(results['arms'])}")
    ev = results["base"]["evals"][0]
    lines = _table(*evaluation_rows(results), markdown)
    about = (f"{results.get('config_name', '?')}: {len(ev['records'])} held-out tasks x {ev.get('k')} samples per "
             f"seed, config {results.get('config_hash', '?')[:12]}; an evaluation only, no trained arms.")
    lines += ["", about, DIGEST_NOTE]
    return "\n".join(lines)


def render(results: dict, markdown: bool = False) -> str:
    if results.get("kind") == "evaluation":  # eval.py's file: one model, no arms
        return render_evaluation(results, markdown)
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
                 f"config {current_record(results).get('config_hash', '?')[:12]}, eval seed {n['seed']}.")
    agreement = agreement_line(results)
    if agreement:
        lines.append(agreement)
    lines.append(DIGEST_NOTE)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Verify a results.json (one experiment) or a sweep.json (a grid of them, "
                                             "every cell re-verified) and print its result tables.")
    ap.add_argument("results", help="path to results.json or sweep.json")
    ap.add_argument("--markdown", action="store_true", help="print the README tables")
    ap.add_argument("--show", metavar="TASK", default=None,
                    help="print the stored samples of one task with their scores: the task's number in its split "
                         "(the 'task' of the records, e.g. a GSM8K test index) or a prefix of its question hash")
    args = ap.parse_args(argv)
    try:
        args.results = _resolve(args.results)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    if _is_sweep(args.results):
        import sweep

        try:
            summary = sweep.verify(args.results)
            report = _sweep_samples(Path(args.results), summary) if args.show is None else None
        except (ResultsError, sweep.SweepError) as e:
            print(f"check.py: {e}", file=sys.stderr)
            return 2
        if args.show is not None:
            print(f"check.py: --show reads a results.json (a sweep's cells: {Path(args.results).parent}/<cell>/"
                  f"results.json)", file=sys.stderr)
            return 2
        print(sweep.render(summary, markdown=args.markdown))
        print(samples_line(report), file=sys.stderr if args.markdown else sys.stdout)
        return 0
    try:
        results, report = verify(args.results)
        text = render(results, markdown=args.markdown) if args.show is None else \
            show(results, Path(args.results).parent, args.show)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(text)
    if args.show is None:  # the README's tables (--markdown) stay the tables: the line goes to stderr there
        print(samples_line(report), file=sys.stderr if args.markdown else sys.stdout)
    return 0


def _sweep_samples(path: Path, summary: dict) -> dict:
    """verify_samples over every cell of a verified sweep.json, the shared base evaluations re-scored once."""
    from tqdm.auto import tqdm

    total: dict = {"evaluations": 0, "with_samples": 0, "samples": 0, "without": []}
    done: dict = {}
    # a grid of 100 cells takes about a minute: a bar on a terminal (tqdm leaves pipes and logs alone)
    for cell in tqdm(summary["cells"], desc="re-scoring samples", unit="cell", leave=False, disable=None):
        # verified by sweep.verify (check.load): read again, the same bytes by digest
        results_path = path.parent / cell["path"]
        results = json.loads(results_path.read_text(encoding="utf-8"))
        if digest(results) != cell["digest"]:
            raise ResultsError(f"{results_path}: changed while it was being checked")
        report = _samples_of(results_path, results, done)
        for key in ("evaluations", "with_samples", "samples"):
            total[key] += report[key]
        total["without"] += [f"{cell['cell']} {where}" for where in report["without"]]
    return total


def _resolve(path: str) -> str:
    """The file to check: a folder stands for the results.json (a run) or sweep.json (a sweep) in it; a path that is
    not there is answered with where runs write their results, and the ones under ./runs."""
    p = Path(path)
    if p.is_dir():
        inside = [p / name for name in ("results.json", "sweep.json") if (p / name).is_file()]
        if not inside:
            raise ResultsError(f"{p} is a folder without results.json or sweep.json (a run writes "
                               f"runs/<config name>/results.json, a sweep <results_dir>/<name>/sweep.json)")
        return str(inside[0])
    if not p.exists():
        runs = sorted(str(f) for f in Path("runs").glob("*/results.json"))
        raise ResultsError(f"{p}: no such file; a run writes runs/<config name>/results.json (the Quick start: "
                           f"runs/quickstart/results.json){'; found: ' + ', '.join(runs) if runs else ''}")
    return path


def _is_sweep(path: str) -> bool:
    """A sweep summary says so (kind: sweep); anything unreadable goes to `load`, which explains."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")).get("kind") == "sweep"
    except (OSError, ValueError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(main())
