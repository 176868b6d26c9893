"""Evaluation: pass@1 over held-out tasks with k seeded samples per task, per-task scores kept.

The reward lives in rewards.py, the statistics (pass@1, paired deltas, noise floor, hack scan) in stats.py.
"""

from __future__ import annotations

from rewards import math_equal_reward
from stats import hack_scan, pass_at_1


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
