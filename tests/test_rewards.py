"""The reward finishes in bounded time whatever the text, on a worker thread of a fresh process; exact numbers."""

import json
import string
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_recipe.answer_text import VALUE_WORDS as ALL_VALUE_WORDS
from gmts_recipe.rewards import (_COUNTED_FROM_4, REWARD_VERSION, REWARD_VERSIONS, bounded_expression,
                                  exact_value, final_answer, math_equal_reward, reward_function, sample_scores)
from gmts_recipe.rewards_math import REWARD_NAME

ROOT = Path(__file__).resolve().parent.parent
NEST = 30
# (completion, expected reward against the gold "72"): powers, factorials, huge exponents, deep nesting, megabyte
# strings, control characters, unicode digits, sums and functions. The old reward computed several of these in sympy.
HOSTILE = [
    ("\\boxed{9**9**9}", 0.0),
    ("\\boxed{9 * * 9 * * 9}", 0.0),
    ("\\boxed{2**2**2**2**2**2}", 0.0),
    ("\\boxed{(9**9)**(9**9)}", 0.0),
    ("\\boxed{9^9^9}", 0.0),
    ("\\boxed{9^{9^{9}}}", 0.0),
    ("\\boxed{10^{10^{10^{10}}}}", 0.0),
    ("\\boxed{2^{2^{2^{2^{2}}}}}", 0.0),
    ("\\boxed{99!}", 0.0),
    ("\\boxed{9!!!!!!!!!!}", 0.0),
    ("\\boxed{(9!)!}", 0.0),
    ("\\boxed{factorial(99999)}", 0.0),
    ("\\boxed{Pow(9, 9**9)}", 0.0),
    ("\\boxed{1e999999}", 0.0),
    ("So the answer is 1e999999", 0.0),
    ("\\boxed{1E99999999999}", 0.0),
    ("\\boxed{10^{999999}}", 0.0),
    ("\\boxed{" + "9" * 60 + "}", 0.0),
    ("\\boxed{99999999999*99999999999*99999999999*99999999999*9999}", 0.0),
    ("\\boxed{" + "(" * NEST + "72" + ")" * NEST + "}", 1.0),  # 62 characters: parentheses around 72 are 72
    ("\\boxed{" + "(" * 10 + "70+2" + ")" * 10 + "}", 1.0),  # unwrapped, then math-verify evaluates 70+2
    ("\\boxed{" + "(" * 31 + "72" + ")" * 31 + "}", 1.0),  # 64 characters, the longest boxed answer read
    ("\\boxed{" + "(" * 32 + "72" + ")" * 32 + "}", 1.0),  # 66: too long for a boxed answer; the last number
    ("(" * 1_000 + "72" + ")" * 1_000, 1.0),  # unboxed: its last number
    ("(" * 100_000 + "72" + ")" * 100_000, 0.0),  # 72 is before the last MAX_TAIL_CHARS
    ("\\boxed{" + "{" * 31 + "72" + "}" * 31 + "}", 1.0),  # braces around 72 are 72, as parentheses are
    ("." + "5" * 1_000_000, 0.0),
    ("1," * 1_000_000, 0.0),
    ("#### " + "1," * 1_000_000, 0.0),
    ("1{,}" * 1_000_000, 0.0),
    ("9\\," * 1_000_000, 0.0),
    ("999\\," * 1_000_000 + "999", 0.0),
    ("\\frac{" * 100_000 + "}" * 100_000, 0.0),
    ("\\frac{1}{2}" * 100_000, 0.0),
    ("\\frac{" + "9" * 100_000 + "}{" + "9" * 100_000 + "}", 0.0),
    ("9" * 100_000 + "/" + "9" * 100_000, 0.0),
    ("1/" * 1_000_000, 0.0),
    ("\\left(" * 300 + "72" + "\\right)" * 300, 1.0),  # unboxed: its last number
    ("\\left(" * 100_000 + "72" + "\\right)" * 100_000, 0.0),
    ("\\boxed{1{,}000{,}000{,}000{,}000{,}000{,}000{,}000{,}000{,}000}", 0.0),
    ("\\boxed{(70+2)}", 1.0),  # an expression math-verify evaluates
    ("\\boxed{" + "\\frac{1}{" * 6 + "2" + "}" * 6 + "}", 0.0),
    ("\\boxed{" * 10_000, 0.0),
    ("{" * 1_000_000, 0.0),
    ("x" * 2_000_000, 0.0),
    ("9" * 1_000_000, 0.0),
    ("#### " + "9" * 100_000, 0.0),
    ("#### 72" + "\n" * 1_000_000, 0.0),  # only the last MAX_TAIL_CHARS are read
    ("x" * 1_000_000 + "#### 72", 1.0),
    ("#### 72" + " apples" * 500, 1.0),  # version 4 reads at most 4 words after an unboxed number
    ("So 72" + " ~" * 1900 + " thousand", 0.0),
    ("1 " * 1999 + "72", 0.0),  # the number before the last across space
    ("72" + " or" * 1300 + " 73", 0.0),
    ("#### 72" + " \\text{" * 500 + "thousand", 1.0),  # a macro left open is no word
    ("\x00\x01\x02\x1b[31m" * 100_000, 0.0),
    ("\\boxed{72\x00}", 0.0),
    ("\\boxed{\x1c72}", 0.0),
    ("\\boxed{7\u200b2}", 0.0),
    ("\U0001F600" * 100_000, 0.0),
    ("\\boxed{\u0667\u0662}", 0.0),  # Arabic-Indic digits: not ASCII, refused
    ("\\boxed{\\sum_{i=1}^{10^{9}} i}", 0.0),
    ("\\boxed{\\prod_{i=1}^{10^9} i}", 0.0),
    ("\\boxed{\\binom{10^9}{5}}", 0.0),
    ("\\boxed{\\sqrt{\\sqrt{2}}}", 0.0),
    ("\\boxed{\\int_0^1 x dx}", 0.0),
    ("\\boxed{9\\uparrow\\uparrow 9}", 0.0),
    ("\\boxed{\\frac{9}{0}}", 0.0),
    ("\\boxed{0/0}", 0.0),
    ("}}}{{{\\frac", 0.0),
]

