"""Reward, evaluation and the statistics that decide whether a result is real.

- `math_equal_reward`: the RLVR reward (TRL signature), 1.0 when math-verify finds the final answer equal to the gold.
- `evaluate_pass_at_1`: pass@1 over held-out tasks with k seeded samples per task, per-task scores kept.
- `paired_delta`: mean(a) - mean(b) over the same tasks, with a paired bootstrap confidence interval.
- `noise_floor`: spread of the base model's pass@1 over sampling seeds.
- `hack_scan`: flags for length, shouting, repetition and answer-less output (flags, not verdicts).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_TAIL_CHARS = 4000  # the final answer is at the end; bounding the input bounds the time
MAX_ANSWER_CHARS = 64  # a final answer longer than this is not a number the gold could equal
_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


def _text(completion: Any) -> str:
    """A completion as TRL passes it: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[-1], dict):
        content = completion[-1].get("content", "")
        return content if isinstance(content, str) else ""
    return ""


def _last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, min(len(text), i + MAX_ANSWER_CHARS + 2)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i + 1 : j]
    return None


def final_answer(text: str) -> str | None:
    """The model's final answer: the last \\boxed{...}, else the number after the last '####', else the last number."""
    text = text[-MAX_TAIL_CHARS:].replace("\u2212", "-")
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    if "####" in text:
        after = _NUMBER.search(text[text.rfind("####") :])
        if after:
            return after.group(0)
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def gold_answer(answer: str) -> str:
    """GSM8K's gold field ('... #### 72') or a bare number string."""
    return answer.rsplit("####", 1)[-1].strip() if "####" in answer else answer.strip()


def _normalize(ans: str) -> str:
    for token in ("\\$", "$", ",", "\\!"):  # \$ before $, or a stray backslash is left
        ans = ans.replace(token, "")
    return ans.strip().rstrip(".")


# What a final answer may contain before math-verify sees it: numbers, + - * /, fractions, brackets. No powers,
# factorials or sums, so sympy's work is bounded by the (short) length: math-verify's own timeouts use SIGALRM, which
# only the main thread may set, and a reward also runs in threads and worker processes.
_SAFE_ANSWER = re.compile(r"(?:\\[dt]?frac|\\cdot|\\times|\\div|\\left|\\right|\\!|\\,|\\%|[\d\s.+\-*/(){}%])*")
_TEXT_MACRO = re.compile(r"\\(?:text|mbox|mathrm)\{[^{}]*\}")


def answers_equal(gold: str, predicted: str | None) -> bool:
    """math-verify equality of the gold number and a predicted final answer (bounded time, see _SAFE_ANSWER)."""
    if predicted is None:
        return False
    p = _normalize(_TEXT_MACRO.sub("", predicted))
    if not p or len(p) > MAX_ANSWER_CHARS or not _SAFE_ANSWER.fullmatch(p):
        return False
    from math_verify import parse, verify

    limit = 2 if threading.current_thread() is threading.main_thread() else None
    gold_parsed = parse(_normalize(gold), parsing_timeout=limit)
    pred_parsed = parse(f"${p}$" if "\\" in p else p, parsing_timeout=limit)
    return bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=limit))


def math_equal_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the completion's final answer equals the gold number (math-verify), else 0.0. Never raises."""
    rewards = []
    for completion, gold in zip(completions, answer, strict=True):
        try:
            rewards.append(float(answers_equal(gold_answer(str(gold)), final_answer(_text(completion)))))
        except Exception:  # noqa: BLE001 - a reward must never stop training; garbage scores 0
            rewards.append(0.0)
    return rewards


# ---------------------------------------------------------------------------- evaluation
@dataclass(frozen=True)
class Sampling:
    """The sampler evaluation uses: the training sampler's fields (TRL builds its GenerationConfig from the same
    names), set explicitly, so that a checkpoint's `generation_config.json` (a `repetition_penalty`, a `top_k`) can
    never apply at evaluation only. Temperature is the recipe's `eval_temperature` (the configs set it to training's)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k filter, as in TRL's GRPOConfig (transformers' own default would be 50)
    min_p: float | None = None
    repetition_penalty: float = 1.0


STATIC_CACHE_BUCKET = 256  # static KV cache length granularity: one compiled decoder per bucket


def _generation_config(model, tokenizer, sampling: Sampling, max_new_tokens: int, static_cache: bool,
                       compile_decoding: bool, cache_len: int):
    """A GenerationConfig with every sampling field set; nothing is left for the checkpoint's config to fill."""
    from transformers import GenerationConfig

    own = getattr(model, "generation_config", None)
    eos = getattr(own, "eos_token_id", None)
    eos = tokenizer.eos_token_id if eos is None else eos
    config = GenerationConfig(
        do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
        min_p=sampling.min_p, repetition_penalty=sampling.repetition_penalty, typical_p=1.0, epsilon_cutoff=0.0,
        eta_cutoff=0.0, no_repeat_ngram_size=0, num_beams=1, max_new_tokens=max_new_tokens, min_new_tokens=0,
        eos_token_id=eos, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        disable_compile=not compile_decoding,
    )
    if static_cache:
        config.cache_implementation = "static"
        config.max_cache_len = cache_len
    return config


