"""The RLVR reward: 1.0 when a completion's final answer equals the gold number, in bounded time whatever the text.

Why bounded by construction rather than by a timeout: a reward runs in the trainer's main thread, in worker threads
and in worker processes. math-verify's own timeouts use SIGALRM, which only the main thread may set, and a C-level
big-integer operation (sympy evaluating `9**9**9`) holds the GIL, so no thread-based timeout can stop it either.
So nothing unbounded ever reaches sympy:

1. `final_answer` reads only the last MAX_TAIL_CHARS characters and a \\boxed{} of at most MAX_ANSWER_CHARS.
2. `exact_value` reads the cases GSM8K needs (a plain decimal like '1,234', '$5.00', '-7', '.5', or a fraction of two
   plain decimals like '\\frac{3}{4}' or '3/4') as an exact `Fraction`: ASCII digits only, at most MAX_ANSWER_CHARS
   characters, no exponent, so the work is linear in a bounded length. Two such values compare exactly. Before
   that, `_normalize` reads LaTeX's thousands separators ('1{,}000', '5\\,000') and drops commas only where they
   group thousands: '1,2,3' is a list, which equals no single number (not 123, not 3); parentheses around the
   whole answer are dropped ('(5)' is 5).
3. Anything else goes to math-verify only if it is short (MAX_ANSWER_CHARS) and written in a grammar without
   powers, exponents, factorials, sums or functions (`_BOUNDED_EXPRESSION`: ASCII digits, + - * / and brackets,
   \\frac, \\cdot, \\times, \\div): every value it can denote is a rational of at most ~64 digits. Everything
   else scores 0 without being parsed. An expression math-verify parses must also evaluate to a finite number:
   '0/0' or '1/0' is no answer. Why: math-verify keeps '0/0' unevaluated, and its comparison of that with a number
   gives True or False with the process's hash seed (PYTHONHASHSEED); a score must not depend on the process.

What a model writes around its number (`_strip_decoration`), read the way a grader reads it: a formatting macro
(\\text, \\textbf, \\mathbf, \\mathrm, \\mbox, ...) is its content ('\\text{72}' is 72), or, when that holds a
letter, words dropped with it ('72\\ \\text{apples}' is 72, as version 1 read it); unit words after the number are
dropped ('72 km', '72 dollars per year'; not 'x' in '72 - x'); degrees are dropped ('72^{\\circ}'); an equation
answers with its right-hand side ('x = 72', '70 + 2 = 72'); braces or parentheses around the whole answer change
nothing ('{72}', '(72)').

Percent: a percent sign after the number is a unit, like 'km': '72\\%' is 72, never 0.72. Why: GSM8K asks "what
percent ..." with the gold written as the number of percent ('72'), and a reward that also accepted 0.72 would score
two different answers right. A percent sign anywhere else ('50\\% + 3') makes the answer no number.

What changes the number is never dropped (version 3): a word that scales or transforms it ('72 thousand', '72
dozen', '72 squared', '72 and a half', '\\text{minus } 72': `VALUE_WORDS`) leaves words in the answer, so it is no
number; a macro's words that hold a number stay ('\\text{14 weeks and} 4' is two numbers, not 4); and two numbers
with only space between them ('72 73', '2 \\text{ times } 36' once the words are dropped) are no single number,
except digit groups of three ('1 000' is 1000) and a mixed number ('5 \\frac{1}{2}' is 5.5). The price: a unit that
counts in multiples is refused too ('5 dozen' answering "how many dozens"), since the reward does not read the
question.

An unboxed answer is read alike (version 4): the number after '####', or the last number, comes with what stands
beside it (`final_answer`, `_beside`): up to 4 words that change the number after it ('thousand', 'and a half', or a
\\text{} macro that begins with one), and a second number right after or before it across space, 'or', 'and' or
'to'. So '#### 72 thousand', '#### 72 73', '#### 72 or 73' and 'The answer is 72 thousand.' are no number, as in a
box. Any other word ends the answer, as punctuation or a line break does: the sentence goes on ('#### 72 apples',
'15 hours to clean one-half' and '12 seconds to speak 10 words' are 72, 15 and 12). From version 4 a dozen counts,
as a pair does ('7 dozens' is 7, boxed or not): of the committed answers version 4 would otherwise have refused, most
said 'N dozens' to a question asked in dozens, with the gold N (bench/docs/reward-versions.md).

REWARD_VERSIONS lists the readings, the newest last; REWARD_VERSION (the newest) is what new evaluations record.
Every evaluation records the version that scored it, and check.py re-scores a samples file with the version it
names, by this module's `sample_scores(texts, gold, version)`: each version is a reading kept exactly, one code path
with the version's branches (`final_answer`, `_clean`, `answers_equal`):
- 1: a \\text, \\mbox or \\mathrm macro is removed with its content; parentheses (not braces) around the whole
  answer are dropped; a percent sign may stand in an expression math-verify reads ('72\\%' equals both 72 and 0.72);
  an expression math-verify leaves unevaluated ('0/0') is compared as it is.
- 2: the decoration above (`_strip_decoration`), braces like parentheses, percent as a unit, only finite values.
- 3: version 2, and what changes the number is never dropped (the paragraph above), inside a \\boxed{}.
- 4: version 3, and the same outside a box: after '####' and as the last number; a dozen counts (the paragraph
  above).
- 5: version 4, and what it read right but is wrong, or wrong but right: fullwidth forms are ASCII ('７２' is 72), a
  zero-width space a space (`ASCII_FORMS`); a box answers only when no second thought after it ('Wait', 'Actually',
  'Final Answer', '####': `_RETRACTION`) ends on another number ('\\boxed{72}. Wait, the total is 36' and
  '\\boxed{72} ... Actually 73' answer neither; '\\boxed{8} years old in 4 years' is 8), nor two boxes joined by
  'or' (`last_box`); an equation answers with its last side that holds a number ('72 = x' is 72 as 'x = 72' is:
  which side the unknown stands on changes nothing); e notation is a number ('7.2e1' is 72; exponents of at most 2
  digits, so the value stays bounded); an unboxed number answers neither with a number beside it across a comma
  ('5, 6'), 'or' and up to two words ('72, or maybe 73'), a dash ('72-73', '60 - 20': a range or a difference left
  unfinished) or a power ('72^2', '72²'), nor after 'not' ('not 72'; in a box 'not' changes the number, as 'minus'
  does); a number in words is read where the answer holds no digit ('seventy-two', '\\boxed{one hundred and five}').
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction
from functools import reduce
from typing import Any

from gmts_recipe.answer_text import ASCII_FORMS, MAX_ANSWER_CHARS, VALUE_WORDS, last_box, text_of, versioned

MAX_TAIL_CHARS = 4000  # the final answer is at the end; bounding the input bounds the time
# Every GSM8K reading this recipe keeps, the newest last: what new evaluations record (REWARD_VERSION) and what a
# samples file may name (check.py re-scores it with the version it names). The one list of known versions.
REWARD_VERSIONS = (1, 2, 3, 4, 5)
REWARD_VERSION = REWARD_VERSIONS[-1]
# An unboxed number: digits with commas inside (not after: '72,' is 72), an optional decimal part, or a bare decimal
# part ('.5' is 0.5, not 5). A comma run that is not thousands grouping ('1,2,3') is kept whole, so that `_normalize`
# sees a list, not the last digit or 123.
_NUMBER = re.compile(r"-?\$?(?:\d(?:[\d,]*\d)?(?:\.\d+)?|\.\d+)")
# An unboxed final answer: a \frac{a}{b} or a/b of plain numbers (the value, not its denominator), else a number.
_FINAL = re.compile(r"-?\\[dt]?frac\{[^{}]*\}\{[^{}]*\}|-?\d+(?:\.\d+)?\s*/\s*\d+(?:\.\d+)?(?![\d,]|\.\d)|"
                    + _NUMBER.pattern)
# Version 5: a number may have an exponent of at most 2 digits ('7.2e1'; '1e999999' is no number of this form)
_FINAL_5 = re.compile(_FINAL.pattern + r"(?:[eE][+-]?\d{1,2}(?![\w.]))?")
# From version 4 a dozen counts, as a pair does: the committed unboxed answers that say '7 dozens' answer a question
# asked in dozens (bench/docs/reward-versions.md), and '72 dozen' for 864 eggs is no 864 either
_COUNTED_FROM_4 = frozenset({"dozen", "dozens"})


# A second thought after a box, or a final answer written again (version 5): what may name another answer after it
_RETRACTION = re.compile(r"(?i)(?<![a-z])(?:wait|actually|mistake|instead|final answer)(?![a-z])|####")
def final_answer(text: str, version: int = REWARD_VERSION) -> str | None:
    """The model's final answer: the last \\boxed{...}, else the number after the last '####', else the last number
    (a \\frac{a}{b} or a/b counts as one number: '... is \\frac{3}{4}' answers 3/4, not 4). From version 4 an
    unboxed number comes with what stands beside it (`_beside`), so that it is read as a boxed one is. From version 5
    a box and another number after a second thought answer '<box> or <number>', which is no number."""
    text = text[-MAX_TAIL_CHARS:].replace("\u2212", "-")
    if version >= 5:
        text = text.translate(ASCII_FORMS)
    box = last_box(text, alternatives=version >= 5)
    if box is None:
        return _unboxed(_spelled(text) if version >= 5 else text, version)
    if version < 5 or not box[0]:
        return box[0]
    retracted = _RETRACTION.search(text, box[1])  # '\\boxed{8} years old in 4 years' is 8; '... Wait, 9' is not
    after = _unboxed(text[retracted.start():], version) if retracted else None  # in digits, not words: '... one'
    answer = _spelled(box[0])
    return answer if after is None or answers_equal(after, answer, version) else f"{answer} or {after}"


def _unboxed(text: str, version: int) -> str | None:
    """The number after the last '####', else the last number, as version `version` reads it (final_answer)."""
    finder = _FINAL if version < 5 else _FINAL_5
    if "####" in text:
        after = finder.search(text, text.rfind("####"))
        if after:
            return after.group(0) if version < 4 else _beside(text, after, None, version)
    numbers = list(finder.finditer(text))
    if not numbers:
        return None
    if version < 4:
        return numbers[-1].group(0)
    return _beside(text, numbers[-1], numbers[-2] if len(numbers) > 1 else None, version)


# A number in words (version 5), up to 999, read where no digit is written: not a fraction's ('one-half', 'two thirds')
_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORD_VALUES = {w: i for i, w in enumerate(_ONES)} | {w: 20 + 10 * i for i, w in enumerate(_TENS)}
_UNDER_100 = rf"(?:(?:{'|'.join(_TENS)})(?:[- ](?:{'|'.join(_ONES[1:10])}))?|{'|'.join(_ONES[::-1])})"
_SPELLED = re.compile(rf"(?i)(?<![a-z-]){_UNDER_100}(?:[- ]hundred(?:(?: and)? {_UNDER_100})?)?"
                      r"(?![a-z]|[- ](?:half|halves|thirds?|quarters?|[a-z]+ths?)(?![a-z]))")


def _spelled(text: str) -> str:
    """`text` with its numbers in words written in digits ('seventy-two' is 72), where it holds no digit."""
    def value(m: re.Match) -> str:  # 'one hundred and five': 1, times 100, plus 5 ('and' adds nothing)
        return str(reduce(lambda n, w: n * 100 if w == "hundred" else n + _WORD_VALUES.get(w, 0),
                          re.findall(r"[a-z]+", m[0].lower()), 0))
    return text if re.search(r"[0-9]", text) else _SPELLED.sub(value, text)


# What may stand between an unboxed number and the words or number beside it: spaces, LaTeX's spaces, math delimiters
_SEPARATOR = r"(?:[ \t~]|\\[ ,;:!]|\\[()\[\]]|(?<!\\)\$)+"
# After the number (version 4): a second number right after it ('72 73', '72 or 73', '7 and 8', '7 to 8'), then up
# to 4 words that change the number, each after a separator, or \\text{} macros that begin with one: '72 thousand',
# '72 and a half', '72 \\text{ thousand}'. Any other word ends it, as punctuation does: the sentence goes on ('15 hours
# to clean one-half' is 15, '72 apples, half of which' is 72, '12 seconds to speak 10 words' is 12).
_CONJUNCTION = r"(?:or|and|to|\\(?:text|mbox|mathrm)\s*\{\s*(?:or|and|to)\s*\})"  # 'or', '\text{ or }'
_BETWEEN = rf"{_SEPARATOR}(?:{_CONJUNCTION}{_SEPARATOR})?|(?:{_SEPARATOR})?{_CONJUNCTION}(?:{_SEPARATOR})?"
_SCALE = "(?i:" + "|".join(sorted(VALUE_WORDS - _COUNTED_FROM_4, key=len, reverse=True)) + r")(?![A-Za-z])"
_BRIDGE = "(?i:and|a|an|one)"  # '72 and a half', '72 and one half'
_SCALE_MACRO = rf"\\(?:text(?:bf|rm|it|normal)?|math(?:bf|rm|it)|mbox)\s*\{{\s*(?:{_BRIDGE}\s+)*{_SCALE}[^{{}}]*\}}"
_AFTER = re.compile(rf"(?:(?:{_BETWEEN})(?:{_FINAL.pattern})(?!\w|\.\d))?"
                    rf"(?:{_SEPARATOR}(?:{_BRIDGE}{_SEPARATOR})*{_SCALE}|(?:{_SEPARATOR})?{_SCALE_MACRO})" + "{0,4}")
_BEFORE = re.compile(_BETWEEN)  # '72 73', '72 or 73': what may stand between the last number and the one before
# Version 5 also: a comma ('5, 6'), 'or' after a comma and before up to two words ('72, or maybe 73'), a dash ('72 -
# 73', '72–73'; '72-73' reads '-73' as the second number), a power ('72^2', '72^{2'); then superscripts after it
_BETWEEN_5 = (rf",?(?:{_BETWEEN})|,(?:{_SEPARATOR})?|,?(?:{_SEPARATOR})?or{_SEPARATOR}(?:[A-Za-z]+{_SEPARATOR}){{0,2}}|"
              rf"(?:{_SEPARATOR})?[\u2013\u2014-](?:{_SEPARATOR})?|\^\{{?")
_BEFORE_5 = re.compile(_BETWEEN_5)
_AFTER_5 = re.compile("[\u00b2\u00b3\u00b9\u2070\u2074-\u2079]*" + _AFTER.pattern.replace(
    _BETWEEN, _BETWEEN_5 + "|(?=-)", 1).replace(_FINAL.pattern, _FINAL_5.pattern, 1))
_DASHED = re.compile(r"[0-9][^0-9A-Za-z]*[\u2013\u2014-]")  # two numbers joined by a dash (version 5): no answer
_NOT_BEFORE = re.compile(rf"(?:(?<![A-Za-z])[Nn]ot|n't)(?:{_SEPARATOR})?$")  # 'not 72', 'isn't $72$' (version 5)
_MATH_DELIMITER = re.compile(r"(?<!\\)\$|\\[()\[\]]")


def _beside(text: str, number: re.Match, previous: re.Match | None, version: int = 4) -> str | None:
    """An unboxed final number with what stands beside it (version 4), to be read as a boxed answer is: the words,
    macros or numbers right after it (`_AFTER`: a word that changes the number, '72 thousand', or a second number,
    '72 73', '72 or 73', then leave no number), and the number right before it when only space, 'or', 'and' or 'to'
    stands between them ('72 73' and '72 or 73' answer neither; '5\\,000' and '1 000' are one number). Math
    delimiters become spaces. Version 5 reads more beside it (_BETWEEN_5, _NOT_BEFORE). Linear in the length: one
    anchored match each way."""
    after, before = (_AFTER, _BEFORE) if version < 5 else (_AFTER_5, _BEFORE_5)
    start, end = number.start(), after.match(text, number.end()).end()
    if previous is not None and (before.fullmatch(text, previous.end(), start) or
                                 (version >= 5 and previous.end() == start and text[start] == "-")):
        start = previous.start()
    negated = _NOT_BEFORE.search(text, max(0, start - 40), start) if version >= 5 else None
    answer = " ".join(_MATH_DELIMITER.sub(" ", text[negated.start() if negated else start:end]).split())
    return None if version >= 5 and _DASHED.search(answer) else answer  # '72-73', '60 - 20': a range or unfinished


def gold_answer(answer: str) -> str:
    """GSM8K's gold field ('... #### 72') or a bare number string."""
    return answer.rsplit("####", 1)[-1].strip() if "####" in answer else answer.strip()


_GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+")  # 1,234,567: commas that separate thousands
_COMMA_RUN = re.compile(r"(?<![\d.])\d[\d,]*\d")
_THIN_SPACE_SEPARATOR = re.compile(r"(?<=\d)\\,(?=\d{3})")  # 5\,000: LaTeX's thin space between digit groups


def _drop_thousands_separators(ans: str) -> str:
    """1,234 -> 1234; a run that is not thousands grouping (1,2,3, a list; 12,34) keeps its commas, so that it is
    no number: a list of numbers is not one answer, it equals neither 123 nor any of its items."""
    return _COMMA_RUN.sub(lambda m: m[0].replace(",", "") if _GROUPED.fullmatch(m[0]) else m[0], ans)


def _unwrap_brackets(ans: str, openings: str = "({") -> str:
    """(5) -> 5, {72} -> 72, ((70+2)) -> 70+2: parentheses or braces (`openings`; version 1: parentheses only) around
    the whole answer change nothing (math-verify parses none of '(5)' or '((70+2))'); (3)(4), {1}{2} and (1,2) are
    kept. Quadratic, so only on an answer already cut to MAX_ANSWER_CHARS."""
    while len(ans) >= 2 and ans[0] in openings and ans[-1] == _CLOSING[ans[0]]:
        opening, closing = ans[0], ans[-1]
        depth = 0
        for i, ch in enumerate(ans):
            depth += {opening: 1, closing: -1}.get(ch, 0)
            if depth == 0 and i < len(ans) - 1:
                return ans  # the first bracket closes before the end
        ans = ans[1:-1].strip()
    return ans