_SCRIPT = """
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
from gmts_recipe.rewards import reward_function
reward = reward_function(json.loads(sys.argv[2]))
reward(["\\\\boxed{6 \\\\times 12}"], ["72"])  # imports math-verify and sympy outside the timing
corpus = json.loads(sys.stdin.read())
out = []
def work():
    for text, gold in corpus:
        t = time.perf_counter()
        score = reward([text], [gold])[0]
        out.append([score, time.perf_counter() - t])
worker = threading.Thread(target=work)  # a worker thread: no SIGALRM timeout could apply here
worker.start()
worker.join()
print(json.dumps(out))
"""


def _math_corpus() -> list[tuple[str, str, float]]:
    """MATH's hostile answers and its largest bounded ones (tests/test_rewards_math.py), boxed, against the gold 5."""
    from test_rewards_math import BOUNDED
    from test_rewards_math import HOSTILE as UNBOUNDED

    return [(f"So $\\boxed{{{a}}}$.", "5", 0.0) for a in UNBOUNDED + BOUNDED] + [
        ("\\boxed{" * 10_000, "5", 0.0), ("{" * 1_000_000, "5", 0.0), ("\\boxed{5}" + "x" * 1_000_000, "5", 0.0),
        ("x" * 1_000_000 + "\\boxed{5}", "5", 1.0)]


# Each reward new runs train with, and the one before it: the newest must stay within the same bounds
@pytest.mark.parametrize("version, seconds, limit", [(4, 2.0, 120), (REWARD_VERSION, 2.0, 120),
                                                     ("math-2", 5.0, 300), (REWARD_NAME, 5.0, 300)])
def test_every_hostile_completion_scores_in_bounded_time_on_a_worker_thread(version, seconds, limit):
    """Each call is timed in a subprocess with a wall-clock limit: a hang fails the test instead of hanging it. The
    one harness of both rewards: GSM8K's HOSTILE against the gold 72, MATH's hostile boxed answers against 5."""
    corpus = [(text, "72", score) for text, score in HOSTILE] if isinstance(version, int) else _math_corpus()
    try:
        done = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT), json.dumps(version)], text=True,
                              input=json.dumps([[text, gold] for text, gold, _ in corpus]), capture_output=True,
                              timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"reward {version} did not finish the hostile corpus within {limit} s")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert [r for r, _ in results] == [score for *_, score in corpus]
    slow = [(text[:40], t) for (text, *_), (_, t) in zip(corpus, results) if t > seconds]
    assert not slow, f"calls over {seconds:g} s (the CPU is shared, typical is a few ms): {slow}"


@pytest.mark.parametrize("text,value", [
    ("72", Fraction(72)), ("1,234", Fraction(1234)), ("$5.00", Fraction(5)), ("-7", Fraction(-7)),
    ("\\frac{3}{4}", Fraction(3, 4)), ("-\\dfrac{3}{4}", Fraction(-3, 4)), ("3/4", Fraction(3, 4)),
    ("0.75", Fraction(3, 4)), (".5", Fraction(1, 2)), ("12 \\text{ apples}", Fraction(12)), ("+72", Fraction(72)),
    ("1{,}000", Fraction(1000)), ("5\\,000", Fraction(5000)), ("(5)", Fraction(5)), ("((0.5))", Fraction(1, 2)),
    ("1,2,3", None), ("12,34", None), ("()", None),
    ("1e9", None), ("9**9", None), ("\\frac{1}{0}", None), ("\u0667", None), ("9" * 65, None), ("6 \\times 12", None),
])
def test_exact_value_reads_plain_numbers_and_fractions_only(text, value):
    assert exact_value(text, 4) == value
    assert exact_value(text) == (Fraction(10**9) if text == "1e9" else value)  # version 5 reads e notation


