"""The speed options (gmts_recipe/speed_options.py) drive the recipe's lists from their fields' metadata, the configs
and trainers explain themselves in help(), and each trainer refuses a config it does not serve before the model
loads."""

from __future__ import annotations

import dataclasses
import pydoc
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import recipe
from gmts_recipe.speed_options import (SpeedOptions, eval_record_entries, evaluation_options, recorded_per_arm,
                                       unhashed_fields)

ROOT = Path(__file__).resolve().parent.parent
SPEED_FIELDS = [f.name for f in dataclasses.fields(SpeedOptions)]


def test_the_recipes_lists_are_the_fields_metadata():
    """Every speed field is either hashed or left out of the hash and recorded with each arm, never both or neither;
    sampling_noise changes which numbers are drawn, so it is hashed."""
    for name in SPEED_FIELDS:
        assert (name in recipe.NOT_HASHED) == (name in recipe.GENERATION_OPTIONS) == (name in unhashed_fields())
    assert "sampling_noise" not in recipe.NOT_HASHED and "sampling_noise" in SPEED_FIELDS
    assert set(recorded_per_arm()) == unhashed_fields() == set(SPEED_FIELDS) - {"sampling_noise"}


def test_a_new_unhashed_field_reaches_every_list(monkeypatch):
    """Adding a field with hashed=False is all it takes: the derived lists pick it up (no list kept by hand)."""
    from gmts_recipe import speed_options

    @dataclasses.dataclass
    class Extended(SpeedOptions):
        generation_new_lever: bool = speed_options._option(False, "A lever.", evaluation=True, eval_record="lever")

    monkeypatch.setattr(speed_options, "SpeedOptions", Extended)
    assert "generation_new_lever" in speed_options.unhashed_fields()
    assert "generation_new_lever" in speed_options.recorded_per_arm()
    assert speed_options.eval_record_entries(Extended(generation_new_lever=True)) == {"lever": True}
    assert speed_options.evaluation_options(Extended(generation_new_lever=True)).generation_new_lever is True


def test_eval_record_holds_what_changes_the_samples_only_away_from_its_default():
    assert eval_record_entries(SpeedOptions()) == {}  # records made before these fields existed keep their key
    assert eval_record_entries(SpeedOptions(generation_deferred_stop=True, generation_decode_loop="compiled_step",
                                            sampling_noise="counter", generation_grouped_attention=True,
                                            generation_decode_kernel="matmul")) == {
        "deferred_stop": True, "decode_loop": "compiled_step", "sampling_noise": "counter"}


def test_evaluation_gets_the_generation_fields_and_nothing_of_the_update():
    config = SpeedOptions(generation_grouped_attention=True, generation_decode_loop="compiled_step",
                          sampling_noise="counter", generation_merge_adapter=True, training_compile=True,
                          lora_autocast_inputs=False, deterministic_kernels=True)
    options = evaluation_options(config)
    assert options.generation_grouped_attention and options.generation_decode_loop == "compiled_step"
    assert options.sampling_noise == "counter"
    assert options.generation_merge_adapter is False and options.training_compile is False  # eval_fast decides those
    assert options.lora_autocast_inputs is True and options.deterministic_kernels is False


def test_help_texts_say_what_and_why_without_measurements():
    measured = re.compile(r"\d\s*(ms|s|GB|GiB|GPU-min|x)\b|H100|H200|\d\s*->\s*\d")
    for f in dataclasses.fields(SpeedOptions):
        assert not measured.search(f.metadata["help"]), f.name


def test_help_shows_every_field_and_names_the_rules():
    from gmts_recipe.fast_config import FastGMTSConfig
    from gmts_trainer import GMTSConfig, GMTSTrainer

    for config, speed in ((GMTSConfig, False), (FastGMTSConfig, True)):
        config_help = " ".join(pydoc.render_doc(config).split())
        ours = [f for f in dataclasses.fields(config) if f.name in SPEED_FIELDS or f.name.startswith(("selection_",
                                                                                                       "token_"))]
        assert len(ours) == (len(SPEED_FIELDS) + 5 if speed else 4)  # the entropy source is the fast trainer's
        for f in ours:
            assert " ".join(f.metadata["help"].split()) in config_help, f.name
    trainer_help = " ".join(pydoc.render_doc(GMTSTrainer).split())
    assert '"entropy" (ETS' in trainer_help
    for name in ("selection_ratio", "selection_scope", "token_selection"):
        assert name in trainer_help


