"""The MATH reward: 1.0 when a completion's last \\boxed{} answer equals the gold answer by math-verify, in bounded
time whatever the text.

The gold is MATH's own: the last \\boxed{} of the dataset's solution (`last_boxed`, also what gmts_recipe.math_data
reads as the gold). The completion's answer is its last \\boxed{} too: the format the Qwen2.5-Math models are
prompted for ("Please reason step by step, and put your final answer within \\boxed{}", data.SYSTEM_PROMPTS "boxed").
No box, an empty box or a box left open (a truncated answer) scores 0.

Equality is math-verify's (`math_verify.parse` with its LaTeX extraction on `\\boxed{answer}`, then
`math_verify.verify`), which reads what MATH's golds hold: fractions (\\frac, \\dfrac, \\tfrac, a/b, mixed numbers),
roots, pi, intervals, ordered tuples (order kept), sets and comma lists (order free), degrees, units and \\text{}
words after a number, equations (x = 5 answers 5), matrices, complex numbers, and text answers (\\text{(C)}, a name).
A decimal equals a fraction or a root when it rounds to the same 6 decimals (math-verify's float_rounding):
0.333333 is 1/3, 0.33 is not. Three readings are this module's own, on both sides alike, before math-verify reads
them (`reading`):

- a period that ends the boxed answer ends a sentence: '\\boxed{10.}' is 10;
- a percent sign is a unit, as in the GSM8K reward (gmts_recipe.rewards, version 2): '10\\%' is 10, never 0.1 (math-
  verify alone reads it as both, so a gold of 10\\% would score 10 and 0.1 right; MATH asks "what percent" with the
  gold written as the number of percent);
- a number in e notation (Minerva OCW's golds write '4.5e33') is the number: '4.5 \\times 10^{33}', not 4.5 x e x 33
  (LaTeX has no e notation, so math-verify reads the e as Euler's number).

Why bounded by construction, not by a timeout (as the GSM8K reward; its docstring says more): a reward runs in the
trainer's main thread, in worker threads and in worker processes, math-verify's timeouts use SIGALRM, which only the
main thread may set, and sympy evaluating '9^{9^{9}}' holds the GIL in C, where no timeout reaches. So an answer
reaches sympy only when `bounded_answer` accepts it:
- at most MAX_ANSWER_CHARS printable ASCII characters, numbers of at most MAX_DIGITS digits;
- no sum, product, integral, limit or arrow notation;
- no exponential (exp, sinh, cosh) inside a function, no function in an exponent;
- at most MAX_POWERS powers, none in an exponent, none of a power but one level deep with one-digit exponents;
  exponents' numbers of at most MAX_EXPONENT_DIGITS digits (MAX_DIGITS_IN_FUNCTIONS where a function is applied),
  their sizes (products) MAX_TOTAL summed;
- factorials only of a number of at most MAX_FACTORIAL_DIGITS digits or of a letter; binomials of small numbers.
Every MATH and Minerva OCW gold answer passes these bounds (tests/test_rewards_math.py reads them where the data is at
hand); anything else scores 0 without being parsed.

REWARD_NAME names this reading. MATH evaluations record it beside their samples file ("reward": "math-1"), and
check.py re-scores a samples file with the reward it names (gmts_recipe.rewards.reward_function), so GSM8K's integer
versions and MATH's named ones never mix.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

REWARD_NAME = "math-1"  # what MATH evaluations record; check.py re-scores a samples file with the reward it names
REWARD_NAMES = (REWARD_NAME,)  # every MATH reading this recipe keeps
MAX_TAIL_CHARS = 8000  # the last \boxed{} is at the end of an answer; bounding the input bounds the time
MAX_ANSWER_CHARS = 256  # MATH's longest gold is 159 characters (a 3x3 matrix), Minerva OCW's 210
MAX_DIGITS = 40  # digits in one number (MATH's golds: at most 9)
MAX_POWERS = 8  # '^' in one answer (MATH's golds: at most 7)
MAX_EXPONENT_DIGITS = 4  # digits of a number in an exponent (MATH's golds: 2^{2008})
MAX_FACTORIAL_DIGITS = 4  # 9999! has 35,660 digits (a MATH gold: 1/2004!)
MAX_TOTAL = 10_000  # the exponents' sizes (and the factorials' numbers) summed over the answer: one 2^{9999}
MAX_DIGITS_IN_FUNCTIONS = 2  # exponents and factorials where a function is applied: sin(10^{9999}) needs 10^4 digits
MAX_BINOMIAL_DIGITS = 3

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# Notation that denotes unbounded work in sympy: sums, products, integrals, limits, Knuth's arrows, braces' labels
_UNBOUNDED = re.compile(r"\\(?:sum|prod|coprod|int|iint|iiint|oint|lim|limsup|liminf|uparrow|Uparrow|underbrace|"
                        r"overbrace)(?![A-Za-z])")
# Functions sympy evaluates numerically: their argument's size is the precision they need
_FUNCTION = re.compile(r"\\(?:exp|a?sinh?|a?cosh?|a?tanh?|sec|csc|cot|arc(?:sin|cos|tan|sec|csc|cot)|log|ln|lg)"
                       r"(?![A-Za-z])")
_GROWTH = re.compile(r"\\(?:exp|sinh|cosh)(?![A-Za-z])")  # the functions whose value outgrows their argument's digits
_BINOMIAL = re.compile(r"\\(?:[dt]?binom|choose)(?![A-Za-z])")
_DIGIT_RUN = re.compile(r"\d+")
_PERCENT = re.compile(r"\\?%")
_END_PERIOD = re.compile(r"(?<!\\)\.+$")  # '10.' or '30^\circ..'; not LaTeX's accent, '\.'
# e notation: a number, e, an integer exponent ('4.5e33', '1e-5'), not inside a word or a longer number
_E_NOTATION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)[eE]([+-]?\d+)(?![\w.])")


def _drop_timeout_notice(record: logging.LogRecord) -> bool:
    """False for math-verify's notice that its timeouts are off: they are off on purpose (bounded inputs), as in
    gmts_recipe.rewards, which filters the same notice for the GSM8K reward."""
    return not record.getMessage().startswith("Timeout is disabled")


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_drop_timeout_notice)


def _text(completion: Any) -> str:
    """A completion as TRL passes it: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else ""
    return ""


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) of `text`, braces matched, stripped; '\\boxed 5' (no
    braces, as two MATH training solutions write it) is its next word. None when there is none or it is left open.
    Linear in the length of the text after the box."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    while start >= 0 and not _BOX.match(text, start):  # \boxedx is no box: an earlier one may be
        start = max(text.rfind("\\boxed", 0, start), text.rfind("\\fbox", 0, start))
    if start < 0:
        return None
    i = _BOX.match(text, start).end()
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] != "{":  # '\boxed 5$': the word after it
        word = re.match(r"[^\s$]+", text[i:])
        return word[0] if word else None
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j].strip()
    return None