def test_version_5_reads_e_notation_with_a_two_digit_exponent_only():
    assert [exact_value(t) for t in ("7.2e1", "-1E-2", "1e99", "1e100", "1e9999")] == [72, Fraction(-1, 100), 10**99,
                                                                                        None, None]


@pytest.mark.parametrize("text,bounded", [
    ("6 \\times 12", True), ("(10+8)", True), ("\\frac{1}{2}+3", True), ("50\\%", True), ("50\\% + 3", False),
    ("9**9", False), ("9 * *9", False), ("9^9", False), ("9!", False), ("\\sqrt{2}", False), ("1e5", False),
    ("x", False), ("\x00", False), ("7\n2", False), ("1" * 65, False),
])
def test_only_power_free_short_expressions_reach_math_verify(text, bounded):
    assert (bounded_expression(text) is not None) == bounded


# (completion, gold, reward): the forms a GSM8K model writes, each against the value it means and the value a wrong
# reading would give
ANSWER_FORMS = [
    ("Half of the cake is left, so the answer is .5", "0.5", 1.0),
    ("Half of the cake is left, so the answer is .5", "5", 0.0),  # not the digit after the point
    ("Each box costs $.50.", "0.5", 1.0),
    ("The candidates are 1,2,3", "123", 0.0),  # a list is not the number 123
    ("The candidates are 1,2,3", "3", 0.0),  # nor its last item: it is not one answer
    ("The candidates are 1,2,3", "1.2", 0.0),  # nor what math-verify would read ('1,2,3' parses as 1.2)
    ("So the possible values are \\boxed{1,2,3}", "123", 0.0),
    ("The total is \\boxed{12,34}.", "1234", 0.0),  # commas that do not group thousands
    ("The total is 1,234,567 dollars.", "1234567", 1.0),
    ("#### 1,234", "1234", 1.0),
    ("It is 72, which is the answer.", "72", 1.0),  # a comma after a number is punctuation
    ("She sells 4 boxes of 250, so she sells \\boxed{1{,}000} cookies.", "1000", 1.0),
    ("She sells 4 boxes of 250, so she sells \\boxed{1{,}000} cookies.", "1", 0.0),
    ("The farm has \\boxed{5\\,000} chickens.", "5000", 1.0),
    ("The farm has \\boxed{5\\,000} chickens.", "5", 0.0),
    ("The price is \\boxed{\\$1{,}250.50}", "1250.5", 1.0),
    ("The distance is \\boxed{5\\,\\text{km}}", "5", 1.0),  # a thin space before a unit is only space
    ("Therefore the answer is \\boxed{(5)}.", "5", 1.0),
    ("Therefore the answer is \\boxed{\\left(5\\right)}.", "5", 1.0),
    ("Therefore the answer is \\boxed{(-5)}.", "-5", 1.0),
    ("Therefore the answer is \\boxed{(1,2)}.", "12", 0.0),  # a pair, not a number
    ("She ate 1 of 4 slices and 2 more, so she ate \\frac{3}{4}", "0.75", 1.0),
    ("She ate 1 of 4 slices and 2 more, so she ate \\frac{3}{4}", "4", 0.0),  # not its denominator
    ("She ate 1 of 4 slices and 2 more, so she ate \\frac{3}{4}", "3", 0.0),
    ("The share is -\\dfrac{1}{2} of the total.", "-0.5", 1.0),
    ("The answer is 3/4.", "0.75", 1.0),
    ("3/4 of 8 apples is 6", "6", 1.0),
    ("#### \\frac{3}{4}", "0.75", 1.0),
]


@pytest.mark.parametrize("completion, gold, reward", ANSWER_FORMS)
def test_answer_forms_a_gsm8k_model_writes(completion, gold, reward):
    assert math_equal_reward([completion], [gold]) == [reward]


@pytest.mark.parametrize("text, answer", [
    ("so it is .5", ".5"), ("so it is 72, done", "72"), ("items 1,2,3", "1,2,3"), ("it is \\frac{3}{4}", "\\frac{3}{4}"),
    ("it is -\\dfrac{1}{2} now", "-\\dfrac{1}{2}"), ("it is 3 / 4.", "3 / 4"), ("3/4.5 and 7", "7"), ("4/5.", "4/5"),
    ("\\boxed{1{,}000}", "1{,}000"),
])
def test_final_answer_reads_the_last_number_whole(text, answer):
    assert final_answer(text, 3) == answer


