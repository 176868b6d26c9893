"""The experiment: base model vs ETS vs GMTS, same data, same LoRA init, same held-out tasks and samples.

    python recipe.py --arm gmts                                  # paper recipe (configs/paper.yaml)
    python recipe.py --arm all --config configs/offline.yaml     # offline model and task, no downloads
    python recipe.py --arm all --config configs/smoke.yaml       # minutes on a CPU: every stage, tiny
    python recipe.py --arm ets --config configs/paper.yaml --learning_rate 5e-5   # any field, from the command line

Arms: `base` (evaluate the untrained model 3 times: the noise floor), `ets` (top-20% tokens by entropy), `gmts` (top-20%
by |entropy x omega|), `all` (base, then ets, then gmts). One run directory per config name,
results/<run_name>/, holds results.json (all arms merged as they finish), per-arm logs and checkpoints, and curves.png.
`--resume` keeps finished arms and resumes an unfinished arm from its last checkpoint. A results.json written by a
different configuration is never mixed in: the config hash is checked.

Steps: 1. data and decontamination; 2. base evals x3 (skipped when the run directory already has them for this
config); 3. train the arm (GMTSTrainer; TRL applies `seed` before building the LoRA adapter, so arms share data order
and init); 4. evaluate it on the same tasks with the first base seed; 5. write results.json (check.seal).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ARMS = ("base", "ets", "gmts", "all")
RULE_OF_ARM = {"ets": "entropy", "gmts": "gmts"}
DEFAULT_CONFIG = "configs/paper.yaml"
# Fields that name where or how a run is executed, not what it computes: left out of the config hash.
NOT_HASHED = {"arm", "resume", "results_dir", "experiment", "output_dir", "logging_dir", "run_name", "token_selection",
              "learning_rate", "report_to", "logging_steps", "save_steps", "save_total_limit", "disable_tqdm",
              "dataloader_num_workers", "use_cpu", "eval_batch_size", "ets_learning_rate", "gmts_learning_rate",
              "generation_merge_adapter", "generation_compile", "cudnn_attention"}
# How an arm was executed (speed options, left out of the hash): recorded in each arm's entry of results.json.
GENERATION_OPTIONS = ("use_cpu", "generation_merge_adapter", "generation_compile", "cudnn_attention")


@dataclass
class RecipeArgs:
    """The experiment's own fields (the trainer's are GMTSConfig's, the model's are TRL's ModelConfig)."""

    arm: str = field(default="all", metadata={"help": "base, ets, gmts or all"})
    experiment: str | None = field(default=None, metadata={"help": "run directory name (default: the config file name)"})
    results_dir: str = field(default="results", metadata={"help": "parent of the run directories"})
    resume: bool = field(default=False, metadata={"help": "keep finished arms; resume an arm from its checkpoint"})
    task: str = field(default="gsm8k", metadata={"help": "gsm8k or arithmetic (generated, offline)"})
    gsm8k_path: str | None = field(default=None, metadata={"help": "folder with train.jsonl/test.jsonl (offline)"})
    difficulty: int = field(default=1, metadata={"help": "arithmetic task difficulty, 0-3"})
    n_train: int = field(default=512, metadata={"help": "train prompts chosen from the train split"})
    n_heldout: int = field(default=120, metadata={"help": "held-out tasks chosen from the test split"})
    task_seed: int = field(default=17, metadata={"help": "seed of the task choice (and of the generated task)"})
    system_prompt: str | None = field(default=None, metadata={"help": "system message: a preset of data.SYSTEM_PROMPTS "
                                                                       "(steps, example, two_examples) or literal text"})
    eval_samples: int = field(default=4, metadata={"help": "samples per held-out task (pass@1 over them)"})
    eval_max_new_tokens: int = field(default=256, metadata={"help": "completion budget at evaluation"})
    eval_temperature: float = field(default=1.0, metadata={"help": "sampling temperature at evaluation"})
    eval_batch_size: int = field(default=64, metadata={"help": "sequences per generate call at evaluation"})
    base_eval_seeds: list[int] = field(default_factory=lambda: [0, 1, 2],
                                       metadata={"help": "sampling seeds of the base evals; arms use the first"})
    ets_learning_rate: float | None = field(default=None, metadata={"help": "ETS arm's lr (default: learning_rate)"})
    gmts_learning_rate: float | None = field(default=None, metadata={"help": "GMTS arm's lr (default: learning_rate)"})
    cudnn_attention: bool = field(default=True, metadata={
        "help": "let PyTorch use cuDNN attention; it builds a plan for each new sequence length (~1.6 ms a layer "
                "call), so with lengths that change every step false is faster (bench/results-h200.json)"})


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


