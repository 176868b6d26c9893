"""What each reward version would score on every committed sample: how many scores a newer reading moves up or down.

Every evaluation records the reward version that scored it (no "reward" in its samples reference: version 1), and
check.py re-scores its samples with that version only. This script re-scores every committed sample (each samples
file once, however many results files name it) with every version, checks that the recorded version gives the stored
score, and counts, for each version, the scores that differ from the recorded ones: up (0 -> 1) and down (1 -> 0).
Every sample whose score differs between any two versions is listed with its final answer, so that the reading of
each version can be read off the committed texts (tests/test_rewards.py re-scores the listed samples at their
recorded version, and at every version, against this file).

    python bench/reward_versions.py                       # writes bench/reward-versions.json, prints the summary
    python bench/reward_versions.py --results DIR --out FILE --jobs 2
    python bench/reward_versions.py --markdown            # bench/docs/reward-versions.md's table, from the committed file
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from gmts_recipe.records import evaluations  # noqa: E402
from gmts_recipe.rewards import REWARD_VERSION, REWARD_VERSIONS, final_answer, sample_scores  # noqa: E402
from tables import markdown_row, markdown_table  # noqa: E402 - bench/tables.py, beside this script

OUT = ROOT / "bench" / "reward-versions.json"
VERSIONS = REWARD_VERSIONS


def samples_files(results_dir: Path) -> dict[str, int]:
    """Every samples file a results file under `results_dir` names (its path from `results_dir`, '/'-separated)
    -> the GSM8K reward version its evaluation records (a MATH evaluation, its reward named, is passed over). A file
    two evaluations name with two versions is refused."""
    found: dict[str, int] = {}
    for path in sorted(results_dir.rglob("*.json")):
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
            evs = evaluations(results) if isinstance(results, dict) and "base" in results else []
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # not a results file (a sweep, a mechanism file, a bench table)
        for _, ev in evs:
            ref = ev.get("samples")
            if not isinstance(ref, dict):
                continue
            name = Path(os.path.relpath((path.parent / ref["path"]).resolve(), results_dir.resolve())).as_posix()
            version = ref.get("reward", 1)
            if isinstance(version, str):
                continue  # MATH's reward (named): not GSM8K's readings (tests/test_rewards_math_forms.py counts them)
            if found.setdefault(name, version) != version:
                raise ValueError(f"{name}: named with reward versions {found[name]} and {version}")
    return found


def rescore_file(results_dir: Path, name: str, recorded: int) -> dict:
    """One samples file at every version: its sample count, the samples whose recorded-version score is not the
    stored one, and every sample whose score differs between versions."""
    lines = lzma.decompress((results_dir / name).read_bytes()).decode("utf-8").splitlines()
    out: dict = {"samples": 0, "not_as_stored": 0, "differ": []}
    for line in map(json.loads, lines):
        per_version = {v: sample_scores(line["samples"], line["gold"], v) for v in VERSIONS}
        out["samples"] += len(line["samples"])
        out["not_as_stored"] += sum(a != b for a, b in zip(per_version[recorded], line["scores"]))
        for j, text in enumerate(line["samples"]):
            scores = [per_version[v][j] for v in VERSIONS]
            if len(set(scores)) > 1:
                out["differ"].append({"file": name, "task": f"{line['task']}:{line['hash']}", "sample": j,
                                      "recorded": recorded, "gold": line["gold"], "answer": final_answer(text),
                                      "scores": scores})
    return out


def summarize(files: dict[str, int], per_file: dict[str, dict]) -> dict:
    """The counts over all files: samples per recorded version; per version, the scores it moves up and down against
    the recorded ones; and between each version and the one before it."""
    differ = [d for name in sorted(per_file) for d in per_file[name]["differ"]]
    by_recorded = {str(v): sum(per_file[n]["samples"] for n, r in files.items() if r == v) for v in VERSIONS}
    against_recorded = {}
    for v in VERSIONS:
        moved = [d["scores"][v - 1] - d["scores"][d["recorded"] - 1] for d in differ]
        against_recorded[str(v)] = {"up": sum(m > 0 for m in moved), "down": sum(m < 0 for m in moved)}
    between = {}
    for v in VERSIONS[1:]:
        moved = [d["scores"][v - 1] - d["scores"][v - 2] for d in differ]
        between[f"{v - 1}->{v}"] = {"up": sum(m > 0 for m in moved), "down": sum(m < 0 for m in moved)}
    return {"reward_version": REWARD_VERSION, "versions": list(VERSIONS), "samples_files": len(files),
            "samples": sum(f["samples"] for f in per_file.values()), "samples_by_recorded_version": by_recorded,
            "not_as_stored": sum(f["not_as_stored"] for f in per_file.values()),
            "against_recorded": against_recorded, "between_versions": between, "differ": differ}


def measure(results_dir: Path, jobs: int = 1) -> dict:
    """Every samples file under `results_dir` re-scored at every version (summarize), `jobs` files at a time."""
    from tqdm.auto import tqdm

    files = samples_files(results_dir)
    if jobs == 1:
        per_file = {name: rescore_file(results_dir, name, v)
                    for name, v in tqdm(files.items(), desc="re-scoring", unit="file", disable=None)}
        return summarize(files, per_file)
    per_file = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {name: pool.submit(rescore_file, results_dir, name, v) for name, v in files.items()}
        for name, future in tqdm(futures.items(), desc="re-scoring", unit="file", disable=None):
            per_file[name] = future.result()
    return summarize(files, per_file)


def text(summary: dict) -> str:
    """The summary in a few lines: what each version would change on the committed samples."""
    lines = [f"{summary['samples']:,} samples in {summary['samples_files']} files "
             f"(recorded version: {', '.join(f'{v}: {n:,}' for v, n in summary['samples_by_recorded_version'].items())}"
             f"); {summary['not_as_stored']} re-score(s) at the recorded version differ from the stored score."]
    for v, moved in summary["against_recorded"].items():
        lines.append(f"version {v} against the recorded version: {moved['up']:,} up, {moved['down']:,} down")
    for pair, moved in summary["between_versions"].items():
        lines.append(f"version {pair.replace('->', ' to ')}: {moved['up']:,} up, {moved['down']:,} down")
    return "\n".join(lines)


def markdown(summary: dict) -> str:
    """The README's table (read-only, from the summary file): each version's score changes against the recorded
    scores and against the version before it, then, for each version from the newest back, every committed sample it
    scores otherwise than the one before it."""
    versions = summary["versions"]
    scored = ", ".join(f"{n:,} scored by version {v}" for v, n in summary["samples_by_recorded_version"].items() if n)
    out = [f"{summary['samples']:,} committed samples in {summary['samples_files']} samples files ({scored});",
           f"re-scored at the version each file records, {summary['not_as_stored']} score(s) differ from the stored "
           f"ones.", "",
           *markdown_table(["reward version", "against the recorded scores", "against the version before"])]
    for v in versions:
        before = summary["between_versions"].get(f"{v - 1}->{v}")
        out.append(markdown_row([v, _moved(summary["against_recorded"][str(v)]), _moved(before) if before else "-"]))
    for previous, last in reversed(list(zip(versions, versions[1:]))):
        changed = [d for d in summary["differ"] if d["scores"][last - 1] != d["scores"][previous - 1]]
        out += ["", f"The {len(changed)} committed sample(s) that version {last} scores otherwise than version "
                    f"{previous}:", "", *markdown_table(
                        ["samples file", "task", "final answer", "gold", f"version {previous}", f"version {last}"],
                        [[d["file"], d["task"].split(":")[0], f"`{d['answer']}`", d["gold"],
                          f"{d['scores'][previous - 1]:g}", f"{d['scores'][last - 1]:g}"] for d in changed])]
    return "\n".join(out) + "\n"


def _moved(counts: dict) -> str:
    return f"{counts['up']:,} up, {counts['down']:,} down"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--results", type=Path, default=ROOT / "results", help="the folder of results files")
    ap.add_argument("--out", type=Path, default=OUT, help="where the JSON summary goes")
    ap.add_argument("--jobs", type=int, default=1, help="samples files re-scored at once (processes)")
    ap.add_argument("--markdown", nargs="?", type=Path, const=OUT, default=None, metavar="FILE",
                    help="print the README's table from a summary file (default bench/reward-versions.json); "
                         "re-scores nothing")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text(encoding="utf-8"))), end="")
        return 0
    summary = measure(args.results, args.jobs)
    args.out.write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(text(summary))
    return 0 if summary["not_as_stored"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
