"""What an evaluation scored, kept beside its results file: one xz-compressed JSON line per task (index, question
hash, question, gold answer, the k texts, their scores), named by its SHA-256, which the evaluation records inside
the digest.
Written by recipe.py, verified and re-scored by check.py and sweep.py --merge, shown by check.py --show. Standard
library only (the reward, imported where samples exist, needs no torch)."""

from __future__ import annotations

import functools
import hashlib
import json
import lzma
import os
from pathlib import Path

from gmts_recipe.records import SCHEMA, ResultsError, evaluations, load, read_samples, samples_path

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


def check_samples(path: Path, evaluation: dict, where: str, golds: dict[str, str] | None = None,
                  key_version: str | None = None, golds_out: dict[str, str] | None = None) -> int:
    """Refuse, in one line naming file, evaluation, task and sample, a samples file that does not hold exactly the
    evaluation's tasks (each once, k texts, their lengths) with the scores of its records, or whose texts the
    recipe's reward (rewards.sample_scores, of the version the evaluation records) scores otherwise, or whose texts give
    another hack_scan than the evaluation records (`_check_hack_scan`). Returns the number of samples. `golds`: each
    task's gold answer in the dataset ("index:key"; heldout.dataset_golds), which every line's gold must be, where the
    dataset is at hand. A line's question, where it keeps one, must be one its key
    covers (an arm's lines keep none: the base evaluation's lines of the same keys hold it), by the file's version of
    the key where given (`key_version`, data.task_key; else either). `golds_out`: filled with each line's gold answer
    ("index:key"), which verify_samples holds against the file's other evaluations.

    Re-scoring is fast for plain final numbers and slower where math-verify parses an expression (measurements:
    bench/README.md, "The test suite's time")."""
    from gmts_recipe.data import TASK_KEYS, question_key
    from gmts_recipe.records import is_known_reward_version
    from gmts_recipe.rewards import sample_scores  # no torch: imported only where samples exist

    version = evaluation["samples"]["reward"]  # the version that scored them (records.check_format: a known one)
    if not is_known_reward_version(version):
        raise ResultsError(f"{where}: samples scored by reward version {version!r}, which this recipe does not know")
    logged = read_samples(path, evaluation["samples"]["sha256"], where)
    where = f"{where}: {path.name}"
    records = {f"{r['task']}:{r['hash']}": r for r in evaluation["records"]}
    k, seen, differ, first = evaluation["k"], set(), 0, None
    for line in logged:
        key = f"{line.get('task')}:{line.get('hash')}" if isinstance(line, dict) else None
        if key not in records or key in seen:
            raise ResultsError(f"{where}: task {key} is " + ("logged twice" if key in seen else
                                                              "not among the evaluation's records"))
        seen.add(key)
        texts, scores, record = line.get("samples"), line.get("scores"), records[key]
        if not (isinstance(texts, list) and all(isinstance(t, str) for t in texts) and len(texts) == k
                and isinstance(scores, list) and len(scores) == k and isinstance(line.get("gold"), str)):
            raise ResultsError(f"{where}: task {key} needs a gold answer and {k} sample texts with {k} scores")
        question = line.get("question")  # an arm's lines keep none (the base's lines of the same keys hold it)
        versions = TASK_KEYS if key_version is None else (key_version,)
        if question is not None and not (isinstance(question, str) and line["hash"] in
                                         {question_key(question, line["gold"], v) for v in versions}):
            raise ResultsError(f"{where}: task {key}: the question in the samples file is not the one its key covers "
                               f"(key of {' and '.join(v.replace('+', ' and ') for v in versions)})")
        if golds_out is not None:
            golds_out[key] = line["gold"]
        if golds is not None and line["gold"] != golds.get(key):
            raise ResultsError(f"{where}: task {key}: gold answer {line['gold']!r} in the samples file, "
                               f"{golds.get(key)!r} in the dataset")
        if record.get("lengths") is not None and record["lengths"] != [len(t) for t in texts]:
            raise ResultsError(f"{where}: task {key}: the texts' lengths {[len(t) for t in texts]} are not the "
                               f"record's {record['lengths']}")
        again = sample_scores(texts, line["gold"], version)
        for j, (filed, logged_score, now) in enumerate(zip(record["scores"], scores, again)):
            if not filed == logged_score == now:
                differ += 1
                first = first or (f"{where}: task {key} sample {j}: scored {filed!r} in the results file, "
                                  f"{logged_score!r} in the samples file, {now!r} by the reward now")
    missing = set(records) - seen
    if missing:
        raise ResultsError(f"{where}: {len(missing)} task(s) of the evaluation have no samples, e.g. "
                           f"{sorted(missing)[0]}")
    if first is not None:
        raise ResultsError(f"{first} ({differ} sample score(s) differ in this evaluation, re-scored by reward version "
                           f"{version}: an edited score, or a reward changed since the run)")
    _check_hack_scan(evaluation, [text for line in logged for text in line["samples"]], where)
    return len(seen) * k


