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

One run directory per config name, runs/<run_name>/ (git-ignored; the committed reference results live in results/, so
a user's run never lands on them), holds results.json (all arms merged as they finish), per-arm logs (report_to's
loggers: one run per arm, TensorBoard's events in arm-<arm>/tensorboard) and checkpoints (an arm's removed once its
results are recorded, unless --keep_checkpoints; its final adapter kept in arm-<arm>/adapter, unless --keep_adapter
false), curves.png, and each arm's samples file (samples-<arm>-seed<k>-<sha>.jsonl.xz: every completion with the score
it got, its SHA-256 recorded in results.json, so check.py re-scores it; the base evaluations' samples are stored once,
beside the base-eval cache). Task math evaluates the same arms on a second held-out set, Minerva OCW, in a run
directory beside it, runs/<run_name>-ocw/, that check.py verifies as any run's. `--resume` keeps finished arms and
resumes an unfinished arm from its last checkpoint; without it a rerun that would replace a finished arm or an
unfinished arm's checkpoints is refused (`--overwrite` replaces them). A results.json written by a different
configuration is never mixed in: the config hash is checked. The hash covers what the config file and the command line
set (as the config classes parsed it, CPU fallback included) and the recipe's own fields away from their defaults (see
config_record): a newer library that adds a field leaves it unchanged, and the library versions are recorded beside it
(results.json "versions").

Concurrency: results.json is written under a file lock (re-read, merge this arm, write atomically), so processes that
train different arms of one experiment at once (one per GPU: `CUDA_VISIBLE_DEVICES=0 ... --arm ets` and `=1 ... --arm
gmts`) never lose each other's arm. The base evaluations are cached by an evaluation hash (model, held-out tasks,
evaluation settings, base seeds, device kind; not the training seed or learning rate) in
<results_dir>/base-evals/<hash>.json, so every cell of a sweep reuses them; computing them holds that file's lock, so a
second process waits for the first instead of evaluating twice. A sweep runner calls `run_experiment(argv)`.

Under `accelerate launch` (data parallel), every process trains; the evaluations run on the main process only, which
alone writes results.json, the base-eval cache, logs and curves, while the others wait at a barrier.

Steps: 1. data and decontamination; 2. base evals x3 (skipped when the run directory already has them for this
config); 3. train the arm (FastGMTSTrainer; TRL applies `seed` before building the LoRA adapter, so arms share data
order and init); 4. evaluate it on the same tasks with the first base seed; 5. write results.json (verify.file.seal).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import gc
import json
import shutil
import sys
import time
import traceback
from pathlib import Path

from eval import Sampling, compile_seconds, evaluate_with_config, sampling  # noqa: F401
from gmts_recipe.arms import arm_named, learning_rate_fields
from gmts_recipe.data import system_prompt, to_prompt
from gmts_recipe.gpu_memory import peak_memory, release_vllm_engine
from gmts_recipe.models import ModelError, resolve_model
from gmts_recipe.plots import plot_run
from gmts_recipe.sequential.failures import report as report_failure  # an arm that raised, for a sweep's runner
from gmts_recipe.user_rules import RulesError, take_rules
# The configuration and what a run sets up around it live in the package (eval.py's command reads them too); their
# names stay importable from here (recipe.parse, recipe.RecipeError, ...) for the bench scripts, the tests and users.
from gmts_recipe.recipe_config import (  # noqa: F401
    DDP_TIMEOUT_S, DEFAULT_CONFIG, EVAL_FIELDS, FIELD_LIBRARIES, GENERATION_OPTIONS, LOADED_MODEL_FIELDS, NOT_HASHED,
    PEFT_FIELDS, POSITIVE_COUNTS, RECIPE_COUNTS, RENAMED, SAMPLING_FIELDS, RecipeArgs, RecipeError, all_arms,
    arm_names, check_counts, check_hub, check_model, check_model_fields, check_recipe_values, check_training_length,
    cli_values, field_names, hub_reachable, known_field_names, parse, trained_arms)
from gmts_recipe.records import (ResultsError, config_hash, current_evaluations, recorded_reward_version, write_json,
                                 write_results)