@pytest.mark.parametrize("text, answer", [
    ("so it is .5", ".5"), ("so it is 72, done", "72"), ("it is -\\dfrac{1}{2} now", "-\\dfrac{1}{2}"),
    ("#### 72 thousand", "72 thousand"), ("#### 72 73", "72 73"), ("#### 72 or 73", "72 or 73"),
    ("#### 7 and 8", "7 and 8"), ("The answer is 72 thousand.", "72 thousand"), ("So it is 72 73.", "72 73"),
    ("So it is 72 or 73.", "72 or 73"), ("He has $72$ apples.", "72"),
    ("It is \\(72\\) thousand.", "72 thousand"),
    ("#### 72 \\text{ thousand}\nDone", "72 \\text{ thousand}"), ("It took 12 seconds to speak 10 words", "10"),
    ("#### 12 seconds to speak 10 words", "12"), ("72, half of which", "72"),
    ("It is 5\\,000 now", "5\\,000"), ("#### 72 \\text{ Million dollars}", "72 \\text{ Million dollars}"),
    ("So 72 and one half", "72 and one half"), ("15 hours to clean one-half", "15"),
    ("The answer is 1 000.", "1 000"), ("\\boxed{72} thousand", "72"),
])
def test_version_4_reads_an_unboxed_number_with_what_stands_beside_it(text, answer):
    """The words that change the number (at most 4), macros that begin with one, or a second number after it, the
    number before it across space, 'or', 'and' or 'to'; any other word or punctuation ends it; a box is read as
    before."""
    assert final_answer(text, 4) == answer


def test_a_signed_answer_is_its_number():
    assert math_equal_reward(["\\boxed{+72}", "#### +72"], ["72", "72"]) == [1.0, 1.0]


def test_math_verify_notice_of_disabled_timeouts_is_dropped_and_nothing_else():
    # A fresh process, as check.py is: an expression that reaches math-verify prints no "Timeout is disabled" notice
    code = ("import logging; logging.basicConfig()\n"
            "from gmts_recipe.rewards import answers_equal\n"
            "print(answers_equal('12', '3 \\\\cdot 4'), answers_equal('12', '3 \\\\cdot 5'))\n"
            "logging.getLogger('math_verify.parser').warning('another warning')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"]
    assert "Timeout is disabled" not in out.stderr and "another warning" in out.stderr


# (completion, reward against the gold "72"): what a model writes around its number, read the way a grader reads it
DECORATED = [
    ("The answer is \\boxed{\\text{72}}.", 1.0),
    ("The answer is \\boxed{\\textbf{72}}.", 1.0),
    ("The answer is \\boxed{\\mathbf{72}}.", 1.0),
    ("The answer is \\boxed{\\textbf{\\text{72}}}.", 1.0),
    ("She has \\boxed{72\\ \\text{apples}}.", 1.0),
    ("She has \\boxed{72 \\text{ apples}}.", 1.0),
    ("The distance is \\boxed{72 km}.", 1.0),
    ("The speed is \\boxed{72 km/h}", 1.0),
    ("John pays \\boxed{72 dollars per year.}", 1.0),
    ("So \\boxed{x = 72}", 1.0),
    ("So \\boxed{70 + 2 = 72}", 1.0),
    ("So \\boxed{{72}}", 1.0),
    ("The angle is \\boxed{72^{\\circ}}", 1.0),
    ("The angle is \\boxed{72^\\circ}", 1.0),
    ("The angle is \\boxed{72\u00b0}", 1.0),
    ("Each kid gets \\boxed{72 \\text{ S'mores for each kid}}", 1.0),
    ("So \\boxed{\\text{seventy-two}}", 1.0),  # version 5: a number in words where no digit is written
    ("So \\boxed{72 - x}", 0.0),  # an expression in x: the x is no unit
    ("So \\boxed{70 + x}", 0.0),
    ("So \\boxed{x = 70}", 0.0),
    ("So \\boxed{72 = x}", 1.0),  # version 5: the last side that holds a number answers
    ("So \\boxed{7 km 2}", 0.0),
]


@pytest.mark.parametrize("completion, reward", DECORATED)
def test_a_number_with_units_macros_or_an_equation_around_it_is_the_number(completion, reward):
    assert math_equal_reward([completion], ["72"]) == [reward]


# The percent rule (module docstring): a percent sign after the number is a unit, so 72% answers 72 and never 0.72
PERCENT = [
    ("\\boxed{72\\%}", "72", 1.0),
    ("\\boxed{72\\%}", "0.72", 0.0),
    ("\\boxed{72%}", "72", 1.0),
    ("\\boxed{72 \\%}", "72", 1.0),
    ("\\boxed{60%.}", "60", 1.0),
    ("\\boxed{\\frac{100}{1000} \\times 100\\% = 10\\%}", "10", 1.0),
    ("\\boxed{0.72}", "72", 0.0),
    ("\\boxed{50\\% + 22}", "72", 0.0),  # a percent sign inside an expression: no number
    ("\\boxed{50\\% + 22}", "22.5", 0.0),
    ("The share is 72%", "72", 1.0),  # unboxed: the last number
]


@pytest.mark.parametrize("completion, gold, reward", PERCENT)
def test_a_percent_sign_is_a_unit(completion, gold, reward):
    assert math_equal_reward([completion], [gold]) == [reward]


