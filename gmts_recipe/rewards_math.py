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

REWARD_NAMES lists the readings, the newest last; REWARD_NAME (the newest) is what MATH evaluations record beside
their samples file ("reward": "math-2"), and check.py re-scores a samples file with the reward it names
(gmts_recipe.rewards.reward_function), so GSM8K's integer versions and MATH's named ones never mix. Each is kept
exactly, one code path with the reading's branches (`reading`, `parse_answer`, `answers_equal`):
- math-1: the readings above.
- math-2: math-1, and what math-verify reads too leniently or too strictly is read as written, on both sides alike:
  - a word that changes the number ('72\\text{ thousand}', '\\text{ million}', 'dozen', 'squared': `_VALUE_WORDS`),
    which math-verify drops with its \\text{}, must be the gold's too;
  - a unit (the words of a \\text{} or \\mbox{} beside a number, degrees), which math-verify drops, must be the gold's
    where both write one, read alike (`_unit`: 'cm' is 'centimeters', 'inches' is 'inch', 'square' dropped): '12 cm'
    is not '12 m', '90 radians' not 90^\\circ; a unit on one side only still scores;
  - a set written '\\{...\\}' against a tuple or interval written '(...)' or '[...]', either way, is wrong (math-verify
    compares their elements only); a comma list without brackets stays either;
  - an approximation ('\\frac12 \\approx 0.5') must hold: a decimal that rounds or truncates the value before it to
    the digits written (`_approximation_holds`); math-verify reads the value alone, so '\\frac12 \\approx 0.6' scored;
  - digit groups of three after a space are one number ('2\\,220', '2 220', '1~000~000': math-verify read 222);
  - an inequality of one variable against numbers ('x > 2', '3 < x \\le 4', 'x < 2 \\text{ or } x > 3', and 'x \\in S')
    is the set of its solutions, so it equals its interval (`_as_set`); never against a bare '(a, b)', which MATH
    also writes for a point;
  - a list of two or more choice letters is one answer however written ('A, C', '(C), (A)' are '\\text{(A), (C)}').
- math-3: math-2, and characters written for ASCII ones read as those (gmts_recipe.answer_text.ASCII_FORMS: the Unicode
  minus, '\\boxed{−3}' is -3; fullwidth forms; a zero-width space a space), and two boxes joined by 'or' answer
  neither ('$\\boxed{3}$ or perhaps $\\boxed{4}$': `last_boxed`), as in the GSM8K reward's version 5.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from typing import Any

from gmts_recipe.answer_text import VALUE_WORDS as GSM8K_VALUE_WORDS  # importing it drops math-verify's timeout notice
from gmts_recipe.answer_text import ASCII_FORMS, box_content, last_box, text_of, versioned

# Every MATH reading this recipe keeps, the newest last: the one list of known names. REWARD_NAME is what new MATH
# evaluations record; check.py re-scores a samples file with the reward it names.
REWARD_NAMES = ("math-1", "math-2", "math-3")
REWARD_NAME = REWARD_NAMES[-1]
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


# math-2's readings (module docstring): each names what math-1 let through or refused
_APPROX = re.compile(r"\\approx(?![A-Za-z])")
_GROUP_SEPARATOR = re.compile(r"\\[,;: ]|~| ")  # LaTeX's thin, medium, thick and normal spaces, a tie, a space
# Digit groups: 1 to 3 digits, then groups of 3 after a space ('2\,220', '2 220', '1 000 000'); not inside a longer
# number or after a decimal point
_DIGIT_GROUPS = re.compile(r"(?<![\d.])\d{1,3}(?:(?:\\[,;: ]|~| )\d{3})+(?!\d)")
_TEXT_MACRO = re.compile(r"\\(?:text(?:rm|bf|it|normal)?|mbox|mathrm)\s*\{([^{}]*)\}")
# Multiple-choice letters: 'A, C', '(A), (C)', '\text{(A) and (C)}', 'AC' is not one (a product, a segment)
_CHOICE = r"\(?[A-E]\)?"
_CHOICES = re.compile(rf"{_CHOICE}(?:\s*(?:,|and|\\text\{{\s*and\s*\}})\s*{_CHOICE})+")
# Words that scale or transform the number they stand by (gmts_recipe.rewards', but abbreviations and signs): never
# dropped with the \text{} math-verify drops
_VALUE_WORDS = GSM8K_VALUE_WORDS - set("k bn power powers root point minus negative".split())
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]+")  # a word, not a LaTeX command's name
# Unit words read alike (singular, spelled out); words that qualify no unit ('square', 'units') are dropped
_UNIT_SYNONYMS = {"cm": "centimeter", "centimetre": "centimeter", "m": "meter", "metre": "meter", "mm": "millimeter",
                  "km": "kilometer", "kilometre": "kilometer", "in": "inch", "ft": "foot", "feet": "foot",
                  "yd": "yard", "mi": "mile", "hr": "hour", "h": "hour", "min": "minute", "sec": "second",
                  "s": "second", "deg": "degree", "g": "gram", "kg": "kilogram", "lb": "pound", "oz": "ounce",
                  "l": "liter", "litre": "liter", "ml": "milliliter", "millilitre": "milliliter", "mph": "mph"}
