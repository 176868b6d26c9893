"""`python recipe.py --help`: the fields a user sets, grouped, each with the value the active config gives it (the
--config given, else the default config, with the command line's --FIELD VALUE over it), in a screen or two and
without importing a library.

argparse's own help lists all ~400 fields of RecipeArgs, FastGMTSConfig (TRL's GRPOConfig and transformers'
TrainingArguments) and TRL's ModelConfig under one heading with the dataclasses' defaults, which are not what a run
uses (TrainingArguments' learning rate 1e-06 where every config sets its own); it stays at `--help-all`. The full
reference of this repository's fields is docs/config.md, generated from the dataclasses (config_reference.py).
"""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

from gmts_recipe.speed_options import SpeedOptions

USAGE = "usage: python recipe.py [--config FILE] [--arm ARM] [--rules FILE.py] [--FIELD VALUE ...]"
# The groups, in the order a user meets them; a field of the config that no group names is listed under "other".
# A note for a field of a library class (TRL's GRPOConfig, ModelConfig: not importable without the libraries); the
# recipe's own fields (RecipeArgs, SpeedOptions) bring their help from their metadata.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run", ("arm", "experiment", "results_dir", "resume", "overwrite", "keep_adapter", "keep_checkpoints",
             "save_minutes", "figures")),
    ("task and data", ("task", "gsm8k_path", "math_path", "difficulty", "n_train", "n_heldout", "task_seed",
                       "system_prompt")),
    ("evaluation", ("eval_samples", "eval_max_new_tokens", "eval_temperature", "eval_batch_size", "eval_fast",
                    "base_eval_seeds", "eval_ocw")),
    ("model (TRL's ModelConfig)", ("model_name_or_path", "dtype", "use_peft", "lora_r", "lora_alpha", "lora_dropout",
                                   "lora_target_modules")),
    ("training (TRL's GRPOConfig)", ("learning_rate", "lr_scheduler_type", "max_steps", "num_generations",
                                     "per_device_train_batch_size", "gradient_accumulation_steps",
                                     "max_completion_length", "temperature", "beta", "loss_type", "num_iterations",
                                     "seed", "bf16", "gradient_checkpointing", "use_cpu", "logging_steps",
                                     "save_steps", "report_to")),
    ("token selection (GMTSConfig; token_selection is set by --arm)", ("selection_ratio", "selection_scope",
                                                                       "selection_normalizer")),
    ("speed: how a run executes, never what it selects (SpeedOptions)", (
        *(f.name for f in dataclasses.fields(SpeedOptions)), "cudnn_attention", "gpu_memory_cap_gib")),
)
LIBRARY_NOTES = {
    "model_name_or_path": "the model: a hub id, a folder, a .gguf file or an offline name",
    "dtype": "weights' dtype (a CPU run uses float32)", "use_peft": "train a LoRA adapter, not every weight",
    "lora_r": "LoRA rank", "lora_alpha": "LoRA scale numerator", "lora_dropout": "LoRA dropout",
    "lora_target_modules": "the layers LoRA adapts",
    "learning_rate": "every arm's (the per-arm *_learning_rate fields override it)",
    "lr_scheduler_type": "the learning rate's schedule (TRL's default: linear decay to 0)",
    "max_steps": "optimizer steps per arm", "num_generations": "rollouts per prompt (GRPO's group)",
    "per_device_train_batch_size": "rollouts per microbatch", "gradient_accumulation_steps": "microbatches per step",
    "max_completion_length": "a rollout's token budget", "temperature": "rollout sampling temperature",
    "beta": "KL coefficient (0: none; omega is the advantage)", "loss_type": "loss aggregation (dapo: token level)",
    "num_iterations": "updates per generation batch", "seed": "training seed", "bf16": "bf16 autocast (GPU)",
    "gradient_checkpointing": "recompute activations: memory for time", "use_cpu": "run on the CPU",
    "logging_steps": "log every N steps", "save_steps": "checkpoint every N steps", "report_to": "loggers (none)",
    "selection_ratio": "share of completion tokens kept (exactly ceil(ratio x tokens))",
    "selection_scope": "where the threshold is taken: batch, microbatch or group",
    "selection_normalizer": "loss denominator: all_tokens (TRL's) or kept_tokens",
}
LIBRARY_DEFAULT = "(library default)"  # a TRL/transformers field the config leaves unset: its value is the library's
WIDTH = 118
NOTE_COLUMN = 34


def _own_fields(recipe_args: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for cls in (recipe_args, SpeedOptions) for f in dataclasses.fields(cls) if f.init}


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value))
    return "unset" if value is None else str(value)


def _note(name: str, own: dict[str, dataclasses.Field]) -> str:
    """A field's note: its help (the recipe's fields; _row cuts it to the line), else LIBRARY_NOTES."""
    if name in own:
        return " ".join(own[name].metadata.get("help", "").split())
    return LIBRARY_NOTES.get(name, "")


def active_values(config: dict, cli: dict[str, str]) -> dict[str, str]:
    """Each field's value as a run with this config file and command line starts from: the command line's, else the
    file's (the --config and --rules options are not fields)."""
    return {k: _shown(v) for k, v in {**config, **cli}.items() if k not in ("config", "rules", "help", "help-all")}


def help_text(config_path: Path, config: dict, cli: dict[str, str], default_config: str, recipe_args: type) -> str:
    """The whole of --help: usage, where the values come from, the groups, and where the rest is documented.
    `recipe_args`: recipe_config.RecipeArgs, passed in so that this module imports nothing of recipe_config."""
    own = _own_fields(recipe_args)
    values = active_values(config, cli)
    where = ("the command line's over " if cli.keys() - {"config", "help", "help-all"} else "") + f"{config_path}'s"
    lines = [USAGE, "", *textwrap.wrap(
        f"Every field of this repository with its type, default and full help: docs/config.md (all ~400 with TRL's "
        f"and transformers' own: --help-all). --config FILE: a YAML file of 'field: value' lines (default "
        f"{default_config}; the others are in configs/); a --FIELD VALUE on the command line overrides the file's "
        f"value; --rules FILE.py: your own selection rules. The values below are {where} (--config FILE --help shows "
        f"another's); 'default' marks a field the config leaves at the recipe's default.", WIDTH), ""]
    listed: set[str] = set()
    for title, names in GROUPS:
        lines.append(f"{title}:")
        for name in names:
            listed.add(name)
            if name in values:
                value = values[name]
            elif name in own:
                value = f"{_shown(_default(own[name]))} (default)"
            else:
                value = LIBRARY_DEFAULT
            lines.append(_row(name, value, _note(name, own)))
        lines.append("")
    rest = [name for name in values if name not in listed]
    if rest:
        lines.append("other fields the config sets:")
        lines += [_row(name, values[name], _note(name, own)) for name in rest]
        lines.append("")
    from gmts_recipe.arms import learning_rate_fields

    lines += textwrap.wrap(f"Per-arm learning rates (unset: learning_rate): "
                           f"{', '.join(f'--{f}' for f in learning_rate_fields().values())}.", WIDTH)
    return "\n".join(lines)


def _row(name: str, value: str, note: str) -> str:
    head = f"  --{name} {value}"
    if len(head) >= NOTE_COLUMN:
        head += "  "
    room = WIDTH - max(len(head), NOTE_COLUMN)
    if len(note) > room:  # cut at a word, the rest is in docs/config.md
        note = note[: max(room - 4, 0)].rsplit(" ", 1)[0].rstrip(",;:(") + " ..."
    return (head.ljust(NOTE_COLUMN) + note).rstrip()