def _check_hack_scan(evaluation: dict, texts: list[str], where: str) -> None:
    """The evaluation's hack_scan (its reward-hacking flags and the shares behind them), where it records one, is the
    one stats.hack_scan gives over its texts in the samples file's order (eval.py's order: task by task): flags read as
    recorded would let an edit clear a flag. Numbers equal up to rounding (records.numbers_close), flags exactly."""
    from gmts_recipe.records import numbers_close
    from gmts_recipe.stats import hack_scan

    recorded = evaluation.get("hack_scan")
    if recorded is None or recorded == {}:
        return  # an evaluation that records none (or an empty one) claims none
    again = hack_scan(texts)
    if not isinstance(recorded, dict) or not numbers_close(again, recorded):
        key = next((k for k in again if not isinstance(recorded, dict) or not numbers_close(again[k], recorded.get(k))),
                   None)
        said = (f"hack_scan.{key} is {recorded.get(key)!r}" if isinstance(recorded, dict) and key is not None else
                f"hack_scan is {recorded!r}")
        raise ResultsError(f"{where}: {said}, its texts give {again[key] if key else again!r} (stats.hack_scan "
                           f"recomputed from the samples file)")


UNSAMPLED_FIX = ("a file of format 1 that keeps no samples files at all passes only with --allow-unsampled, which "
                 "says which numbers were not re-scored")


def verify_samples(results: dict, folder: Path, done: dict[tuple[str, str], int] | None = None,
                   golds: dict[str, str] | None = None, allow_unsampled: bool = False) -> dict:
    """Check every evaluation's samples file (check_samples, against the dataset's `golds` where given) and return
    {"evaluations", "with_samples", "samples", "without"}. An evaluation without samples is refused: its scores could
    be anything. `allow_unsampled` lets them through, listed in "without", in a format-1 file (records.check_format
    admits them there only where no evaluation keeps samples and the file records nothing that came after them); a
    file of this format (`results["schema"]`, the file's) keeps every evaluation's samples. Every evaluation holds one
    gold answer per task, the first evaluation's (`_agree`), whether or not the dataset is at hand. `done`: evaluations
    already checked (by file SHA-256 and records: the number of samples and each task's gold answer), so the base
    evaluations a sweep's cells share are re-scored once."""
    done = {} if done is None else done
    out = {"evaluations": 0, "with_samples": 0, "samples": 0, "without": []}
    version = (results.get("data") or {}).get("task_key")
    agreed: dict[str, tuple[str, str]] = {}  # each task's gold answer, and the first evaluation that holds it
    for where, ev in evaluations(results):
        out["evaluations"] += 1
        if "samples" not in ev:
            if results.get("schema") == SCHEMA:  # the file's format (records.current_record keeps it)
                raise ResultsError(f"{where} keeps no samples, so its scores cannot be re-scored (a format-{SCHEMA} "
                                   f"file keeps every evaluation's; {UNSAMPLED_FIX})")
            if not allow_unsampled:
                raise ResultsError(f"{where} keeps no samples, so its scores cannot be re-scored ({UNSAMPLED_FIX})")
            out["without"].append(where)
            continue
        path = samples_path(folder, ev, where)
        key = (ev["samples"]["sha256"], hashlib.sha256(json.dumps([ev["k"], ev["records"], ev.get("hack_scan")],
                                                                  sort_keys=True).encode()).hexdigest(),
               golds is not None)
        if key not in done:
            own: dict[str, str] = {}
            done[key] = (check_samples(path, ev, where, golds, version, own), own)
        count, own = done[key]
        _agree(agreed, own, f"{where}: {path.name}", where)
        out["with_samples"] += 1
        out["samples"] += count
    return out


