"""The MATH reward's readings, math-1 against math-2 and math-3: hand-written answers with their exact scores,
properties over numbers, and the counts over MATH-500's golds in each written form that math-2 reads otherwise (where
the data is at hand): words that change the number, another unit, spaced thousands, an inequality for an interval,
choice letters, a tuple for a set (and a set for a tuple), an approximation; then what math-3 reads otherwise."""

import re
from fractions import Fraction

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_recipe.rewards_math import (_TEXT_MACRO, _VALUE_WORDS, REWARD_NAMES, _units, parse_answer, reading,
                                      reward_function)


def scores(answer: str, gold: str) -> tuple[float, ...]:
    """The boxed answer's score against `gold` under each MATH reading, oldest first."""
    return tuple(reward_function(name)([f"So the answer is $\\boxed{{{answer}}}$."], [gold])[0]
                 for name in REWARD_NAMES)


# (boxed answer, gold, math-1, math-2)
BY_NAME = [
    # a word that changes the number: math-verify drops the \text{} it stands in
    ("72\\text{ thousand}", "72", 1.0, 0.0),
    ("72 \\text{ million}", "72", 1.0, 0.0),
    ("72\\text{ thousand}", "72000", 0.0, 0.0),  # refused, not rescaled
    ("\\frac{1}{2}\\text{ dozen}", "\\frac12", 1.0, 0.0),
    ("72 thousand", "72", 0.0, 0.0),  # bare words are letters to math-verify
    # another unit than the gold's
    ("12\\text{ cm}", "12\\text{ m}", 1.0, 0.0),
    ("15\\mbox{ m}^2", "15\\mbox{ cm}^2", 1.0, 0.0),
    ("5.4 \\text{ dollars}", "5.4 \\text{ cents}", 1.0, 0.0),
    ("90\\text{ radians}", "90^\\circ", 1.0, 0.0),
    ("\\frac{270}{7}\\text{ radians}", "\\frac{270}7\\text{ degrees}", 1.0, 0.0),
    # the gold's unit however written, or none, still scores
    ("12\\text{ meters}", "12\\text{ m}", 1.0, 1.0),
    ("15\\text{ square centimeters}", "15\\mbox{ cm}^2", 1.0, 1.0),
    ("864 \\text{ square inches}", "864 \\mbox{ inches}^2", 1.0, 1.0),
    ("5.4 \\text{ cent}", "5.4 \\text{ cents}", 1.0, 1.0),
    ("5.4", "5.4 \\text{ cents}", 1.0, 1.0),
    ("90 \\text{ degrees}", "90^\\circ", 1.0, 1.0),
    ("\\frac{270}{7}^\\circ", "\\frac{270}7\\text{ degrees}", 1.0, 1.0),
    ("12\\text{ cm}", "12", 1.0, 1.0),
    # a tuple for a set, a set for a tuple
    ("(1+\\sqrt{5},1-\\sqrt{5},-2)", "\\{1\\pm\\sqrt{5},-2\\}", 1.0, 0.0),
    ("\\{-2,1\\}", "(-2,1)", 1.0, 0.0),
    ("\\{6,31,-1\\}", "(6,31,-1)", 1.0, 0.0),
    ("\\{-2, 1-\\sqrt{5},1+\\sqrt{5}\\}", "\\{1\\pm\\sqrt{5},-2\\}", 1.0, 1.0),
    ("1+\\sqrt{5},1-\\sqrt{5},-2", "\\{1\\pm\\sqrt{5},-2\\}", 1.0, 1.0),  # a list of solutions: a set
    ("(1,-2)", "1,-2", 1.0, 1.0),
    # an approximation: it must hold, to the digits written
    ("\\frac12 \\approx 0.6", "\\frac12", 1.0, 0.0),
    ("\\frac13 \\approx 0.34", "\\frac13", 1.0, 0.0),
    ("\\sqrt2 \\approx 1.42", "\\sqrt2", 1.0, 0.0),
    ("\\frac12 \\approx 0.5", "\\frac12", 1.0, 1.0),
    ("\\frac13 \\approx 0.33", "\\frac13", 1.0, 1.0),
    ("\\frac23 \\approx 0.66", "\\frac23", 1.0, 1.0),  # truncated
    ("\\frac23 \\approx 0.67", "\\frac23", 1.0, 1.0),  # rounded
    ("-\\frac38 \\approx -0.38", "-\\frac38", 1.0, 1.0),  # a half rounds away from zero, exactly
    ("\\pi \\approx 3.14159", "\\pi", 1.0, 1.0),
    ("0.6 \\approx \\frac12", "\\frac12", 0.0, 0.0),
    # spaced thousands
    ("2\\,220", "2220", 0.0, 1.0),
    ("2 220", "2220", 0.0, 1.0),
    ("10\\,080", "10,\\!080", 0.0, 1.0),
    ("1\\,000\\,000", "1000000", 0.0, 1.0),
    ("2\\,220", "222", 1.0, 0.0),
    ("2,220", "2220", 1.0, 1.0),
    ("2{,}220", "2220", 1.0, 1.0),
    ("2\\,22", "2220", 0.0, 0.0),  # not a group of three
    # an inequality of one variable for an interval
    ("x > 2", "(2,\\infty)", 0.0, 1.0),
    ("x \\ge 2", "(2,\\infty)", 0.0, 0.0),  # the end is open
    ("x \\le 0", "(-\\infty, 0]", 0.0, 1.0),
    ("3 < x \\le 4", "(3,4]", 0.0, 1.0),
    ("x < 2 \\text{ or } x > 3", "(-\\infty, 2) \\cup (3, \\infty)", 0.0, 1.0),
    ("-2 \\le x \\le 7", "x \\in [-2,7]", 0.0, 1.0),
    ("y > 2", "(2,\\infty)", 0.0, 1.0),  # whatever the variable
    ("2 < x < 4", "(2,4)", 0.0, 0.0),  # '(2, 4)' may be a point: never an inequality
    ("x > 2y", "(2,\\infty)", 0.0, 0.0),  # two variables
    ("x^2 > 4", "(2,\\infty)", 0.0, 0.0),  # not the variable itself
    ("x > 2", "x > 2", 1.0, 1.0),
    # choice letters
    ("A, C", "\\text{(A), (C)}", 0.0, 1.0),
    ("(C), (A)", "\\text{(A), (C)}", 0.0, 1.0),
    ("\\text{(A) and (C)}", "\\text{(A), (C)}", 1.0, 1.0),
    ("\\text{A, C}", "\\text{(A), (C)}", 1.0, 1.0),
    ("A", "\\text{(A), (C)}", 0.0, 0.0),
    ("A, B, C", "\\text{(A), (C)}", 0.0, 0.0),
    ("A, C, A", "\\text{(A), (C)}", 0.0, 0.0),
    ("C", "\\text{(C)}", 1.0, 1.0),
    ("(C)", "\\text{(C)}", 1.0, 1.0),
]


