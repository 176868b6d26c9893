"""What a newcomer meets trying task math on a CPU, without a run: the CPU-sized config and its guide, eval.py -h on
the passes an evaluation makes, Minerva OCW skipped by a recorded setting, counts in the number they take, a run that
had nothing to learn from said so, --show's task numbers and hash prefixes told apart, a CPU run's provenance, and
recipe.py --help short, grouped and with the config's values. (The runs themselves: tests/test_math_task.py.)"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

import check
import eval as evaluation
import recipe
from gmts_recipe import recipe_config, tables
from gmts_recipe.speed_options import CUDA_ONLY, EAGER_STEP, options_that_ran
from gmts_recipe.stats import no_learning_signal
from gmts_recipe.verify.file import seeded_heldout
from gmts_recipe.verify.provenance import provenance_text
from results_files import rehash, seal_format_1
from test_check import fake_results, run_dir, unwrapped, write

ROOT = Path(__file__).resolve().parent.parent
CPU_FLAGS = ["--use_cpu", "true", "--bf16", "false"]


# ---------------------------------------------------------------------------- the CPU-sized config and its guide
def test_configs_math_cpu_is_task_math_at_a_cpus_size():
    """configs/math.yaml makes 64 rollouts of 1024 tokens a step; math-cpu.yaml 8 of 64 on the offline SmolLM2, a
    few steps, 10 MATH-500 problems once, Minerva OCW skipped (eval_ocw false, recorded in the config)."""
    r, train, model, name = recipe.parse(["--config", "configs/math-cpu.yaml", *CPU_FLAGS])
    assert (name, r.task, r.system_prompt, model.model_name_or_path) == ("math-cpu", "math", "boxed",
                                                                         "smollm2-135m-instruct")
    rollouts = train.per_device_train_batch_size * train.gradient_accumulation_steps
    assert rollouts <= 8 and train.max_completion_length <= 128 and train.max_steps <= 4
    assert r.n_heldout <= 10 and r.eval_samples == 1 and list(r.base_eval_seeds) == [0, 1] and not r.eval_ocw
    from gmts_recipe.run_setup import config_record, second_heldout

    assert config_record(r, train, model)["eval_ocw"] is False and second_heldout(r) is None


def test_the_guide_and_the_readme_give_the_cpu_command_with_its_measured_time():
    guide = (ROOT / "docs" / "guides" / "math.md").read_text()
    assert "python recipe.py --arm all --config configs/math-cpu.yaml" in guide
    section = guide.split("## On a CPU", 1)[1].split("\n## ", 1)[0]
    assert "measured" in section and "load average" in section and "nice" in section
    assert "configs/math-cpu.yaml" in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------------------- eval.py: the passes, Minerva OCW apart
def test_eval_help_explains_the_passes_base_eval_seeds_makes(capsys):
    with pytest.raises(SystemExit):  # argparse's -h
        evaluation.main(["-h"])
    out = capsys.readouterr().out
    assert "--base_eval_seeds S [S ...]" in out and "one full evaluation per seed" in out
    assert "--eval_ocw false" in out and "docs/config.md" in out and "--eval_ocw" in out.split("positional")[0]


def test_eval_ocw_is_for_task_math_only(capsys):
    with pytest.raises(recipe.RecipeError, match="eval_ocw is for task math"):
        recipe.parse(["--config", "configs/quickstart.yaml", "--eval_ocw", "false", *CPU_FLAGS])
    r, *_ = recipe.parse(["--config", "configs/math.yaml", "--eval_ocw", "false", *CPU_FLAGS])
    assert not r.eval_ocw


def test_counts_take_their_number():
    assert [tables.counted(n, "seed") for n in (0, 1, 2)] == ["0 seeds", "1 seed", "2 seeds"]
    results = fake_results(n=6, k=1)
    results["base"]["evals"] = results["base"]["evals"][:1]
    results = seal_format_1(rehash(results))
    text = tables.render(results)
    assert "(1 seed: " in text and "x 1 sample," in text and "1 samples" not in text and "1 seeds" not in text


# ---------------------------------------------------------------------------- nothing to learn from
def _log(rewards: list[float], zero_std: float = 1.0, grad: float = 0.0, loss: float = 0.0) -> list[dict]:
    return [{"step": i + 1, "reward": r, "frac_reward_zero_std": zero_std, "grad_norm": grad, "loss": loss}
            for i, r in enumerate(rewards)]


def test_no_learning_signal_says_why_an_arm_never_moved():
    assert "every training reward was 0" in no_learning_signal(_log([0.0, 0.0]))
    assert "grad norm and loss 0 at every step" in no_learning_signal(_log([0.0, 0.0]))
    assert "scored alike" in no_learning_signal(_log([1.0, 0.5]))  # every group all right or all wrong
    assert no_learning_signal(_log([0.0, 0.25], zero_std=0.5, grad=0.3)) is None  # some group had a spread
    assert no_learning_signal([{"step": 1, "grad_norm": 0.2}]) is None  # a log without rewards: nothing to say


@pytest.mark.parametrize("edit", [{"grad_norm": 0.31}, {"loss": 0.002}, {"frac_reward_zero_std": 0.75},
                                  {"grad_norm": None}, {"loss": None}, {"frac_reward_zero_std": True}],
                         ids=["grad norm", "loss", "share", "no grad norm", "no loss", "share a bool"])
def test_no_learning_signal_needs_no_gradient_and_no_loss_at_every_step(edit):
    """A log whose every step claims all rollouts scored alike (frac_reward_zero_std 1) while one step's grad norm or
    loss says it trained, or that does not log them, shows no lack of signal: the three agree at every step or the arm
    trained (verify.cell.check_apart lets only such arms sample alike)."""
    log = _log([0.25, 0.5, 0.5])
    assert "scored alike" in no_learning_signal(log)
    log[1] = {key: value for key, value in {**log[1], **edit}.items() if value is not None}
    assert no_learning_signal(log) is None


def test_check_says_why_a_flat_arm_is_flat(tmp_path, capsys):
    """Every reward 0 in training: the arms read flat, and a line under check.py's table says they never trained."""
    results = fake_results(n=20)
    for arm in ("ets", "gmts"):
        results["arms"][arm]["train_log"] = _log([0.0, 0.0, 0.0])
    results = seal_format_1(rehash(results))
    assert check.main([write(tmp_path, results), "--allow-unsampled"]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "Not trained (ETS, GMTS): every training reward was 0 (no rollout was right): every advantage was 0, " \
           "so no gradient (grad norm and loss 0 at every step); nothing was learned" in out
    assert "Not trained" not in tables.render(fake_results(n=20))  # arms with a signal: no such line


# ---------------------------------------------------------------------------- --show: a number is an index
def _drawn_run(tmp_path: Path) -> tuple[Path, list[int]]:
    """A run whose 60 held-out tasks are those its seeded split draws from a test pool of 300 (as MATH-500's lines are
    whatever n_heldout drew, so their numbers are not 0-59), their keys f"{i:016x}" for i in 0-59; and those numbers.
    """
    results = fake_results()
    results["data"]["test_pool"], results["data"]["train_pool"] = 300, 1000
    results["config"]["n_heldout"] = 60
    drawn = seeded_heldout(results, None)
    number = {i: drawn[pos] for pos, (i, _) in enumerate(results["data"]["heldout"])}
    results["data"]["heldout"] = [[number[i], key] for i, key in results["data"]["heldout"]]
    for ev in [*results["base"]["evals"], *(entry["eval"] for entry in results["arms"].values())]:
        for r in ev["records"]:
            r["task"] = number[r["task"]]
    return run_dir(tmp_path, seal_format_1(rehash(results))), drawn


def test_show_reads_a_number_as_the_tasks_index_never_as_a_hash(tmp_path, capsys):
    path, drawn = _drawn_run(tmp_path)
    hex_only = next(i for i in range(60) if i not in drawn and f"{i:016x}".isdigit())  # a key of digits, no index
    key = f"{hex_only:016x}"
    owner = drawn[hex_only]  # the task whose key it is
    assert check.main([str(path), "--show", str(owner)]) == 0
    assert capsys.readouterr().out.startswith(f"task {owner} (question hash {key})")
    assert check.main([str(path), "--show", key]) == 2  # digits only: an index, and none is this number
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"check.py: --show {key}: no task has index {hex_only} here (a number is a task's index")
    assert f"task {owner}'s hash starts {key} ({key}): --show key:{key}" in err
    assert "\n" not in err
    assert check.main([str(path), "--show", f"key:{key}"]) == 0
    assert capsys.readouterr().out.startswith(f"task {owner} ")
    assert check.main([str(path), "--show", f"{59:016x}"]) == 0  # a letter: a prefix of the hash
    assert capsys.readouterr().out.startswith(f"task {drawn[59]} ")
    assert check.main([str(path), "--show", "task-7"]) == 2
    assert "give a task's index (a number, e.g. 3) or the start of its hash" in capsys.readouterr().err


