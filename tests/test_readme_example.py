"""The README's GMTSTrainer example runs as written, on a tiny model: it cannot rot. It chooses its device and
precision itself (here a CPU: float32), and its model where the hub is out of reach (gmts_recipe.models.hub_or_offline;
tests/test_own_script.py runs it on that offline model, outside the clone)."""

from pathlib import Path

import pytest

from gmts_recipe import models
from tiny import save_tiny_model

README = Path(__file__).resolve().parent.parent / "README.md"
# What the tests change in the example, each a string the example must still contain: the sizes (two steps of short
# answers). Nothing of the device, the precision or the model: the example decides those on the machine it runs on.
SIZES = {"max_completion_length=256": "max_completion_length=8", "max_steps=40": "max_steps=2"}


def example(sizes: dict[str, str] = SIZES) -> str:
    """The python block of the README's section on using GMTSTrainer in one's own script, at `sizes`."""
    section = README.read_text().split("## Use GMTSTrainer in your own TRL script", 1)[1].split("\n## ", 1)[0]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    for old, new in sizes.items():
        assert old in code, f"the README example no longer contains {old!r}: update this test with it"
        code = code.replace(old, new)
    return code


def test_readme_example_trains_on_a_cpu_as_written(tmp_path, monkeypatch):
    model = save_tiny_model(tmp_path / "tiny")
    asked = []
    monkeypatch.setattr(models, "hub_or_offline", lambda hub_id: asked.append(hub_id) or model)  # the tiny model
    monkeypatch.chdir(tmp_path)  # output_dir lands here
    namespace: dict = {}
    exec(compile(example(), str(README), "exec"), namespace)  # noqa: S102 - the README's own example
    trainer = namespace["trainer"]
    assert asked == ["Qwen/Qwen2.5-1.5B-Instruct"]
    assert trainer.state.global_step == 2
    assert trainer.args.use_cpu and not trainer.args.bf16  # chosen by the example: no GPU here
    assert next(trainer.model.parameters()).dtype.is_floating_point and trainer.model.device.type == "cpu"
    assert trainer.args.token_selection == "gmts"
    assert trainer.args.lr_scheduler_type == "constant"  # as every config: TRL's default decays it linearly to 0
    assert trainer.lr_scheduler.get_last_lr() == [1e-4] * len(trainer.lr_scheduler.get_last_lr())  # after the last step
    logged = {k for row in trainer.state.log_history for k in row}
    assert {"selection/kept_fraction", "selection/overlap", "reward"} <= logged


def test_without_the_hub_the_example_takes_the_offline_model(monkeypatch, capsys):
    from huggingface_hub import constants

    monkeypatch.setattr(models, "resolve_model", lambda name: f"/cache/{name}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(models, "hub_reachable", lambda: True)
    assert models.hub_or_offline("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(models, "hub_reachable", lambda: False)
    assert models.hub_or_offline("Qwen/Qwen2.5-1.5B-Instruct") == "/cache/smollm2-135m-instruct"
    assert capsys.readouterr().out == ("[gmts] Qwen/Qwen2.5-1.5B-Instruct is out of reach (no Hugging Face Hub): using "
                                       "the offline smollm2-135m-instruct instead\n")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # offline mode: the local cache decides
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: "/hf/config.json")
    assert models.hub_or_offline("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    monkeypatch.setattr("huggingface_hub.try_to_load_from_cache", lambda repo, name: None)
    assert models.hub_or_offline("Qwen/Qwen2.5-1.5B-Instruct") == "/cache/smollm2-135m-instruct"
    assert "not in the local cache" in capsys.readouterr().out


@pytest.mark.parametrize("line", ["use_cpu=not torch.cuda.is_available()",
                                  "bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported()",
                                  'model = hub_or_offline("Qwen/Qwen2.5-1.5B-Instruct")'])
def test_the_example_decides_device_precision_and_model_itself(line):
    assert line in example()
