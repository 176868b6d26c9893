"""bench/determinism.py: the step-by-step comparison of two runs (first differing step, rollouts matched to the step
that trained on them), the command lines (the paper's levers, the setting), its refusals; end to end on the CPU with
the tiny model (slow): a run alone and two at once with deterministic_kernels on, every step identical."""

import json

import pytest

from bench_scripts import load_bench

det = load_bench("determinism")


def record(losses: list[float], digests: dict[str, list[str]]) -> dict:
    log = [{"step": i + 1, "loss": loss, "grad_norm": 0.1 * loss, "reward": 0.5, "step_time": 1.0 + i}
           for i, loss in enumerate(losses)]
    return {"status": "ok", "train_log": log, "rollout_digests": digests, "median_step_s": 1.0}


def test_compare_steps_finds_the_first_differing_step_and_ignores_wall_clock_fields():
    a = record([1.0, 2.0, 3.0], {"0": ["x"], "1": ["y"], "2": ["z"]})
    b = record([1.0, 2.0000001, 3.5], {"0": ["x"], "1": ["y"], "2": ["w"]})
    b["train_log"][0]["step_time"] = 9.0  # a wall-clock field: never expected to repeat
    c = det.compare_steps(a, b)
    assert c["identical"] is False and c["first_step_metrics_differ"] == 2 and c["first_step_rollouts_differ"] == 3
    step2 = c["steps"][1]
    assert step2["metrics_differing"] == ["grad_norm", "loss"] and step2["rollouts_same"] is True
    assert step2["loss"] == [2.0, 2.0000001]
    assert det.compare_steps(a, a)["identical"] is True


def test_a_failed_run_is_compared_as_unknown_and_the_cost_is_the_ratio_of_medians():
    ok = record([1.0, 2.0], {"0": ["x"], "1": ["y"]})
    runs = {"off": {"alone": ok, "shared": [ok, {"status": "failed", "reason": "boom"}]},
            "on": {"alone": {**ok, "median_step_s": 1.5}, "shared": [ok, ok]}}
    c = det.comparisons(runs["off"])
    assert c["shared-1 vs alone"]["identical"] is True and c["shared-2 vs alone"]["identical"] is None
    cost = det.cost(runs)
    assert cost["on_over_off_alone"] == 1.5 and cost["on_over_off_shared"] == 1.0


def test_every_run_gets_the_paper_levers_the_setting_and_no_evaluation(tmp_path):
    argv = det.run_argv(["--config", "c.yaml", "--generation_decode_kernel", "sdpa"], "on", tmp_path, "on-alone", 3)
    assert argv[:2] == ["--config", "c.yaml"]
    kernel = [i for i, a in enumerate(argv) if a == "--generation_decode_kernel"]
    assert [argv[i + 1] for i in kernel] == ["matmul", "sdpa"]  # the paper's, then the command line's (which wins)
    assert argv[argv.index("--sampling_noise") + 1] == "counter"
    assert argv[argv.index("--deterministic_kernels") + 1] == "true" and argv[argv.index("--max_steps") + 1] == "3"


def test_the_table_gives_each_setting_its_verdicts_step_times_and_failures(tmp_path, capsys):
    ok = record([1.0, 2.0], {"0": ["x"], "1": ["y"]})
    off = record([1.0, 2.5], {"0": ["x"], "1": ["y"]})
    runs = {"off": {"alone": ok, "shared": [ok, off]},
            "on": {"alone": {"status": "failed", "reason": "RecipeError: no"}, "shared": [ok, ok]}}
    result = {"measured": "2026-12-01 23:01 UTC", "runs": runs,
              "comparison": {s: det.comparisons(r) for s, r in runs.items()}}
    (tmp_path / "d.json").write_text(json.dumps(result))
    assert det.main(["--markdown", str(tmp_path / "d.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("| d.json | off | 2026-12-01 23:01 UTC | 1.00 | 1.00 | identical (2 steps) | differs from step 2 "
                        "(rollouts the same) | - |")
    assert lines[3] == ("| d.json | on | 2026-12-01 23:01 UTC | - | 1.00 | not compared (a run failed) | not compared "
                        "(a run failed) | RecipeError: no |")


@pytest.mark.parametrize("args", [["--settings", "onn"], ["--steps", "1"], []])
def test_bad_arguments_are_refused_in_one_line(tmp_path, capsys, args):
    with pytest.raises(SystemExit) as err:
        det.main([*args] + (["--out", str(tmp_path / "r.json")] if args else []))
    assert err.value.code == 2
    assert len([line for line in capsys.readouterr().err.splitlines() if "error" in line]) == 1


@pytest.mark.slow
def test_small_mode_alone_and_two_at_once_with_the_option_on(tmp_path):
    out = tmp_path / "det.json"
    assert det.main(["--small", "--steps", "2", "--settings", "on", "--out", str(out), "--work", str(tmp_path / "w")]) == 0
    r = json.loads(out.read_text())
    runs = r["runs"]["on"]
    for run in [runs["alone"], *runs["shared"]]:
        assert run["status"] == "ok", run
        assert run["deterministic_algorithms"] is True and run["cublas_workspace_config"] == ":4096:8"
        assert len(run["step_s"]) == 2 and len(run["train_log"]) == 2
    assert set(r["comparison"]["on"]) == {"shared-1 vs alone", "shared-2 vs alone", "shared-2 vs shared-1"}
    assert all(c["identical"] is True for c in r["comparison"]["on"].values())  # the CPU repeats
    assert r["cost"]["on_alone_median_step_s"] > 0 and r["cost"]["off_alone_median_step_s"] is None