@pytest.mark.parametrize("answer, gold, math1, math2", BY_NAME)
def test_each_reading_scores_these_answers_exactly(answer, gold, math1, math2):
    assert scores(answer, gold) == (math1, math2, math2)  # math-3 reads these as math-2


# (completion, gold, math-2, math-3): the Unicode minus and fullwidth forms are ASCII; two boxes joined by 'or' are none
MATH_3 = [
    ("So $\\boxed{3}$ or perhaps $\\boxed{4}$.", "4", 1.0, 0.0),
    ("So $\\boxed{3}$ or perhaps $\\boxed{4}$.", "3", 0.0, 0.0),
    ("$\\boxed{\u22123}$", "-3", 0.0, 1.0),
    ("$\\boxed{\\frac{\u22121}{\uff12}}$", "-\\frac12", 0.0, 1.0),
    ("$\\boxed{3}$. Wait, that is wrong: $\\boxed{4}$.", "4", 1.0, 1.0),  # a box that corrects one still answers
    ("$\\boxed{3}$ and $\\boxed{4}$", "4", 1.0, 1.0),
]


@pytest.mark.parametrize("completion, gold, math2, math3", MATH_3)
def test_math_3_reads_unicode_forms_and_refuses_alternative_boxes(completion, gold, math2, math3):
    assert tuple(reward_function(name)([completion], [gold])[0] for name in ("math-2", "math-3")) == (math2, math3)