@contextlib.contextmanager
def _clean_generation_defaults(model):
    """`generate` fills every field left None from the model's own generation_config (transformers 5): swap in an
    empty one for the duration, so only what `_generation_config` sets applies."""
    from transformers import GenerationConfig

    owner = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved = getattr(owner, "generation_config", None)
    owner.generation_config = GenerationConfig()
    try:
        yield
    finally:
        owner.generation_config = saved


def generate_samples(model, tokenizer, prompts: list[list[dict]], k: int, seed: int, max_new_tokens: int,
                     temperature: float = 1.0, batch_size: int = 32, progress: bool = True,
                     sampling: Sampling | None = None, fast: bool = False) -> list[list[str]]:
    """k sampled completions per prompt, seeded. Returns texts, one list per prompt (in the order given).

    Samples are generated longest prompt first (less left padding per batch) and put back in order. `fast`: the LoRA
    adapter folded into the weights (bit-exact restore after), a static KV cache (a growing cache copies itself every
    token step), and on a GPU compiled decoding with CUDA graphs; batches are then padded to one size so the compiled
    decoder is reused. The first fast call compiles (about a minute for a 1.5B model); the sampler is the same.
    """
    import torch
    from tqdm.auto import tqdm

    from gmts_trainer import merged_lora, without_input_grad_hooks

    sampling = sampling or Sampling(temperature=temperature)
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    flat = [i for i in range(len(texts)) for _ in range(k)]  # prompt index of each sample
    order = sorted(range(len(flat)), key=lambda j: -lengths[flat[j]])  # longest prompts first
    device = next(model.parameters()).device
    compile_decoding = fast and device.type == "cuda"
    cache_len = -(-(max(lengths, default=0) + max_new_tokens) // STATIC_CACHE_BUCKET) * STATIC_CACHE_BUCKET
    config = _generation_config(model, tokenizer, sampling, max_new_tokens, fast, compile_decoding, cache_len)
    batch_size = -(-len(flat) // -(-len(flat) // batch_size)) if flat else batch_size  # even batches: little padding
    out: list[str | None] = [None] * len(flat)
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(_clean_generation_defaults(model))
            if fast:
                stack.enter_context(merged_lora(model))
                stack.enter_context(without_input_grad_hooks(model))
            bar = stack.enter_context(tqdm(total=len(flat), desc=f"eval (seed {seed})", unit="sample",
                                           disable=not progress))
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                rows = chunk + chunk[-1:] * (batch_size - len(chunk) if compile_decoding else 0)  # one shape
                batch = tokenizer([texts[flat[j]] for j in rows], return_tensors="pt", padding=True,
                                  padding_side="left", add_special_tokens=False).to(device)  # (B, P), left-padded
                gen = model.generate(**batch, generation_config=config)  # (B, P + new)
                decoded = tokenizer.batch_decode(gen[: len(chunk), batch["input_ids"].size(1) :],
                                                 skip_special_tokens=True)
                for j, text in zip(chunk, decoded):
                    out[j] = text
                bar.update(len(chunk))
    finally:
        model.train(was_training)
    return [out[i * k : (i + 1) * k] for i in range(len(prompts))]


def score_samples(samples: list[list[str]], tasks: list[dict]) -> list[dict]:
    """Per-task records: the task's index and hash, one 0/1 score per sample, and the sample lengths."""
    from data import task_hash

    records = []
    for task, outs in zip(tasks, samples, strict=True):
        scores = math_equal_reward(outs, [task["answer"]] * len(outs))
        records.append({"task": task.get("index"), "hash": task_hash(task["question"]), "scores": scores,
                        "lengths": [len(o) for o in outs]})
    return records


def pass_at_1(records: list[dict]) -> float:
    """Mean over tasks of the per-task mean score (each task weighs the same)."""
    return float(np.mean([np.mean(r["scores"]) for r in records])) if records else 0.0


def evaluate_pass_at_1(model, tokenizer, tasks: list[dict], k: int = 4, seed: int = 0, max_new_tokens: int = 256,
                       temperature: float = 1.0, batch_size: int = 32, system_prompt: str | None = None,
                       progress: bool = True, sampling: Sampling | None = None, fast: bool = False) -> dict:
    """pass@1 with k samples per task. Returns {"seed", "k", "pass@1", "records", "hack_scan", "seconds"}."""
    import time

    from data import system_prompt as resolve_prompt
    from data import to_prompt

    t0 = time.perf_counter()
    prompts = [to_prompt(t["question"], resolve_prompt(system_prompt)) for t in tasks]
    samples = generate_samples(model, tokenizer, prompts, k, seed, max_new_tokens, temperature, batch_size, progress,
                               sampling=sampling, fast=fast)
    t1 = time.perf_counter()
    records = score_samples(samples, tasks)
    return {"seed": seed, "k": k, "pass@1": pass_at_1(records), "records": records,
            "hack_scan": hack_scan([s for outs in samples for s in outs]),
            "seconds": {"generation": t1 - t0, "scoring": time.perf_counter() - t1}}


# ---------------------------------------------------------------------------- statistics
def paired_delta(a: Sequence[float], b: Sequence[float], confidence: float = 0.95, seed: int = 0) -> dict:
    """delta = mean(a) - mean(b) over per-task scores of two arms on the same tasks (same order), with a paired
    bootstrap percentile interval (scipy, 10,000 resamples of tasks).

    Why a bootstrap: per-task scores are bounded and discrete (multiples of 1/k), often piled at 0 and 1, so a
    t-interval's normality assumption is weakest exactly where arms differ little; resampling whole tasks keeps the
    pairing. It is seeded, hence reproducible. Identical arms give the degenerate interval [0, 0].
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"paired_delta needs two equal-length score lists of 2+ tasks, got {x.shape} and {y.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} must be in (0, 1)")
    d = x - y
    delta = float(d.mean())
    if np.all(d == d[0]):  # no spread: every resample has the same mean
        return {"delta": delta, "low": delta, "high": delta, "n": int(d.size)}
    from scipy.stats import bootstrap

    res = bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=10_000, method="percentile",
                    rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return {"delta": delta, "low": float(ci.low), "high": float(ci.high), "n": int(d.size)}


def noise_floor(pass_at_1_scores: Sequence[float]) -> float:
    """Spread (max - min) of the base model's pass@1 across sampling seeds: a delta inside it is not a result."""
    s = list(pass_at_1_scores)
    return float(max(s) - min(s)) if s else 0.0


def _repetition(text: str, ngram: int) -> float:
    """Share of a completion's word n-grams that repeat an earlier one (0 for a text with no repeats)."""
    words = text.split()
    grams = [tuple(words[i : i + ngram]) for i in range(len(words) - ngram + 1)]
    return 1 - len(set(grams)) / len(grams) if grams else 0.0


def hack_scan(completions: Sequence[str], ngram: int = 4) -> dict:
    """Reward-hacking flags over completions: length, uppercase share, repeated n-grams within a completion, empty or
    answer-less completions."""
    texts = [c if isinstance(c, str) else "" for c in completions]
    n = max(len(texts), 1)
    letters = sum(ch.isalpha() for t in texts for ch in t)
    upper = sum(ch.isupper() for t in texts for ch in t)
    repetition = sum(_repetition(t, ngram) for t in texts) / n
    stats = {
        "mean_length": sum(len(t) for t in texts) / n,
        "upper_fraction": upper / letters if letters else 0.0,
        "repetition": repetition,
        "empty_fraction": sum(not t.strip() for t in texts) / n,
        "answerless_fraction": sum(final_answer(t) is None for t in texts) / n,
    }
    stats["flags"] = [name for name, bad in (
        ("uppercase", stats["upper_fraction"] > 0.5),
        ("repetition", stats["repetition"] > 0.5),
        ("empty", stats["empty_fraction"] > 0.1),
        ("answerless", stats["answerless_fraction"] > 0.5),
    ) if bad]
    return stats
