"""The product names things by what they are: no word of how it was built (the run history in results/LOG.md and
the raw run logs keep theirs)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKSHOP = r"stretch(es)?|lease|deliverable|issue #?[0-9]+|helper|session"
HISTORY = (":!results/LOG.md", ":!*.log", ":!tests/test_words.py")  # the story may be told there, and this pattern


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_no_workshop_words_in_code_configs_tests_or_docs():
    found = subprocess.run(["git", "grep", "-nwiE", WORKSHOP, "--", ".", *HISTORY], cwd=ROOT, capture_output=True,
                           text=True)
    assert found.returncode == 1, f"workshop words in the product:\n{found.stdout[:2000]}"
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not [n for n in names.splitlines() if any(w in n.lower() for w in ("stretch", "lease", "session"))]