def test_the_readings_are_one_tuple_newest_last():
    from gmts_recipe import records

    assert REWARD_NAMES == ("math-1", "math-2", "math-3")
    assert all(records.is_known_reward_version(name) for name in REWARD_NAMES)
    assert not records.is_known_reward_version("math-4")
    assert reading("2\\,220", "math-1") == "2\\,220" and reading("2\\,220") == "2220"
    assert reading("\\frac12 \\approx 0.5") == "\\frac12" and reading("C, A") == "\\text{(A), (C)}"


GROUP_SEPARATORS = ["\\,", " ", "\\ ", "~", "\\;"]


def grouped(n: int, separator: str) -> str:
    digits = str(abs(n))
    groups = [digits[max(0, i - 3):i] for i in range(len(digits), 0, -3)][::-1]
    return "-" * (n < 0) + separator.join(groups)


@settings(max_examples=60, deadline=None)
@given(st.integers(1000, 10**12) | st.integers(-10**12, -1000), st.sampled_from(GROUP_SEPARATORS))
def test_spaced_thousands_are_the_number(n, separator):
    assert scores(grouped(n, separator), str(n))[-1] == 1.0
    assert scores(grouped(n, separator), str(n + 1))[-1] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(-10**6, 10**6), st.sampled_from(sorted(_VALUE_WORDS)),
       st.sampled_from(["{n}\\text{{ {w}}}", "{n} \\text{{ {w}}}", "{n}\\ \\mbox{{{w}}}", "\\text{{{w} }}{n}"]))
def test_a_word_that_changes_the_number_never_passes(n, word, form):
    assert scores(form.format(n=n, w=word), str(n))[-1] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(-999, 999), st.integers(1, 999), st.integers(1, 4))
def test_an_approximation_scores_when_it_holds_to_its_digits(p, q, digits):
    """The value rounded half away from zero to `digits` decimals holds; two units of the last digit off does not."""
    value = Fraction(p, q)
    unit = Fraction(1, 10**digits)
    rounded = (abs(value) / unit + Fraction(1, 2)).__floor__() * unit * (1 if value >= 0 else -1)
    gold = f"\\frac{{{p}}}{{{q}}}"
    assert scores(f"{gold} \\approx {float(rounded):.{digits}f}", gold)[-1] == 1.0
    assert scores(f"{gold} \\approx {float(rounded + 2 * unit):.{digits}f}", gold)[-1] == 0.0


# ---------------------------------------------------------------- MATH-500's golds in each written form
def math500_golds() -> list[str]:
    from gmts_recipe import math_data

    folder = math_data.data_folder()
    if folder is None:
        pytest.skip(f"MATH's files are not installed ({math_data.WHEEL_FIX})")
    return [row["answer"] for row in math_data.read_sets(str(folder), ("math500",))["math500"]]


NUMERIC = re.compile(r"-?\d+(?:\.\d+)?")


def _inequality(s: sympy.Set) -> str | None:
    """An interval (or a union of intervals) as an inequality of x: (2, oo) as 'x > 2'."""
    if isinstance(s, sympy.Union):
        parts = [_inequality(a) for a in s.args]
        return None if None in parts else " \\text{ or } ".join(parts)
    if not isinstance(s, sympy.Interval):
        return None
    less = {True: "<", False: "\\le"}
    if s.end == sympy.oo:
        greater = {True: ">", False: "\\ge"}
        return None if s.start == -sympy.oo else f"x {greater[bool(s.left_open)]} {sympy.latex(s.start)}"
    low = "" if s.start == -sympy.oo else f"{sympy.latex(s.start)} {less[bool(s.left_open)]} "
    return f"{low}x {less[bool(s.right_open)]} {sympy.latex(s.end)}"


def _decimal(hundredths: int) -> str:
    return f"{'-' if hundredths < 0 else ''}{abs(hundredths) // 100}.{abs(hundredths) % 100:02d}"