_CLOSING = {"(": ")", "{": "}"}


def _normalize(ans: str) -> str:
    ans = ans.replace("{,}", ",")  # LaTeX's thousands comma: 1{,}000
    ans = _THIN_SPACE_SEPARATOR.sub(",", ans)  # 5\,000 -> 5,000 (a thin space elsewhere is only space)
    ans = ans.replace("\\left(", "(").replace("\\right)", ")")
    for token in ("\\$", "$", "\\!", "\\,"):  # \$ before $, or a stray backslash is left
        ans = ans.replace(token, "")
    return _drop_thousands_separators(ans.strip().rstrip(".,"))


# A formatting macro around plain text: replaced by its text (a number stays, a unit word is dropped as a unit word)
_FORMAT_MACRO = re.compile(r"\\(?:text(?:bf|rm|it|normal)?|math(?:bf|rm|it)|mbox|boldsymbol|bm)\s*\{([^{}]*)\}")
_TEXT_MACRO = re.compile(r"\\(?:text|mbox|mathrm)\{[^{}]*\}")  # version 1: removed with its content
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|\^\s*\{\s*\}")  # 72^{\circ}, 72^\circ, 72\degree
_UNIT_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*(?:/[A-Za-z]+)*[.,]?")  # km, apples, km/h, hrs., S'mores
_ENDS_A_NUMBER = re.compile(r"[0-9}%]$")  # what unit words may follow: a number, a \frac{}{}, a percent
_PERCENT = re.compile(r"\s*\\?%$")
_END_PUNCTUATION = re.compile(r"(?<!\\)[.,]+$")  # a sentence's end; not the comma of LaTeX's thin space \,
# Two numbers with only space between them: '72 73', '72.5 .5', '0 -1' (a sign with a digit right after it is the
# second number's, not a minus: '5 - 3' is not matched), '\frac{1}{2} 3' (not '5 \frac{1}{2}', a mixed number)
_SIDE_BY_SIDE = re.compile(r"[0-9}]\s+[+-]?\.?[0-9]")
_DIGIT_GROUPS = re.compile(r"[+-]?[1-9][0-9]{0,2}(?: [0-9]{3})+(?:\.[0-9]+)?")  # 1 000 000: spaces that group thousands
_DECIMAL = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"  # ASCII digits: no exponent, no unicode digits
_EXACT, _EXACT_5 = (re.compile(rf"(?P<sign>[+-]?)\s*(?:(?P<value>{d})|\\[dt]?frac\{{(?P<num>{d})\}}"
                               rf"\{{(?P<den>{d})\}}|(?P<n>{d})\s*/\s*(?P<d>{d}))")
                    for d in (_DECIMAL, _DECIMAL + "(?:[eE][+-]?[0-9]{1,2})?"))  # version 5: '7.2e1' is 72
