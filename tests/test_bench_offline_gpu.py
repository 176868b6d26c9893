"""bench/offline_gpu.sh: a command given before anything was started is refused in one line of its own; `background`
runs a command detached, and `wait` packs what it wrote."""

import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "offline_gpu.sh"


def _run(tmp_path: Path, *args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_WORK=str(tmp_path / "work"),
               GPU_TREE=str(tmp_path / "tree"), GPU_FILES=str(tmp_path / "m"), GPU_COMPILE_CACHE=str(tmp_path / "ic"),
               GPU_SITE=str(tmp_path / "site"),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=60)


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


def test_background_runs_a_command_detached_and_wait_packs_what_it_wrote(tmp_path):
    """`background CMD` runs CMD in a copy of the tree, detached by setsid (the end of the command that started it
    does not stop it), with its pid recorded; a second start is refused while it runs; `wait` packs what
    it wrote under the work folder. Run from a small tree holding only the script, so the copy is small."""
    tree = tmp_path / "repo"
    (tree / "bench").mkdir(parents=True)
    (tree / "bench" / "offline_gpu.sh").write_text(SCRIPT.read_text())
    (tree / "marker.txt").write_text("the tree\n")
    work = tmp_path / "work"

    def script(*args: str) -> subprocess.CompletedProcess:
        return _run(tmp_path, *args, script=tree / "bench" / "offline_gpu.sh")

    (work / "grid" / "base-evals").mkdir(parents=True)  # carried in before the start: older than .started
    (work / "grid" / "base-evals" / "h.json").write_text("{}")
    started = script("background", "bash", "-c", f"sleep 2; cat marker.txt > {work}/copied.txt")
    assert started.returncode == 0, started.stdout + started.stderr
    pid = int((work / "driver.pid").read_text())
    deadline = time.monotonic() + 10
    while os.getsid(pid) != pid and time.monotonic() < deadline:  # the recorded pid becomes setsid's within moments
        time.sleep(0.05)
    assert os.getsid(pid) == pid  # CMD itself, detached
    again = script("background", "true")
    assert again.returncode == 2 and f"a command is running here already (pid {pid})" in again.stdout
    waited = script("wait", "30")
    assert waited.returncode == 0 and "[offline_gpu] ended after" in waited.stdout
    parts = b"".join(p.read_bytes() for p in sorted((tmp_path / "out" / "cur").glob("b.tar.gz.*")))
    with tarfile.open(fileobj=io.BytesIO(parts)) as packed:
        assert packed.extractfile("work/copied.txt").read() == b"the tree\n"
        # a sweep's base evaluations come back whatever their age: its cells' files name them, a merge reads them
        assert packed.extractfile("work/grid/base-evals/h.json").read() == b"{}"


def test_the_state_carries_each_cells_samples(tmp_path):
    """The sweep there verifies every cell it finds before it runs more, samples included: `state` packs them."""
    import lzma

    tree = tmp_path / "repo"
    (tree / "bench").mkdir(parents=True)
    (tree / "bench" / "offline_gpu.sh").write_text(SCRIPT.read_text())
    (tree / "configs" / "sweeps").mkdir(parents=True)
    (tree / "configs" / "sweeps" / "g.yaml").write_text("name: g\n")
    cell = tree / "results" / "g" / "v-lr0.1-s1"
    cell.mkdir(parents=True)
    (tree / "results" / "g" / "base-evals").mkdir()
    (cell / "results.json").write_text('{"base": {"eval_hash": "h"}}')
    (cell / "samples-ets-seed0-abc.jsonl.xz").write_bytes(b"xz")
    stub = tree / "gmts_recipe" / "sweep"
    stub.mkdir(parents=True)
    (tree / "gmts_recipe" / "__init__.py").write_text("")
    (stub / "__init__.py").write_text("")
    (stub / "grid.py").write_text("class SweepError(Exception): pass\n"
                                  "class G:\n    results_dir, name = 'results', 'g'\n"
                                  "def load_grid(path):\n    return G()\n")
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(["bash", "bench/offline_gpu.sh", "state", "configs/sweeps/g.yaml"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    packed = lzma.decompress(b"".join(p.read_bytes() for p in sorted((tree / ".carry" / "st").glob("st.tar.xz.*"))))
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        names = tar.getnames()
    assert "g/v-lr0.1-s1/results.json" in names and "g/v-lr0.1-s1/samples-ets-seed0-abc.jsonl.xz" in names


def test_a_wheel_carried_in_parts_is_joined_and_installed_with_the_others(tmp_path):
    """A wheel over one command's 64 MiB travels cut into NAME.whl.part.NN; `prepare` (here through
    `background`) joins the parts into whl/NAME.whl, removes them, and installs every wheel of whl/."""
    import zipfile

    tree = tmp_path / "repo"
    (tree / "bench").mkdir(parents=True)
    (tree / "bench" / "offline_gpu.sh").write_text(SCRIPT.read_text())
    wheel = tmp_path / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tinypkg/__init__.py", "VALUE = 7\n")
        z.writestr("tinypkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        z.writestr("tinypkg-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                   "Tag: py3-none-any\n")
        z.writestr("tinypkg-1.0.dist-info/RECORD", "")
    data, m = wheel.read_bytes(), tmp_path / "m"
    m.mkdir()
    half = len(data) // 2
    (m / f"{wheel.name}.part.00").write_bytes(data[:half])
    (m / f"{wheel.name}.part.01").write_bytes(data[half:])
    done = _run(tmp_path, "background", "true", script=tree / "bench" / "offline_gpu.sh")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (m / "whl" / wheel.name).read_bytes() == data and not list(m.glob("*.part.*"))
    assert (tmp_path / "site" / "tinypkg" / "__init__.py").read_text() == "VALUE = 7\n"


def test_the_script_documents_its_transfers_and_names_nothing_outside_the_repository():
    """What each transfer carries and how it is made is in the script's own header; every file it names there is the
    repository's."""
    import re

    text = SCRIPT.read_text()
    header = text.split("\nset -euo pipefail", 1)[0]
    assert "../" not in text
    absolute = set(re.findall(r"(?:^|[\s=(:])(/[a-z][\w.-]*)", text, re.M))  # the GPU machine's folders only
    assert absolute <= {"/root", "/tmp", "/dev", "/usr"}, absolute
    assert "bash bench/offline_gpu.sh carry GSM8K_DIR" in header
    for folder in (".carry/w", ".carry/qNN", ".carry/st"):
        assert f"#   {folder} " in header
    named = set(re.findall(r"\b(?:[\w.-]+/)+[\w.-]+\.(?:md|py|txt|sh)\b", header))
    assert named and all((ROOT / name).is_file() for name in named), named


def test_carry_without_gsm8k_is_one_line_and_changes_nothing(tmp_path):
    before = _listing(ROOT / ".carry" / "w")
    done = _run(tmp_path, "carry", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stdout.startswith("[offline_gpu] carry GSM8K_DIR: a folder with GSM8K's train.jsonl and test.jsonl")
    assert _listing(ROOT / ".carry" / "w") == before