def reading(answer: str) -> str:
    """The answer as math-verify is given it: a sentence's period at its end dropped ('\\boxed{10.}' is 10), a
    percent sign dropped (a unit), e notation written as a power of 10 (module docstring). The same for a gold answer
    and a completion's."""
    answer = _END_PERIOD.sub("", _PERCENT.sub(" ", answer).strip())
    return _E_NOTATION.sub(lambda m: f"{m[1]} \\times 10^{{{m[2]}}}", answer).strip()


def _group_before(text: str, end: int) -> str | None:
    """The bracketed group that closes at text[end] (')', ']' or '}'), found backwards; None when unmatched."""
    closing = text[end]
    opening = {")": "(", "]": "[", "}": "{"}[closing]
    depth = 0
    for i in range(end, -1, -1):
        depth += {closing: 1, opening: -1}.get(text[i], 0)
        if depth == 0:
            return text[i : end + 1]
    return None


def _exponent(text: str, start: int) -> tuple[str, int] | None:
    """The exponent after the '^' at text[start - 1] and the index after it: a {group}, a \\command, a run of
    digits or one character. None when a group is left open."""
    i = start
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None
    if text[i] == "{":
        depth = 0
        for j in range(i, len(text)):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                return text[i : j + 1], j + 1
        return None
    token = re.match(r"\\[A-Za-z]+|\d+|.", text[i:])[0]
    return token, i + len(token)


def _powers_bounded(answer: str, digits: int, nested: bool = True) -> int | None:
    """The sum of the exponents' sizes (each the product of its numbers, every number counted as at least 2: a bound
    on the value '99 \\cdot 99' or '2 / 5' can take), or None when the powers are unbounded: over MAX_POWERS of them,
    one right after an exponent ('2^3^4') or followed by a factorial, a '^', a factorial or a function in an exponent,
    a number in an exponent over `digits` digits. A power of a bracket that holds powers (Minerva OCW's
    '\\left[P_{0}^{2 / 5} - ...\\right]^{5 / 2}') only one level deep (`nested`), with one-digit numbers in every
    exponent of the pair."""
    carets = [i for i, ch in enumerate(answer) if ch == "^"]
    if len(carets) > MAX_POWERS:
        return None
    total = 0
    for i in carets:
        found = _exponent(answer, i + 1)
        if found is None:
            return None
        exponent, after = found
        runs = _DIGIT_RUN.findall(exponent)
        if "^" in exponent or _has_factorial(exponent) or _FUNCTION.search(exponent) or \
                any(len(d) > digits for d in runs):
            return None
        if answer[after:].lstrip(" ")[:1] in ("^", "!"):
            return None
        total += math.prod(max(int(d), 2) for d in runs) if runs else 1
        before = answer[:i].rstrip(" ")
        if before and before[-1] in ")]}":
            group = _group_before(before, len(before) - 1)
            if group is None or _has_factorial(group):
                return None
            if "^" in group and not (nested and all(len(d) == 1 for d in runs)
                                     and _powers_bounded(group, digits=1, nested=False) is not None):
                return None
    return total


def _has_factorial(text: str) -> bool:
    return re.search(r"(?<!\\)!", text) is not None  # '\!' is LaTeX's negative space, no factorial