_BOUNDED_EXPRESSION = re.compile(r"(?:\\[dt]?frac|\\cdot|\\times|\\div|\\left|\\right|[0-9 .+\-*/(){}])*")
_BOUNDED_WITH_PERCENT = re.compile(r"(?:\\[dt]?frac|\\cdot|\\times|\\div|\\left|\\right|\\%|[0-9 .+\-*/(){}%])*")
_POWER = re.compile(r"\*\s*\*")  # '**' (a power in sympy's syntax), also with spaces in between




def _value_words(version: int) -> frozenset[str]:
    """The words that change the number, as reward version `version` reads them."""
    return (VALUE_WORDS - _COUNTED_FROM_4 | ({"not"} if version >= 5 else set())) if version >= 4 else VALUE_WORDS


def _changes_value(text: str, version: int = REWARD_VERSION) -> bool:
    """True when `text` holds a word that changes the number ('thousand', 'Million.', 'minus'; _value_words)."""
    words = _value_words(version)
    return any(word.lower() in words for word in re.findall(r"[A-Za-z]+", text))


def _strip_decoration(answer: str, version: int = REWARD_VERSION) -> str:
    """The answer without what a model writes around its number (module docstring): formatting macros, degrees, an
    equation's left-hand side, unit words after the number, a trailing percent sign; from version 3, never a word
    that changes the number. Linear in the length, called on at most MAX_TAIL_CHARS characters."""
    for _ in range(4):  # \\textbf{\\text{72}}: a macro inside a macro, a few levels deep
        unwrapped = _FORMAT_MACRO.sub(lambda m: _macro_content(m[1], version), answer)
        if unwrapped == answer:
            break
        answer = unwrapped
    answer = _DEGREES.sub("", answer.replace("\u00b0", "")).replace("\\ ", " ").replace("~", " ")
    sides = answer.split("=")  # x = 72: the right-hand side; from version 5 the last side with a number (72 = x)
    answer = next((side for side in sides[::-1] if version >= 5 and re.search("[0-9]", side)), sides[-1])
    words = [w for w in answer.split(" ") if w]  # spaces only: a control character stays, and _clean refuses it
    units = len(words)
    while units > 1 and _UNIT_WORD.fullmatch(words[units - 1]):
        units -= 1
    if units < len(words) and _ENDS_A_NUMBER.search(words[units - 1]) and \
            not (version >= 3 and _changes_value(" ".join(words[units:]), version)):  # 72 km, 72 apples; not 21 - x
        words = words[:units]
    return _PERCENT.sub("", _END_PUNCTUATION.sub("", " ".join(words)))  # 60%. is 60%, then 60


