"""Markdown as the documentation's generated blocks print it: prose and list items wrapped to one width, so a page
reads in a terminal and a diff (tests/test_readme.py holds every generated line to LINE_LIMIT characters).

Markdown joins a paragraph's lines and a list item's indented lines, so wrapping changes nothing a reader sees
rendered; a table row cannot wrap, so a generator keeps its cells short and lists long values below its table.
"""

from __future__ import annotations

import re
import textwrap

WIDTH = 118  # a wrapped line of prose
README_WIDTH = 155  # the README's own prose: a block only the README shows wraps as its text around it does
LINE_LIMIT = 200  # no generated line longer: a table row included
_GLUE = "\x01"  # a space textwrap does not break at (its whitespace is ASCII's), restored after wrapping
# A wrapped line must not begin with what markdown reads as a block of its own: a list item ("GMTS - ETS" broken
# before "- ETS"), an ordered one ("in 2. Then"), a heading or a quote; such a mark stays on the line of the word
# before it.
_MARKERS = re.compile(r" ([-+*>]|#{1,6}|\d+[.)])(?= |$)")  # at the end too: "2." alone is an item


def _wrap(text: str, width: int, first: str = "", later: str = "") -> str:
    glued = _MARKERS.sub(lambda m: _GLUE + m.group(1), text)
    return textwrap.fill(glued, width, initial_indent=first, subsequent_indent=later, break_long_words=False,
                         break_on_hyphens=False).replace(_GLUE, " ")


def fill(text: str, width: int = WIDTH) -> str:
    """One paragraph, wrapped; no word, path or hyphenated name is broken."""
    return _wrap(text, width)


def item(text: str, width: int = WIDTH, bullet: str = "- ") -> str:
    """One list item, wrapped, its later lines indented under its text."""
    return _wrap(text, width, bullet, " " * len(bullet))


def fill_lines(text: str, width: int = WIDTH) -> str:
    """Each line of `text` wrapped on its own: a list item (`- `) as an item, a table row or a blank line as it is,
    any other line as a paragraph. For the output of a function that prints one long line per paragraph or item."""
    out = []
    for line in text.split("\n"):
        if not line.strip() or line.lstrip().startswith("|") or len(line) <= width:
            out.append(line)
        elif line.startswith("- "):
            out.append(item(line[2:], width))
        else:
            out.append(fill(line, width))
    return "\n".join(out)