def test_version_1_is_kept_and_reads_text_and_percent_as_before():
    """Results scored by version 1 re-score with it (check.py): its reading of these forms is not the current one."""
    old, new = reward_function(1), reward_function(REWARD_VERSION)
    texts = ["\\boxed{\\text{72}}", "\\boxed{72\\%}", "\\boxed{x = 72}", "\\boxed{72 km}"]
    assert old(texts, ["72"] * 4) == [0.0, 1.0, 0.0, 0.0]
    assert old(["\\boxed{72\\%}"], ["0.72"]) == [1.0]
    assert new(texts, ["72"] * 4) == [1.0, 1.0, 1.0, 1.0]
    assert sample_scores(texts, "72", 1) == [0.0, 1.0, 0.0, 0.0] and sample_scores(texts, "72") == [1.0] * 4
    assert old.__name__ == "math_equal_reward_v1" and new is math_equal_reward  # TRL logs a reward by its name
    for version in (0, 99, REWARD_VERSION + 1, True, "2"):
        with pytest.raises(ValueError, match=f"reward version {version!r} is unknown"):
            reward_function(version)


# (completion, gold, the score of versions 1, 2, 3): hand-written answers with the value each version gives. A unit
# that changes the value, or words between two numbers, pass in version 2 (and some in 1); version 3 refuses them.
BY_VERSION = [
    ("\\boxed{72 thousand}", "72", (0.0, 1.0, 0.0)),
    ("\\boxed{72 thousand}", "72000", (0.0, 0.0, 0.0)),  # refused, not rescaled
    ("\\boxed{72 dozen}", "72", (0.0, 1.0, 0.0)),
    ("\\boxed{72 squared}", "72", (0.0, 1.0, 0.0)),
    ("\\boxed{72 Million.}", "72", (0.0, 1.0, 0.0)),
    ("\\boxed{72 and a half}", "72", (0.0, 1.0, 0.0)),
    ("\\boxed{72 \\text{ dozen}}", "72", (1.0, 1.0, 0.0)),
    ("\\boxed{\\text{minus } 72}", "72", (1.0, 1.0, 0.0)),
    ("\\boxed{\\text{negative }72}", "72", (1.0, 1.0, 0.0)),
    ("\\boxed{2 \\text{ times } 36}", "36", (1.0, 1.0, 0.0)),
    ("\\boxed{2 \\text{ times } 36}", "72", (0.0, 0.0, 0.0)),
    ("\\boxed{72 \\text{ or } 73}", "73", (1.0, 1.0, 0.0)),
    ("\\boxed{72 \\text{ or } 73}", "72", (0.0, 0.0, 0.0)),
    ("\\boxed{72 \\text{ apples} \\text{ or } \\text{73}}", "73", (0.0, 1.0, 0.0)),
    ("\\boxed{14 \\text{ weeks and } 4 \\text{ days}}", "4", (1.0, 1.0, 0.0)),  # a committed sample's answer
    ("\\boxed{72 73}", "73", (1.0, 1.0, 0.0)),
    ("\\boxed{72.5 73}", "73", (1.0, 1.0, 0.0)),
    ("\\boxed{72\\ 73}", "73", (0.0, 1.0, 0.0)),
    ("\\boxed{0 100}", "100", (1.0, 1.0, 0.0)),
    # what stays: units that count, digit groups, a mixed number, an expression, a percent sign, a label
    ("\\boxed{72 apples}", "72", (0.0, 1.0, 1.0)),
    ("\\boxed{72 pairs}", "72", (0.0, 1.0, 1.0)),
    ("\\boxed{72 times}", "72", (0.0, 1.0, 1.0)),
    ("\\boxed{72 \\text{ apples}}", "72", (1.0, 1.0, 1.0)),
    ("\\boxed{72 \\text{ (rounded)}}", "72", (1.0, 1.0, 1.0)),
    ("\\boxed{\\text{Answer: } 72}", "72", (1.0, 1.0, 1.0)),
    ("\\boxed{1 000}", "1000", (1.0, 1.0, 1.0)),
    ("\\boxed{12 345.5}", "12345.5", (1.0, 1.0, 1.0)),
    ("\\boxed{5 \\frac{1}{2}}", "5.5", (1.0, 1.0, 1.0)),
    ("\\boxed{6 \\times 12}", "72", (1.0, 1.0, 1.0)),
    ("\\boxed{72 + 3}", "75", (1.0, 1.0, 1.0)),
    ("\\boxed{72\\%}", "72", (1.0, 1.0, 1.0)),
    ("\\boxed{72\\%}", "0.72", (1.0, 0.0, 0.0)),
    ("\\boxed{\\text{72}}", "72", (0.0, 1.0, 1.0)),
    ("So the answer is 72 thousand", "72", (1.0, 1.0, 1.0)),  # unboxed: the last number, as versions 1 to 3 read it
]


@pytest.mark.parametrize("completion, gold, scores", BY_VERSION)
def test_each_version_scores_these_answers_exactly(completion, gold, scores):
    assert tuple(sample_scores([completion], gold, v)[0] for v in (1, 2, 3)) == scores
    if completion.startswith("\\boxed") and "dozen" not in completion:  # version 4 reads a box as version 3
        assert sample_scores([completion], gold, 4) == [scores[2]]


