"""The README's own-script example runs as written from a folder outside the clone (where a user's script lives) on a
machine without a GPU or the hub: it takes the CPU, float32 and the offline model (gmts_recipe.models.hub_or_offline);
only its sizes are made small (two steps of short answers, each logged)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from selection import kept_count
from test_readme_example import example

ROOT = Path(__file__).resolve().parent.parent
# The example's last line trains; these print what a reader checks after it.
REPORT = """
steps = [row for row in trainer.state.log_history if "selection/kept_tokens" in row]
print(f"device {trainer.model.device.type}, bf16 {args.bf16}; kept tokens per step: "
      + ", ".join(f"{row['selection/kept_tokens']:.0f} of {row['selection/valid_tokens']:.0f}" for row in steps))
print("learning rates per step: " + ", ".join(f"{row['learning_rate']:g}" for row in steps))
"""


@pytest.mark.slow
def test_the_readme_example_trains_on_a_cpu_without_the_hub_outside_the_clone(tmp_path):
    script = tmp_path / "my_script.py"
    script.write_text(example({"max_completion_length=256": "max_completion_length=16",
                               "max_steps=40": "max_steps=2, logging_steps=1"}) + REPORT)  # a log row per step
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "HF_ENDPOINT": "http://127.0.0.1:9"}  # a hub that refuses at once: out of reach, on any machine
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    assert ("Qwen/Qwen2.5-1.5B-Instruct is out of reach (no Hugging Face Hub): using the offline "
            "smollm2-135m-instruct instead") in done.stdout
    rates = done.stdout.rsplit("learning rates per step: ", 1)[1].split("\n", 1)[0]
    assert rates == "0.0001, 0.0001", rates  # constant, as every config (TRL's default decays it linearly to 0)
    line = done.stdout.rsplit("device ", 1)[1].split("\nlearning rates", 1)[0].strip()
    assert line.startswith("cpu, bf16 False; kept tokens per step: ")
    steps = [s.split(" of ") for s in line.split("kept tokens per step: ", 1)[1].split(", ")]
    assert len(steps) == 2
    for kept, valid in steps:  # exactly ceil(0.2 x completion tokens) every step
        assert int(kept) == kept_count(int(valid), 0.2) and int(valid) > 0
    assert (tmp_path / "gmts-run").is_dir() and not (ROOT / "gmts-run").exists()  # beside the user's script


def test_the_guide_says_what_the_test_runs():
    guide = (ROOT / "docs" / "guides" / "own-script.md").read_text()
    for said in ("hub_or_offline", "use_cpu=not torch.cuda.is_available()", "tests/test_own_script.py",
                 "max_steps=2"):
        assert said in guide, said