def _first_key(strings: list[str]) -> str:
    keys = [s.lstrip("-").split("=")[0] for s in strings if s.startswith("--")]
    return (keys or strings)[0]


def _check_arm(arm: str) -> None:
    if arm not in ARMS:
        raise RecipeError(f"unknown arm '{arm}': use one of {', '.join(ARMS)}")


def parse(argv: list[str]):
    """(RecipeArgs, GMTSConfig, ModelConfig, config name) from a YAML file and command-line overrides."""
    argv = list(argv)
    for i, a in enumerate(argv):  # the arm first: its error is the one a typo deserves, before any config check
        arm = a.split("=", 1)[1] if a.startswith("--arm=") else argv[i + 1] if a == "--arm" and i + 1 < len(argv) else None
        if arm is not None:
            _check_arm(arm)
    if "--config" not in argv:
        argv = ["--config", DEFAULT_CONFIG, *argv]
    config_path = Path(argv[argv.index("--config") + 1]) if argv.index("--config") + 1 < len(argv) else None
    if config_path is None or not config_path.is_file():
        raise RecipeError(f"config file {config_path} not found (configs: "
                          f"{', '.join(sorted(str(p) for p in Path('configs').glob('*.yaml')))})")
    parser = _parser()
    allowed = sorted({a.dest for a in parser._actions if a.dest != "help"} | {"config"})
    try:
        recipe, train, model, from_file, from_cli = parser.parse_args_and_config(
            argv, return_remaining_strings=True, separate_remaining_strings=True)
    except (ValueError, TypeError) as e:  # a value a config class refused, e.g. selection_scope: global
        raise RecipeError(str(e).splitlines()[0]) from None
    for where, strings in (("config file", from_file), ("command line", from_cli)):
        if strings:
            key = _first_key(strings)
            near = difflib.get_close_matches(key, allowed, n=3)
            hint = f"did you mean {', '.join(near)}?" if near else f"run `python recipe.py --help` for all {len(allowed)} keys"
            raise RecipeError(f"unknown key '{key}' in the {where}: {hint}")
    _check_arm(recipe.arm)  # an arm set in the config file
    if recipe.task not in ("gsm8k", "arithmetic"):
        raise RecipeError(f"unknown task '{recipe.task}': use gsm8k or arithmetic")
    if not recipe.base_eval_seeds:
        raise RecipeError("base_eval_seeds must name at least one seed")
    return recipe, train, model, recipe.experiment or config_path.stem


def config_record(recipe: RecipeArgs, train, model) -> dict:
    """Everything that decides what a run computes, as plain JSON."""
    out = {}
    for obj in (recipe, model, train):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if f.name in NOT_HASHED or f.name.startswith(("push_to_hub", "hub_", "logging_")):
                continue
            out[f.name] = value if isinstance(value, (int, float, str, bool, type(None), list, dict)) else str(value)
    return out