from gmts_recipe.verify.file import load as load_results, seal
from gmts_recipe.rewards import math_equal_reward  # noqa: F401 - importable from here, as before
from gmts_recipe.rewards import reward_function  # the task's reward (MATH: its own)
from gmts_recipe.run_setup import (  # noqa: F401
    HUB_MODEL_FIX, KNOWN_LOG_LINES, KNOWN_WARNINGS, cap_gpu_memory, code_commit, config_record, deterministic_kernels,
    eval_record, hub_errors, keep_samples, load_model, load_tasks, model_dtype, model_load_kwargs, provenance,
    quiet_known_warnings, reward_version,
    versions)
from gmts_recipe.run_setup import second_heldout  # MATH: Minerva OCW, evaluated apart
from gmts_recipe.speed_options import recorded_noise_version
from gmts_recipe.stats import no_learning_signal
from gmts_recipe.tables import heldout_set_name, render


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on `path` between processes (a sibling .lock file), held while reading-merging-writing."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        yield


ADAPTER_DIR = "adapter"  # arm-<arm>/adapter: the arm's final LoRA adapter (keep_adapter), what eval.py evaluates


# ---------------------------------------------------------------------------- the run
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
        self.apart: list[tuple[Run, list]] = []  # held-out sets evaluated apart (MATH: Minerva OCW): (run, tasks)

    def _load_or_new(self) -> dict:
        if not self.path.is_file():
            return {"config_name": self.name, "config": self.record, "config_hash": self.hash, "arms": {}}
        try:
            results = load_results(self.path)  # of any format, as this one holds it (records.current_record)
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
            write_results(self.path, merged)  # as the format stores it: no per-task records beside samples files
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
                    base = json.loads(cache.read_text())  # its evaluations as this format holds them
                    base["evals"] = current_evaluations(base["evals"], self.dir)
                    print(f"[recipe] base evals: reusing {len(base['evals'])} from {cache}")
                else:
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
        named = heldout_set_name(self.results.get("data"))  # MATH: MATH-500, or Minerva OCW apart
        for seed in self.recipe.base_eval_seeds:
            t0 = time.time()
            ev = self._evaluate(model, tok, heldout, seed)
            print(f"[recipe] base eval{f', {named},' if named else ''} seed {seed}: pass@1 {ev['pass@1']:.3f} "
                  f"({time.time() - t0:.0f}s)")
            evals.append(ev)
        return evals

    def _evaluate(self, model, tok, heldout, seed) -> dict:
        return evaluate_with_config(model, tok, heldout, self.recipe, self.train_args, seed)

    def build_trainer(self, arm: str, train_tasks):
        """(FastGMTSTrainer, its FastGMTSConfig) for one arm, as train_arm trains it; bench/step.py times this very
        trainer."""
        from datasets import Dataset
        from trl import get_peft_config

        from gmts_recipe.progress import SaveEveryMinutes, quiet_console
        from gmts_recipe.fast_config import check_fast_config
        from gmts_recipe.fast_trainer import FastGMTSTrainer

        arm_dir = self.dir / f"arm-{arm}"
        lr = getattr(self.recipe, learning_rate_fields()[arm], None) or self.train_args.learning_rate  # its own lr
        args = copy.deepcopy(self.train_args)  # not dataclasses.replace: GRPOConfig's __post_init__ is not idempotent
        args.output_dir, args.token_selection, args.learning_rate = str(arm_dir / "checkpoints"), arm_named(arm).rule, lr
        args.run_name = f"{self.name}-{arm}"  # one run per arm for report_to's loggers (TensorBoard, Trackio, ...)
        if "project" not in self.recipe.set_fields:  # Trackio's project: the arms of one experiment side by side
            args.project = self.name
        check_fast_config(args)
        path = resolve_model(self.model_args.model_name_or_path)
        args.model_init_kwargs = model_load_kwargs(self.model_args, args)
        prompt = system_prompt(self.recipe.system_prompt)
        dataset = Dataset.from_list([{"prompt": to_prompt(t["question"], prompt), "answer": t["answer"]}
                                     for t in train_tasks])
        with hub_errors(f"model {path}", HUB_MODEL_FIX):
            trainer = FastGMTSTrainer(model=path, reward_funcs=training_reward(reward_version(self.recipe)),
                                      args=args, train_dataset=dataset, peft_config=get_peft_config(self.model_args),
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
        if self.recipe.overwrite and self.state.is_main_process:  # started over: no old checkpoint or adapter left
            for folder in (arm_dir / "checkpoints", arm_dir / ADAPTER_DIR):
                shutil.rmtree(folder, ignore_errors=True)
        self.state.wait_for_everyone()
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
        if self.recipe.keep_adapter:  # the trained weights, for eval.py (the main process writes; the others wait)
            trainer.save_model(str(arm_dir / ADAPTER_DIR))
        if self.state.is_main_process:
            self._evaluate_arm(arm, trainer, args, heldout, t0, train_minutes, train_compile_s)
            for apart, tasks in self.apart:  # before its checkpoint is gone: the trained model is in memory
                apart.evaluate_apart(arm, trainer, self.results["arms"][arm], tasks)
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
                              f"samples-{arm}-seed{seed}", questions=False)  # the base's samples keep them
        wall = (time.time() - t0) / 60
        gpus = self.state.num_processes if trainer.model.device.type == "cuda" else 0
        self.results["arms"][arm] = {
            "eval": ev, "train_log": log, "learning_rate": args.learning_rate, "token_selection": arm_named(arm).rule,
            "entropy_source": trainer.entropy_source_used, "rollout_digests": trainer.rollout_digests,
            "reward_version": reward_version(self.recipe),  # the training reward's; its evaluation's samples too
            "train_minutes": train_minutes,
            "train_compile_seconds": train_compile_s, "eval_minutes": (time.time() - t1) / 60, "wall_minutes": wall,
            "gpu_minutes": wall * gpus, **({"gpu_peak_memory_gib": self.peaks} if self.peaks else {}),
            "generation_options": {k: getattr(self.recipe if k == "cudnn_attention" else args, k)
                                   for k in GENERATION_OPTIONS},
        }
        self.results["arms"][arm]["provenance"] = provenance(t0, time.time(), self.state.num_processes,
                                                             self.results["arms"][arm]["generation_options"],
                                                             trainer.model.device.type)  # what ran on this device
        named = heldout_set_name(self.results.get("data"))
        print(f"[recipe] {arm}: pass@1 {ev['pass@1']:.3f}{f' on {named}' if named else ''}, trained "
              f"{train_minutes:.1f} min")
        untrained = no_learning_signal(log)
        if untrained is not None:  # its verdict will read flat: say why here, as check.py does under its table
            print(f"[recipe] {arm}: not trained: {untrained}")
        self.save(arm)
        self._drop_replaced_samples(arm)
        if not self.recipe.keep_checkpoints:  # the arm is sealed in results.json: --resume will not need them
            shutil.rmtree(arm_dir / "checkpoints", ignore_errors=True)
        if self.recipe.figures:
            self.plot()

    def _drop_replaced_samples(self, arm: str) -> None:
        """The samples files of the arm this run replaced (none names them any more)."""
        named = {entry["eval"].get("samples", {}).get("path") for entry in self.results["arms"].values()}
        for stale in self.dir.glob(f"samples-{arm}-seed*.jsonl.xz"):
            if stale.name not in named:
                stale.unlink()

    def add_apart(self, heldout_set: str, tasks: list, data_record: dict, device) -> Run:
        """A held-out set evaluated apart from this run's own (MATH: Minerva OCW), in a run directory beside it,
        <name>-<set>/: its base evaluations now, each arm's evaluation as it finishes training (evaluate_apart), so
        check.py verifies its results.json as any run's. Same config, same trained arms; only the tasks differ."""
        apart = Run(self.recipe, self.train_args, self.model_args, f"{self.name}-{heldout_set}")
        apart.results["data"] = data_record
        apart.base_evals(tasks, device)
        self.apart.append((apart, tasks))
        return apart

    def evaluate_apart(self, arm: str, trainer, entry: dict, tasks: list) -> None:
        """The arm just trained (its entry as the training run recorded it) evaluated on this run's tasks with the first
        base seed, merged into this run's results.json (main process)."""
        t1 = time.time()
        seed = self.recipe.base_eval_seeds[0]
        peaks = dict(entry.get("gpu_peak_memory_gib", {}))
        with peak_memory(peaks, "eval", trainer.model.device.type):
            ev = keep_samples(self._evaluate(trainer.model, trainer.processing_class, tasks, seed), self.dir,
                              f"samples-{arm}-seed{seed}", questions=False)  # the base's samples keep them
        self.results["arms"][arm] = {**entry, "eval": ev, "eval_minutes": (time.time() - t1) / 60,
                                     **({"gpu_peak_memory_gib": peaks} if peaks else {})}
        print(f"[recipe] {arm} on {self.name}: pass@1 {ev['pass@1']:.3f}")
        self.save(arm)
        self._drop_replaced_samples(arm)
        if self.recipe.figures:
            self.plot()

    def plot(self) -> None:
        plot_run(self.results, self.dir / "curves.png")


