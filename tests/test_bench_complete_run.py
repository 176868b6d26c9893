"""bench/complete_run.py: one recipe.py process timed start to exit, in a results directory of its own."""

import json
import subprocess
import sys
from pathlib import Path

from bench_scripts import assert_refuses_bad_json_files, load_bench

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ["--config", "configs/smoke.yaml"]


def _module():
    return load_bench("complete_run")


def _results(arms=("ets", "gmts"), compile_seconds: bool = True) -> dict:
    """compile_seconds False: a run of a recipe.py from before it recorded them."""
    options = {"generation_grouped_attention": True, "generation_deferred_stop": True,
               "generation_decode_kernel": "matmul", "generation_decode_loop": "compiled_step",
               "training_compile": True}
    return {"config": {"model_name_or_path": "m", "per_device_train_batch_size": 32,
                       "gradient_accumulation_steps": 2, "gradient_checkpointing": False},
            "versions": {"gpu": "NVIDIA H200", "gpus": 1},
            "base": {"evals": [{"seconds": {"generation": 28.0, "scoring": 2.0}, "seed": seed, "k": 4,
                                "records": [{}] * 1319,
                                **({"compile_seconds": c} if compile_seconds else {})}
                               for seed, c in zip((0, 1, 2), (33.0, 0.0, 0.5))]},
            "arms": {arm: {"wall_minutes": 1.5, "generation_options": options,
                           "train_log": [{"step": 1, "step_time": first}, {"step": 2, "step_time": 1.25}],
                           **({"train_compile_seconds": train} if compile_seconds else {}),
                           "eval": {"pass@1": 0.5, "seed": 0, "k": 4, "records": [{}] * 1319,
                                    "seconds": {"generation": gen, "scoring": 1.0},
                                    **({"compile_seconds": ev} if compile_seconds else {})}}
                     for arm, first, train, ev, gen in zip(arms, (122.5, 1.5), (121.0, 0.25), (21.0, 0.0),
                                                           (41.0, 20.0))}}


def test_a_run_is_timed_as_one_process_and_summarized(tmp_path, monkeypatch):
    mod = _module()
    results_dir = tmp_path / "fresh"
    seen = {}

    def fake_recipe(cmd, cwd):  # recipe.py writes results.json where run_dir says
        seen["cmd"] = cmd
        path = results_dir / "smoke" / "results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(_results()))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(mod.subprocess, "run", fake_recipe)
    cache = tmp_path / "inductor-cache"  # a fresh machine's: cold
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(cache))
    out = tmp_path / "complete-run.json"
    assert mod.main(["--out", str(out), "--", *SMOKE, "--results_dir", str(results_dir)]) == 0
    assert seen["cmd"][1:4] == [str(ROOT / "recipe.py"), "--arm", "ets,gmts"]
    r = json.loads(out.read_text())
    assert r["wall_s"] > 0 and r["gpu_minutes"] == r["wall_s"] / 60 and r["returncode"] == 0
    assert (r["model"], r["rows"], r["gradient_checkpointing"]) == ("m", 64, False)
    assert r["base_eval_s"] == [30.0] * 3 and r["arm_wall_minutes"] == {"ets": 1.5, "gmts": 1.5}
    assert r["generation_options"]["generation_decode_loop"] == "compiled_step"
    # compiling, per phase and in all: 33 + 0 + 0.5 (base) + 121 + 21 (ETS) + 0.25 + 0 (GMTS); the first steps
    assert r["base_eval_compile_s"] == [33.0, 0.0, 0.5]
    assert r["arm_compile_s"] == {"ets": {"train": 121.0, "eval": 21.0}, "gmts": {"train": 0.25, "eval": 0.0}}
    assert r["compile_s"] == 175.75 and r["first_step_s"] == {"ets": 122.5, "gmts": 1.5}
    assert r["median_step_s"] == {"ets": 1.25, "gmts": 1.25}  # the steps after the first
    assert r["compile_cache"] == {"dir": str(cache), "warm": False}
    # every full evaluation in the order it ran, generation + scoring, with its compile seconds
    assert [(e["phase"], e["seed"], e["samples"], e["seconds"], e["compile_seconds"]) for e in r["evaluations"]] == [
        ("base", 0, 5276, 30.0, 33.0), ("base", 1, 5276, 30.0, 0.0), ("base", 2, 5276, 30.0, 0.5),
        ("ets", 0, 5276, 42.0, 21.0), ("gmts", 0, 5276, 21.0, 0.0)]