_NO_UNIT = frozenset("square sq cubic cu unit units and or the a an of is are".split())
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree")
_SET_WRITTEN = re.compile(r"(?:\\left)?\\\{.*\\\}", re.DOTALL)  # \{1, 2\} (fullmatch)
_TUPLE_WRITTEN = re.compile(r"(?:\\left)?[(\[][^,]*,.*[)\]]", re.DOTALL)  # (1, 2), [1, 2): a tuple, an interval
_DECIMAL = re.compile(r"-?(\d+)(?:\.(\d+))?")


def _choices(answer: str) -> str:
    """A list of two or more multiple-choice letters, each once, however written ('A, C', '(A), (C)', '\\text{(C),
    (A)}'), as '\\text{(A), (C)}': letters in order (the choices are a set). Anything else unchanged."""
    if len(answer) > MAX_ANSWER_CHARS:
        return answer  # refused anyway (bounded_answer)
    bare = _TEXT_MACRO.sub(lambda m: m[1], answer).strip()
    if not _CHOICES.fullmatch(bare):
        return answer
    written = re.findall(r"[A-E]", bare.replace("and", ""))
    letters = sorted(set(written))
    if len(letters) < len(written):
        return answer  # 'A, A': a letter twice is no list of choices
    return "\\text{" + ", ".join(f"({letter})" for letter in letters) + "}"


def _value_words(answer: str) -> list[str]:
    """The words of `answer` that change its number ('72\\text{ thousand}'), sorted: math-verify drops them."""
    return sorted(w.lower() for w in _WORD.findall(answer) if w.lower() in _VALUE_WORDS)


def _unit(word: str) -> str:
    word = word.lower()
    if len(word) > 3 and re.search(r"(?:ch|sh|x)es$", word):
        word = word[:-2]
    elif len(word) > 2 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return _UNIT_SYNONYMS.get(word, word)


def _units(answer: str) -> frozenset[str]:
    """The units an answer writes beside its number (math-verify drops them): the words of its \\text{} macros and
    degrees, read alike (`_unit`); none where no digit stands outside the macros (a text answer, '\\text{(C)}')."""
    outside = _TEXT_MACRO.sub(" ", answer)
    if not re.search(r"\d", outside):
        return frozenset()
    words = [w for m in _TEXT_MACRO.finditer(answer) for w in re.findall(r"[A-Za-z]+", m[1])]
    units = {_unit(w) for w in words if w.lower() not in _NO_UNIT}
    return frozenset(units | ({"degree"} if _DEGREE.search(outside) else set()))


def _shapes_agree(gold: str, predicted: str) -> bool:
    """False for a set written against a tuple or an interval ('\\{1, 2\\}' against '(1, 2)'), either way:
    math-verify compares their elements alone."""
    set_written = (_SET_WRITTEN.fullmatch(gold), _SET_WRITTEN.fullmatch(predicted))
    tuple_written = (_TUPLE_WRITTEN.fullmatch(gold), _TUPLE_WRITTEN.fullmatch(predicted))
    return not ((set_written[0] and tuple_written[1]) or (tuple_written[0] and set_written[1]))