def training_reward(version: int | str):
    """The reward function the trainer calls, of reward version `version`. A GSM8K version trains under the name
    every run has logged its reward by (TRL logs rewards/<name>/mean), whichever version it is: an older version's
    train log then reads row for row like the runs made with it; the arm records the version ("reward_version")."""
    reward = reward_function(version)
    if isinstance(version, int) and reward.__name__ != "math_equal_reward":
        def math_equal_reward(completions: list, answer: list[str], **kwargs) -> list[float]:
            return reward(completions, answer, **kwargs)

        return math_equal_reward
    return reward


def log_into_arm_folder(trainer, arm_dir: Path) -> None:
    """TensorBoard's event files (report_to tensorboard) in <arm folder>/tensorboard: transformers puts them under
    output_dir, the arm's checkpoints folder, which is removed once the arm's results are recorded. An environment's
    TENSORBOARD_LOGGING_DIR still wins, as in transformers."""
    from transformers.integrations import TensorBoardCallback

    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and callback.logging_dir is None:
            callback.logging_dir = str(arm_dir / "tensorboard")


def check_rerun(run: Run, arms: list[str]) -> None:
    """Refuse, in one line before the model loads, a rerun that would replace what this run folder holds: an arm it
    has finished (results, samples, adapter) or an arm's checkpoints from an interrupted run. --resume keeps and
    continues them, --overwrite trains them again; a new --experiment NAME is a new folder."""
    recipe = run.recipe
    if recipe.resume and recipe.overwrite:
        raise RecipeError("--resume keeps what the run folder holds and --overwrite replaces it: pass one of them")
    if recipe.resume or recipe.overwrite:
        return
    finished = [a for a in arms if a in run.results.get("arms", {})]
    if finished:
        raise RecipeError(f"{run.path} already holds the finished arm(s) {', '.join(finished)}: --resume keeps them "
                          f"(and trains what is missing), --overwrite trains them again and replaces them, "
                          f"--experiment NAME starts another run folder")
    started = [a for a in arms if any((run.dir / f"arm-{a}" / "checkpoints").glob("checkpoint-*"))]
    if started:
        raise RecipeError(f"{run.dir / f'arm-{started[0]}' / 'checkpoints'} holds the checkpoints of an interrupted "
                          f"run of {started[0]}: --resume continues it, --overwrite starts it over")


