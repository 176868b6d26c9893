"""What both rewards read in a completion's text, before either task's own reading: the text of a completion as TRL
passes it, the characters a model writes for ASCII ones, the words that change a number's value, the one box scanner,
a reward named by its version, and math-verify's timeout notice dropped. Standard library only; gmts_recipe.rewards
(GSM8K) and gmts_recipe.rewards_math (MATH) import it, and neither imports the other at import time."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

MAX_ANSWER_CHARS = 64  # a final answer longer than this is not a number the gold could equal
# Characters a model writes for ASCII ones (version 5, math-3), each one character for one: the Unicode minus,
# fullwidth forms ('７２', '＋'), zero-width spaces (a space: '7\u200b2' is two numbers, as '7 2' is)
ASCII_FORMS = {0x2212: "-", **{c: chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)},
               **dict.fromkeys((0x200B, 0x2060, 0xFEFF), " ")}
# Words that scale or transform the number they stand by (version 3): never dropped as a unit is. Counted things
# ('pairs', 'quarters', 'times') and units of measure are not among them: '72 pairs' answers "how many pairs".
VALUE_WORDS = frozenset(
    "hundred hundreds thousand thousands million millions billion billions trillion trillions dozen dozens lakh "
    "lakhs crore crores k bn squared cubed power powers root half halves tenth tenths hundredth hundredths "
    "thousandth thousandths point minus negative twice double triple thrice".split())


def text_of(completion: Any) -> str:
    """A completion as TRL passes it: a string, or a conversational list of messages (the MATH reward's too)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else ""
    return ""


_BOXED = re.compile(r"\\boxed(?=\{)")  # GSM8K's box: '\boxed{' (MATH's: rewards_math._BOX)
_OR = re.compile(r"(?<![A-Za-z])or(?![A-Za-z])")


def last_box(text: str, box: re.Pattern = _BOXED, limit: int | None = MAX_ANSWER_CHARS,
             alternatives: bool = False) -> tuple[str, int] | None:
    """The content of the last box of `text` (the last match of `box`), braces matched, and the index after it; a box
    without braces ('\\boxed 5', which MATH's pattern allows) is its next word. None when there is none, or it is left
    open or holds more than `limit` characters. `alternatives` (version 5, math-3): content '' where the box before it
    is joined to it by 'or' ('\\boxed{3} or perhaps \\boxed{4}' answers neither). The one box scanner of both
    rewards; linear in the length of the text."""
    found = list(box.finditer(text))
    last = box_content(text, found[-1].end(), limit) if found else None
    if last is not None and alternatives and len(found) > 1:
        before = box_content(text, found[-2].end(), limit)
        between = text[before[1]:found[-1].start()] if before else "."
        if len(between) <= 40 and not re.search(r"[.\n]", between) and _OR.search(between):
            return "", last[1]
    return last


def box_content(text: str, i: int, limit: int | None) -> tuple[str, int] | None:
    """The content of the box whose braces open at `i` (blanks before them skipped; no brace: the next word) and the
    index after it; None when left open or longer than `limit`."""
    while i < len(text) and text[i] in " \t":
        i += 1
    if i < len(text) and text[i] != "{":  # '\boxed 5$': the word after it
        word = re.match(r"[^\s$]+", text[i:])
        return (word[0], i + len(word[0])) if word else None
    depth = 0
    for j in range(i, len(text) if limit is None else min(len(text), i + limit + 2)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j], j + 1
    return None


def versioned(scores: Callable, version: int | str, name: str) -> Callable[..., list[float]]:
    """A reward that scores as `scores(completions, answer, version)` does, named `name` (TRL logs a reward by name):
    an older reading of either task's reward."""
    def reward(completions: list, answer: list[str], **kwargs) -> list[float]:
        return scores(completions, answer, version)

    reward.__name__ = reward.__qualname__ = name
    return reward


def _drop_timeout_notice(record: logging.LogRecord) -> bool:
    """False for math-verify's notice that its timeouts are off: they are off on purpose (rewards.answers_equal)."""
    return not record.getMessage().startswith("Timeout is disabled")


# math-verify warns once per process that a timeout of None disables its timeout; check.py and every evaluation would
# print it twice. Only that notice is dropped, once at import (the loggers exist by name before math-verify loads);
# its other warnings still show.
for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_drop_timeout_notice)


