"""bench/offline_gpu.sh refuses, in one line of its own, a command given before the sweep it needs was started."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "offline_gpu.sh"


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_WORK=str(tmp_path / "work"),
               GPU_TREE=str(tmp_path / "tree"), GPU_FILES=str(tmp_path / "m"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, missing", [(("wait", "5"), "driver.pid is missing"),
                                           (("exec", "true"), "tree is missing")])
def test_refuses_before_start(tmp_path, args, missing):
    done = _run(tmp_path, *args)
    assert done.returncode == 2
    assert done.stdout.startswith("[offline_gpu] ") and missing in done.stdout and "start first" in done.stdout
    assert "No such file" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()  # nothing packed


def _listing(folder: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_mtime_ns) for p in folder.glob("*")) if folder.is_dir() else []


def test_unknown_grid_is_sweeps_one_line(tmp_path):
    packed = _listing(ROOT / ".carry" / "st")
    done = _run(tmp_path, "state", "configs/sweeps/nope.yaml")
    assert done.returncode != 0
    assert "configs/sweeps/nope.yaml not found" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert _listing(ROOT / ".carry" / "st") == packed  # a state packed before is left as it was


def test_usage_without_command(tmp_path):
    done = _run(tmp_path)
    assert done.returncode == 2
    assert "bash bench/offline_gpu.sh state GRID" in done.stdout
