"""decoding.py: transformers' deferred stop check, admitted on CUDA inside the block; same tokens per call."""

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList
from transformers.generation.utils import DeferredStopCheck, GenerationMixin

from gmts_recipe.generation import decoding
from gmts_recipe.speed_options import SpeedOptions
from tiny import tiny_model, tiny_tokenizer

CUDA, MPS, CPU = torch.device("cuda"), torch.device("mps"), torch.device("cpu")


class _Cache:
    def __init__(self, croppable: bool):
        self.is_croppable = croppable


def test_cuda_is_admitted_inside_the_block_only_and_restored_after_an_error():
    original = DeferredStopCheck.__dict__["is_supported"]
    assert not DeferredStopCheck.is_supported(CUDA, None, False, False)
    with decoding.deferred_stop_check():
        assert DeferredStopCheck.is_supported(CUDA, None, False, False)
        assert DeferredStopCheck.is_supported(MPS, None, False, False)  # transformers' own case, unchanged
        assert not DeferredStopCheck.is_supported(CPU, None, False, False)
    with pytest.raises(RuntimeError), decoding.deferred_stop_check():
        raise RuntimeError("generation failed")
    assert DeferredStopCheck.__dict__["is_supported"] is original
    assert not DeferredStopCheck.is_supported(CUDA, None, False, False)


@pytest.mark.parametrize("cache, returned, assistant, expected", [
    (None, False, False, True),
    (_Cache(croppable=False), False, False, True),   # the cache is dropped: nothing to undo in it
    (_Cache(croppable=False), True, False, False),   # handed back and cannot be cropped: the extra step would stay
    (_Cache(croppable=True), True, False, True),
    (None, False, True, False),                      # never for an assistant model (transformers' rule)
])
def test_transformers_conditions_hold_on_cuda(cache, returned, assistant, expected):
    with decoding.deferred_stop_check():
        assert DeferredStopCheck.is_supported(CUDA, cache, returned, assistant) is expected


class _EosAt(LogitsProcessor):
    """Every row samples EOS at decoding step `step` (0-based), whatever it sampled before: all rows stop early."""

    def __init__(self, eos: int, step: int):
        self.eos, self.step, self.calls = eos, step, 0

    def __call__(self, input_ids, scores):
        if self.calls == self.step:
            scores = torch.full_like(scores, -float("inf"))
            scores[:, self.eos] = 0.0
        self.calls += 1
        return scores


class _HostEvent:
    """torch has no CPU events; on the CPU copies are synchronous, so an event that is always complete is exact."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args):
        pass

    def synchronize(self):
        pass


def _sample(model, batch, eos: int, deferred: bool) -> tuple[torch.Tensor, int, torch.Tensor]:
    """(sequences, forward calls, the random state after the call) of one sampled generate."""
    calls = [0]
    hook = model.register_forward_pre_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    torch.manual_seed(3)
    try:
        with decoding.deferred_stop_check() if deferred else torch.no_grad():
            out = model.generate(**batch, do_sample=True, max_new_tokens=8, pad_token_id=0, eos_token_id=eos,
                                 logits_processor=LogitsProcessorList([_EosAt(eos, step=4)]))
    finally:
        hook.remove()
    return out, calls[0], torch.get_rng_state()


def test_the_deferred_loop_returns_the_same_tokens_and_draws_once_more_when_all_rows_stop_early(monkeypatch):
    """Run transformers' deferred loop itself (on the CPU with an always-complete event): the rows stop on EOS at step
    5 of 8, the deferred loop runs one forward more, cuts its token, and the random stream has moved by one draw."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, hidden=64).eval()
    batch = tok(["1+1=", "123+45="], return_tensors="pt", padding=True, padding_side="left")
    eos = tok.eos_token_id
    plain, plain_calls, plain_rng = _sample(model, batch, eos, deferred=False)
    monkeypatch.setattr(decoding, "DEVICES", ("cpu",))
    monkeypatch.setattr(torch, "Event", _HostEvent)
    deferred, deferred_calls, deferred_rng = _sample(model, batch, eos, deferred=True)
    assert torch.equal(deferred, plain) and plain.size(1) == batch["input_ids"].size(1) + 5
    assert deferred_calls == plain_calls + 1
    assert not torch.equal(deferred_rng, plain_rng)


