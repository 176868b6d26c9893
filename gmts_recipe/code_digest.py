"""Which committed code ran, from the files themselves: a digest of the project's Python code as it lay on disk when
a run started, recorded in its provenance beside the commit git named, and matched against git history by check.py.

Why: a run records `git rev-parse HEAD` and `git status`, which read the checkout's .git. A copy of a working tree
whose .git is older than its files (a GPU machine that received the tree's files but kept an earlier repository)
records the older commit and lists every file since as changed: the files that ran are the new ones, the commit
named is not. The digest is computed from the files alone, the same way from a commit's tree (each file's git blob
id, so no file is read back from history), so check.py finds the commit whose code ran, whatever .git said.

The code: every `*.py` file at the top of the project and under `gmts_recipe/` (what recipe.py, eval.py and check.py
import). Configs are not code here: a run's settings are in its config record, checked on their own.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

PACKAGE = "gmts_recipe"
ROOT = Path(__file__).resolve().parent.parent  # the checkout (an installed copy: site-packages, with no top-level code)


def is_code(path: str) -> bool:
    """A repository path (slash-separated) that the digest covers: a top-level .py file or one under the package."""
    return path.endswith(".py") and ("/" not in path or path.startswith(f"{PACKAGE}/"))


def blob_id(data: bytes) -> str:
    """The id git gives a file's contents (SHA-1 of "blob <size>\\0" and the bytes): what `git ls-tree` lists."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def digest_of(blobs: dict[str, str]) -> str:
    """The digest of a set of code files, {path: blob id}: SHA-256 over its sorted "path blob" lines."""
    return hashlib.sha256("".join(f"{p} {b}\n" for p, b in sorted(blobs.items())).encode()).hexdigest()


def code_digest(root: Path | None = None) -> str | None:
    """The digest of the code on disk under `root` (the checkout by default); None where no top-level code lies there
    (an installed copy), so nothing is claimed."""
    root = root or ROOT
    files = [*root.glob("*.py"), *(root / PACKAGE).rglob("*.py")]
    if not any(f.parent == root for f in files):
        return None
    return digest_of({f.relative_to(root).as_posix(): blob_id(f.read_bytes()) for f in files if f.is_file()})


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.lru_cache(maxsize=4096)
def commit_digest(commit: str, root: Path) -> str | None:
    """The digest of a commit's code, from its tree's blob ids (`git ls-tree`); None where git does not know it."""
    listing = _git(root, "ls-tree", "-r", "-z", "--full-tree", commit)
    if listing is None:
        return None
    blobs = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        if meta.split()[1] == "blob" and is_code(path):
            blobs[path] = meta.split()[2]
    return digest_of(blobs)


@functools.lru_cache(maxsize=256)
def commit_with_code(digest: str, root: Path) -> str | None:
    """The commit of HEAD's history that made the code exactly `digest` (the newest such, read among the commits
    that change code); None where no commit holds it (code that ran uncommitted, or a history this checkout lacks)."""
    history = _git(root, "rev-list", "HEAD", "--", ":(glob)*.py", f":(glob){PACKAGE}/**/*.py")
    for commit in (history or "").split():
        if commit_digest(commit, root) == digest:
            return commit
    return None


def code_commit(provenance: dict, root: Path | None = None) -> tuple[str, str | None] | None:
    """Which commit's code a run ran, from the digest its provenance recorded: None where it recorded none (runs from
    before it); ("recorded", commit) where its code is its recorded commit's; ("other", commit) where it is another
    commit's (a stale .git named the recorded one); ("none", None) where no commit of this history holds it."""
    digest, recorded = provenance.get("code_digest"), provenance.get("commit")
    if not isinstance(digest, str):
        return None
    root = root or ROOT
    if isinstance(recorded, str) and commit_digest(recorded, root) == digest:
        return "recorded", recorded
    found = commit_with_code(digest, root)
    return ("other", found) if found else ("none", None)