def _factorials_bounded(answer: str, digits: int) -> int | None:
    """The sum of the numbers factorials are taken of, or None when a factorial is of more than `digits` digits or
    of anything but a number or a letter (a bracket, a power, another factorial)."""
    total = 0
    for m in re.finditer(r"(?<!\\)!", answer):
        before = answer[: m.start()].rstrip(" ")
        run = re.search(r"\d+$", before)
        if run is not None:
            if len(run[0]) > digits:
                return None
            total += int(run[0])
        elif not re.search(r"(?<![\\A-Za-z])[A-Za-z]$", before):  # n!, not \infty! or )!
            return None
    return total


def _functions_nested(answer: str) -> bool:
    """Whether a function's argument (its bracketed group, or without brackets all that follows it: '\\sin 2\\exp x'
    may read as sin(2 exp x)) holds an exponential (exp, sinh, cosh): sin(exp(exp(99))) needs 10^43 digits of pi to
    evaluate. Other nesting is bounded (Minerva OCW's gold '\\arcsin{1.3 \\sin{\\theta_w}}')."""
    for m in _FUNCTION.finditer(answer):
        rest = answer[m.end():].lstrip(" ")
        if rest.startswith("\\left"):
            rest = rest[len("\\left"):].lstrip(" ")
        if rest[:1] in ("(", "[", "{"):
            closing = {"(": ")", "[": "]", "{": "}"}[rest[0]]
            depth, end = 0, len(rest)
            for j, ch in enumerate(rest):
                depth += {rest[0]: 1, closing: -1}.get(ch, 0)
                if depth == 0:
                    end = j + 1
                    break
            argument = rest[:end]
        else:
            argument = rest
        if _GROWTH.search(argument):
            return True
    return False


def bounded_answer(answer: str) -> bool:
    """Whether sympy may read `answer` (a boxed answer, `reading` applied) in bounded time: the bounds of the module
    docstring. Linear in the (already bounded) length, but for the brackets of a power's base."""
    if not 0 < len(answer) <= MAX_ANSWER_CHARS or not answer.isascii():
        return False
    if any(not (ch.isprintable() or ch in "\n\t") for ch in answer) or _UNBOUNDED.search(answer):
        return False
    digits = [len(d) for d in _DIGIT_RUN.findall(answer)]
    if digits and max(digits) > MAX_DIGITS:
        return False
    if _BINOMIAL.search(answer) and ("^" in answer or _has_factorial(answer) or
                                     (digits and max(digits) > MAX_BINOMIAL_DIGITS)):
        return False
    functions = _FUNCTION.search(answer) is not None
    if functions and _functions_nested(answer):
        return False
    powers = _powers_bounded(answer, MAX_DIGITS_IN_FUNCTIONS if functions else MAX_EXPONENT_DIGITS)
    factorials = _factorials_bounded(answer, MAX_DIGITS_IN_FUNCTIONS if functions else MAX_FACTORIAL_DIGITS)
    return powers is not None and factorials is not None and powers <= MAX_TOTAL and factorials <= MAX_TOTAL


@functools.lru_cache(maxsize=8192)
def parse_answer(answer: str) -> tuple:
    """math-verify's reading of a boxed answer (`reading` applied first), or () when `bounded_answer` refuses it or
    math-verify reads nothing. Cached: a task's gold is parsed once per process, not once per sample."""
    from math_verify import LatexExtractionConfig, parse

    read = reading(answer)
    if not bounded_answer(read):
        return ()
    # No SIGALRM timeouts (None): the input is bounded by construction, and a reward may run off the main thread.
    return tuple(parse(f"\\boxed{{{read}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=None))


def answers_equal(gold: str, predicted: str | None) -> bool:
    """math-verify's equality of the gold answer and a completion's boxed answer, both read by `parse_answer`;
    False when either is refused or unreadable."""
    if predicted is None:
        return False
    gold_parsed, predicted_parsed = parse_answer(gold), parse_answer(predicted)
    if not gold_parsed or not predicted_parsed:
        return False
    from math_verify import verify

    return bool(verify(list(gold_parsed), list(predicted_parsed), timeout_seconds=None))


def boxed_answer(completion: Any) -> str | None:
    """A completion's final answer as this reward reads it: the last \\boxed{} of its last MAX_TAIL_CHARS
    characters."""
    return last_boxed(_text(completion)[-MAX_TAIL_CHARS:])


def math_boxed_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's last boxed answer equals the gold answer (the task's "answer": MATH's boxed gold),
    else 0.0. Never raises; bounded time."""
    rewards = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            rewards.append(float(answers_equal(str(gold).strip(), boxed_answer(completion))))
        except Exception:  # noqa: BLE001 - a reward must never stop training; garbage scores 0
            rewards.append(0.0)
    return rewards


def reward_function(name: str = REWARD_NAME) -> Callable[..., list[float]]:
    """The MATH reward a name denotes (REWARD_NAMES); gmts_recipe.rewards.reward_function dispatches named versions
    here."""
    if name == REWARD_NAME:
        return math_boxed_reward
    raise ValueError(f"reward {name!r} is unknown: this recipe's MATH rewards are {', '.join(REWARD_NAMES)}")
