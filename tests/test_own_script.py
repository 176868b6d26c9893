"""examples/own_script_cpu.py, GMTSTrainer in one's own script on a CPU without the hub, runs as written from a
folder outside the clone (where a user's script lives), on the offline model the recipe resolves."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from selection import kept_count

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "own_script_cpu.py"


@pytest.mark.slow
def test_the_cpu_script_trains_two_steps_outside_the_clone(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "HF_HUB_OFFLINE": "1"}  # no hub: the model is the converted GGUF, the dataset generated
    done = subprocess.run([sys.executable, str(SCRIPT)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "trained 2 steps; kept tokens per step: " in done.stdout
    steps = [s.split(" of ") for s in done.stdout.rsplit("kept tokens per step: ", 1)[1].strip().split(", ")]
    assert len(steps) == 2
    for kept, valid in steps:  # exactly ceil(0.2 x completion tokens) every step
        assert int(kept) == kept_count(int(valid), 0.2) and int(valid) > 0
    assert (tmp_path / "gmts-run-cpu").is_dir()  # output_dir beside the user's script, not in the clone
    assert not (ROOT / "gmts-run-cpu").exists()


def test_the_guide_runs_the_file_it_shows():
    """docs/guides/own-script.md gives the command this test runs and names the settings a CPU needs."""
    guide = (ROOT / "docs" / "guides" / "own-script.md").read_text()
    assert "python examples/own_script_cpu.py" in guide
    code = SCRIPT.read_text()
    for setting in ('resolve_model("smollm2-135m-instruct")', "use_cpu=True, bf16=False", "max_steps=2"):
        assert setting in code and setting in guide, setting