def _macro_content(content: str, version: int) -> str:
    """\\text{72} is 72; a macro holding a letter is words ('\\text{ apples}', '\\text{ with 2 left over}'): dropped
    with its content, as a unit is. From version 3 its words stay where they hold a number ('\\text{72 apples}' is
    read as '72 apples'; '\\text{ with 2 left over}' leaves two numbers) or a word that changes the number
    ('\\text{ thousand}', '\\text{minus }'): the answer is then read, or refused, as any other words are."""
    if not re.search(r"[A-Za-z]", content):
        return f" {content} "
    if version >= 3 and (re.search(r"[0-9]", content) or _changes_value(content, version)):
        return f" {content} "
    return " "


def _clean(answer: str, version: int = REWARD_VERSION) -> str | None:
    """The answer without decoration, units, currency and thousands separators, as reward version `version` reads it
    (module docstring); None when too long to be a number, when it holds anything but printable ASCII (control
    characters, unicode digits or spaces), or (version 3) when it holds two numbers side by side."""
    if len(answer) > MAX_TAIL_CHARS:
        return None
    stripped = _TEXT_MACRO.sub("", answer) if version == 1 else _strip_decoration(answer, version)
    if not (stripped.isascii() and stripped.isprintable()):
        return None
    cleaned = _normalize(stripped)
    if not 0 < len(cleaned) <= MAX_ANSWER_CHARS:
        return None
    cleaned = _unwrap_brackets(cleaned, "(" if version == 1 else "({")
    if version >= 3 and _SIDE_BY_SIDE.search(cleaned) and not _DIGIT_GROUPS.fullmatch(cleaned):
        return None  # 72 73 is two numbers, not 73; 1 000 is 1000
    return cleaned or None  # '()' or '{}' holds nothing