def test_evaluation_and_training_generation_decode_inside_it(tmp_path, monkeypatch):
    from eval import generate_samples
    from test_trainer import generation_batch, make_trainer

    seen = []
    original = GenerationMixin._sample

    def spy(self, *args, **kwargs):
        seen.append(DeferredStopCheck.is_supported(CUDA, None, False, False))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(GenerationMixin, "_sample", spy)
    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    model = tiny_model(tok, hidden=64)
    prompts = [[{"role": "user", "content": c}] for c in ("1+1", "9")]
    generate_samples(model, tok, prompts, k=1, seed=5, max_new_tokens=3, progress=False, fast=True)
    generate_samples(model, tok, prompts, k=1, seed=5, max_new_tokens=3, progress=False, fast=True,
                     options=SpeedOptions(generation_deferred_stop=True))
    assert seen == [False, True]
    generation_batch(make_trainer(tmp_path, generation_deferred_stop=True))
    assert seen[2:] and all(seen[2:])
    assert not DeferredStopCheck.is_supported(CUDA, None, False, False)


def test_the_base_evaluation_key_has_it_only_when_on_and_results_record_it():
    """Off: the key of every base evaluation made before it existed. On: another key (it can move the random stream
    between evaluation batches). Not in the config hash: a speed option, recorded with each arm's generation options."""
    import recipe

    flags = ["--config", "configs/qwen.yaml", "--use_cpu", "true", "--bf16", "false"]
    off = recipe.parse([*flags, "--generation_deferred_stop", "false"])
    on = recipe.parse([*flags, "--generation_deferred_stop", "true"])
    assert off[1].generation_deferred_stop is False and on[1].generation_deferred_stop is True
    record_off = recipe.eval_record(off[0], off[2], off[1], [], "cuda")
    assert "deferred_stop" not in record_off
    assert recipe.eval_record(on[0], on[2], on[1], [], "cuda") == {**record_off, "deferred_stop": True}
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*on[:3]))
    assert "generation_deferred_stop" in recipe.GENERATION_OPTIONS


def evaluation_options(monkeypatch, parsed) -> dict:
    """The speed options (as a dict) the recipe's evaluation (Run._evaluate) passes to eval.evaluate_pass_at_1 under
    the parsed config (recipe.parse's result): how a speed switch is shown to reach every evaluation."""
    import dataclasses

    import eval as evaluation
    import recipe

    seen = {}
    monkeypatch.setattr(evaluation, "evaluate_pass_at_1", lambda *a, **kw: seen.update(kw) or {"pass@1": 0.0})
    run = recipe.Run.__new__(recipe.Run)
    run.recipe, run.train_args = parsed[0], parsed[1]
    run._evaluate(None, None, [], 0)
    return dataclasses.asdict(seen["options"])


def check_rounding_only_switch(monkeypatch, field: str) -> None:
    """A bool speed switch of the compiled decode step: parsed on from the command line (configs/qwen.yaml with the
    compiled step), out of the config hash, recorded with each arm's generation options, and passed to every
    evaluation in its options."""
    import recipe

    flags = ["--config", "configs/qwen.yaml", "--use_cpu", "true", "--bf16", "false", "--generation_decode_loop",
             "compiled_step"]
    off = recipe.parse(flags)
    on = recipe.parse([*flags, f"--{field}", "true"])
    assert getattr(on[1], field) and not getattr(off[1], field)
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*on[:3]))
    assert field in recipe.GENERATION_OPTIONS
    assert evaluation_options(monkeypatch, on)[field] is True


def test_the_decode_loop_keys_base_evaluations_only_when_on_and_reaches_every_evaluation(monkeypatch):
    """generation_decode_loop 'compiled_step' draws other random numbers than generate on CUDA: another base evaluation
    key when on (the old key when off), not in the config hash, recorded with the arm's generation options, and the
    recipe's evaluations decode through it too (Run._evaluate passes it to eval.evaluate_pass_at_1)."""
    import recipe

    flags = ["--config", "configs/qwen.yaml", "--use_cpu", "true", "--bf16", "false"]
    off = recipe.parse(flags)
    on = recipe.parse([*flags, "--generation_decode_loop", "compiled_step"])
    record_off = recipe.eval_record(off[0], off[2], off[1], [], "cuda")
    assert "decode_loop" not in record_off
    assert recipe.eval_record(on[0], on[2], on[1], [], "cuda") == {**record_off, "decode_loop": "compiled_step"}
    assert recipe.config_hash(recipe.config_record(*off[:3])) == recipe.config_hash(recipe.config_record(*on[:3]))
    assert "generation_decode_loop" in recipe.GENERATION_OPTIONS
    assert evaluation_options(monkeypatch, on)["generation_decode_loop"] == "compiled_step"
