"""Every number in the documentation's result blocks is what the code prints from the committed results files."""

import re
from pathlib import Path

import pytest

from update_readme import PAGES, ROOT, blocks, run

TEXT = {page: (ROOT / page).read_text() for page in PAGES}
ALL_BLOCKS = [(page, m) for page in PAGES for m in blocks(TEXT[page])]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # markdown link or image target, anchors dropped


def test_result_tables_are_generated():
    """The README's result tables and the benchmark's tables are all generated blocks, wherever they moved."""
    assert len(blocks(TEXT["README.md"])) >= 2 and len(blocks(TEXT["bench/README.md"])) >= 2


@pytest.mark.parametrize("page,block", ALL_BLOCKS, ids=lambda x: x if isinstance(x, str) else x.group("cmd"))
def test_block_matches_its_command(page, block):
    assert block.group("body") == run(block.group("cmd")), f"{page}: block is stale: run python update_readme.py"


def test_readme_links_the_moved_pages():
    targets = set(LINK.findall(TEXT["README.md"]))
    assert {"bench/README.md", "results/LOG.md"} <= targets


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    base = (ROOT / page).parent
    missing = [t for t in LINK.findall(TEXT[page]) if "://" not in t and not (base / t).exists()]
    assert not missing, f"{page} links to missing files: {missing}"


def test_quick_start_comes_first():
    """A newcomer meets the headline result and the Quick start before any benchmark detail."""
    sections = [line[3:].strip() for line in TEXT["README.md"].splitlines() if line.startswith("## ")]
    assert sections[0].startswith("Result") and sections[1] == "Quick start"


def test_ci_runs_the_quick_start_test_command():
    """The CI proves the README's test command, not a variant of it."""
    quick = TEXT["README.md"].split("## Quick start", 1)[1].split("\n## ", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python -m pytest -q" in quick and "python -m pytest -q" in ci