def run_experiment(argv: list[str]) -> dict:
    """One experiment, as `python recipe.py ARGV` runs it: base evals (shared through the cache), then each arm of
    --arm. Returns the results as written to <results_dir>/<experiment>/results.json (with the arms other processes
    wrote). Raises RecipeError (a user error: one line; or, after the last arm, arms that failed on their own: each
    reported as it failed, gmts_recipe.sequential.failures.report, and the next arm trained), an arm's machine fault (a
    CUDA error: the run stops) and KeyboardInterrupt (resume with --resume)."""
    try:
        return _run_experiment(take_rules(argv))  # a user's own rules (--rules FILE) before the arms are read
    except (ModelError, RulesError) as e:  # an offline model that is not installed or does not verify; a rules file
        raise RecipeError(str(e)) from None


def batch_shape(train, processes: int) -> str:
    """The rollouts of one optimizer step, said in full: under a data-parallel launcher the global batch grows with
    the process count, so a run on 2 GPUs is the 1-GPU experiment only with half the accumulation steps."""
    rows = train.per_device_train_batch_size * train.gradient_accumulation_steps * processes
    return (f"{rows} rollouts per step ({rows // train.num_generations} prompts x {train.num_generations}; "
            f"{train.per_device_train_batch_size} per device x {train.gradient_accumulation_steps} accumulation x "
            f"{processes} process{'es' if processes > 1 else ''})")