def forms(gold: str) -> dict[str, list[str]]:
    """The written forms a gold takes part in, each as the answers a model could box (all must score alike)."""
    out: dict[str, list[str]] = {}
    value = next(iter(parse_answer(gold, "math-1")), None)
    if NUMERIC.fullmatch(gold):
        out["N thousand"] = [f"{gold}\\text{{ thousand}}", f"{gold} \\text{{ million}}"]
        if len(gold.lstrip("-")) >= 4 and "." not in gold:
            out["spaced thousands"] = [grouped(int(gold), "\\,"), grouped(int(gold), " ")]
    if _units(gold):  # another unit: meters, or radians for degrees
        other = _TEXT_MACRO.sub(lambda m: "\\text{ radians}" if "degree" in m[1] else "\\text{ meters}", gold)
        out["other unit"] = [re.sub(r"\^\s*\\circ", r"\\text{ radians}", other)]
    if isinstance(value, sympy.Eq) and isinstance(value.rhs, sympy.Set):
        value = value.rhs  # 'x \in [-2, 7]'
    bare_pair = isinstance(value, sympy.Interval) and value.left_open and value.right_open and \
        value.start.is_finite and value.end.is_finite  # '(2, 4)': a point too
    if isinstance(value, (sympy.Interval, sympy.Union)) and not bare_pair and _inequality(value):
        out["interval inequality"] = [_inequality(value)]
    if re.fullmatch(r"\\text\{\([A-E]\)\}", gold):
        out["choice letters"] = [gold[7], f"({gold[7]})"]
    if gold.startswith("\\{") and gold.endswith("\\}"):
        out["tuple for a set"] = [f"({gold[2:-2]})"]
    if re.fullmatch(r"\((?!.*\\infty)[^()\[\]]*,[^()\[\]]*\)", gold):
        out["set for a tuple"] = [f"\\{{{gold[1:-1]}\\}}"]
    if isinstance(value, sympy.Expr) and value.is_number and value.is_real and abs(value) < 10**9:
        near = Fraction(str(value)) if value.is_Rational else Fraction(repr(float(value)))
        hundredths = (abs(near) * 100 + Fraction(1, 2)).__floor__() * (1 if near >= 0 else -1)  # half away from 0
        out["approx, holds"] = [f"{gold} \\approx {_decimal(hundredths)}"]
        out["approx, 0.1 off"] = [f"{gold} \\approx {_decimal(hundredths + 10)}"]
    return out


def form_counts(golds: list[str]) -> dict[str, tuple[int, ...]]:
    """Per form: how many golds take part, then per reading (REWARD_NAMES) how many score 1 in every answer."""
    table: dict[str, list[int]] = {}
    for gold in golds:
        for form, answers in forms(gold).items():
            row = table.setdefault(form, [0] * (1 + len(REWARD_NAMES)))
            row[0] += 1
            for i, name in enumerate(REWARD_NAMES, 1):
                got = reward_function(name)([f"\\boxed{{{a}}}" for a in answers], [gold] * len(answers))
                row[i] += all(s == 1.0 for s in got)
    return {form: tuple(row) for form, row in table.items()}


def test_math500_golds_in_each_written_form():
    """(golds in the form, scored 1 by math-1, by math-2, by math-3). math-1 let through a word that changes the
    number, another unit, a set for a tuple and a tuple for a set, an approximation that does not hold, and refused
    spaced thousands and an inequality for its interval; math-2 reads each as written, and math-3 as math-2 (these
    forms are ASCII, one box each). Choice letters and a holding approximation score under all three."""
    assert form_counts(math500_golds()) == {
        "N thousand": (316, 316, 0, 0),
        "other unit": (18, 18, 0, 0),
        "spaced thousands": (20, 0, 20, 20),
        "interval inequality": (10, 0, 10, 10),
        "choice letters": (3, 3, 3, 3),
        "tuple for a set": (1, 1, 0, 0),
        "set for a tuple": (8, 8, 0, 0),
        "approx, holds": (433, 426, 433, 433),
        "approx, 0.1 off": (433, 426, 0, 0),
    }