# ---------------------------------------------------------------------------- a CPU run's provenance
def test_a_cpu_runs_provenance_lists_what_ran_not_the_configs_gpu_options():
    options = {"use_cpu": True, "cudnn_attention": True, "generation_compile": True, "generation_deferred_stop": True,
               "generation_compile_regions": True, "lora_autocast_inputs": True, "generation_merge_adapter": True,
               "generation_grouped_attention": True, "generation_decode_loop": "compiled_step"}
    ran = options_that_ran(options, "cpu")
    assert not any(ran[k] for k in CUDA_ONLY) and ran["generation_decode_loop"] == EAGER_STEP
    assert ran["generation_merge_adapter"] and ran["generation_grouped_attention"]  # these run on a CPU too
    assert options_that_ran(options, "cuda") == options
    line = provenance_text({"commit": "abc", "options": ran})
    assert "generation_compile" not in line and "cudnn" not in line and "generation_decode_loop=compiled_step (eager)" \
        in line


# ---------------------------------------------------------------------------- recipe.py --help
def test_recipe_help_is_short_grouped_fast_and_shows_the_configs_values():
    """--help without the libraries: a screen or two, in groups, with the values the config gives (configs/paper.yaml's
    learning rate 1e-4, not TrainingArguments' 1e-06), and where the rest is (docs/config.md, --help-all)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-X", "importtime", "recipe.py", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert " trl" not in done.stderr and "| torch\n" not in done.stderr  # no library imported for the help
    out = done.stdout
    assert len(out.splitlines()) < 120 and len(out) < 12_000, (len(out.splitlines()), len(out))
    for heading in ("run:", "task and data:", "evaluation:", "model (TRL's ModelConfig):", "training (TRL's GRPOConfig):",
                    "token selection", "speed:"):
        assert f"\n{heading}" in out, heading
    assert "  --learning_rate 0.0001 " in out and "1e-06" not in out and "docs/config.md" in out
    assert "  --eval_ocw true (default)" in out and "configs/paper.yaml's" in out
    assert time.perf_counter() - started < 60  # the old help imported TRL and printed ~1,400 lines (6 s unloaded)


def test_recipe_help_shows_the_named_configs_values_and_the_command_lines(capsys):
    with pytest.raises(SystemExit):
        recipe_config.parse(["--config", "configs/math-cpu.yaml", "--max_steps", "2", "--help"])
    out = capsys.readouterr().out
    assert "the command line's over configs/math-cpu.yaml's" in out
    assert "  --max_steps 2 " in out and "  --task math " in out and "  --eval_ocw false " in out
    assert "  --model_name_or_path smollm2-135m-instruct " in out


def test_recipe_help_all_still_lists_every_field(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    with pytest.raises(SystemExit):
        recipe_config.parse(["--help-all"])
    out = capsys.readouterr().out
    assert "--per_device_train_batch_size" in out and "--adam_beta1" in out and len(out.splitlines()) > 500