def _approximation_holds(answer: str) -> bool:
    """Whether every approximation an answer writes ('\\frac12 \\approx 0.5') is a decimal that rounds or truncates
    the value before it to the digits written ('\\frac13 \\approx 0.33', not 0.34; '\\frac12 \\approx 0.6' is no
    answer, where math-verify reads the value alone). True when it writes none."""
    parts = _APPROX.split(reading(answer, "math-1"))
    if len(parts) == 1 or not parts[0].strip():
        return True  # none, or nothing before it ('\\approx 8.24 \\text{ mph}', a MATH gold): math-verify reads it
    value = next((v for v in parse_answer(parts[0], "math-2") if _is_number(v)), None)
    if value is None:
        return False
    import sympy

    for part in parts[1:]:
        written = _TEXT_MACRO.sub(" ", part)  # a unit after it: '\\approx 0.67 \\text{ dollars}'
        for token in ("\\$", "$", "\\ldots", "\\dots", "\\,", "\\!"):
            written = written.replace(token, "")
        m = _DECIMAL.fullmatch(written.strip().rstrip(".").strip())
        if m is None or len(m[0]) > MAX_DIGITS:
            return False
        written, unit = sympy.Rational(m[0]), sympy.Rational(1, 10 ** len(m[2] or ""))
        exact = value if value.is_Rational else sympy.N(value, 50)  # a rational compares exactly: -3/8 is -0.38
        error = abs(exact - written)
        rounded = error <= unit / 2
        truncated = error < unit and abs(written) <= abs(exact)  # toward zero: 2/3 as 0.66
        if not (rounded or truncated):
            return False
    return True


def _is_number(value: Any) -> bool:
    import sympy

    return isinstance(value, sympy.Expr) and value.is_number and value.is_real is True


def _as_set(value: Any) -> Any:
    """An inequality of one variable against numbers ('x > 2', '2 < x \\le 5', 'x < 2 or x > 3') or 'x \\in S' as the
    set of its solutions, so that it compares with an interval; None for anything else. Only the interval form:
    each relation between the variable itself and a number, so solving is trivial, bounded work."""
    import sympy
    from sympy.core.relational import Relational

    if isinstance(value, sympy.Eq) and isinstance(value.rhs, sympy.Set) and isinstance(value.lhs, sympy.Symbol):
        return value.rhs
    if isinstance(value, sympy.FiniteSet) and len(value) > 1:
        sets = [_as_set(v) for v in value]
        return sympy.Union(*sets) if all(s is not None for s in sets) else None
    relations = [value] if isinstance(value, Relational) else \
        list(value.args) if isinstance(value, (sympy.And, sympy.Or)) else []
    if not relations or any(not isinstance(r, Relational) or isinstance(r, (sympy.Eq, sympy.Ne)) for r in relations):
        return None
    symbols = set().union(*(r.free_symbols for r in relations))
    if len(symbols) != 1:
        return None
    (x,) = symbols
    if any(not ((r.lhs == x and r.rhs.is_number) or (r.rhs == x and r.lhs.is_number)) for r in relations):
        return None
    return value.as_set()


def _open_bounded(value: Any) -> bool:
    """An open interval with two finite ends, '(2, 4)': MATH writes a point so too, so no inequality answers it."""
    import sympy

    return isinstance(value, sympy.Interval) and value.left_open and value.right_open and \
        value.start.is_finite and value.end.is_finite


