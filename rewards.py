"""The RLVR reward: 1.0 when a completion's final answer equals the gold number, in bounded time whatever the text.

Why bounded by construction rather than by a timeout: a reward runs in the trainer's main thread, in worker threads
and in worker processes. math-verify's own timeouts use SIGALRM, which only the main thread may set, and a C-level
big-integer operation (sympy evaluating `9**9**9`) holds the GIL, so no thread-based timeout can stop it either.
So nothing unbounded ever reaches sympy:

1. `final_answer` reads only the last MAX_TAIL_CHARS characters and a \\boxed{} of at most MAX_ANSWER_CHARS.
2. `exact_value` reads the cases GSM8K needs (a plain decimal like '1,234', '$5.00', '-7', or a fraction of two
   plain decimals like '\\frac{3}{4}' or '3/4') as an exact `Fraction`: ASCII digits only, at most MAX_ANSWER_CHARS
   characters, no exponent, so the work is linear in a bounded length. Two such values compare exactly.
3. Anything else goes to math-verify only if it is short (MAX_ANSWER_CHARS) and written in a grammar without
   powers, exponents, factorials, sums or functions (`_BOUNDED_EXPRESSION`: ASCII digits, + - * / and brackets,
   \\frac, \\cdot, \\times, \\div, %): every value it can denote is a rational of at most ~64 digits. Everything
   else scores 0 without being parsed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

MAX_TAIL_CHARS = 4000  # the final answer is at the end; bounding the input bounds the time
MAX_ANSWER_CHARS = 64  # a final answer longer than this is not a number the gold could equal
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


def _text(completion: Any) -> str:
    """A completion as TRL passes it: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else ""
    return ""


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, min(len(text), i + MAX_ANSWER_CHARS + 2)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def final_answer(text: str) -> str | None:
    """The model's final answer: the last \\boxed{...}, else the number after the last '####', else the last number."""
    text = text[-MAX_TAIL_CHARS:].replace("\u2212", "-")
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    if "####" in text:
        after = _NUMBER.search(text[text.rfind("####") :])
        if after:
            return after.group(0)
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def gold_answer(answer: str) -> str:
    """GSM8K's gold field ('... #### 72') or a bare number string."""
    return answer.rsplit("####", 1)[-1].strip() if "####" in answer else answer.strip()


def _normalize(ans: str) -> str:
    for token in ("\\$", "$", ",", "\\!"):  # \$ before $, or a stray backslash is left
        ans = ans.replace(token, "")
    return ans.strip().rstrip(".")


_TEXT_MACRO = re.compile(r"\\(?:text|mbox|mathrm)\{[^{}]*\}")
_DECIMAL = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits: no exponent, no unicode digits
_EXACT = re.compile(rf"(?P<sign>[+-]?)\s*(?:(?P<value>{_DECIMAL})|\\[dt]?frac\{{(?P<num>{_DECIMAL})\}}"
                    rf"\{{(?P<den>{_DECIMAL})\}}|(?P<n>{_DECIMAL})\s*/\s*(?P<d>{_DECIMAL}))")
_BOUNDED_EXPRESSION = re.compile(r"(?:\\[dt]?frac|\\cdot|\\times|\\div|\\left|\\right|\\%|[0-9 .+\-*/(){}%])*")
_POWER = re.compile(r"\*\s*\*")  # '**' (a power in sympy's syntax), also with spaces in between


def _clean(answer: str) -> str | None:
    """The answer without units, currency and thousands separators; None when too long to be a number or when it
    holds anything but printable ASCII (control characters, unicode digits or spaces)."""
    if len(answer) > MAX_TAIL_CHARS:
        return None
    unwrapped = _TEXT_MACRO.sub("", answer)
    if not (unwrapped.isascii() and unwrapped.isprintable()):
        return None
    cleaned = _normalize(unwrapped)
    return cleaned if 0 < len(cleaned) <= MAX_ANSWER_CHARS else None


def exact_value(answer: str) -> Fraction | None:
    """A plain decimal or a fraction of two plain decimals as an exact Fraction; None for anything else (including a
    zero denominator). Linear in the (bounded) length: no exponent can be written."""
    cleaned = _clean(answer)
    m = _EXACT.fullmatch(cleaned) if cleaned is not None else None
    if m is None:
        return None
    sign = -1 if m["sign"] == "-" else 1
    if m["value"] is not None:
        return sign * Fraction(m["value"])
    num, den = (m["num"], m["den"]) if m["num"] is not None else (m["n"], m["d"])
    return sign * Fraction(num) / Fraction(den) if Fraction(den) != 0 else None


def bounded_expression(answer: str) -> str | None:
    """The cleaned answer when math-verify may parse it in bounded time (short, no power, factorial, exponent, sum
    or function: see the module docstring), else None."""
    cleaned = _clean(answer)
    if cleaned is None or not _BOUNDED_EXPRESSION.fullmatch(cleaned) or _POWER.search(cleaned):
        return None
    return cleaned


def answers_equal(gold: str, predicted: str | None) -> bool:
    """Exact equality of two numbers when both are plain numbers or fractions; otherwise math-verify's equality of
    two bounded expressions; False for anything unbounded."""
    if predicted is None:
        return False
    gold_value, predicted_value = exact_value(gold), exact_value(predicted)
    if gold_value is not None and predicted_value is not None:
        return gold_value == predicted_value
    g, p = bounded_expression(gold), bounded_expression(predicted)
    if g is None or p is None:
        return False
    from math_verify import parse, verify

    # No SIGALRM timeouts (None): the input is bounded by construction, and a reward may run off the main thread.
    gold_parsed = parse(f"${g}$" if "\\" in g else g, parsing_timeout=None)
    pred_parsed = parse(f"${p}$" if "\\" in p else p, parsing_timeout=None)
    return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None))


def math_equal_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's final answer equals the gold number, else 0.0. Never raises; bounded time."""
    rewards = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            rewards.append(float(answers_equal(gold_answer(str(gold)), final_answer(_text(completion)))))
        except Exception:  # noqa: BLE001 - a reward must never stop training; garbage scores 0
            rewards.append(0.0)
    return rewards