def exact_value(answer: str, version: int = REWARD_VERSION) -> Fraction | None:
    """A plain decimal or a fraction of two plain decimals as an exact Fraction; None for anything else (including a
    zero denominator). Linear in the (bounded) length: no exponent can be written."""
    cleaned = _clean(answer, version)
    m = (_EXACT if version < 5 else _EXACT_5).fullmatch(cleaned) if cleaned is not None else None
    if m is None:
        return None
    sign = -1 if m["sign"] == "-" else 1
    if m["value"] is not None:
        return sign * Fraction(m["value"])
    num, den = (m["num"], m["den"]) if m["num"] is not None else (m["n"], m["d"])
    return sign * Fraction(num) / Fraction(den) if Fraction(den) != 0 else None


def bounded_expression(answer: str, version: int = REWARD_VERSION) -> str | None:
    """The cleaned answer when math-verify may parse it in bounded time (short, no power, factorial, exponent, sum
    or function: see the module docstring), else None. Version 1 also let a percent sign through."""
    cleaned = _clean(answer, version)
    grammar = _BOUNDED_WITH_PERCENT if version == 1 else _BOUNDED_EXPRESSION
    if cleaned is None or not grammar.fullmatch(cleaned) or _POWER.search(cleaned):
        return None
    return cleaned