def config_hash(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


# ---------------------------------------------------------------------------- data, model
def load_tasks(recipe: RecipeArgs) -> tuple[list[dict], list[dict], dict]:
    from data import arithmetic_task, choose_split, decontaminate, load_gsm8k, task_hash

    if recipe.task == "gsm8k":
        pools = load_gsm8k(recipe.gsm8k_path)
    else:  # generated: enough distinct problems for the split; the test pool uses another seed
        pools = {"train": arithmetic_task(4 * recipe.n_train, recipe.task_seed, recipe.difficulty),
                 "test": arithmetic_task(4 * recipe.n_heldout, recipe.task_seed + 1, recipe.difficulty)}
    train, heldout = choose_split(pools["train"], pools["test"], recipe.n_train, recipe.n_heldout, recipe.task_seed)
    train, dropped = decontaminate(train, heldout)
    record = {"task": recipe.task, "train_pool": len(pools["train"]), "test_pool": len(pools["test"]),
              "train_chosen": recipe.n_train, "decontamination_dropped": dropped, "train_kept": len(train),
              "train": [[t["index"], task_hash(t["question"])] for t in train],
              "heldout": [[t["index"], task_hash(t["question"])] for t in heldout]}
    return train, heldout, record


def model_dtype(model_args) -> str:
    """The dtype name to load weights in, as both transformers and TRL's model_init_kwargs take it."""
    return model_args.dtype or "auto"


def load_model(model_args, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from models import resolve_model

    path = resolve_model(model_args.model_name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=model_dtype(model_args)).to(device)
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


# ---------------------------------------------------------------------------- the run
class Run:
    """One run directory: results.json (merged, sealed), per-arm logs and checkpoints, curves.png."""

    def __init__(self, recipe: RecipeArgs, train, model, name: str):
        self.recipe, self.train_args, self.model_args, self.name = recipe, train, model, name
        self.dir = Path(recipe.results_dir) / name
        self.path = self.dir / "results.json"
        self.record = config_record(recipe, train, model)
        self.hash = config_hash(self.record)
        self.results = self._load_or_new()

    def _load_or_new(self) -> dict:
        if not self.path.is_file():
            return {"config_name": self.name, "config": self.record, "config_hash": self.hash, "arms": {}}
        from check import ResultsError
        from check import load as load_results

        try:
            results = load_results(self.path)
        except ResultsError as e:
            raise RecipeError(f"{self.path} cannot be extended: {e}") from None
        if results.get("config_hash") != self.hash:
            changed = sorted(k for k in set(self.record) | set(results.get("config", {}))
                             if self.record.get(k) != results.get("config", {}).get(k))
            raise RecipeError(f"{self.path} was written by another configuration (differs in: {', '.join(changed[:6])})"
                              f"; use --experiment NAME to start a new run directory")
        return results

    def save(self) -> None:
        from check import seal

        self.dir.mkdir(parents=True, exist_ok=True)
        self.results["versions"] = versions()
        if "base" in self.results:
            seal(self.results)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1))
        tmp.replace(self.path)  # atomic: an interrupted write never leaves half a file

    # ------------------------------------------------------------------ stages
    def base_evals(self, heldout, device) -> None:
        if "base" in self.results:
            print(f"[recipe] base evals: reusing {len(self.results['base']['evals'])} from {self.path}")
            return
        _, model, tok = load_model(self.model_args, device)
        evals = []
        for seed in self.recipe.base_eval_seeds:
            t0 = time.time()
            ev = self._evaluate(model, tok, heldout, seed)
            print(f"[recipe] base eval seed {seed}: pass@1 {ev['pass@1']:.3f} ({time.time() - t0:.0f}s)")
            evals.append(ev)
        self.results["base"] = {"evals": evals}
        self.save()

    def _evaluate(self, model, tok, heldout, seed) -> dict:
        from eval import evaluate_pass_at_1

        r = self.recipe
        return evaluate_pass_at_1(model, tok, heldout, k=r.eval_samples, seed=seed, max_new_tokens=r.eval_max_new_tokens,
                                  temperature=r.eval_temperature, batch_size=r.eval_batch_size,
                                  system_prompt=r.system_prompt)

    def train_arm(self, arm: str, train_tasks, heldout, device) -> None:
        import torch
        from datasets import Dataset
        from trl import get_peft_config

        from data import system_prompt, to_prompt
        from eval import math_equal_reward
        from gmts_trainer import GMTSTrainer, check_selection_config
        from models import resolve_model

        arm_dir = self.dir / f"arm-{arm}"
        lr = getattr(self.recipe, f"{arm}_learning_rate") or self.train_args.learning_rate
        args = copy.deepcopy(self.train_args)  # not dataclasses.replace: GRPOConfig's __post_init__ is not idempotent
        args.output_dir, args.token_selection, args.learning_rate = str(arm_dir / "checkpoints"), RULE_OF_ARM[arm], lr
        args.run_name, args.report_to = f"{self.name}-{arm}", []
        check_selection_config(args)
        path = resolve_model(self.model_args.model_name_or_path)
        args.model_init_kwargs = {"dtype": model_dtype(self.model_args)}
        prompt = system_prompt(self.recipe.system_prompt)
        dataset = Dataset.from_list([{"prompt": to_prompt(t["question"], prompt), "answer": t["answer"]}
                                     for t in train_tasks])
        trainer = GMTSTrainer(model=path, reward_funcs=math_equal_reward, args=args, train_dataset=dataset,
                              peft_config=get_peft_config(self.model_args))
        checkpoint = None
        if self.recipe.resume and any(arm_dir.glob("checkpoints/checkpoint-*")):
            checkpoint = True
            print(f"[recipe] {arm}: resuming from the last checkpoint in {arm_dir / 'checkpoints'}")
        t0 = time.time()
        trainer.train(resume_from_checkpoint=checkpoint)
        train_minutes = (time.time() - t0) / 60
        log = [row for row in trainer.state.log_history if "step" in row and "loss" in row]
        arm_dir.mkdir(parents=True, exist_ok=True)
        (arm_dir / "train_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in log))
        t1 = time.time()
        ev = self._evaluate(trainer.model, trainer.processing_class, heldout, self.recipe.base_eval_seeds[0])
        wall = (time.time() - t0) / 60
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self.results["arms"][arm] = {
            "eval": ev, "train_log": log, "learning_rate": lr, "token_selection": RULE_OF_ARM[arm],
            "entropy_source": trainer.entropy_source_used, "train_minutes": train_minutes,
            "eval_minutes": (time.time() - t1) / 60, "wall_minutes": wall, "gpu_minutes": wall * gpus,
            "generation_options": {k: getattr(self.recipe if k == "cudnn_attention" else args, k)
                                   for k in GENERATION_OPTIONS},
        }
        print(f"[recipe] {arm}: pass@1 {ev['pass@1']:.3f}, trained {train_minutes:.1f} min")
        self.save()
        self.plot()

    def plot(self) -> None:
        from plots import plot_run

        plot_run(self.results, self.dir / "curves.png")


def main(argv: list[str] | None = None) -> int:
    try:
        recipe, train, model, name = parse(sys.argv[1:] if argv is None else argv)
        run = Run(recipe, train, model, name)
        import torch

        device = "cuda" if torch.cuda.is_available() and not train.use_cpu else "cpu"
        torch.backends.cuda.enable_cudnn_sdp(recipe.cudnn_attention)
        train_tasks, heldout, data_record = load_tasks(recipe)
        print(f"[recipe] {name}: {len(train_tasks)} train prompts ({data_record['decontamination_dropped']} dropped "
              f"by decontamination), {len(heldout)} held-out tasks, config {run.hash[:12]}")
        run.results["data"] = data_record
        run.base_evals(heldout, device)
        arms = ["ets", "gmts"] if recipe.arm == "all" else [] if recipe.arm == "base" else [recipe.arm]
        for arm in arms:
            if recipe.resume and arm in run.results["arms"]:
                print(f"[recipe] {arm}: finished in {run.path}, kept")
                continue
            run.train_arm(arm, train_tasks, heldout, device)
    except RecipeError as e:
        print(f"recipe.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("recipe.py: interrupted; run again with --resume to continue", file=sys.stderr)
        return 130
    from check import render

    print(render(run.results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
