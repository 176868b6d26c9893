"""What a results file is, and how it is verified: one sealed JSON per run directory (results.json), written by
recipe.py, merged and pooled by sweep.py, checked by check.py. Both take it from here, so the imports run one way:
check.py -> gmts_recipe.sweep -> gmts_recipe.records (check.py reads a sweep's summary through gmts_recipe.sweep).

Nothing here imports torch or transformers (the arms table, arms.py, and the rule registry it reads, selection.py,
import torch only inside functions): verifying a file needs only the standard library, numpy (stats.py) and, for grid
files, PyYAML.

- The arms a file may hold, their names and the pairs compared come from the arms table (gmts_recipe/arms.py:
  arms(), comparisons()); sweep.py pools the same.
- `load`: read a file, check its digest, recompute every summary number from the per-task records; one-line
  `ResultsError` otherwise. `seal`: add the summary and the digest (the last step of writing a file).
- `digest`, `json_text`, `write_json`: the canonical hash, the compact layout and the atomic write of a file.
- `read_yaml_mapping`: a YAML file that must hold a mapping (a config, a sweep file), any problem one line;
  `read_json`: the same for a JSON file (`load`'s), and `json_file`, it as an argparse type.
- `config_hash`, `current_record`: the hash of a config record, and a file as recipe.py writes it today (fields that
  moved from the config record into each arm's record moved there), so that older files compare with newer ones.
- `numbers_close`, `first_difference`: numbers equal up to rounding, and the first that is not, as a path.
See check.py's docstring for what the digest proves and what it does not.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from pathlib import Path
from typing import Any

from gmts_recipe.arms import arms, comparisons, short_name
from gmts_recipe.stats import compare, noise_floor, paired_delta, pass_at_1, verdict

SCHEMA = 1
# The arms (arms.arms()) and the pairs compared (arms.comparisons(): (a, b), delta = a - b, for the pairs a
# file holds; sweep.py pools the same pairs over seeds). GMTS - ETS-nz: the |advantage| weighting at one kept count
# without zero-omega slots; ETS-nz - ETS: what skipping the zero-omega slots (a larger effective step) alone does.


# Fields that a run's config record (and so its hash) held before they counted as how an arm is executed, not what it
# computes: recipe.py now leaves them out of the record (NOT_HASHED) and each arm records them in its
# generation_options. gradient_checkpointing: the same gradients bit for bit on the CPU, checkpointing or not
# (tests/test_trainer.py); a memory-for-time trade, as the speed options are.
MOVED_TO_ARMS = ("gradient_checkpointing",)


class ResultsError(ValueError):
    """A results file that cannot be trusted; the message is the one-line reason."""


def digest(results: dict) -> str:
    """SHA-256 of the canonical JSON without the digest: anyone can recompute it (see check.py's docstring)."""
    body = {k: v for k, v in results.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def config_hash(record: dict) -> str:
    """The hash of a config record (run_setup.config_record): two runs with the same one compute the same thing."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def current_record(results: dict) -> dict:
    """`results` as recipe.py writes it today: each MOVED_TO_ARMS field its config record holds taken out of it and
    into every arm's generation_options (where the arm does not record it itself: it ran with the config's value), and
    the config hash recomputed. A file written before a field moved then resumes, merges and pools with files written
    after. A new dict where it changes (the config, the arms, each arm entry and its options) sharing everything else
    with `results`, which stays as it was (no deep copy: the evaluation records are most of a file); `results` itself
    when nothing moves. Not sealed: whoever writes it seals it."""
    config = results.get("config") or {}
    moved = {k: config[k] for k in MOVED_TO_ARMS if k in config}
    if not moved:
        return results
    out = dict(results, config={k: v for k, v in config.items() if k not in moved})
    out["config_hash"] = config_hash(out["config"])
    if "arms" in results:
        out["arms"] = {}
        for arm, entry in results["arms"].items():
            options = dict(entry.get("generation_options", {}))
            for k, v in moved.items():
                options.setdefault(k, v)  # an arm that records it ran with its own value
            out["arms"][arm] = {**entry, "generation_options": options}
    return out


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
    if not numbers_close(stored, own):
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
    known = arms()
    unknown = set(results.get("arms", {})) - set(known)
    if unknown:
        raise ResultsError(f"unknown arm {sorted(unknown)[0]!r} (known: {', '.join(known)})")
    arm_scores = {}
    for arm in known:
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
        f"{a}_vs_{b}": compare(arm_scores[a], arm_scores[b], floor, names=(short_name(a), short_name(b)),
                               collapsed=tuple(summary["arms"][x]["verdict"] == "collapsed" for x in (a, b)))
        for a, b in comparisons() if a in arm_scores and b in arm_scores}
    return summary


def numbers_close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(numbers_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(numbers_close(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def first_difference(a: Any, b: Any, path: str = "summary") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b or not numbers_close(a[k], b[k]):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}")
    return f"{path} is {b!r} in the file but {a!r} recomputed from the records"


def load(path: str | Path) -> dict:
    """Load and verify a results file; raise ResultsError with a one-line reason."""
    p = Path(path)
    results = read_json(p, ResultsError)
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
    if not numbers_close(recomputed, results.get("summary")):
        raise ResultsError(f"{p}: {first_difference(recomputed, results.get('summary') or {})}")
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


def read_json(path: str | Path, error: type[Exception]) -> Any:
    """A JSON file a user named (a results file, a benchmark's): a missing or broken one is one line of `error`."""
    p = Path(path)
    if not p.is_file():
        raise error(f"{p}: no such file")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise error(f"{p}: not valid JSON ({json_break(e)})") from None
    except UnicodeDecodeError as e:
        raise error(f"{p}: not valid JSON ({e})") from None
    except OSError as e:  # a file it may not read
        raise error(f"{p}: cannot be read ({e.strerror or e})") from None


def json_break(e: json.JSONDecodeError) -> str:
    """Where a JSON text breaks, for a one-line refusal: the parser's reason, line and column, and whether the text
    ends there (a file cut short, e.g. by a full disk or a copy interrupted, breaks at its very end)."""
    cut = "; the text ends there: cut short?" if not e.doc[e.pos:].strip() else ""
    return f"{e.msg} at line {e.lineno}, column {e.colno}{cut}"


def json_file(path: str) -> str:
    """argparse type of an option that names a JSON file to read: the path as given, once it reads as JSON; a missing
    or broken file is argparse's own one-line error, not a traceback later."""
    import argparse

    read_json(path, argparse.ArgumentTypeError)
    return path


def read_yaml_mapping(path: Path, error: type[Exception], shape: str) -> dict:
    """A YAML file that must hold a mapping (a config, a sweep file): any problem is one line of `error`."""
    import yaml

    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise error(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise error(f"{path} {shape}")
    return raw


def rollout_agreement(first: dict, second: dict) -> list[tuple[int, float]]:
    """(step, share of identical completions) for every step both arms recorded (`rollout_digests`: step -> one
    digest per rollout, in the batch's order): how long two arms of one seed drew the same rollouts. With
    sampling_noise 'counter' they share the noise at every step, so the share is 1 while their weights are equal and
    falls as the updates part them."""
    steps = sorted(set(first) & set(second), key=int)
    return [(int(s), sum(a == b for a, b in zip(first[s], second[s], strict=True)) / len(first[s]))
            for s in steps if first[s]]


def agreement_line(results: dict, pair: tuple[str, str] = ("ets", "gmts")) -> str | None:
    """One line for the summary: the share of identical rollouts of two arms per step, where both recorded them."""
    arms = results.get("arms", {})
    digests = [arms.get(a, {}).get("rollout_digests") for a in pair]
    if not all(digests):
        return None
    shares = rollout_agreement(*digests)
    shown = ", ".join(f"{s}: {share:.0%}" for s, share in shares[:12]) + (", ..." if len(shares) > 12 else "")
    return (f"Identical rollouts, {pair[0]} vs {pair[1]} (the share of a step's completions the two arms sampled "
            f"alike; shared noise, parting weights), per step: {shown}")


def evaluations(results: dict) -> list[tuple[str, dict]]:
    """Every evaluation of a results file with the name check.py gives it in its messages."""
    return [*((f"base eval {i}", ev) for i, ev in enumerate(results["base"]["evals"])),
            *((f"arm {arm}", entry["eval"]) for arm, entry in results.get("arms", {}).items())]
