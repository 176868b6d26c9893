"""Every number in the README's result blocks is what the code prints from the committed results files."""

from pathlib import Path

import pytest

from update_readme import blocks, run

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_has_generated_blocks():
    assert len(blocks(README)) >= 3


@pytest.mark.parametrize("block", blocks(README), ids=lambda m: m.group("cmd"))
def test_block_matches_its_command(block):
    assert block.group("body") == run(block.group("cmd")), "README block is stale: run python update_readme.py"
