"""What an evaluation scored, kept beside its results file: one xz-compressed JSON line per task (index, question
hash, question, gold answer, the k texts, their scores), named by its SHA-256, which the evaluation records inside
the digest.
Written by recipe.py, verified and re-scored by verify/file.py (check.py, sweep.py --merge), shown by check.py --show.
Standard library only (the reward, imported where samples exist, needs no torch)."""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
from pathlib import Path

from gmts_recipe.records import ResultsError, evaluations, read_samples, samples_path

SAMPLES_PRESET = 6  # xz: 3.9x on GSM8K-like text (gzip 2.9x); 9 is no smaller at a few MB and takes 674 MiB to compress


def samples_bytes(log: list[dict]) -> bytes:
    """A samples file's bytes: one JSON line per task (eval.sample_log), xz-compressed. xz has no timestamp, so the
    same samples give the same bytes, hence the same SHA-256."""
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in log)
    return lzma.compress(text.encode("utf-8"), preset=SAMPLES_PRESET)


def write_samples(folder: Path, stem: str, log: list[dict]) -> tuple[Path, str]:
    """Write `log` to <folder>/<stem>-<first 12 hex of its SHA-256>.jsonl.xz (atomically; a file of that name holds
    those bytes, so a run that replaces an arm never overwrites the file the previous results.json still names) and
    return (the file, its SHA-256)."""
    data = samples_bytes(log)
    sha = hashlib.sha256(data).hexdigest()
    path = Path(folder) / f"{stem}-{sha[:12]}.jsonl.xz"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path, sha


def samples_line(report: dict) -> str:
    """One line: what was re-scored, and plainly what was not."""
    n, with_samples, without = report["evaluations"], report["with_samples"], report["without"]
    if not n:
        return "Samples: no evaluation yet, nothing to re-score."
    if not with_samples:
        return (f"Scores not re-scored: none of the {n} evaluations keeps a samples file (a format-1 file); the "
                f"digest, the recomputed summaries and the held-out tasks are all that was checked.")
    line = (f"Samples: {report['samples']:,} in {with_samples} evaluation(s) re-scored with the recipe's reward, "
            f"every score as recorded")
    if without:
        shown = ", ".join(without[:3]) + (f" and {len(without) - 3} more" if len(without) > 3 else "")
        line += f"; {len(without)} evaluation(s) keep no samples ({shown}): their scores were not re-scored"
    return line + "."


def dataset_line(report: dict) -> str:
    """One line: whether the held-out tasks' keys and gold answers were compared with the dataset, and with which."""
    if not report["evaluations"]:
        return "Held-out tasks: no evaluation yet."
    if report.get("dataset"):
        return (f"Held-out tasks: the run's seeded split, recomputed, and every evaluation holds exactly them; their "
                f"keys and the samples' gold answers are the dataset's ({report['dataset']}).")
    return (f"Held-out tasks: the run's seeded split, recomputed from the recorded pool sizes, and every evaluation "
            f"holds exactly them, with one gold answer per task; keys and gold answers not compared with a dataset: "
            f"{report.get('no_dataset') or 'none at hand'}.")


KEY_PREFIX = "key:"  # --show key:PREFIX: a task by the start of its hash, whatever its characters


def task_selector(task: str) -> tuple[str, str]:
    """What --show's TASK names, one meaning per form: ("index", "267") for a number (the task's index in its split,
    the records' "task"; its digits kept, to name the task whose hash they start where no index is the number),
    ("key", "01cc") for a prefix of its hash, written key:01cc or with a letter a-f in it (a
    hash prefix of digits only would read as a number). Anything else is refused in one line."""
    text = task.strip().lower()
    if text.startswith(KEY_PREFIX):
        prefix = text[len(KEY_PREFIX):]
        if prefix and all(c in "0123456789abcdef" for c in prefix):
            return "key", prefix
    elif text.isdigit():
        return "index", text
    elif text and all(c in "0123456789abcdef" for c in text):
        return "key", text
    raise ResultsError(f"--show {task}: give a task's index (a number, e.g. 3) or the start of its hash (with a letter "
                       f"a-f, e.g. 01cc9f, or key:PREFIX)")


