"""Reward, evaluation and the statistics that decide whether a result is real.

- `math_equal_reward`: the RLVR reward (TRL signature), 1.0 when math-verify finds the final answer equal to the gold.
- `evaluate_pass_at_1`: pass@1 over held-out tasks with k seeded samples per task, per-task scores kept.
- `paired_delta`: mean(a) - mean(b) over the same tasks, with a paired bootstrap confidence interval.
- `noise_floor`: spread of the base model's pass@1 over sampling seeds.
- `hack_scan`: flags for length, shouting, repetition and answer-less output (flags, not verdicts).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
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
def generate_samples(model, tokenizer, prompts: list[list[dict]], k: int, seed: int, max_new_tokens: int,
                     temperature: float = 1.0, batch_size: int = 32, progress: bool = True) -> list[list[str]]:
    """k sampled completions per prompt, batched with left padding, seeded. Returns texts, one list per prompt."""
    import torch
    from tqdm.auto import tqdm

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    flat = [t for t in texts for _ in range(k)]
    out: list[str] = []
    device = next(model.parameters()).device
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in tqdm(range(0, len(flat), batch_size), desc=f"eval (seed {seed})", disable=not progress,
                              unit="batch"):
                batch = tokenizer(flat[start : start + batch_size], return_tensors="pt", padding=True,
                                  padding_side="left", add_special_tokens=False).to(device)  # (B, T), left-padded
                gen = model.generate(**batch, do_sample=True, temperature=temperature, top_p=1.0, top_k=0,
                                     max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id)
                out.extend(tokenizer.batch_decode(gen[:, batch["input_ids"].size(1) :], skip_special_tokens=True))
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
                       progress: bool = True) -> dict:
    """pass@1 with k samples per task. Returns {"seed", "k", "pass@1", "records", "hack_scan"}."""
    from data import system_prompt as resolve_prompt
    from data import to_prompt

    prompts = [to_prompt(t["question"], resolve_prompt(system_prompt)) for t in tasks]
    samples = generate_samples(model, tokenizer, prompts, k, seed, max_new_tokens, temperature, batch_size, progress)
    records = score_samples(samples, tasks)
    return {"seed": seed, "k": k, "pass@1": pass_at_1(records), "records": records,
            "hack_scan": hack_scan([s for outs in samples for s in outs])}


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
