"""What a results file is: one sealed JSON per run directory (results.json), written by recipe.py, merged and pooled
by sweep.py, verified by gmts_recipe/verify/file.py (check.py). No torch or transformers here (arms.py and selection.py
import torch only inside functions): the standard library, numpy (stats.py) and, for grid files, PyYAML.

- The formats (FORMATS): format 2 is written today (verify.file.seal, `write_results`: an evaluation with a samples
  file stores no per-task records, `stored`); `current_record` is the one converter of every earlier format, and of
  a format-2 file's records (rebuilt from its samples); verify/file.py checks what a file's own format allows.
- The arms a file may hold, their names and the pairs compared come from the arms table (gmts_recipe/arms.py:
  arms(), comparisons()); sweep.py pools the same.
- `summarize`: every summary number from the per-task records (verify.file.seal adds it and the digest).
- `digest`, `json_text`, `write_json`: the canonical hash, the compact layout and the atomic write of a file.
- `read_yaml_mapping`: a YAML file that must hold a mapping (a config, a sweep file), any problem one line;
  `read_json`: the same for a JSON file, and `json_file`, it as an argparse type.
- `config_hash`: the hash of a config record; `numbers_close`, `first_difference`: numbers equal up to rounding, and
  the first that is not, as a path. What the digest proves and what it does not: check.py's docstring.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
import os
import statistics
import typing
from pathlib import Path
from typing import Any

from gmts_recipe.arms import arms, comparisons, short_name
from gmts_recipe.stats import compare, noise_floor, paired_delta, pass_at_1, verdict
from gmts_recipe.user_rules import RULES_HINT  # said beside an unknown arm

# The arms (arms.arms()) and the pairs compared (arms.comparisons(): (a, b), delta = a - b, for the pairs a
# file holds; sweep.py pools the same pairs over seeds). GMTS - ETS-nz: the |advantage| weighting at one kept count
# without zero-omega slots; ETS-nz - ETS: what skipping the zero-omega slots (a larger effective step) alone does.


class ResultsError(ValueError):
    """A results file that cannot be trusted; the message is the one-line reason."""


# ---------------------------------------------------------------------------- the formats, and the one converter
SCHEMA = 2  # the format recipe.py, eval.py and sweep.py --merge write; `current_record` converts the earlier ones
FORMATS = {
    1: "every evaluation's per-task records in results.json, beside the samples file where it keeps one",
    2: "an evaluation with a samples file stores no per-task records (loading rebuilds them from the samples); every "
       "evaluation keeps samples and records the reward version that scored them",
}
# Fields that a run's config record (and so its hash) held before they counted as how an arm is executed, not what it
# computes: recipe.py leaves them out of the record (NOT_HASHED) and each arm records them in its generation_options.
# gradient_checkpointing: the same gradients bit for bit on the CPU, checkpointing or not (tests/test_trainer.py); a
# memory-for-time trade, as the speed options are.
MOVED_TO_ARMS = ("gradient_checkpointing",)
# The recipe's defaults (recipe_config.RecipeArgs) of the config fields the checks read: what a run whose config record
# leaves a field out ran with (a record holds only the fields away from their defaults). Frozen here, as the files
# were written: tests/test_formats.py holds them equal to RecipeArgs' (a changed default would reread old files).
RECORD_DEFAULTS = {"task": "gsm8k", "n_train": 512, "n_heldout": 120, "task_seed": 17, "difficulty": 1,
                   "eval_samples": 4}
# The generated task's pool as a format-1 file without data.pool drew it: the recipe's defaults where its config
# record leaves a field out.
POOL_DEFAULTS = {k: RECORD_DEFAULTS[k] for k in ("n_heldout", "task_seed", "difficulty")}


def setting(config: dict, key: str) -> Any:
    """A recipe setting as a run with this config record ran it: the record's value, else the default
    (RECORD_DEFAULTS)."""
    return config.get(key, RECORD_DEFAULTS[key])


def digest(results: dict) -> str:
    """SHA-256 of the canonical JSON of the file as stored (`stored`) without the digest: anyone can recompute it (see
    check.py's docstring)."""
    body = {k: v for k, v in stored(results).items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def config_hash(record: dict) -> str:
    """The hash of a config record (run_setup.config_record): two runs with the same one compute the same thing."""
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def evaluation_fields(results: dict) -> list[tuple[str, dict]]:
    """Every evaluation of a results file with the path of its field ("base.evals[1]", "arms.gmts.eval"): what the
    one-line refusals name."""
    base = results.get("base") if isinstance(results.get("base"), dict) else {}
    arms = results.get("arms") if isinstance(results.get("arms"), dict) else {}
    return [*((f"base.evals[{i}]", ev) for i, ev in enumerate(base.get("evals") or []) if isinstance(ev, dict)),
            *((f"arms.{arm}.eval", e["eval"]) for arm, e in arms.items()
              if isinstance(e, dict) and isinstance(e.get("eval"), dict))]


def stored(results: dict) -> dict:
    """`results` as a file of this format stores it: an evaluation that keeps a samples file without its per-task
    records (the samples hold them: task, key, scores and each text's length; `current_record` rebuilds them). A dict
    of an earlier format (its own "schema") as it is: that is how its file holds it."""
    if results.get("schema") != SCHEMA or not any("samples" in ev for _, ev in evaluation_fields(results)):
        return results

    def bare(ev: dict) -> dict:
        return {k: v for k, v in ev.items() if k != "records"} if "samples" in ev else ev

    out = dict(results)
    if isinstance(results.get("base"), dict) and isinstance(results["base"].get("evals"), list):
        out["base"] = {**results["base"], "evals": [bare(ev) if isinstance(ev, dict) else ev
                                                    for ev in results["base"]["evals"]]}
    if isinstance(results.get("arms"), dict):
        out["arms"] = {arm: {**e, "eval": bare(e["eval"])} if isinstance(e, dict) and isinstance(e.get("eval"), dict)
                       else e for arm, e in results["arms"].items()}
    return out


def known_reward_versions() -> tuple[int, ...]:
    """The GSM8K reward versions this recipe can score with, the newest last (gmts_recipe.rewards.REWARD_VERSIONS,
    the one list)."""
    from gmts_recipe.rewards import REWARD_VERSIONS  # standard library only

    return REWARD_VERSIONS


def recorded_reward_version(entry: dict) -> int | str:
    """The reward an arm of a results file trained with: the version it records ("reward_version"), else the one its
    evaluation was scored with (its samples file's), else 1 (an arm made before reward versions were named)."""
    if "reward_version" in entry:
        return entry["reward_version"]
    return ((entry.get("eval") or {}).get("samples") or {}).get("reward", 1)


def is_known_reward_version(version: Any) -> bool:
    """A GSM8K reward is numbered (known_reward_versions), a MATH reward named (rewards_math.REWARD_NAMES)."""
    from gmts_recipe.rewards_math import REWARD_NAMES  # standard library only

    if isinstance(version, str):
        return version in REWARD_NAMES
    return isinstance(version, int) and not isinstance(version, bool) and version in known_reward_versions()


def task_reward_versions(task: Any) -> tuple:
    """The reward versions that read a task's answers: MATH's named ones (rewards_math.REWARD_NAMES: the last
    \\boxed{} through math-verify) for task math, the numbered ones (rewards: the final number) for GSM8K and the
    generated task. A GSM8K file re-scored by a MATH reading, or the reverse, scores answers by a rule the task was
    never evaluated with."""
    from gmts_recipe.rewards_math import REWARD_NAMES  # standard library only

    return tuple(REWARD_NAMES) if task == "math" else tuple(known_reward_versions())


def task_rewards_text(task: Any) -> str:
    versions = task_reward_versions(task)
    return (f"named ({', '.join(versions)})" if task == "math" else f"versions {versions[0]} to {versions[-1]}")


def current_record(results: dict, folder: str | Path | None = None) -> dict:
    """`results` as this format holds it in memory, from a file of any format: the one converter (`load` and
    `read_results` call it; nothing else reads an earlier format). From format 1:
    - each MOVED_TO_ARMS field its config record holds goes into every arm's generation_options (where the arm does
      not record it itself: it ran with the config's value), and the config hash is recomputed, so a file of every
      stage resumes, merges and pools with new ones;
    - data.task_key, absent before keys covered the gold answer, is "question"; data.pool of a generated task, absent
      before it was recorded, is POOL_DEFAULTS updated with the config's values; data.decontamination of a generated
      task, absent before its tasks were held out by problem (held out by index then), records no problem;
    - a samples file without a reward version was scored by version 1.
    From format 2: each evaluation's per-task records are rebuilt from its samples file (path relative to `folder`,
    the results file's folder; its SHA-256 checked), as eval.py made them (task, key, scores, each text's length).
    Every stage of format 1 that results/ and bench/logs/ hold converts here (no samples kept; samples scored by
    version 1 with keys over the question; the reward version recorded, keys over question and gold answer, each
    arm's provenance; config records with gradient_checkpointing): tests/test_formats.py loads a file of each.
    "schema" stays the file's (a dict without one is read as format 1): what the file's format allowed
    (verify.file.verify_samples reads it); verify.file.seal makes it this format's. A new dict where it changes,
    sharing everything else with `results`, which stays as it was (no deep copy: records are most of a file);
    `results` itself when nothing changes. Not sealed: whoever writes it seals it (its "digest" is still the file's)."""
    schema = results.get("schema", 1)
    if schema not in FORMATS:
        raise ResultsError(f"schema is {schema!r}, not a results file format this recipe reads "
                           f"({', '.join(map(str, FORMATS))})")
    out = _from_format_1(results) if schema == 1 else results
    changed = {}
    for where, ev in evaluation_fields(out):
        now = _current_evaluation(ev, folder, where, schema)
        if now is not ev:
            changed[where] = now
    if not changed:
        return out
    out = dict(out)
    if isinstance(out.get("base"), dict) and isinstance(out["base"].get("evals"), list):
        out["base"] = {**out["base"], "evals": [changed.get(f"base.evals[{i}]", ev)
                                                for i, ev in enumerate(out["base"]["evals"])]}
    if isinstance(out.get("arms"), dict):
        out["arms"] = {arm: {**e, "eval": changed[f"arms.{arm}.eval"]} if f"arms.{arm}.eval" in changed else e
                       for arm, e in out["arms"].items()}
    return out


def _from_format_1(results: dict) -> dict:
    """The file-wide fields of a format-1 file as format 2 holds them (current_record); `results` itself where none
    changes."""
    config = results.get("config") or {}
    out = results
    moved = {k: config[k] for k in MOVED_TO_ARMS if k in config}
    if moved:
        out = dict(results, config={k: v for k, v in config.items() if k not in moved})
        out["config_hash"] = config_hash(out["config"])
        if "arms" in results:
            out["arms"] = {}
            for arm, entry in results["arms"].items():
                options = dict(entry.get("generation_options", {}))
                for k, v in moved.items():
                    options.setdefault(k, v)  # an arm that records it ran with its own value
                out["arms"][arm] = {**entry, "generation_options": options}
    data = results.get("data")
    pool = isinstance(data, dict) and data.get("task") == "arithmetic" and "pool" not in data
    by_index = isinstance(data, dict) and data.get("task") == "arithmetic" and "decontamination" not in data
    if isinstance(data, dict) and ("task_key" not in data or pool or by_index):
        data = {**data, "task_key": data.get("task_key", "question")}
        if pool:
            data["pool"] = {**POOL_DEFAULTS, **{k: config[k] for k in POOL_DEFAULTS if k in config}}
        if by_index:  # held out by index, as GSM8K is, before the generated task was held out by problem
            data["decontamination"] = {"problem": None}
        out = dict(out, data=data) if out is results else {**out, "data": data}
    return out


def _current_evaluation(ev: dict, folder: str | Path | None, where: str, schema: int | None) -> dict:
    """One evaluation as format 2 holds it in memory (current_record): its reward version (unrecorded in format 1:
    version 1) and its records (rebuilt from its samples file where the file stores none); `ev` itself where neither
    changes."""
    out = ev
    if schema == 1 and isinstance(ev.get("samples"), dict) and "reward" not in ev["samples"]:
        out = {**ev, "samples": {**ev["samples"], "reward": 1}}
    if "records" not in out and "samples" in out:
        if folder is None:
            raise ResultsError(f"{where}: its records are in its samples file, and the results file's folder is not "
                               f"known")
        out = {**out, "records": records_from_samples(out, folder, where)}
    return out


def current_evaluations(evals: list[dict], cell_folder: str | Path) -> list[dict]:
    """A base-evaluation cache's evaluations (recipe.py's <results_dir>/base-evals/<eval hash>.json, written with
    their records; samples paths relative to a cell's folder, `cell_folder`) as current_record holds them."""
    return [_current_evaluation(ev, cell_folder, f"base.evals[{i}]", 1) for i, ev in enumerate(evals)]


def samples_path(folder: Path, evaluation: dict, where: str) -> Path:
    """The samples file an evaluation names: "samples": {"path", "sha256", "reward"}, the path relative to the folder
    of the results.json that holds it (a base evaluation's is in the shared ../base-evals/, stored once for every
    cell); "reward": the reward version that scored them. Format 2 rebuilds an evaluation's records from it
    (records_from_samples); verify.file.check_samples re-scores it."""
    ref = evaluation["samples"]
    if not (isinstance(ref, dict) and isinstance(ref.get("path"), str) and isinstance(ref.get("sha256"), str)):
        raise ResultsError(f"{where}: samples must be {{'path': ..., 'sha256': ...}}, not {ref!r}")
    if Path(ref["path"]).is_absolute():
        raise ResultsError(f"{where}: samples path {ref['path']} must be relative to the results file's folder")
    return Path(folder) / ref["path"]


def read_samples(path: Path, sha256: str | None, where: str) -> list[dict]:
    """The records of a samples file whose bytes have the recorded SHA-256 (None: unchecked)."""
    if not path.is_file():
        raise ResultsError(f"{where}: samples file {path} is missing")
    data = path.read_bytes()
    actual = hashlib.sha256(data).hexdigest()
    if sha256 is not None and actual != sha256:
        raise ResultsError(f"{where}: samples file {path} has SHA-256 {actual[:12]}..., the results file records "
                           f"{sha256[:12]}...: the samples were changed after the run")
    try:
        return [json.loads(line) for line in lzma.decompress(data).decode("utf-8").splitlines()]
    except (lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultsError(f"{where}: samples file {path} is not xz-compressed JSON lines ({e})") from None


# Records rebuilt per samples file, as compact JSON (~70 KB for 1,319 tasks): a sweep's check reads every cell twice
# (its summaries, then its samples), and its cells share the base evaluations.
_REBUILT: dict[tuple, str] = {}
REBUILT_KEPT = 512


def records_from_samples(evaluation: dict, folder: str | Path, where: str) -> list[dict]:
    """An evaluation's per-task records from its samples file (samples.read_samples: the recorded SHA-256 checked):
    each line's task, key and scores, and the length of each text, in the file's order (the order eval.py scored
    them in, so every summary is recomputed bit for bit). A file read before in this process (same path, SHA-256,
    size and time) is not read again."""
    path = samples_path(folder, evaluation, where)
    sha = evaluation["samples"]["sha256"]
    try:
        stat = path.stat()
        key = (str(path.resolve()), sha, stat.st_size, stat.st_mtime_ns)
    except OSError:
        key = None
    if key in _REBUILT:
        _REBUILT[key] = _REBUILT.pop(key)  # the most recently used last: the shared base evaluations stay
        return [_record(row) for row in json.loads(_REBUILT[key])]
    lines = read_samples(path, sha, where)
    rows = [_row(line, f"{where}: samples file {path.name}: line {i + 1}") for i, line in enumerate(lines)]
    if key is not None:
        if len(_REBUILT) >= REBUILT_KEPT:
            _REBUILT.pop(next(iter(_REBUILT)))
        _REBUILT[key] = json.dumps(rows)
    return [_record(row) for row in rows]


def _row(line: Any, where: str) -> tuple[Any, Any, list, list]:
    """(task, key, scores, lengths) of one samples line; a line without them is one line of ResultsError."""
    if not (isinstance(line, dict) and "task" in line and "hash" in line and isinstance(line.get("scores"), list)
            and isinstance(line.get("samples"), list) and all(isinstance(t, str) for t in line["samples"])):
        raise ResultsError(f"{where} needs a task, its key (hash), the sample texts and their scores")
    return line["task"], line["hash"], list(line["scores"]), [len(t) for t in line["samples"]]


def _record(row: tuple | list) -> dict:
    task, key, scores, lengths = row
    return {"task": task, "hash": key, "scores": list(scores), "lengths": list(lengths)}


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
    """A time field a file may lack (format-1 files from before the field existed) is, where present, a finite
    number >= 0: `compile_seconds` of every evaluation and `train_compile_seconds` of every arm (recipe.compile_seconds:
    the process's torch.compile time during that phase, CUDA-graph recording not included)."""
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
        raise ResultsError(f"unknown arm {sorted(unknown)[0]!r} (known: {', '.join(known)}; {RULES_HINT})")
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


# ---------------------------------------------------------------------------- what a file says about itself
# The recipe's base_eval_seeds (recipe_config.RecipeArgs takes its default from here): what a config record that
# leaves the field out ran with.
BASE_EVAL_SEEDS = (0, 1, 2)
CURVES_NOTE = ("Training curves (each arm's train_log): read as recorded; check.py recomputes their summaries (grad "
               "norm, overlap, kept fraction) and checks their steps, learning rates and each rule's kept fraction, "
               "but cannot re-derive the logged values.")


def write_results(path: Path, results: dict) -> None:
    """Write a sealed results file as this format stores it (`stored`: no per-task records beside a samples file),
    atomically (write_json)."""
    write_json(path, stored(results))


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


def load_unique_yaml(text: str) -> Any:
    """yaml.safe_load, refusing a mapping that gives a key twice (ValueError naming the key and its lines): PyYAML
    keeps the last value without a word, so a field set twice in a config file would silently take the second."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        pass

    def mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            if isinstance(key, typing.Hashable) and key in lines:
                raise ValueError(f"key {key!r} is given twice (lines {lines[key]} and {key_node.start_mark.line + 1})")
            if isinstance(key, typing.Hashable):
                lines[key] = key_node.start_mark.line + 1
        return loader.construct_mapping(node, deep=True)

    UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass


def read_yaml_mapping(path: Path, error: type[Exception], shape: str) -> dict:
    """A YAML file that must hold a mapping (a config, a sweep file): any problem is one line of `error`."""
    import yaml

    try:
        raw = load_unique_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise error(f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    except ValueError as e:  # a key given twice: PyYAML alone would keep the last
        raise error(f"{path}: {e}") from None
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