# (completion, gold, versions 3 and 4): version 4 reads an unboxed final number as version 3 reads a boxed one
UNBOXED = [
    ("#### 72 thousand", "72", (1.0, 0.0)),
    ("#### 72 thousand", "72000", (0.0, 0.0)),  # refused, not rescaled
    ("#### 72 73", "72", (1.0, 0.0)),
    ("#### 72 73", "73", (0.0, 0.0)),
    ("#### 72 or 73", "72", (1.0, 0.0)),
    ("#### 72 or 73", "73", (0.0, 0.0)),
    ("The answer is 72 thousand.", "72", (1.0, 0.0)),
    ("So the answer is 72 73", "73", (1.0, 0.0)),
    ("So the answer is 72 or 73.", "73", (1.0, 0.0)),
    ("So the answer is 72 or 73.", "72", (0.0, 0.0)),
    ("So she has 72 and a half apples.", "72", (1.0, 0.0)),
    ("The total is $72 \\text{ thousand}$.", "72", (1.0, 0.0)),
    ("#### 1 000", "1000", (0.0, 1.0)),  # digit groups are one number
    ("The farm has 5\\,000 chickens.", "5000", (0.0, 1.0)),
    # what stays, or passes now: a dozen counts (as a pair does), a sentence that goes on is no answer's word
    ("#### 7 dozen", "7", (1.0, 1.0)),
    ("\\boxed{7 dozens}", "7", (0.0, 1.0)),
    ("\\boxed{72 \\text{ dozen}}", "72", (0.0, 1.0)),
    ("It takes 15 hours to clean one-half", "15", (1.0, 1.0)),
    ("#### 2 gallons of root beer", "2", (1.0, 1.0)),
    ("#### 82\\, \\text{degrees} from the ground", "82", (1.0, 1.0)),
    ("#### 72", "72", (1.0, 1.0)),
    ("#### 72 apples\nThe end.", "72", (1.0, 1.0)),
    ("#### 72 is the answer", "72", (1.0, 1.0)),
    ("The answer is 72.", "72", (1.0, 1.0)),
    ("He has $72$ apples left.", "72", (1.0, 1.0)),
    ("She pays \\$72 per week.", "72", (1.0, 1.0)),
    ("So 70 + 2 = 72", "72", (1.0, 1.0)),
    ("It is 72 or more.", "72", (1.0, 1.0)),
    ("It is 72, half of the 144.", "144", (1.0, 1.0)),
    ("#### 12 seconds to speak 10 words", "12", (1.0, 1.0)),
    ("The answer is \\frac{3}{4} cup.", "0.75", (1.0, 1.0)),
]


@pytest.mark.parametrize("completion, gold, scores", UNBOXED)
def test_version_4_refuses_words_and_numbers_beside_an_unboxed_number(completion, gold, scores):
    assert tuple(sample_scores([completion], gold, v)[0] for v in (3, 4)) == scores


# (completion, gold, versions 4 and 5): what version 4 scored right but is wrong, then wrong but right (rewards.py)
VERSION_5 = [
    ("\\boxed{72} ... Wait ... the correct total is 36.", "72", (1.0, 0.0)),  # another number after the box
    ("\\boxed{72} ... Wait ... the correct total is 36.", "36", (0.0, 0.0)),
    ("\\boxed{72}. **Final Answer** Actually 73.", "72", (1.0, 0.0)),
    ("\\boxed{3} or perhaps \\boxed{4}", "4", (1.0, 0.0)),  # two boxes joined by 'or'
    ("It is either 72, or maybe 73.", "73", (1.0, 0.0)),
    ("72\u201373", "73", (1.0, 0.0)),  # an en dash: a range
    ("72-73", "-73", (1.0, 0.0)),  # a range (or 72 - 73), not -73
    ("72-73", "-1", (0.0, 0.0)),
    ("So the total is 60 - 20", "20", (1.0, 0.0)),  # a difference left unfinished (a committed completion's end)
    ("72\u00b2", "72", (1.0, 0.0)),
    ("72\u00b3", "72", (1.0, 0.0)),
    ("72^2", "2", (1.0, 0.0)),
    ("The answer is not 72.", "72", (1.0, 0.0)),
    ("It isn't $72$.", "72", (1.0, 0.0)),
    ("\\boxed{\\text{not } 72}", "72", (1.0, 0.0)),
    ("The answer is 5, 6", "6", (1.0, 0.0)),  # a list
    ("#### 5, 6", "5", (1.0, 0.0)),
    ("\uff17\uff12", "72", (0.0, 1.0)),  # fullwidth digits
    ("\\boxed{\uff17\uff12}", "72", (0.0, 1.0)),
    ("\\boxed{72\u200b}", "72", (0.0, 1.0)),  # a zero-width space is a space
    ("\\boxed{7\u200b2}", "72", (0.0, 0.0)),  # two numbers, as '7 2' is
    ("\\boxed{72 = x}", "72", (0.0, 1.0)),
    ("7.2e1", "72", (0.0, 1.0)),
    ("\\boxed{7.2e1}", "72", (0.0, 1.0)),
    ("seventy-two", "72", (0.0, 1.0)),
    ("The answer is Seventy-two.", "72", (0.0, 1.0)),
    ("\\boxed{one hundred and five}", "105", (0.0, 1.0)),
    # what stays
    ("\\boxed{72}. Actually, he has 72 apples.", "72", (1.0, 1.0)),  # the same number after the box
    ("\\boxed{8} years old 4 years from now.", "8", (1.0, 1.0)),  # numbers after a box, no second thought
    ("\\boxed{72}. Wait, let me check: 70 + 2 = 72.", "72", (1.0, 1.0)),
    ("\\boxed{72}\n#### 73", "72", (1.0, 0.0)),
    ("\\boxed{72}. I hope this one helps.", "72", (1.0, 1.0)),  # words after a box are read in digits only
    ("\\boxed{6 \\times 12}. That is 72.", "72", (1.0, 1.0)),
    ("\\boxed{3}. Wait, that is wrong. \\boxed{4}", "4", (1.0, 1.0)),  # a box that corrects one
    ("\\boxed{x = 72}", "72", (1.0, 1.0)),
    ("\\boxed{70 + 2 = 72}", "72", (1.0, 1.0)),
    ("It takes 15 hours to clean one-half", "15", (1.0, 1.0)),
    ("The answer is one-half.", "1", (0.0, 0.0)),  # a fraction in words is no number
    ("It is 72, half of the 144.", "144", (1.0, 1.0)),
    ("So 100 - 28 = 72", "72", (1.0, 1.0)),
    ("So the answer is 1e999999", "1", (0.0, 0.0)),  # no exponent of 3 digits or more
    ("\\boxed{\u0667\u0662}", "72", (0.0, 0.0)),  # Arabic-Indic digits: not fullwidth forms
]


