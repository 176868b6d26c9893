"""A confirmatory plan precedes its data: the commit that added a plan's grid file (its seeds and its primary test)
is an ancestor of, and not later than, every commit that added a results file of its cells, so no cell's result
could have shaped the plan. Checked on this repository's history, and the check itself on two made-up histories."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# a plan fixed before any of its cells ran (and the files its rules rest on) -> its cells
PLANS = {"configs/sweeps/confirm.yaml": "results/confirm", "configs/sweeps/confirm-extension.yaml":
         "results/confirm-extension", "configs/sweeps/confirm-extension-design.json": "results/confirm-extension"}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)


def cells_before_plan(root: Path, plan: str, cells: str) -> list[str]:
    """The commits that added a `cells/*/results.json` without the plan's first commit before them."""
    added = _git(root, "log", "--diff-filter=A", "--format=%H %ct", "--", plan).stdout.split()
    if not added:
        return [f"{plan} is not in the history"]
    plan_sha, plan_time = added[-2], int(added[-1])  # the oldest commit that added the plan
    log = _git(root, "log", "--diff-filter=A", "--format=%H %ct", "--", f"{cells}/*/results.json").stdout
    bad = []
    for sha, when in (line.split() for line in log.splitlines() if line.strip()):
        if sha == plan_sha or _git(root, "merge-base", "--is-ancestor", plan_sha, sha).returncode != 0 \
                or int(when) < plan_time:
            bad.append(f"{sha[:10]} added cells of {plan} before the plan ({plan_sha[:10]})")
    return bad


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_every_plan_was_committed_before_any_of_its_cells(plan):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the order of commits cannot be read")
    if _git(ROOT, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.fail("a shallow clone: run git fetch --unshallow to check the plan's order")
    if not (ROOT / plan).is_file():
        assert not (ROOT / PLANS[plan]).exists(), f"cells in {PLANS[plan]} without their plan {plan}"
        pytest.skip(f"{plan} is not written yet (nor any of its cells)")
    assert cells_before_plan(ROOT, plan, PLANS[plan]) == []


def _history(tmp_path: Path, order: list[str]) -> Path:
    """A repository whose commits add, in this order, the plan ("plan") and cell results ("cell0", ...); "a+b": one
    commit adding both."""
    env = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for i, commit in enumerate(order):
        for what in commit.split("+"):
            path = tmp_path / ("configs/sweeps/confirm.yaml" if what == "plan" else
                               f"results/confirm/{what}/results.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(what)
        subprocess.run(["git", "-C", str(tmp_path), "add", "-A"], check=True)
        date = f"2026-12-01T10:00:{i:02d}"
        subprocess.run(["git", "-C", str(tmp_path), *env, "commit", "-qm", commit, f"--date={date}"], check=True,
                       env={"GIT_COMMITTER_DATE": date, "PATH": "/usr/bin:/bin"})
    return tmp_path


def test_the_check_passes_a_plan_committed_first(tmp_path):
    root = _history(tmp_path, ["plan", "cell0", "cell1"])
    assert cells_before_plan(root, "configs/sweeps/confirm.yaml", "results/confirm") == []


def test_the_check_names_a_cell_committed_before_its_plan(tmp_path):
    root = _history(tmp_path, ["cell0", "plan", "cell1"])
    bad = cells_before_plan(root, "configs/sweeps/confirm.yaml", "results/confirm")
    assert len(bad) == 1 and "before the plan" in bad[0]


def test_the_check_names_a_cell_committed_with_its_plan(tmp_path):
    root = _history(tmp_path, ["plan+cell0", "cell1"])
    assert len(cells_before_plan(root, "configs/sweeps/confirm.yaml", "results/confirm")) == 1