def check_noise_version(results: dict, train, arms: list[str], resume: bool) -> None:
    """The arms of one results file that draw "counter" noise are coupled by drawing the same keys at every step: a
    run whose arms would draw them by another counter_noise_version than the arms the file keeps is refused."""
    if train.sampling_noise != "counter":
        return
    kept = {a: entry for a, entry in results.get("arms", {}).items() if resume or a not in arms}
    other = {a: recorded_noise_version(entry.get("generation_options") or {}) for a, entry in kept.items()}
    other = {a: v for a, v in other.items() if v != train.counter_noise_version}
    if other:
        version = next(iter(other.values()))
        raise RecipeError(f"the arms this run keeps ({', '.join(other)}) drew 'counter' noise keyed by "
                          f"counter_noise_version {version}, this run's is {train.counter_noise_version}: add "
                          f"--counter_noise_version {version} to draw as they did, or --experiment NAME for a new "
                          f"run directory")


def check_reward_version(results: dict, recipe, arms: list[str], resume: bool) -> None:
    """The arms of one results file are compared on one reward: a run whose arms would train and be scored with
    another reward version than the arms the file keeps is refused, in one line before the model loads."""
    version = reward_version(recipe)
    kept = {a: entry for a, entry in results.get("arms", {}).items() if resume or a not in arms}
    other = {a: recorded_reward_version(entry) for a, entry in kept.items()}
    other = {a: v for a, v in other.items() if v != version}
    if other:
        theirs = next(iter(other.values()))
        raise RecipeError(f"the arms this run keeps ({', '.join(other)}) trained with reward version {theirs}, this "
                          f"run's is {version}: add --reward_version {theirs} to train as they did, or --experiment "
                          f"NAME for a new run directory")


def _run_experiment(argv: list[str]) -> dict:
    quiet_known_warnings()
    recipe, train, model, name = parse(argv, hub=True)
    deterministic_kernels(train)  # before Run: its process state may be the first CUDA work
    run = Run(recipe, train, model, name)
    check_noise_version(run.results, train, trained_arms(recipe.arm), recipe.resume)
    check_reward_version(run.results, recipe, trained_arms(recipe.arm), recipe.resume)
    check_rerun(run, trained_arms(recipe.arm))
    cap_gpu_memory(recipe, train)  # after Run: its process state picks this process's card
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
    second = second_heldout(recipe)  # MATH: Minerva OCW, in <name>-ocw/ beside the run
    if second is not None:
        run.add_apart(*second, device)
    run.arm_order, failed = trained_arms(recipe.arm), []
    for arm in run.arm_order:
        if recipe.resume and arm in run.results["arms"]:
            print(f"[recipe] {arm}: finished in {run.path}, kept")
            for apart, _ in run.apart:  # an arm stopped between its two evaluations: its checkpoint is gone
                if arm not in apart.results["arms"]:
                    print(f"[recipe] {arm}: not evaluated in {apart.path}; to fill it, train the arm again "
                          f"(without --resume)")
            continue
        if arm in run.results["arms"] and run.state.is_main_process:  # --overwrite (check_rerun)
            print(f"[recipe] {arm}: finished in {run.path} (lr {run.results['arms'][arm]['learning_rate']:g}); "
                  f"trained again (--overwrite), and replaced when done")
        try:
            run.train_arm(arm, train_tasks, heldout, device)
        except (RecipeError, ModelError, RulesError):  # a refusal of the run's inputs: the same for every arm
            raise
        except Exception as e:  # noqa: BLE001 - an arm's failure, reported for a sweep's runner (failures.report)
            if report_failure(arm, e) == "machine" or len(run.arm_order) == 1:  # the card's ends the run
                raise
            traceback.print_exc()  # the arm's own: an outcome, and the next arm runs
            failed.append(arm)
        if failed and failed[-1] == arm and torch.cuda.is_available():  # what it held, freed as a finished arm's
            gc.collect()
            torch.cuda.empty_cache()
    if failed:
        raise RecipeError(f"arm(s) {', '.join(failed)} failed on their own (tracebacks above); the other arms ran")
    if not run.state.is_main_process:
        return load_results(run.path)  # what the main process wrote
    print(f"[recipe] done: {run.path} and its figures in {run.dir}; the table below; verify it at any time: "
          f"python check.py {run.path}")
    for apart, _ in run.apart:
        print(f"[recipe] {apart.name}, the same arms on another held-out set: python check.py {apart.path}")
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