@pytest.mark.parametrize("completion, gold, scores", VERSION_5)
def test_version_5_reads_what_version_4_read_wrong(completion, gold, scores):
    assert tuple(sample_scores([completion], gold, v)[0] for v in (4, 5)) == scores


def test_the_versions_are_one_tuple_newest_last():
    """REWARD_VERSIONS is the one list of known GSM8K versions: the newest is what new evaluations record, every one
    has a reward function, and records.py knows exactly these."""
    from gmts_recipe import records

    assert REWARD_VERSIONS == (1, 2, 3, 4, 5) and REWARD_VERSION == REWARD_VERSIONS[-1]
    assert reward_function(REWARD_VERSION) is math_equal_reward
    assert [reward_function(v).__name__ for v in REWARD_VERSIONS[:-1]] == [f"math_equal_reward_v{v}"
                                                                           for v in (1, 2, 3, 4)]
    assert tuple(records.known_reward_versions()) == REWARD_VERSIONS
    assert all(records.is_known_reward_version(v) for v in REWARD_VERSIONS)
    assert not any(records.is_known_reward_version(v) for v in (0, 6, "4", True, 4.0))
    with pytest.raises(ValueError, match="reward version 6 is unknown"):
        reward_function(6)


VALUE_WORDS = sorted(ALL_VALUE_WORDS - _COUNTED_FROM_4)  # version 4's; a dozen counts
NUMBERS = st.one_of(st.integers(-10**9, 10**9).map(str), st.decimals(-10**6, 10**6, places=2).map(str),
                    st.integers(1, 10**9).map(lambda n: f"{n:,}"))