def show(results: dict, folder: Path, task: str, gsm8k_path: str | None = None, gsm8k_pinned: bool = True,
         math_path: str | None = None) -> str:
    """Every stored sample of one task (its index, or a prefix of its hash: task_selector), evaluation by evaluation,
    with its score, after the task's question: what the model was asked and wrote, to read beside the numbers. The
    question comes from a samples file's line of the task (the base evaluations' keep it), else from the dataset where
    it is at hand (show_question). A number that is no task's index is refused, naming the task whose hash it starts,
    if one does: never is a number silently read as a hash."""
    from gmts_recipe.rewards import final_answer  # what the reward read as the answer (no torch)
    from gmts_recipe.rewards_math import REWARD_NAMES, boxed_answer  # MATH's reward reads the last \boxed{}

    kind, wanted = task_selector(task)
    found, by_key = [], set()
    for where, ev in evaluations(results):
        if "samples" not in ev:
            continue
        path = Path(os.path.normpath(samples_path(folder, ev, where)))
        logged = read_samples(path, ev["samples"]["sha256"], where)
        keyed = [r for r in logged if str(r["hash"]).startswith(wanted)]
        lines = [r for r in logged if str(r["task"]) == str(int(wanted))] if kind == "index" else keyed
        by_key |= {(r["task"], r["hash"]) for r in keyed} if kind == "index" else set()
        if len(lines) > 1:
            raise ResultsError(f"--show {task}: matches {len(lines)} tasks in {where}; give more of the hash")
        found += [(where, ev, path, lines[0])] if lines else []
    if not found:
        kept = any("samples" in ev for _, ev in evaluations(results))
        some = ", ".join(str(r["task"]) for r in results["base"]["evals"][0]["records"][:5])
        missing = (f"no task has index {int(wanted)} here (a number is a task's index in its split: e.g. {some}; the start "
                   f"of its hash: key:PREFIX)" if kind == "index" else
                   f"no task's hash starts {wanted} (or give its index, e.g. {some})")
        if kind == "index" and len(by_key) == 1:
            index, key = next(iter(by_key))
            missing += f"; task {index}'s hash starts {wanted} ({key}): --show key:{wanted}"
        raise ResultsError(f"--show {task}: {missing if kept else 'this file keeps no samples files'}")
    first = found[0][3]
    asked = next((line for *_, line in found if isinstance(line.get("question"), str)), first)
    out = [f"task {first['task']} (question hash {first['hash']}), gold answer {first['gold']}",
           show_question(results, asked, gsm8k_path, gsm8k_pinned, math_path)]
    for where, ev, path, line in found:
        version = ev["samples"].get("reward", 1)  # the reading that scored it reads its final answer
        read = functools.partial(boxed_answer, name=version) if version in REWARD_NAMES else \
            functools.partial(final_answer, version=version)
        out.append(f"\n=== {where} (eval seed {ev['seed']}): {sum(line['scores']):g} of {len(line['scores'])} right  "
                   f"[{path}]")
        for j, (text, score) in enumerate(zip(line["samples"], line["scores"])):
            out.append(f"--- sample {j}: score {score:g}, final answer {read(text)!r}, {len(text)} characters")
            out.append(text)
    return "\n".join(out)


def show_question(results: dict, line: dict, gsm8k_path: str | None = None, gsm8k_pinned: bool = True,
                  math_path: str | None = None) -> str:
    """The question of a samples file's line, as --show prints it: the line's own (check_samples tied it to the key;
    an arm's lines keep none), else the dataset's task at that index once its key is the line's
    (verify.file.heldout_pool: the generated task rebuilt from its seed, GSM8K from `gsm8k_path` or the run's), else a
    sentence saying why it is not at hand."""
    from gmts_recipe.data import task_key
    from gmts_recipe.verify.file import heldout_pool

    if isinstance(line.get("question"), str):
        return f"question: {line['question']}"
    pool, source = heldout_pool(results, gsm8k_path, gsm8k_pinned, math_path)
    index = line["task"]
    if pool is None:
        return f"question: not in this samples file, and {source}"
    if not (isinstance(index, int) and 0 <= index < len(pool)) or \
            task_key(pool[index], results["data"]["task_key"]) != line["hash"]:
        raise ResultsError(f"--show {index}: the dataset's task {index} has another key than {line['hash']}")
    return f"question ({source}): {pool[index]['question']}"
