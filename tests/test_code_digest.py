"""The code digest a run records (gmts_recipe.code_digest): computed from the files on disk exactly as from a
commit's tree, so check.py names the commit whose code ran where a stale .git recorded another."""

import shutil
import subprocess

from gmts_recipe import code_digest as cd
from gmts_recipe.verify.provenance import code_note, provenance_lines


def git(root, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                          capture_output=True, text=True).stdout.strip()


def commit(root, message) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD")


def project(root):
    """A project of three commits: A (first code), B (code changed), C (docs only)."""
    (root / "gmts_recipe" / "sweep").mkdir(parents=True)
    git(root, "init", "-q")
    (root / "recipe.py").write_text("x = 1\n")
    (root / "gmts_recipe" / "sweep" / "cells.py").write_text("y = 1\n")
    (root / "README.md").write_text("one\n")
    a = commit(root, "A")
    (root / "gmts_recipe" / "sweep" / "cells.py").write_text("y = 2\n")
    b = commit(root, "B")
    (root / "README.md").write_text("two\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("z = 1\n")  # tests are not the code a run imports
    c = commit(root, "C")
    return a, b, c


def test_the_files_digest_is_the_commits(tmp_path):
    a, b, c = project(tmp_path)
    assert cd.blob_id(b"y = 2\n") == git(tmp_path, "hash-object", "gmts_recipe/sweep/cells.py")
    on_disk = cd.code_digest(tmp_path)
    assert on_disk == cd.commit_digest(c, tmp_path) == cd.commit_digest(b, tmp_path) != cd.commit_digest(a, tmp_path)
    (tmp_path / "README.md").write_text("three\n")  # not code
    (tmp_path / "tests" / "test_x.py").write_text("z = 2\n")
    assert cd.code_digest(tmp_path) == on_disk
    (tmp_path / "gmts_recipe" / "new.py").write_text("")  # an untracked module an import may read: code
    assert cd.code_digest(tmp_path) != on_disk
    (tmp_path / "site" / "gmts_recipe").mkdir(parents=True)
    (tmp_path / "site" / "gmts_recipe" / "x.py").write_text("")
    assert cd.code_digest(tmp_path / "site") is None  # the package without top-level code (an installed copy)


def test_check_names_the_commit_whose_code_ran(tmp_path):
    """A copy of C's files beside A's .git (what a machine that kept an older repository runs) records A; its
    digest is B's code (C changed no code), and check.py says so. A recorded commit whose code ran says so too."""
    a, b, c = project(tmp_path)
    stale = tmp_path.parent / f"{tmp_path.name}-stale"
    git(tmp_path.parent, "clone", "-q", str(tmp_path), str(stale))
    git(stale, "reset", "-q", "--soft", a)  # .git at A, the files C's
    assert git(stale, "rev-parse", "HEAD") == a and git(stale, "status", "--porcelain")
    recorded = {"commit": a, "dirty": True, "code_digest": cd.code_digest(stale)}
    assert code_note(recorded, tmp_path) == f"code of commit {b[:10]}"
    assert code_note({**recorded, "commit": c}, tmp_path) == "code as committed"
    assert code_note({"commit": a}, tmp_path) == ""  # a run from before the digest: nothing claimed
    assert code_note({**recorded, "code_digest": "0" * 64}, tmp_path) == "code of no commit in this history"
    assert code_note(recorded, stale) == "code of no commit in this history"  # the stale history lacks B
    shutil.rmtree(stale)


def test_a_run_records_the_digest_and_check_prints_its_commit(monkeypatch, tmp_path):
    """provenance() records the checkout's digest; check.py's lines name the code's commit beside the recorded one."""
    from gmts_recipe.run_setup import provenance
    from gmts_recipe.verify.provenance import cell_origin

    assert provenance(0.0, 1.0, 1, {}, "cpu")["code_digest"] == cd.code_digest()
    a, b, c = project(tmp_path)
    monkeypatch.setattr(cd, "ROOT", tmp_path)
    stale = {"commit": a, "dirty": True, "changed_files": ["README.md"], "gpu": "NVIDIA H100 80GB HBM3", "gpus": 1,
             "code_digest": cd.commit_digest(b, tmp_path)}
    results = {"arms": {"ets": {"provenance": stale}, "gmts": {"provenance": stale}}}
    assert cell_origin(results) == f"{b[:7]} (recorded {a[:7]}), NVIDIA H100 80GB HBM3"
    assert f"commit {a[:12]} (uncommitted changes: README.md) [code of commit {b[:10]}]" in "\n".join(
        provenance_lines(results))
    clean = {**stale, "commit": c}
    h100 = "NVIDIA H100 80GB HBM3"
    assert cell_origin({"arms": {"ets": {"provenance": clean}}}) == f"{c[:7]} (code as committed), {h100}"
    assert cell_origin({"arms": {"ets": {"provenance": {**clean, "dirty": False}}}}) == \
        f"{c[:7]}, NVIDIA H100 80GB HBM3"
    forged = {**clean, "code_digest": "1" * 64}
    assert cell_origin({"arms": {"ets": {"provenance": forged}}}) == f"{c[:7]} (code of no commit), {h100}"