def last_boxed(text: str, alternatives: bool = False) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}) of `text`, braces matched, stripped; '\\boxed 5' (no
    braces, as two MATH training solutions write it) is its next word. None when there is none or it is left open;
    '' for two boxes joined by 'or' where `alternatives` (math-3). gmts_recipe.answer_text.last_box, the one scanner."""
    box = last_box(text, _BOX, None, alternatives)
    return None if box is None else box[0].strip()


def reading(answer: str, name: str = REWARD_NAME) -> str:
    """The answer as math-verify is given it: a sentence's period at its end dropped ('\\boxed{10.}' is 10), a
    percent sign dropped (a unit), e notation written as a power of 10 (module docstring); from math-2 also digit
    groups joined ('2\\,220' and '2 220' are 2220), an approximation dropped ('\\frac12 \\approx 0.5' is 1/2, once
    `_approximation_holds`) and a list of choice letters written one way ('A, C' is '\\text{(A), (C)}'). The same
    for a gold answer and a completion's."""
    answer = answer if name in ("math-1", "math-2") else answer.translate(ASCII_FORMS)
    answer = _END_PERIOD.sub("", _PERCENT.sub(" ", answer).strip())
    answer = _E_NOTATION.sub(lambda m: f"{m[1]} \\times 10^{{{m[2]}}}", answer).strip()
    if name == "math-1":
        return answer
    before = _APPROX.split(answer, 1)[0].strip()
    answer = before or answer  # '\\approx 8.24' alone is read as written
    answer = _DIGIT_GROUPS.sub(lambda m: _GROUP_SEPARATOR.sub("", m[0]), answer)
    return _choices(answer)


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
        group = box_content(text, i, None)
        return (f"{{{group[0]}}}", group[1]) if group else None
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
def parse_answer(answer: str, name: str = REWARD_NAME) -> tuple:
    """math-verify's reading of a boxed answer (`reading` applied first), or () when `bounded_answer` refuses it or
    math-verify reads nothing. Cached: a task's gold is parsed once per process, not once per sample."""
    from math_verify import LatexExtractionConfig, parse

    read = reading(answer, name)
    if not bounded_answer(read):
        return ()
    # No SIGALRM timeouts (None): the input is bounded by construction, and a reward may run off the main thread.
    return tuple(parse(f"\\boxed{{{read}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=None))


def answers_equal(gold: str, predicted: str | None, name: str = REWARD_NAME) -> bool:
    """math-verify's equality of the gold answer and a completion's boxed answer, both read by `parse_answer`;
    False when either is refused or unreadable. From math-2 (module docstring) also False where the two write other
    words that change the number, other units, a set against a tuple, or an approximation that does not hold; and an
    inequality of one variable equals the interval of its solutions."""
    if predicted is None:
        return False
    gold_parsed, predicted_parsed = parse_answer(gold, name), parse_answer(predicted, name)
    if not gold_parsed or not predicted_parsed:
        return False
    if name != "math-1" and not _math2_agree(gold, predicted):  # both bounded now: at most MAX_ANSWER_CHARS read
        return False
    from math_verify import verify

    if verify(list(gold_parsed), list(predicted_parsed), timeout_seconds=None):
        return True
    return name != "math-1" and _inequality_equal(gold_parsed, predicted_parsed)


def _math2_agree(gold: str, predicted: str) -> bool:
    """What math-2 asks of the two answers as written, ahead of math-verify's comparison (answers_equal)."""
    gold_read, predicted_read = reading(gold, "math-1"), reading(predicted, "math-1")
    if _value_words(gold_read) != _value_words(predicted_read):
        return False
    gold_units, predicted_units = _units(gold_read), _units(predicted_read)
    if gold_units and predicted_units and gold_units != predicted_units:
        return False
    return _shapes_agree(gold_read, predicted_read) and _approximation_holds(predicted) and _approximation_holds(gold)


def _inequality_equal(gold_parsed: tuple, predicted_parsed: tuple) -> bool:
    """An inequality on one side, an interval (not a bare '(a, b)', `_open_bounded`) or another inequality on the
    other: equal when their solution sets are (math-verify compares the sets)."""
    from math_verify import verify

    gold_value, predicted_value = gold_parsed[0], predicted_parsed[0]
    gold_set, predicted_set = _as_set(gold_value), _as_set(predicted_value)
    if gold_set is None and predicted_set is None:
        return False
    if _open_bounded(gold_value) or _open_bounded(predicted_value):
        return False
    try:
        return bool(verify([gold_set if gold_set is not None else gold_value],
                           [predicted_set if predicted_set is not None else predicted_value], timeout_seconds=None))
    except Exception:  # noqa: BLE001 - a set sympy cannot compare is no answer
        return False


def boxed_answer(completion: Any, name: str = REWARD_NAME) -> str | None:
    """A completion's final answer as the reading `name` reads it: the last \\boxed{} of its last MAX_TAIL_CHARS
    characters."""
    return last_boxed(text_of(completion)[-MAX_TAIL_CHARS:], name not in ("math-1", "math-2"))


def math_boxed_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's last boxed answer equals the gold answer (the task's "answer": MATH's boxed gold),
    else 0.0, as the newest reading (REWARD_NAME) reads them. Never raises; bounded time."""
    return _scores(completions, answer, REWARD_NAME)


def _scores(completions: list, answer: list[str], name: str) -> list[float]:
    """math_boxed_reward as the reading `name` reads the answers."""
    rewards = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            rewards.append(float(answers_equal(str(gold).strip(), boxed_answer(completion, name), name)))
        except Exception:  # noqa: BLE001 - a reward must never stop training; garbage scores 0
            rewards.append(0.0)
    return rewards


def reward_function(name: str = REWARD_NAME) -> Callable[..., list[float]]:
    """The MATH reward a name denotes (REWARD_NAMES; REWARD_NAME is `math_boxed_reward`), so a samples file scored by
    an older reading still re-scores as it was scored; gmts_recipe.rewards.reward_function dispatches named versions
    here."""
    if name not in REWARD_NAMES:
        raise ValueError(f"reward {name!r} is unknown: this recipe's MATH rewards are {', '.join(REWARD_NAMES)}")
    return math_boxed_reward if name == REWARD_NAME else \
        versioned(_scores, name, f"math_boxed_reward_{name.replace('-', '_')}")