WORDS = st.text(alphabet=string.ascii_letters, min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(NUMBERS, st.sampled_from(VALUE_WORDS), st.sampled_from(["{n} {w}", "{n} \\text{{ {w}}}", "{n}\\ \\text{{{w}}}",
                                                                  "{n} {W}.", "\\text{{{w} }}{n}", "{n} and a {w}"]))
def test_a_word_that_changes_the_value_never_passes(number, word, form):
    """Whatever the number and however the word is written beside it, the answer is not the number."""
    answer = "\\boxed{" + form.format(n=number, w=word, W=word.capitalize()) + "}"
    assert sample_scores([answer], number.replace(",", "")) == [0.0], answer


@settings(max_examples=300, deadline=None)
@given(NUMBERS, NUMBERS, WORDS, st.sampled_from(["{a} \\text{{ {w} }} {b}", "{a} {w} {b}", "{a} {b}", "{a}~{b}",
                                                 "{a}\\ \\text{{{w}}}\\ {b}", "\\text{{{a} {w}}} {b}"]))
def test_words_or_space_between_two_numbers_never_pass(a, b, word, form):
    """Two numbers with words or only space between them answer neither (nor a number math-verify makes of them)."""
    answer = "\\boxed{" + form.format(a=a, b=b, w=word) + "}"
    for gold in (a, b):
        assert sample_scores([answer], gold.replace(",", "")) == [0.0], (answer, gold)


@settings(max_examples=200, deadline=None)
@given(NUMBERS, st.sampled_from(["apples", "km", "dollars", "km/h", "hrs.", "pairs", "dozens", "times",
                                 "cookies per day", "S'mores", "Apples."]))
def test_a_unit_that_counts_still_passes(number, unit):
    for form in ("{n} {u}", "{n} \\text{{ {u}}}", "{n}\\ \\text{{{u}}}"):
        answer = "\\boxed{" + form.format(n=number, u=unit) + "}"
        assert sample_scores([answer], number.replace(",", "")) == [1.0], answer


UNBOXED_FORMS = ["#### {a}", "The answer is {a}.", "So the total is ${a}$.\n", "#### {a}\nThat is all."]


@settings(max_examples=300, deadline=None)
@given(NUMBERS, st.sampled_from(VALUE_WORDS), st.sampled_from(["{n} {w}", "{n} \\text{{ {w}}}", "{n} {W}",
                                                                  "{n} and a {w}"]), st.sampled_from(UNBOXED_FORMS))
def test_version_4_an_unboxed_word_that_changes_the_value_never_passes(number, word, form, where):
    answer = where.format(a=form.format(n=number, w=word, W=word.capitalize()))
    assert sample_scores([answer], number.replace(",", ""), 4) == [0.0], answer


@settings(max_examples=300, deadline=None)
@given(NUMBERS, NUMBERS, st.sampled_from(["{a} {b}", "{a} or {b}", "{a}~{b}", "{a} \\text{{ or }} {b}"]),
       st.sampled_from(UNBOXED_FORMS))
def test_version_4_two_unboxed_numbers_side_by_side_answer_neither(a, b, form, where):
    answer = where.format(a=form.format(a=a, b=b))
    for gold in (a, b):
        assert sample_scores([answer], gold.replace(",", ""), 4) == [0.0], (answer, gold)


@settings(max_examples=200, deadline=None)
@given(NUMBERS, st.sampled_from(["apples", "km", "dollars", "km/h", "pairs", "times", "cookies per day", "S'mores"]),
       st.sampled_from(UNBOXED_FORMS))
def test_version_4_an_unboxed_unit_that_counts_still_passes(number, unit, where):
    answer = where.format(a=f"{number} {unit}")
    assert sample_scores([answer], number.replace(",", ""), 4) == [1.0], answer


GOLDS = ROOT / "results" / "coupled" / "base-evals" / "9862d13807ad5c2d-seed0-a0096a53ad2b.jsonl.xz"  # GSM8K test


def test_the_false_positives_fail_against_every_gsm8k_gold():
    """Every gold answer of GSM8K's test split (1,319, from a committed samples file): the answers that version 2
    scored right score 0 now."""
    import lzma

    golds = [json.loads(line)["gold"] for line in lzma.decompress(GOLDS.read_bytes()).decode().splitlines()]
    assert len(golds) == 1319
    for gold in golds:
        wrong = [f"\\boxed{{{gold} thousand}}", f"\\boxed{{{gold} squared}}", f"\\boxed{{2 \\text{{ times }} {gold}}}",
                 f"#### {gold} thousand", f"The answer is {gold} or {gold}1."]
        assert sample_scores(wrong, gold) == [0.0] * 5, gold
        assert sample_scores([f"\\boxed{{{gold} dozen}}"], gold, 3) == [0.0], gold  # version 4: a dozen counts
        after = str(int(gold) + 1) if gold.lstrip("-").isdigit() else gold + "1"
        assert sample_scores([f"\\boxed{{{gold} \\text{{ or }} {after}}}"], after) == [0.0], gold
        assert sample_scores([f"\\boxed{{{gold} apples}}", f"\\boxed{{{gold}}}"], gold) == [1.0, 1.0], gold
    assert sample_scores(["\\boxed{72 thousand}", "\\boxed{72 dozen}", "\\boxed{72 squared}"], "72", 2) == [1.0] * 3


# Inputs whose score math-verify's comparison once left to the process's hash seed, and their neighbours
UNSEEDED = [("\\boxed{0/0}", "0"), ("\\boxed{0/0}", "1"), ("\\boxed{\\frac{0}{0}}", "0"), ("\\boxed{1/0}", "0"),
            ("\\boxed{(1-1)/(2-2)}", "0"), ("\\boxed{0 \\cdot (1/0)}", "0"), ("\\boxed{0/0 + 72}", "72"),
            ("\\boxed{6 \\times 12}", "72"), ("\\boxed{(70+2)}", "72"), ("\\boxed{1,2}", "12")]
_SCORE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from gmts_recipe.rewards import math_equal_reward
pairs = json.loads(sys.stdin.read())
print(json.dumps(math_equal_reward([c for c, _ in pairs], [g for _, g in pairs])))
"""


def test_a_completion_scores_the_same_under_every_hash_seed():
    """Each process has its own PYTHONHASHSEED: the scores must not depend on it."""
    import os

    runs = {}
    for seed in ("0", "1", "2", "3", "4", "5"):
        done = subprocess.run([sys.executable, "-c", _SCORE, str(ROOT)], input=json.dumps(UNSEEDED), text=True,
                              capture_output=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": seed})
        assert done.returncode == 0, done.stderr[-2000:]
        runs[seed] = json.loads(done.stdout)
    assert all(scores == runs["0"] for scores in runs.values()), runs
    assert runs["0"] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0]