def test_a_plain_grpo_config_is_refused_before_the_model_loads(tmp_path):
    from trl import GRPOConfig

    from gmts_trainer import GMTSTrainer

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    loaded = []

    class NoModel(str):  # a model id whose loading would be seen
        def __getattribute__(self, name):
            loaded.append(name)
            return super().__getattribute__(name)

    with pytest.raises(TypeError) as err:
        GMTSTrainer(model=NoModel("no/such-model"), reward_funcs=lambda **kw: [], args=args)
    assert "GMTSConfig" in str(err.value) and "\n" not in str(err.value)
    assert loaded == []
    with pytest.raises(TypeError, match="got NoneType"):  # TRL would build a GRPOConfig itself
        GMTSTrainer(model=NoModel("no/such-model"), reward_funcs=lambda **kw: [])


def test_each_trainer_refuses_a_config_it_does_not_serve_before_the_model_loads(tmp_path):
    """GMTSTrainer does not run the speed options: a FastGMTSConfig that sets one is refused, naming it, rather
    than trained without it; at their defaults it trains as a GMTSConfig. FastGMTSTrainer needs a FastGMTSConfig."""
    from gmts_recipe.fast_config import FastGMTSConfig
    from gmts_recipe.fast_trainer import FastGMTSTrainer
    from gmts_trainer import GMTSConfig, GMTSTrainer

    kw = dict(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], per_device_train_batch_size=8)
    with pytest.raises(TypeError, match=r"GMTSTrainer does not run generation_merge_adapter, sampling_noise "
                                        r"\(FastGMTSConfig's\)"):
        GMTSTrainer(model="no/such-model", reward_funcs=lambda **k: [],
                    args=FastGMTSConfig(**kw, generation_merge_adapter=True, sampling_noise="counter"))
    with pytest.raises(TypeError, match="FastGMTSTrainer needs args=FastGMTSConfig"):
        FastGMTSTrainer(model="no/such-model", reward_funcs=lambda **k: [], args=GMTSConfig(**kw))


def test_no_module_of_the_package_imports_the_trainer_but_its_fast_subclass():
    """gmts_recipe is what gmts_trainer is built from: importing every module of it but fast_trainer (which
    subclasses GMTSTrainer) loads no gmts_trainer."""
    modules = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "gmts_recipe").rglob("*.py")
                     if p.name not in ("__init__.py", "fast_trainer.py"))
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import importlib\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print('gmts_trainer' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("version", [1, 2])
def test_counter_noise_is_new_for_every_generation_of_a_step_and_for_evaluation(tmp_path, monkeypatch, version):
    """With gradient_accumulation_steps 2 and steps_per_generation 1, TRL generates twice per optimizer step, and an
    evaluation at the same step generates once more: each gets its own "counter" keys, noise.rollout_noise_keys of
    its (step, generation, training or evaluation) under the run's counter_noise_version. Under version 1 the step's
    first training generation keeps train_stream(step)'s (what the coupled runs recorded)."""
    from test_trainer import make_trainer
    from tiny import tiny_dataset

    from gmts_recipe import fast_trainer
    from gmts_recipe.generation.decode_loop import noise_keys, train_stream
    from gmts_recipe.generation.noise import rollout_noise_keys

    seen = []
    original = fast_trainer.with_decode_loop
    monkeypatch.setattr(fast_trainer, "with_decode_loop", lambda model, cache_len, recorder, regions, keys, fused:
                        seen.append((keys.clone(), model.training)) or original(model, cache_len, recorder, regions,
                                                                                keys, fused))
    trainer = make_trainer(tmp_path, sampling_noise="counter", generation_decode_loop="compiled_step",
                           steps_per_generation=1, eval_dataset=tiny_dataset(4), eval_strategy="steps", eval_steps=1,
                           per_device_eval_batch_size=4, counter_noise_version=version)
    trainer.train()
    train_keys = [k for k, training in seen if training]
    eval_keys = [k for k, training in seen if not training]
    assert len(train_keys) == 2 and eval_keys
    seed = trainer.args.seed
    assert torch.equal(train_keys[0], rollout_noise_keys(seed, 0, 4, version=version))
    assert torch.equal(train_keys[1], rollout_noise_keys(seed, 0, 4, generation=1, version=version))
    assert torch.equal(eval_keys[0], rollout_noise_keys(seed, 1, 4, train=False, version=version))
    if version == 1:
        assert torch.equal(train_keys[0], noise_keys(seed, train_stream(0), torch.arange(4)))
    distinct = {tuple(k.tolist()) for k in train_keys + eval_keys}
    assert len(distinct) == len(train_keys) + len(eval_keys)
