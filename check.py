"""Check a results.json and print its result tables.

    python check.py runs/quickstart/results.json              # the tables; exit 0 on a valid file
    python check.py runs/quickstart/results.json --markdown   # the README tables
    python check.py results/offline/results.json              # from before evaluations kept samples: not re-scored
    python check.py runs/quickstart/results.json --show 3     # task 3's question, what the model wrote, each score
    python check.py --power results/confirm/sweep.json        # why a sweep could not decide; the seeds one needs

Exits 2 with a one-line reason when the file is missing or malformed, when its records cannot be paired (every
evaluation must hold the run's held-out tasks, by task key, each once, with k scores in [0, 1], and every arm must be
evaluated with the base's first sampling seed), or when a summary number differs from the one recomputed here from the
per-task records (pass@1, paired deltas and their bootstrap intervals, noise floor, verdicts).

An evaluation-only file (`python eval.py MODEL`: one model's evaluations over the recipe's seeds, kind "evaluation",
no trained arms) is verified the same way, samples included, and printed as the model's pass@1 with a 95%
bootstrap interval over tasks.

What a seal and a re-score prove, and what they do not. The digest is a plain SHA-256 of the file's canonical JSON
that `seal` recomputes for anyone: it shows only that nobody edited the file without re-sealing it, and the
recomputed summaries that every number follows from the records. The re-score ties the records to texts: every
evaluation keeps its completions in a samples file beside results.json (one xz-compressed JSON line per task: index,
task key, question, gold answer, the k texts, their scores; its path and SHA-256 inside the digest), and check.py
re-scores every text with the recipe's reward (rewards.sample_scores, at the reward version the file records) against the gold answer. Every evaluation must hold exactly
the run's held-out tasks (data.heldout), and where the run's test pool is at hand (the generated task is rebuilt
from its seed; GSM8K from --gsm8k_path DIR or the run's gsm8k_path) each task's key (question and gold answer; files
written before: the question) and each samples file's gold answer must be the dataset's. An evaluation without
samples is refused where others of its file keep theirs, unless --allow-unsampled; a file none of whose evaluations
keeps samples (written before evaluations kept them) passes, its table marking the numbers "(not re-scored)" and its
last line saying how many. Any mismatch is one line naming file, evaluation, task and sample. What remains possible:
a forger who writes new completions that earn the scores (texts anyone can read with --show), who reruns with
another seed or another model and keeps the run they like, who drops every samples file of a file (it then reads
"not re-scored", as a file from before samples does), or, for GSM8K without the dataset at hand, who rewrites gold
answers and keys together (said in the output: not compared). Nothing here shows that the texts came from the
trained model: that takes rerunning the recipe (configs and seeds are recorded; see "Runs that repeat").
Provenance (each arm's commit, uncommitted changes, times, host, GPUs, library versions, execution options) is
printed as recorded, not verified.

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
from gmts_recipe.records import (SCHEMA, ResultsError,  # noqa: F401
                                 _close, _first_difference, digest, json_text, load, optional_seconds, paired, seal,
                                 summarize, task_scores, write_json, agreement_line,
                                 current_record)  # a results file's model, verification and writing
from gmts_recipe.samples import dataset_line  # the held-out tasks against the dataset
from gmts_recipe.samples import (SAMPLES_PRESET, _samples_of, check_samples, evaluations,  # noqa: F401
                                 read_samples, samples_bytes, samples_line, samples_path, show, verify, verify_samples,
                                 write_samples)  # what each evaluation scored
from gmts_recipe.sweep import summary as sweep_summary  # a sweep.json recomputed from its cells
from gmts_recipe.sweep.deviations import deviations
from gmts_recipe.sweep.grid import SweepError
from gmts_recipe.sweep.plan import report as plan_report  # the sweep's plan against git
from gmts_recipe.sweep.report import render as render_sweep
from selection import short_name  # the arms' short names (the rule registry; no torch)
from gmts_recipe.tables import (DIGEST_NOTE, NOT_RESCORED, _delta, _label, _pct, _table,  # noqa: F401
                                _verdict_text, comparison_rows, evaluation_rows, render, render_evaluation,
                                table_rows)  # the result tables, shared with eval.py
from gmts_recipe.tables import fit_text, output_width  # the default output fitted to the terminal


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Verify a results.json (one experiment) or a sweep.json (a grid of them, "
                                             "every cell re-verified) and print its result tables.")
    ap.add_argument("results", help="path to results.json or sweep.json")
    ap.add_argument("--markdown", action="store_true", help="print the README tables")
    ap.add_argument("--show", metavar="TASK", default=None,
                    help="print one task's question and its stored samples with their scores: the task's number in "
                         "its split (the 'task' of the records, e.g. a GSM8K test index) or a prefix of its question "
                         "hash")
    ap.add_argument("--allow-unsampled", action="store_true",
                    help="accept a file where some evaluations keep samples and others none (a file none of whose "
                         "evaluations keeps any, written before evaluations kept their completions, passes without "
                         "it); the table marks the numbers not re-scored")
    ap.add_argument("--gsm8k_path", metavar="DIR", default=None,
                    help="GSM8K's train.jsonl and test.jsonl: the held-out tasks' keys and gold answers of a GSM8K "
                         "run are compared with them (the generated task is rebuilt from its seed)")
    ap.add_argument("--power", action="store_true",
                    help="for a sweep.json: how its comparison's per-seed variance splits into evaluation and "
                         "training noise, and the seeds a decisive test needs (size your comparison from a pilot)")
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
        results, report = verify(args.results, gsm8k_path=args.gsm8k_path, allow_unsampled=True)
        refuse_mixed(args.results, report, args.allow_unsampled)
        text = render(results, markdown=args.markdown, unsampled=tuple(report["without"]), width=width) \
            if args.show is None else show(results, Path(args.results).parent, args.show, args.gsm8k_path)
    except ResultsError as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(text)
    if args.show is None:  # the README's tables (--markdown) stay the tables: these lines go to stderr there
        lines = (samples_line(report), dataset_line(report), *provenance_lines(results), *memory_lines(results))
        print(fit_text("\n".join(lines), width), file=sys.stderr if args.markdown else sys.stdout)
        print(verified_line(args.results, report, arms=len(results.get("arms", {}))),  # one line, however long
              file=sys.stderr if args.markdown else sys.stdout)
    return 0


def _check_sweep(args) -> int:
    """check.py on a sweep.json: the summary recomputed from every cell, every cell's samples re-scored, the plan
    held against git; the tables, then the lines (to stderr with --markdown, whose output is the tables alone)."""
    if args.show is not None:
        print(f"check.py: --show reads a results.json (a sweep's cells: {Path(args.results).parent}/<cell>/"
              f"results.json)", file=sys.stderr)
        return 2
    width = None if args.markdown else output_width()
    try:
        summary = sweep_summary.verify(args.results)
        report = _sweep_samples(Path(args.results), summary, args.gsm8k_path, args.allow_unsampled)
        planned = plan_report(Path(args.results), summary)
    except (ResultsError, SweepError) as e:
        print(f"check.py: {e}", file=sys.stderr)
        return 2
    print(render_sweep(summary, markdown=args.markdown, width=width))
    lines = [samples_line(report), dataset_line(report), *planned]
    if summary.get("primary"):  # what differed between the planned test's cells, from their records and logs
        lines.append("Where the planned test's cells departed from its plan (records and logs):\n"
                     + deviations(summary, Path(args.results).parent).rstrip("\n"))
    plan = "; plan as committed" if any(line.startswith("Plan: ") and " as committed" in line for line in planned) \
        else "; plan not compared with git"
    print(fit_text("\n".join(lines), width), file=sys.stderr if args.markdown else sys.stdout)
    print(verified_line(args.results, report, cells=len(summary["cells"]), plan=plan),  # one line, however long
          file=sys.stderr if args.markdown else sys.stdout)
    return 0


def refuse_mixed(path, report: dict, allow_unsampled: bool) -> None:
    """A file none of whose evaluations keeps a samples file was written before evaluations kept their completions:
    check.py verifies the rest and says plainly that its scores were not re-scored (samples_line, the table's "not
    re-scored", verified_line). A file where some evaluations keep samples and others none is refused, unless
    --allow-unsampled: a samples file missing there is not the file's age."""
    if report["without"] and report["with_samples"] and not allow_unsampled:
        raise ResultsError(f"{path}: {report['without'][0]} keeps no samples where {report['with_samples']} "
                           f"evaluation(s) of the file do, so its scores cannot be re-scored (--allow-unsampled "
                           f"accepts it, its numbers marked not re-scored)")


def verified_line(path: str, report: dict, arms: int | None = None, cells: int | None = None, plan: str = "") -> str:
    """The last line of check.py's output: what was verified, in one line (the lines above say how)."""
    what = [f"{cells} cell{'s' * (cells != 1)}"] if cells is not None else \
        [f"{arms} trained arm{'s' * (arms != 1)}"] if arms else ["an evaluation only"]
    what.append(f"{report['evaluations']} evaluation{'s' * (report['evaluations'] != 1)}")
    what.append(f"{report['samples']:,} samples re-scored")
    without = len(report["without"])
    if without:
        what[-1] += f" ({without} evaluation{'s' * (without != 1)} keep none: not re-scored)"
    return f"Verified: {path}: {', '.join(what)}{plan}."


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


def _sweep_samples(path: Path, summary: dict, gsm8k_path: str | None = None, allow_unsampled: bool = False) -> dict:
    """_samples_of (held-out tasks, gold answers, samples) over every cell of a verified sweep.json, the shared base
    evaluations re-scored once."""
    from tqdm.auto import tqdm

    total: dict = {"evaluations": 0, "with_samples": 0, "samples": 0, "without": [], "dataset": None,
                   "no_dataset": None}
    done: dict = {}
    # a grid of 100 cells takes about a minute: a bar on a terminal (tqdm leaves pipes and logs alone)
    for cell in tqdm(summary["cells"], desc="re-scoring samples", unit="cell", leave=False, disable=None):
        # verified by gmts_recipe.sweep.summary.verify (check.load): read again, the same bytes by digest
        results_path = path.parent / cell["path"]
        results = json.loads(results_path.read_text(encoding="utf-8"))
        if digest(results) != cell["digest"]:
            raise ResultsError(f"{results_path}: changed while it was being checked")
        report = _samples_of(results_path, results, done, gsm8k_path, allow_unsampled=True)
        refuse_mixed(results_path, report, allow_unsampled)
        for key in ("evaluations", "with_samples", "samples"):
            total[key] += report[key]
        total["dataset"], total["no_dataset"] = report["dataset"], report["no_dataset"]
        total["without"] += [f"{cell['cell']} {where}" for where in report["without"]]
    return total


def provenance_lines(results: dict) -> list[str]:
    """One compact block: where each arm ran (recipe.provenance: commit, uncommitted changes, times, host, GPUs,
    libraries, execution options), or the file-wide versions of a file whose arms record none (written before they
    did) or that has no arms (an evaluation-only file: eval.py records the versions alone)."""
    arms = results.get("arms", {})
    lines = []
    for arm, entry in arms.items():
        p = entry.get("provenance")
        if not isinstance(p, dict):
            continue
        commit = str(p.get("commit") or "unknown")[:12] + (" (uncommitted changes)" if p.get("dirty") else "")
        gpu = f"{p.get('gpus', 0)} x {p['gpu']}" if p.get("gpu") else "CPU"
        libs = ", ".join(f"{k} {v}" for k, v in (p.get("versions") or {}).items() if k not in ("gpu", "gpus"))
        options = ", ".join(k if v is True else f"{k}={v}" for k, v in (p.get("options") or {}).items()
                            if v not in (False, None))  # the options that were on
        lines.append(f"  {short_name(arm)}: commit {commit}, {p.get('started', '?')} to "
                     f"{p.get('finished', '?')}, host {p.get('host', '?')}, {gpu}; {libs}"
                     + (f"; {options}" if options else ""))
    if lines:
        return ["Provenance (recorded by each arm, outside the config hash):", *lines]
    v = results.get("versions")
    if isinstance(v, dict):
        libs = ", ".join(f"{k} {x}" for k, x in v.items() if k not in ("gpu", "gpus"))
        gpu = f"{v.get('gpus', 0)} x {v['gpu']}" if v.get("gpu") else "CPU"
        whose = "the arms record none" if arms else "the file records no commit, host or times"
        return [f"Provenance: {whose}; the file's versions: {gpu}; {libs}."]
    return []


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
