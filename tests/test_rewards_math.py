"""The MATH reward: the last \\boxed{} answer against MATH's boxed gold through math-verify; exact on the forms MATH's
golds take, no false positive on the probes, hostile answers refused before sympy (timed by tests/test_rewards.py's
harness), the same score
under any hash seed, and every gold of MATH-500 (and, slow, of all of MATH and Minerva OCW) right in a model's forms
where the data is at hand."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gmts_recipe import rewards
from gmts_recipe.rewards_math import (REWARD_NAME, REWARD_NAMES, bounded_answer, last_boxed, math_boxed_reward, parse_answer,
                                      reading, reward_function)

ROOT = Path(__file__).resolve().parent.parent


def score(completion: str, gold: str) -> float:
    return math_boxed_reward([completion], [gold])[0]


@pytest.mark.parametrize("text, boxed", [
    ("so $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
    ("first \\boxed{1}, then \\boxed{2}", "2"),  # the last box
    ("\\boxed{ \\left( 3, \\frac{\\pi}{2} \\right) }", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("So the answer is $\\boxed 2$.", "2"),  # MATH's braceless form
    ("\\fbox{7}", "7"),
    ("There are $\\boxed{}$ of them.", ""),  # an empty box
    ("The answer is \\boxed{\\frac{1}{", None),  # left open: a truncated answer
    ("no box at all: 5", None),
    ("\\boxedx{3}", None),  # another command
    ("\\boxed{3} and \\boxedx", "3"),
])
def test_last_boxed_reads_the_last_box_whole(text, boxed):
    assert last_boxed(text) == boxed


# (completion, gold, reward): the forms of MATH's gold answers, written as a model writes them
ANSWER_FORMS = [
    ("Adding, $\\boxed{10}$.", "10", 1.0),
    ("So the answer is \\boxed{\\dfrac{9}{7}}.", "\\frac{9}{7}", 1.0),
    ("So the answer is \\boxed{\\frac{18}{14}}.", "\\frac{9}{7}", 1.0),
    ("So the answer is \\boxed{9/7}.", "\\frac{9}{7}", 1.0),
    ("So the answer is \\boxed{1\\frac{2}{7}}.", "\\frac{9}{7}", 1.0),  # a mixed number
    ("So the answer is \\boxed{\\frac{7}{9}}.", "\\frac{9}{7}", 0.0),
    ("$\\boxed{\\sqrt{27}}$", "3\\sqrt{3}", 1.0),
    ("$\\boxed{3\\sqrt{2}}$", "3\\sqrt{3}", 0.0),
    ("$\\boxed{\\frac{\\pi}{2}}$", "\\frac{\\pi}{2}", 1.0),
    ("$\\boxed{\\frac{\\pi}{3}}$", "\\frac{\\pi}{2}", 0.0),
    ("$\\boxed{2\\pi}$", "2\\pi", 1.0),
    ("$\\boxed{2}$", "2\\pi", 0.0),
    ("The solution set is $\\boxed{[1,2)}$.", "[1,2)", 1.0),
    ("The solution set is $\\boxed{(1,2)}$.", "[1,2)", 0.0),  # open and closed ends differ
    ("The solution set is $\\boxed{(-\\infty, 3] \\cup [5, \\infty)}$.", "(-\\infty,3] \\cup [5,\\infty)", 1.0),
    ("The point is $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$.", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0),
    ("The point is $\\boxed{(\\frac{\\pi}{2}, 3)}$.", "\\left( 3, \\frac{\\pi}{2} \\right)", 0.0),  # order kept
    ("The roots are $\\boxed{3, -2}$.", "-2, 3", 1.0),  # a list of solutions: any order
    ("The roots are $\\boxed{3}$.", "-2, 3", 0.0),  # not all of them
    ("The angle is $\\boxed{30^\\circ}$.", "30^\\circ", 1.0),
    ("The angle is $\\boxed{30}$.", "30^\\circ", 1.0),  # degrees: the number
    ("The angle is $\\boxed{60^\\circ}$.", "30^\\circ", 0.0),
    ("It is $\\boxed{5 \\text{ cm}}$.", "5", 1.0),  # a unit after the number
    ("It is $\\boxed{\\$5.00}$.", "\\$5", 1.0),
    ("It is $\\boxed{\\text{(C)}}$.", "\\text{(C)}", 1.0),
    ("It is $\\boxed{C}$.", "\\text{(C)}", 1.0),
    ("It is $\\boxed{\\text{(D)}}$.", "\\text{(C)}", 0.0),
    ("She is $\\boxed{\\text{Evelyn}}$.", "\\text{Evelyn}", 1.0),
    ("She is $\\boxed{\\text{Bob}}$.", "\\text{Evelyn}", 0.0),
    ("$\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}$", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", 1.0),
    ("$\\boxed{\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}}$", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", 0.0),
    ("$\\boxed{6-5i}$", "6 - 5i", 1.0),
    ("$\\boxed{6+5i}$", "6 - 5i", 0.0),
    ("$\\boxed{x = 5}$", "5", 1.0),  # an equation answers with its right-hand side
    ("$\\boxed{y = 2x + 3}$", "y = 2x + 3", 1.0),
    ("$\\boxed{1,000}$", "1000", 1.0),
    ("$\\boxed{1{,}000}$", "1000", 1.0),
    ("$\\boxed{1,2}$", "12", 0.0),
    ("$\\boxed{10\\%}$", "10\\%", 1.0),
    ("$\\boxed{10}$", "10\\%", 1.0),  # a percent sign is a unit
    ("$\\boxed{0.1}$", "10\\%", 0.0),  # not 0.1 (math-verify alone says yes)
    ("$\\boxed{50\\%}$", "\\frac{1}{2}", 0.0),  # nor is 50% one half
    ("$\\boxed{0.333333}$", "\\frac{1}{3}", 1.0),  # math-verify: 6 decimals
    ("$\\boxed{0.33}$", "\\frac{1}{3}", 0.0),
    ("$\\boxed{4.5 \\times 10^{33}}$", "4.5e33", 1.0),  # Minerva OCW's e notation is the number
    ("$\\boxed{4.5e33}$", "4.5e33", 1.0),
    ("$\\boxed{4.6e33}$", "4.5e33", 0.0),
    ("$\\boxed{4.5}$", "4.5e33", 0.0),
    ("$\\boxed{\\frac{1}{2004!}}$", "\\frac{1}{2004!}", 1.0),  # a MATH gold with a factorial
    ("The answer is 10.", "10", 0.0),  # no box
    ("The answer is \\boxed{}.", "10", 0.0),  # an empty box
    ("The answer is \\boxed{10", "10", 0.0),  # a box left open
    ("\\boxed{10} and then more text about \\boxed{11}", "10", 0.0),  # the last box counts
    ("\\boxed{9} is wrong, so \\boxed{10}", "10", 1.0),
    ([{"role": "assistant", "content": "So $\\boxed{10}$."}], "10", 1.0),  # a conversational completion
]


@pytest.mark.parametrize("completion, gold, reward", ANSWER_FORMS)
def test_answer_forms_of_math_golds(completion, gold, reward):
    assert score(completion, gold) == reward


# (gold, boxed answer): wrong answers that a lenient reading would score right; every one scores 0
FALSE_POSITIVE_PROBES = [
    ("10", "11"), ("10", "10.00001"), ("-1", "1"), ("7", "-7"), ("1", "0.9999999"), ("123456789", "123456788"),
    ("\\frac{1}{3}", "0.33"), ("\\sqrt{3}", "1.732"), ("\\sqrt{2}", "2"), ("2\\pi", "2"), ("\\frac{\\pi}{2}", "\\pi"),
    ("[1,2)", "(1,2)"), ("(1,2)", "[1,2]"), ("(1,2)", "(2,1)"), ("(1,2,3)", "(3,2,1)"), ("(1,2)", "2,1"),
    ("2", "1,2,3"), ("2", "2 \\text{ or } 3"), ("2", "x=2 \\text{ and } x=3"), ("5", "5\\pm1"), ("1,2", "1"),
    ("x > 2", "x \\ge 2"), ("(2,\\infty)", "[2,\\infty)"), ("\\infty", "-\\infty"),
    ("5", "x"), ("x", "5"), ("x=5", "y=5"), ("x^2+1", "x^2+2"), ("3+2i", "3-2i"),
    ("\\text{(C)}", "\\text{(D)}"), ("\\text{(A)}", "\\text{(A), (B)}"), ("\\text{(A)}", "\\text{A or B}"), ("A", "AB"),
    ("\\text{even}", "\\text{odd}"), ("\\text{neither}", "\\text{even}"), ("\\text{Evelyn}", "\\text{Bob}"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "(1,2)"), ("10\\%", "0.1"), ("\\frac{1}{2}", "50\\%"),
    ("50", "0.5"), ("0", "0/0"), ("1", "\\frac{1}{0}"), ("\\infty", "\\frac{1}{0}"), ("1", "\\text{True}"),
    ("4.5e33", "4.5"), ("4.5e33", "4.5 e 33"), ("12", "1,2"),
]


@pytest.mark.parametrize("gold, answer", FALSE_POSITIVE_PROBES)
def test_false_positive_probes_score_0(gold, answer):
    assert score(f"So the answer is $\\boxed{{{answer}}}$.", gold) == 0.0


def test_the_reward_is_named_and_dispatched_by_task():
    assert rewards.task_reward("math") == REWARD_NAME == REWARD_NAMES[-1] == "math-3"
    assert REWARD_NAMES == ("math-1", "math-2", "math-3")
    assert rewards.task_reward("gsm8k") == rewards.task_reward("arithmetic") == rewards.REWARD_VERSION
    assert rewards.reward_function("math-3") is math_boxed_reward is reward_function()
    assert rewards.reward_function("math-1").__name__ == "math_boxed_reward_math_1"
    for name in REWARD_NAMES:
        assert rewards.sample_scores(["\\boxed{\\dfrac{1}{2}}", "\\boxed{0.4}"], "\\frac{1}{2}", name) == [1.0, 0.0]
    with pytest.raises(ValueError, match="reward 'math-4' is unknown"):
        rewards.reward_function("math-4")


def test_readings_before_math_verify():
    assert reading("10\\%") == "10" and reading("4.5e33") == "4.5 \\times 10^{33}" and reading("1e-5") == \
        "1 \\times 10^{-5}"
    assert reading("e^{2}") == "e^{2}" and reading("x2e3") == "x2e3"  # Euler's number and words stay
    assert reading("\\text{Evelyn}.") == "\\text{Evelyn}" and reading("0.5") == "0.5"


HOSTILE = [
    "9^{9^{9}}", "9^{99999}", "10^{10^{10}}", "2^{2^{2^{2^{2}}}}", "9^9^9", "((9^9)^9)^9", "(9^{9999})^{9}",
    "{9^{99}}^{99}", "99999!", "(10^{100})!", "9!!", "(9!)!", "10^{9999}!", "\\binom{10^{9}}{10^{8}}",
    "\\binom{1000}{500}", "\\sum_{k=1}^{9} k", "\\prod_{k=1}^{10^9} k", "\\int_0^1 x^{1000} dx", "\\lim_{x} x",
    "9\\uparrow\\uparrow 9", "9" * 41, "2^{99\\cdot 99\\cdot 99\\cdot 99}", "\\exp(10^{9999})",
    "\\sin(\\exp(\\exp(99)))", "\\exp(\\exp(99))", "\\sin 2\\exp(\\exp(9))", "\\tan(\\exp(\\exp(\\exp(9))))",
    "e^{e^{9}}", "e^{\\exp(9)}",
    "\\sin(e^{99\\cdot 99\\cdot 99})", "\\sin(9999!)", "x" * 300, "\x00 5", "\u0665",
    "9999!\\cdot 9999!", "2^{9999}\\cdot 2^{9999}",
]
BOUNDED = ["(9^9)^9", "2^{2008}", "\\frac{1}{2004!}", "\\sin(10^{99})", "\\exp(99)",
           "\\left[P_{0}^{2 / 5}-\\frac{2}{5} g K^{-3 / 5} z\\right]^{5 / 2}", "\\arcsin{1.3 \\sin{\\theta_w}}",
           "2 \\sin b \\cos a", "9" * 40, "9" * 40 + "^{9999}", "\\binom{10}{3}", "n!", "5!", "e^{9999}"]


@pytest.mark.parametrize("answer", HOSTILE)
def test_unbounded_answers_are_refused_before_sympy(answer):
    assert not bounded_answer(reading(answer)) and parse_answer(answer) == ()


@pytest.mark.parametrize("answer", BOUNDED)
def test_bounded_answers_reach_math_verify(answer):
    assert bounded_answer(reading(answer))


_SEEDED = """
import json, sys
sys.path.insert(0, sys.argv[1])
from gmts_recipe.rewards_math import math_boxed_reward
pairs = json.loads(sys.stdin.read())
print(json.dumps([math_boxed_reward([f"$\\\\boxed{{{a}}}$"], [g])[0] for g, a in pairs]))
"""


def test_scores_do_not_depend_on_the_hash_seed():
    """sympy's comparison of an unevaluated expression can follow the process's hash seed (the GSM8K reward met it
    with '0/0'): every probe and answer form scores the same under two seeds."""
    pairs = [list(p) for p in FALSE_POSITIVE_PROBES] + [[g, last_boxed(c) or ""] for c, g, _ in ANSWER_FORMS
                                                        if isinstance(c, str)]
    outs = []
    for seed in ("0", "12345"):
        done = subprocess.run([sys.executable, "-c", _SEEDED, str(ROOT)], input=json.dumps(pairs), text=True,
                              capture_output=True, timeout=300, env={"PYTHONHASHSEED": seed, "PATH": ""})
        assert done.returncode == 0, done.stderr[-2000:]
        outs.append(json.loads(done.stdout))
    assert outs[0] == outs[1]


# ---------------------------------------------------------------- the real golds, where the data is at hand
def real_sets(names=("math500",)):
    from gmts_recipe import math_data

    folder = math_data.data_folder()
    if folder is None:
        pytest.skip(f"MATH's files are not installed ({math_data.WHEEL_FIX})")
    return math_data.read_sets(str(folder), names)


def model_forms(gold: str) -> list[str]:
    """A gold answer as a model writes it: boxed after some words, inside $...$ with a trailing period, with the
    period inside the box, \\frac as \\dfrac and back."""
    return [f"Putting it together, the answer is \\boxed{{{gold}}}", f"So the final answer is $\\boxed{{{gold}}}$.",
            f"\\boxed{{{gold}.}}", f"$\\boxed{{{gold.replace(chr(92) + 'frac', chr(92) + 'dfrac')}}}$",
            f"$\\boxed{{{gold.replace(chr(92) + 'dfrac', chr(92) + 'frac')}}}$"]


def misses(rows: list[dict]) -> list[tuple[str, list[float]]]:
    out = []
    for row in rows:
        gold = last_boxed(row["solution"])
        forms = model_forms(gold)
        scores = math_boxed_reward(forms, [gold] * len(forms))
        if scores != [1.0] * len(forms):
            out.append((gold, scores))
    return out


def test_every_math500_gold_is_right_in_a_models_forms():
    """All 500 MATH-500 gold answers (the last box of each solution, which is also its "answer" field), written as a
    model writes them: no false negative."""
    rows = real_sets()["math500"]
    assert len(rows) == 500 and all(last_boxed(r["solution"]) == r["answer"] for r in rows)
    assert misses(rows) == []


@pytest.mark.slow
def test_every_gold_of_math_and_minerva_ocw_is_right_in_a_models_forms():
    """The 12,496 golds of MATH's two files that box an answer (two training solutions box nothing) and the 272 of
    Minerva OCW: no false negative."""
    sets = real_sets(("train", "test", "ocw"))
    rows = [r for name in ("train", "test", "ocw") for r in sets[name] if last_boxed(r["solution"])]
    assert len(rows) == 7_498 + 5_000 + 272
    assert misses(rows) == []