def test_an_earlier_run_is_summarized_again_from_its_results_keeping_what_only_its_timing_knew(tmp_path):
    mod = _module()
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_results(compile_seconds=False)))
    out = tmp_path / "complete-run.json"
    out.write_text(json.dumps({"wall_s": 436.0, "returncode": 0, "recipe_argv": ["--arm", "ets,gmts", "--seed", "3"],
                               "base_eval_s": [1.0]}))  # an older summary: no evaluations, no compile cache
    assert mod.main(["--out", str(out), "--from_results", str(results)]) == 0
    r = json.loads(out.read_text())
    assert (r["wall_s"], r["returncode"], r["recipe_argv"]) == (436.0, 0, ["--arm", "ets,gmts", "--seed", "3"])
    assert r["base_eval_s"] == [30.0] * 3 and len(r["evaluations"]) == 5 and "compile_cache" not in r
    assert r["evaluations"][3]["compile_seconds"] is None  # that recipe.py did not record it
    assert mod.main(["--out", str(tmp_path / "none.json"), "--from_results", str(results)]) == 2
    (tmp_path / "broken.json").write_text("{")  # a broken file is one line too, not a traceback
    assert mod.main(["--out", str(out), "--from_results", str(tmp_path / "broken.json")]) == 2


def test_the_compile_cache_is_warm_once_it_holds_a_graph(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    mod = _module()
    assert mod.compile_cache() == {"dir": str(tmp_path), "warm": False}
    (tmp_path / "fxgraph").mkdir()
    assert mod.compile_cache()["warm"] is False  # an empty folder holds nothing
    (tmp_path / "fxgraph" / "ab").mkdir()
    assert mod.compile_cache()["warm"] is True


def test_a_run_of_a_recipe_without_compile_seconds_says_unrecorded():
    r = _module().summary(_results(compile_seconds=False), 300.0, 0, [])
    assert r["compile_s"] is None and r["base_eval_compile_s"] == [None] * 3
    assert r["arm_compile_s"]["ets"] == {"train": None, "eval": None} and r["first_step_s"]["gmts"] == 1.5


def test_a_results_directory_with_cached_base_evaluations_or_an_arm_flag_is_refused(tmp_path, capsys, monkeypatch):
    """The first refusal as a user meets it (the script in a fresh process), the second through main() here."""
    (tmp_path / "used" / "base-evals").mkdir(parents=True)
    argv = ["--out", str(tmp_path / "o.json"), "--", *SMOKE, "--results_dir", str(tmp_path / "used")]
    done = subprocess.run([sys.executable, "bench/complete_run.py", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "base-evals exists" in lines[0], done.stderr[-2000:]
    assert not (tmp_path / "o.json").exists()

    monkeypatch.chdir(ROOT)
    argv = ["--out", str(tmp_path / "o.json"), "--", *SMOKE, "--results_dir", str(tmp_path / "new"), "--arm", "gmts"]
    assert _module().main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no --arm after '--'" in lines[0], lines
    assert not (tmp_path / "o.json").exists()


def test_the_timed_runs_table_reads_every_number_off_the_files(tmp_path, capsys):
    mod = _module()
    ok = {**mod.summary(_results(), 300.0, 0, []), "compile_cache": {"dir": "/c", "warm": True}}
    ok["pass@1"] = {"ets": 0.5, "gmts": 0.5375}
    ok["median_step_s"]["gmts"] = None  # a log of one step
    older = {**mod.summary(_results(compile_seconds=False), 436.2, 0, [])}  # no compile seconds, no cache
    del older["median_step_s"]  # a summary from before it recorded them
    crashed = {**ok, "returncode": 1}
    regions = {**ok, "generation_options": {**ok["generation_options"], "training_compile": False,
                                            "generation_compile_regions": True}}
    paths = []
    for name, d in (("warm.json", ok), ("older.json", older), ("crashed.json", crashed), ("regions.json", regions)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(d))
    assert mod.main(["--table", *map(str, paths)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| " + " | ".join(mod.TABLE_HEADER) + " |" and lines[1] == "|---" * 12 + "|"
    assert lines[2:] == [
        "| warm.json | on | off | warm | 5.00 | 176 | 30 | 122.5, 1.5 | 1.25, - | 1.50, 1.50 | 50.0, 53.8 | +3.8 |",
        "| older.json | on | off | - | 7.27 | - | 30 | 122.5, 1.5 | -, - | 1.50, 1.50 | 50.0, 50.0 | +0.0 |",
        "| crashed.json | recipe.py exited 1: not a complete run |",
        "| regions.json | off | on | warm | 5.00 | 176 | 30 | 122.5, 1.5 | 1.25, - | 1.50, 1.50 | 50.0, 53.8 | +3.8 |",
        "", mod.TABLE_NOTE]
    assert_refuses_bad_json_files(mod.main, "--table", tmp_path, capsys)
