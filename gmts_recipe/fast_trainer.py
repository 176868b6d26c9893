"""FastGMTSTrainer: GMTSTrainer with the speed options (FastGMTSConfig, fast_config.py), which recipe.py builds. They
change how GRPO generates and updates, never the rule that selects (the same score, tie-break and count): the same
tokens, the same distribution, or other rounding. Not always the same kept tokens: with its default entropy source
(recorded during generation, below) the selection ranks on the entropy GMTSTrainer recomputes in a scoring pass, in
other rounding (~6e-5 nats apart in float32 on the tiny model), so two tokens whose scores lie closer than that at the
top-k threshold can trade places. Exact ties cannot: they are equal in both sources and broken alike. Measured on the
CPU (tests/test_entropy_sources.py): 2 of 24 tiny float32 batches, 2 of 422 kept tokens (0.5%), each one token traded;
an option that changes the rounding of generation (a bf16 kernel) can trade tokens the same way.
`selection_entropy_source="scoring_pass"` keeps GMTSTrainer's tokens bit for bit; the committed runs ranked on the
recorded entropy (results.json's entropy_source_used), which stays the default. The code each option runs lives
beside it: generation/fast.py (what generation runs inside),
generation/noise.py (the "counter" noise's keys), training_speed.py (what the update runs inside), determinism.py.

What it puts around GMTSTrainer, each with what it changes:
- `__init__`: deterministic kernels enabled before the model is loaded (`deterministic_kernels`); after TRL's own
  construction, the settings a speed option cannot serve refused (the compiled step's generation settings, a model
  whose projections cannot be fused, training_compile without repeated layers), transformers' compiled decoding
  configured (`generation_compile`), and whether PEFT's LoRA input cast can be skipped (`lora_autocast_inputs`).
- `generation_entropy`: the entropy of the batch and group scopes, in order of preference, from (a) the generation
  itself (fast.EntropyRecorder), used only when every generation setting leaves softmax(logits / T) as the sampled
  distribution before truncation (`settings_off_softmax`); (b) the no-grad scoring pass TRL makes for
  `old_per_token_logps`, whose fused LM head computes entropy anyway (kept by `_get_per_token_logps_and_entropies`);
  (c) GMTSTrainer's own scoring pass (vLLM without IS correction, continuous batching, tools, beta != 0, or
  `selection_entropy_source="scoring_pass"`).
- `generate_and_score`: TRL's generation and scoring with the layers' own forwards and deterministic kernels in
  warn_only mode; afterwards `drop_duplicate_input_grad_hooks` (TRL turns gradient checkpointing off and on around
  them, and each time transformers adds an input-grad hook it never removes).
- `training_step`: strict deterministic kernels, LoRA inputs in the autocast dtype (`lora_autocast_inputs`), the
  decoder layers compiled (`training_compile`).
- `_generate_single_turn`: merged LoRA (`generation_merge_adapter`), grouped attention, its decode kernel and the
  deferred stop (`generation_grouped_attention`, `generation_decode_kernel`, `generation_deferred_stop`), the static
  cache of compiled decoding without the input-grad hooks (`generation_compile`), the compiled token step
  (`generation_decode_loop`, `generation_compile_regions`, `generation_fused_projections`), the "counter" noise
  (`sampling_noise`, keyed by `counter_noise_version`: noise.rollout_noise_keys) and the entropy recorder. Every arm
  records a digest of each rollout per training step (`rollout_digests`), by which two arms' rollouts are compared.
- `evaluate`: restarts the count of the evaluation's generations (the "counter" noise of each).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib

import torch
from transformers import GenerationConfig
from transformers.utils import logging

from gmts_recipe import determinism
from gmts_recipe.fast_config import FastGMTSConfig, check_decode_loop_generation, check_speed_options
from gmts_recipe.generation.decoding import decoding_options
from gmts_recipe.generation.fast import (EntropyRecorder, compile_cache_length, merged_lora, static_compile_config,
                                         with_decode_loop, with_logits_processor, without_input_grad_hooks)
from gmts_recipe.generation.fused import fusable_groups
from gmts_recipe.generation.noise import generator_seed, rollout_noise_keys
from gmts_recipe.grad_hooks import drop_duplicate_input_grad_hooks
from gmts_recipe.training_speed import layer_forwards, lora_autocast_blockers, lora_input_casting, repeated_layers
from gmts_trainer import GMTSTrainer

logger = logging.get_logger(__name__)

# Generation settings under which the sampled distribution is softmax(logits / T) up to truncation (top-k, top-p, ...),
# so the recorder's entropy is the training forward's. transformers runs a custom processor (the recorder) after its own
# logits processors and before the warpers: any processor of the first kind changes what the recorder sees.
GENERATION_ANY_VALUE = frozenset({
    "max_length", "max_new_tokens", "max_time", "stop_strings", "early_stopping", "length_penalty",  # stopping
    "top_k", "top_p", "min_p", "top_h", "typical_p", "epsilon_cutoff", "eta_cutoff", "renormalize_logits",  # warpers
    "use_cache", "cache_implementation", "cache_config", "max_cache_len", "compile_config", "disable_compile",
    "prefill_chunk_size", "low_memory", "output_attentions", "output_hidden_states", "output_scores", "output_logits",
    "return_dict_in_generate", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
    "transformers_version", "_from_model_config",
})
GENERATION_NEUTRAL_VALUES = {  # settings whose processor is off at these values; any other field must be None
    "do_sample": (True,), "num_beams": (None, 1), "num_return_sequences": (None, 1),
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0), "guidance_scale": (None, 1.0),
    "no_repeat_ngram_size": (None, 0), "encoder_no_repeat_ngram_size": (None, 0), "min_length": (None, 0),
    "min_new_tokens": (None, 0), "remove_invalid_values": (None, False),
}


def settings_off_softmax(config: GenerationConfig, temperature: float) -> list[str]:
    """The generation settings (of the config `generate` will use) that make the sampled distribution differ from
    softmax(logits / temperature) before truncation, or that this allow-list does not know. [] means exact."""
    off = []
    for name, value in config.to_dict().items():
        if name == "temperature":
            ok = value == temperature or (value is None and temperature == 1.0)
        else:
            ok = name in GENERATION_ANY_VALUE or value in GENERATION_NEUTRAL_VALUES.get(name, (None,))
        if not ok:
            off.append(name)
    return off


def completion_digest(token_ids: list[int]) -> str:
    """8 hex digits naming a completion's token ids: equal completions, equal digests (different ones collide with
    probability 2^-32)."""
    return hashlib.blake2b(",".join(map(str, token_ids)).encode(), digest_size=4).hexdigest()


class FastGMTSTrainer(GMTSTrainer):
    """GMTSTrainer with the speed options of FastGMTSConfig (the module docstring lists what it overrides); the
    selection is GMTSTrainer's. The args must be a FastGMTSConfig."""

    config_class = FastGMTSConfig

    def __init__(self, *args, **kwargs):
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if isinstance(config, FastGMTSConfig):  # anything else: GMTSTrainer refuses it, before TRL loads the model
            check_speed_options(config)
        if getattr(config, "deterministic_kernels", False):  # before the model reaches the GPU (cuBLAS's workspace)
            determinism.enable()
        super().__init__(*args, **kwargs)
        self._recorder: EntropyRecorder | None = None  # set around a generation whose entropy is recorded
        self._capture_scoring: dict[str, torch.Tensor] | None = None  # set around TRL's scoring pass to keep
        self._entropy_found: tuple[EntropyRecorder | None, dict | None] = (None, None)  # for `generation_entropy`
        # step -> a digest of each rollout this process generated at that step (`completion_digest`): two arms'
        # rollouts are compared by these (records.rollout_agreement) to see how long sampling_noise 'counter' couples
        self.rollout_digests: dict[str, list[str]] = {}
        self._eval_generations = 0  # generations of the evaluation under way ("counter" noise)
        self._set_up_generation()
        self.lora_autocast_inputs_on = False  # whether training steps skip PEFT's LoRA input cast (see training_step)
        if self.args.lora_autocast_inputs:
            with self.accelerator.autocast():  # the context TRL's forwards run in
                device = self.accelerator.device.type
                dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
            blockers = lora_autocast_blockers(self.accelerator.unwrap_model(self.model), dtype)
            self.lora_autocast_inputs_on = not blockers
            if blockers:
                logger.info(f"lora_autocast_inputs does not engage ({'; '.join(blockers)}): PEFT casts LoRA inputs.")
        # training_compile: the layers that training_step compiles (none without it)
        self.training_layers = repeated_layers(self.accelerator.unwrap_model(self.model)) if (
            self.args.training_compile) else []
        if self.args.training_compile and not self.training_layers:
            raise ValueError("training_compile compiles the model's repeated decoder layers (a ModuleList of one "
                             "class) and this model has none; set training_compile=False.")

    def _set_up_generation(self) -> None:
        """Refuse, now rather than at the first step, what the generation options cannot serve with this model, and
        configure transformers' compiled decoding."""
        if self.args.generation_decode_loop == "compiled_step":  # refused, not dropped, where it is not exact
            check_decode_loop_generation(self.accelerator.unwrap_model(self.model), self.generation_config,
                                         self.temperature)
        if self.args.generation_fused_projections:  # a model it cannot fuse is refused now, not at the first step
            fusable_groups(self.accelerator.unwrap_model(self.model),
                           merged_lora=self.args.generation_merge_adapter)
        if self.args.generation_compile:  # refused with vLLM and continuous batching (check_generation_config)
            self.generation_config.cache_implementation = "static"
            self.generation_config.disable_compile = False  # TRL sets True; transformers then compiles the decoder
            self.generation_config.compile_config = static_compile_config()
            self.generation_kwargs["cache_implementation"] = "static"

    # ------------------------------------------------------------------ where the selection's entropy comes from
    def _trl_makes_scoring_pass(self) -> bool:
        """Mirrors TRL's condition for computing old_per_token_logps in `_generate_and_score_completions`."""
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self.args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )

    def _generation_entropy_is_exact(self) -> bool:
        return (
            self.args.selection_entropy_source == "auto"
            and not self.use_vllm
            and not self.use_transformers_continuous_batching
            and not self.tools
            and getattr(self, "rollout_func", None) is None
            and self.beta == 0.0  # omega's KL term needs the policy's log-probs: a scoring pass anyway
            and not settings_off_softmax(self._generation_config_used(), self.temperature)
        )

    def _generation_config_used(self) -> GenerationConfig:
        """TRL's generation config with the unset fields filled from the model's own, as transformers' `generate`
        merges them (a checkpoint's generation_config.json can set e.g. suppress_tokens)."""
        config = copy.deepcopy(self.generation_config)
        model_config = getattr(self.accelerator.unwrap_model(self.model), "generation_config", None)
        if model_config is not None:
            config.update(**model_config.to_dict(), defaults_only=True)
        return config

    def generate_and_score(self, inputs: dict) -> dict:
        batch_wide = self.selects_generation_batch()
        if batch_wide and self._generation_entropy_is_exact():
            self._recorder = EntropyRecorder(self.temperature)
        elif batch_wide and self._trl_makes_scoring_pass():
            self._capture_scoring = {}
        try:
            with (layer_forwards(self.training_layers, compiled=False),  # generation and scoring: the layers' own
                  determinism.warn_only(self.args.deterministic_kernels)):  # the mode generation was compiled in
                return super().generate_and_score(inputs)
        finally:
            drop_duplicate_input_grad_hooks(self.accelerator.unwrap_model(self.model))
            self._entropy_found = (self._recorder, self._capture_scoring)
            self._recorder, self._capture_scoring = None, None

    def _get_per_token_logps_and_entropies(self, model, *args, compute_entropy: bool = False, **kwargs):
        capture = self._capture_scoring is not None and not self._capture_scoring
        logps, entropies, aux = super()._get_per_token_logps_and_entropies(
            model, *args, compute_entropy=compute_entropy or capture, **kwargs
        )
        if capture:  # TRL's own old_per_token_logps pass: keep the entropy its fused head computed anyway
            self._capture_scoring.update(logps=logps, entropy=entropies)
            entropies = entropies if compute_entropy else None
        return logps, entropies, aux

    def generation_entropy(self, output: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
        (recorder, captured), self._entropy_found = self._entropy_found, (None, None)
        if recorder is not None:
            ids = output["completion_ids"]
            ent = recorder.entropy(ids.size(0), ids.size(1), ids.device)
            if ent is not None:
                self.entropy_source_used = "generation"
                return ent, None
            logger.warning_once("GMTS: no entropy was recorded during generation; falling back to a scoring pass.")
        if captured and captured.get("entropy") is not None:
            self.entropy_source_used = "trl_scoring_pass"
            return captured["entropy"], captured["logps"]
        return super().generation_entropy(output)

    # ------------------------------------------------------------------ how generation and the update run
    def training_step(self, model, inputs, num_items_in_batch=None):
        """TRL's step (generation, scoring, forward and backward with its checkpoint recompute); with
        `lora_autocast_inputs_on`, LoRA layers take their input in the autocast dtype (same numbers, fewer copies);
        with training_compile, the decoder layers run compiled (generation and scoring: see `generate_and_score`)."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(determinism.strict(self.args.deterministic_kernels))
            if self.lora_autocast_inputs_on:
                stack.enter_context(lora_input_casting(self.accelerator.unwrap_model(self.model), enabled=False))
            if self.training_layers:
                stack.enter_context(layer_forwards(self.training_layers, compiled=True))
            return super().training_step(model, inputs, num_items_in_batch)

    def _generate_single_turn(self, prompt_ids, *args, **kwargs):
        model = self.accelerator.unwrap_model(self.model_wrapped)
        with contextlib.ExitStack() as stack:
            if self.lora_autocast_inputs_on:  # generation runs without autocast: PEFT's cast is needed there
                stack.enter_context(lora_input_casting(model, enabled=True))
            if self.args.generation_merge_adapter and not self.use_vllm:
                stack.enter_context(merged_lora(model))
            stack.enter_context(decoding_options(model, self.args.generation_grouped_attention,
                                                 self.args.generation_deferred_stop,
                                                 self.args.generation_decode_kernel))
            loop = self.args.generation_decode_loop == "compiled_step"
            if self.args.generation_compile or loop:
                cache_len = compile_cache_length(prompt_ids, self.max_completion_length, self.pad_to_multiple_of)
                self.generation_config.max_cache_len = cache_len
                stack.enter_context(without_input_grad_hooks(model))
            keys = None
            if self.args.sampling_noise == "counter":  # a function of (seed, step, generation, mode) only
                place = self._noise_place()
                if loop:
                    keys = rollout_noise_keys(rows=len(prompt_ids), **place)
                else:
                    stack.enter_context(torch.random.fork_rng(devices=[model.device] if model.device.type == "cuda"
                                                              else [], device_type=model.device.type))
                    torch.manual_seed(generator_seed(**place))
            if loop:  # the recorder, if any, takes the entropy the compiled step computed
                stack.enter_context(with_decode_loop(model, cache_len, self._recorder,
                                                     self.args.generation_compile_regions, keys,
                                                     self.args.generation_fused_projections))
            elif self._recorder is not None:
                stack.enter_context(with_logits_processor(model, self._recorder))
            out = super()._generate_single_turn(prompt_ids, *args, **kwargs)
        if self.model.training:
            digests = self.rollout_digests.setdefault(str(self.state.global_step), [])
            digests.extend(completion_digest(ids) for ids in out[0])
        return out

    def _noise_place(self) -> dict:
        """Which generation this is ("counter" noise): seed, step, process, the generation's index within its step and
        mode, training or evaluation, and the key scheme's version."""
        train = self.model.training
        if train:  # TRL generates at micro-steps 0, generate_every, ... of an optimizer step's accumulation
            every = self.args.steps_per_generation * self.num_iterations
            generation = (self._step % self.args.gradient_accumulation_steps) // every
        else:  # one generation per evaluation batch, counted from each evaluation's start (`evaluate`)
            generation, self._eval_generations = self._eval_generations, self._eval_generations + 1
        return dict(seed=self.args.seed, step=self.state.global_step, process_index=self.accelerator.process_index,
                    generation=generation, train=train, version=self.args.counter_noise_version)

    def evaluate(self, *args, **kwargs):
        """TRL's evaluation; its "counter" noise restarts with it, so evaluating the same weights twice at one step
        draws the same samples."""
        self._eval_generations = 0
        return super().evaluate(*args, **kwargs)
