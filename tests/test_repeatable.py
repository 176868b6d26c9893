"""A run repeats: an evaluation is a function of (weights, tasks, seed) and an arm of (seed, config), whatever ran
before in the process, with sampling_noise 'counter' (decode_loop.counter_noise) on the compiled step's path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_recipe import run, tiny_config  # noqa: F401 - the fixture
from test_decode_loop import sharpen
from tiny import CHAT_TEMPLATE, tiny_model, tiny_tokenizer

from gmts_recipe.verify.file import load
from gmts_recipe.speed_options import SpeedOptions

import eval as evaluation

PROMPTS = [[{"role": "user", "content": q}] for q in ("1+2=", "34+5=", "7+8+9+10=", "9=", "6+6=", "12+30+4=")]
NOT_REPEATED = ("runtime", "per_second", "time", "seconds")  # wall-clock fields of a training log


def _tiny():
    tok = tiny_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    return tok, sharpen(tiny_model(tok).eval())


def _samples(model, tok, batch_size: int, noise: str = "counter") -> list[list[str]]:
    return evaluation.generate_samples(model, tok, PROMPTS, k=3, seed=7, max_new_tokens=8, batch_size=batch_size,
                                       progress=False, fast=True,
                                       options=SpeedOptions(generation_decode_loop="compiled_step",
                                                            sampling_noise=noise))


def test_an_evaluation_repeats_after_other_draws_and_in_other_batches():
    """The same evaluation twice in one process, with other random draws and a training step between them (an
    optimizer step on a copy, as an arm before it would), gives the same samples; so do batches of another size
    (each sample's noise is keyed by its prompt and index, not its batch)."""
    tok, model = _tiny()
    first = _samples(model, tok, batch_size=18)
    other = tiny_model(tok)
    loss = other(**tok(["1+1=2"], return_tensors="pt"), labels=tok(["1+1=2"], return_tensors="pt")["input_ids"]).loss
    loss.backward()
    torch.optim.AdamW(other.parameters()).step()
    torch.rand(4096)
    assert _samples(model, tok, batch_size=18) == first
    assert _samples(model, tok, batch_size=6) == first
    assert any(len(set(outs)) > 1 for outs in first)  # the samples of a prompt differ: the noise is per sample


def test_the_stream_noise_depends_on_the_batches():
    """For contrast: with sampling_noise 'stream' the same samples need the same batches (other batches draw other
    numbers), which is why the counter noise exists."""
    tok, model = _tiny()
    assert _samples(model, tok, 18, "stream") != _samples(model, tok, 6, "stream")


def _repeatable_fields(entry: dict) -> dict:
    log = [{k: v for k, v in row.items() if not any(w in k for w in NOT_REPEATED)} for row in entry["train_log"]]
    return {"train_log": log, "records": entry["eval"]["records"], "rollout_digests": entry["rollout_digests"]}


def test_an_arm_alone_equals_the_arm_trained_after_another(tiny_config, tmp_path):  # noqa: F811 - the fixture
    """GMTS trained alone in a process and GMTS trained after ETS in another give the same training log, rollouts
    and evaluation records: an arm depends on its seed and config only."""
    flags = ["--config", tiny_config, "--sampling_noise", "counter", "--generation_decode_loop", "compiled_step",
             "--eval_fast", "true"]
    assert run("--arm", "gmts", "--results_dir", tmp_path / "alone", *flags) == 0
    assert run("--arm", "ets,gmts", "--results_dir", tmp_path / "after", *flags) == 0
    alone, after = (load(tmp_path / d / "tiny" / "results.json") for d in ("alone", "after"))  # records rebuilt
    assert _repeatable_fields(alone["arms"]["gmts"]) == _repeatable_fields(after["arms"]["gmts"])
    digests = alone["arms"]["gmts"]["rollout_digests"]
    assert sorted(digests) == ["0", "1"] and all(len(d) == 8 for d in digests.values())
    # the arms of one seed drew the same numbers at step 1 from equal weights: identical rollouts
    assert after["arms"]["ets"]["rollout_digests"]["0"] == digests["0"]


@pytest.mark.parametrize("noise", ["bogus"])
def test_an_unknown_sampling_noise_is_one_line(tiny_config, tmp_path, capsys, noise):  # noqa: F811 - the fixture
    assert run("--arm", "gmts", "--config", tiny_config, "--results_dir", tmp_path, "--sampling_noise", noise) == 2
    err = capsys.readouterr().err.strip()
    assert "sampling_noise" in err and "\n" not in err


def _rollouts(trainer, step: int, history: int) -> list[list[int]]:
    """The trainer's generation at training step `step` after `history` other draws from the global generator."""
    from test_trainer import generation_batch

    trainer.state.global_step = step
    torch.manual_seed(history)
    torch.rand(history + 1)
    out = generation_batch(trainer, seed=history)  # reseeds the global generator: another history again
    return out["completion_ids"].tolist()


@pytest.mark.parametrize("loop", ["transformers", "compiled_step"])
def test_a_step_rollouts_are_a_function_of_seed_and_step_in_both_decode_paths(tmp_path, loop):
    """sampling_noise 'counter': equal weights give identical rollouts at one step whatever the generator's state
    (two arms of one seed at step t), other rollouts at another step; 'stream' follows the generator's state."""
    from test_trainer import make_trainer

    counter = make_trainer(tmp_path, sampling_noise="counter", generation_decode_loop=loop)
    assert _rollouts(counter, 3, 0) == _rollouts(counter, 3, 1)
    assert _rollouts(counter, 3, 0) != _rollouts(counter, 4, 0)
    stream = make_trainer(tmp_path, generation_decode_loop=loop)
    assert _rollouts(stream, 3, 0) != _rollouts(stream, 3, 1)


@pytest.mark.slow
def test_a_warm_workers_second_cell_equals_the_cell_in_a_fresh_process(tiny_config, tmp_path):  # noqa: F811
    """sweep.py --warm_workers: recipe.py run again in one process (gmts_recipe.worker), a cell trained after another
    cell (another seed, arm and experiment) gives the records it gives in a fresh process."""
    import os
    import subprocess
    import sys

    from gmts_recipe.worker import WarmWorker

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    flags = ["--config", str(tiny_config), "--sampling_noise", "counter", "--generation_decode_loop", "compiled_step",
             "--eval_fast", "true", "--base_eval_seeds", "0", "1"]
    cell = ["--arm", "gmts", "--experiment", "cell", "--seed", "18"]
    fresh = subprocess.run([sys.executable, "recipe.py", *cell, "--results_dir", str(tmp_path / "fresh"), *flags],
                           cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    worker = WarmWorker(env, cwd=root)
    try:
        first = ["--arm", "ets", "--experiment", "first", "--seed", "17"]
        for argv in (first, cell):
            assert worker.run(["recipe.py", *argv, "--results_dir", str(tmp_path / "warm"), *flags],
                              tmp_path / "warm.log") == 0, (tmp_path / "warm.log").read_text()[-3000:]
    finally:
        worker.close()
    assert worker.started == 1 and (tmp_path / "warm.log").read_text().count("held-out tasks, config") == 2
    a, b = (load(tmp_path / d / "cell" / "results.json") for d in ("fresh", "warm"))  # records rebuilt
    assert _repeatable_fields(a["arms"]["gmts"]) == _repeatable_fields(b["arms"]["gmts"])
    assert a["base"]["evals"][0]["records"] == b["base"]["evals"][0]["records"]