def answers_equal(gold: str, predicted: str | None, version: int = REWARD_VERSION) -> bool:
    """Exact equality of two numbers when both are plain numbers or fractions; otherwise math-verify's equality of
    two bounded expressions; False for anything unbounded. `version`: the reading (module docstring)."""
    if predicted is None:
        return False
    gold_value, predicted_value = exact_value(gold, version), exact_value(predicted, version)
    if gold_value is not None and predicted_value is not None:
        return gold_value == predicted_value
    g, p = bounded_expression(gold, version), bounded_expression(predicted, version)
    if g is None or p is None:
        return False
    from math_verify import parse, verify

    # No SIGALRM timeouts (None): the input is bounded by construction, and a reward may run off the main thread.
    gold_parsed = parse(f"${g}$" if "\\" in g else g, parsing_timeout=None)
    pred_parsed = parse(f"${p}$" if "\\" in p else p, parsing_timeout=None)
    if version == 1:  # compared as parsed, evaluated or not
        return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None))
    if not (_finite(gold_parsed) and _finite(pred_parsed)):
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=None))


def _finite(parsed: list) -> bool:
    """True when math-verify read a value and every sympy value it read is a finite number. Why: '0/0' parses to an
    unevaluated product whose comparison with a number depends on the process's hash seed; evaluated, it is nan (and
    '1/0' is zoo), which is no answer. Cheap: a bounded expression denotes a rational of at most ~64 digits."""
    import sympy

    values = [v for v in parsed if isinstance(v, sympy.Basic)]
    return bool(values) and all(v.doit().is_finite is True for v in values)


