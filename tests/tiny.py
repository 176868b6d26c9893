"""A tiny random-init causal LM, a character tokenizer and a generated dataset: no download, seconds on CPU."""

from __future__ import annotations

import socket
import string

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

SPECIALS = ["<pad>", "<eos>"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    chars = list(string.digits + string.ascii_letters + " +-=?.,")
    vocab = {tok: i for i, tok in enumerate(SPECIALS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    fast.padding_side = "left"
    return fast


def tiny_model(tokenizer, seed: int = 0, hidden: int = 32, layers: int = 2) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(config)


def tiny_dataset(n: int = 16, seed: int = 0) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    ab = torch.randint(0, 10, (n, 2), generator=g).tolist()
    return Dataset.from_list([{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a, b in ab])


def digit_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 for an even-length completion: a random model gets reward variance, hence non-zero advantages."""
    return [float(len(c) % 2 == 0) for c in completions]


CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['content'] }}{% if not loop.last %} {% endif %}{% endfor %}"
    "{% if add_generation_prompt %}={% endif %}"
)


def save_tiny_model(folder) -> str:
    """The tiny model and tokenizer as a folder a recipe config can name, with a (minimal) chat template."""
    tok = tiny_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    model = tiny_model(tok)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)



TINY_CONFIG = """
model_name_or_path: {model}
use_peft: true
lora_r: 4
lora_alpha: 8
lora_target_modules: [q_proj, v_proj]
task: arithmetic
difficulty: 0
n_train: 8
n_heldout: 6
system_prompt: Solve
eval_samples: 2
eval_max_new_tokens: 6
eval_batch_size: 12
num_generations: 4
per_device_train_batch_size: 8
gradient_accumulation_steps: 1
max_completion_length: 6
max_steps: 2
learning_rate: 1.0e-3
use_cpu: true
save_steps: 1
save_total_limit: 1
logging_steps: 1
report_to: none
"""


def write_tiny_config(folder) -> "Path":
    """A recipe config for the tiny model (saved beside it): every stage of recipe.py in seconds on the CPU."""
    from pathlib import Path

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "tiny.yaml"
    config.write_text(TINY_CONFIG.format(model=save_tiny_model(folder / "model")))
    return config

def prepared_batch(vocab: int, groups: int = 4, group_size: int = 4, prompt: int = 5, completion: int = 12,
                   seed: int = 0, min_length: int = 2) -> dict:
    """What GRPOTrainer's `_generate_and_score_completions` returns (right-padded completions of min_length to
    `completion` tokens, group advantages, `group_index`), built by hand with random token ids below `vocab`: for
    calling `compute_loss` without generating first (the tests)."""
    g = torch.Generator().manual_seed(seed)
    rows = groups * group_size
    lengths = torch.randint(min_length, completion + 1, (rows,), generator=g)
    completion_mask = (torch.arange(completion).unsqueeze(0) < lengths.unsqueeze(1)).long()
    rewards = torch.randint(0, 2, (groups, group_size), generator=g).float()
    advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).flatten()
    return {
        "prompt_ids": torch.randint(2, vocab, (rows, prompt), generator=g),
        "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
        "completion_ids": torch.randint(2, vocab, (rows, completion), generator=g),
        "completion_mask": completion_mask,
        "advantages": advantages,
        "num_items_in_batch": completion_mask.sum(),
        "group_index": torch.arange(rows) // group_size,
    }


def free_port() -> str:
    """A free local port for torch.distributed.run: a fixed one collides with another test run on the same machine."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])