def _agree(agreed: dict[str, tuple[str, str]], golds: dict[str, str], where: str, name: str) -> None:
    """One gold answer per task across a file's evaluations: the first to hold a task (the base's first evaluation,
    whose lines keep the question its key covers) fixes it. Without the dataset at hand this is what ties an arm's
    gold answers (its lines keep no question) to the task's."""
    for key, gold in golds.items():
        first = agreed.setdefault(key, (gold, name))
        if first[0] != gold:
            raise ResultsError(f"{where}: task {key}: gold answer {gold!r}, {first[1]}'s samples file has "
                               f"{first[0]!r} (every evaluation scores a task against one gold answer)")


def verify(path: str | Path, done: dict | None = None, gsm8k_path: str | None = None,
           allow_unsampled: bool = False, gsm8k_pinned: bool = True) -> tuple[dict, dict]:
    """`load` (digest, records, summaries), then the held-out tasks and every evaluation's samples (samples_of):
    (results, report). Every refusal is a ResultsError naming the file."""
    results = load(path)
    return results, samples_of(path, results, done, gsm8k_path, allow_unsampled, gsm8k_pinned)


def samples_of(path: str | Path, results: dict, done: dict | None = None, gsm8k_path: str | None = None,
               allow_unsampled: bool = False, gsm8k_pinned: bool = True) -> dict:
    """Every evaluation holds the run's held-out tasks (heldout.check_heldout), whose keys and gold answers are the
    dataset's where it is at hand (heldout.dataset_golds; a GSM8K copy the original release's test split, unless
    `gsm8k_pinned` is off: heldout.pinned_gsm8k), and its samples re-score to its records."""
    from gmts_recipe.heldout import check_heldout, dataset_golds, heldout_pool

    try:
        pool, source = heldout_pool(results, gsm8k_path, gsm8k_pinned)
        check_heldout(results, pool)
        golds = None if pool is None else dataset_golds(results, pool)
        report = verify_samples(results, Path(path).parent, done, golds, allow_unsampled)
        report["dataset"] = source if pool is not None else None
        report["no_dataset"] = None if pool is not None else source
        return report
    except ResultsError as e:
        raise ResultsError(f"{path}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ResultsError(f"{path}: malformed samples ({type(e).__name__}: {e})") from None


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


def show(results: dict, folder: Path, task: str, gsm8k_path: str | None = None, gsm8k_pinned: bool = True) -> str:
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
           show_question(results, asked, gsm8k_path, gsm8k_pinned)]
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


def show_question(results: dict, line: dict, gsm8k_path: str | None = None, gsm8k_pinned: bool = True) -> str:
    """The question of a samples file's line, as --show prints it: the line's own (check_samples tied it to the key;
    an arm's lines keep none), else the dataset's task at that index once its key is the line's (heldout.heldout_pool:
    the generated task rebuilt from its seed, GSM8K from `gsm8k_path` or the run's), else a sentence saying why it is
    not at hand."""
    from gmts_recipe.data import task_key
    from gmts_recipe.heldout import heldout_pool

    if isinstance(line.get("question"), str):
        return f"question: {line['question']}"
    pool, source = heldout_pool(results, gsm8k_path, gsm8k_pinned)
    index = line["task"]
    if pool is None:
        return f"question: not in this samples file, and {source}"
    if not (isinstance(index, int) and 0 <= index < len(pool)) or \
            task_key(pool[index], results["data"]["task_key"]) != line["hash"]:
        raise ResultsError(f"--show {index}: the dataset's task {index} has another key than {line['hash']}")
    return f"question ({source}): {pool[index]['question']}"
