"""Regenerate the result blocks of the documentation pages from the committed results files.

Each block sits between `<!-- BEGIN generated: COMMAND -->` and `<!-- END generated -->`; its body is COMMAND's output.
tests/test_readme.py fails when a block differs from what its command prints, so no documented number is typed by hand.

    python update_readme.py
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# Every page that holds generated blocks (commands run from the repository root, whatever the page's folder).
PAGES = ("README.md", "bench/README.md", "results/LOG.md")
BLOCK = re.compile(r"(<!-- BEGIN generated: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- END generated -->)", re.S)


def run(cmd: str) -> str:
    argv = shlex.split(cmd)
    if argv[0] == "python":
        argv[0] = sys.executable
    return subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True).stdout.rstrip("\n") + "\n"


def blocks(text: str) -> list[re.Match]:
    return list(BLOCK.finditer(text))


def main() -> None:
    for page in PAGES:
        path = ROOT / page
        text = BLOCK.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), path.read_text())
        path.write_text(text)
        print(f"{page}: regenerated {len(blocks(text))} blocks")


if __name__ == "__main__":
    main()