def math_equal_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's final answer equals the gold number, else 0.0. Never raises; bounded time."""
    return _scores(completions, answer, REWARD_VERSION)


def _scores(completions: list, answer: list[str], version: int) -> list[float]:
    """math_equal_reward as reward version `version` reads the answers."""
    rewards = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            answer = final_answer(text_of(completion), version)
            rewards.append(float(answers_equal(gold_answer(str(gold)), answer, version)))
        except Exception:  # noqa: BLE001 - a reward must never stop training; garbage scores 0
            rewards.append(0.0)
    return rewards


def reward_function(version: int | str = REWARD_VERSION) -> Callable[..., list[float]]:
    """The reward of a given version (REWARD_VERSIONS; REWARD_VERSION is `math_equal_reward`), so a results file
    scored by an older reading still re-scores as it was scored; a name ("math-1") is a MATH reward
    (`gmts_recipe.rewards_math`)."""
    from gmts_recipe import rewards_math  # standard library only

    if isinstance(version, str) and version.startswith("math"):  # MATH's are named ("math-1"), GSM8K's numbered
        return rewards_math.reward_function(version)  # refuses a name it does not know
    if isinstance(version, bool) or version not in REWARD_VERSIONS:
        raise ValueError(f"reward version {version!r} is unknown: this recipe has versions {REWARD_VERSIONS[0]} to "
                         f"{REWARD_VERSION} "
                         f"and MATH's {', '.join(rewards_math.REWARD_NAMES)}")
    return math_equal_reward if version == REWARD_VERSION else \
        versioned(_scores, version, f"math_equal_reward_v{version}")


def task_reward(task: str) -> int | str:
    """The reward a task trains and is evaluated with: MATH's own (rewards_math.REWARD_NAME, the last \\boxed{}
    answer through math-verify) for task math, this module's REWARD_VERSION for GSM8K and the generated task."""
    if task == "math":
        from gmts_recipe.rewards_math import REWARD_NAME

        return REWARD_NAME
    return REWARD_VERSION


def sample_scores(texts: list[str], gold: str, version: int | str = REWARD_VERSION) -> list[float]:
    """The recipe's score of each sample of one task: the one function both `score_samples` and check.py's
    re-scoring of a stored samples file call, so a stored score and its re-score can only differ when the score was
    edited. `version`: the reward version the evaluation records (check.py), this module's by default."""
    return reward_function(version)(texts, [gold] * len(texts))


def task_reward_versions(task: str) -> tuple[int | str, ...]:
    """The rewards a run of `task` may train and be scored with, oldest first: MATH's named readings
    (rewards_math.REWARD_NAMES), else GSM8K's numbered versions (the generated task's too). The first is what a
    results file that names no version was scored with; the newest is `task_reward(task)`."""
    if task == "math":
        from gmts_recipe.rewards_math import REWARD_NAMES

        return tuple(REWARD_NAMES)
    return tuple(range(1, REWARD_VERSION + 1))


def run_reward(task: str, requested: int | str | None = None) -> int | str:
    """The reward a run of `task` trains and is scored with: `requested` (a config's reward_version: 1, '3',
    'math-1'), else the task's newest (`task_reward`). A version the task does not have raises ValueError, one line
    naming the task's versions: GSM8K's numbers are not MATH's names (a reward version belongs to a task)."""
    if requested is None or requested == "":
        return task_reward(task)
    known = task_reward_versions(task)
    value = int(requested) if isinstance(requested, str) and requested.strip().isdigit() else requested
    if isinstance(value, bool) or value not in known:
        raise ValueError(f"reward_version={requested!r} is not a reward of task {task}: its versions are "
                         f"{', '.join(map(str, known))} (unset: the newest, {task_reward(task)})")
    return value
