"""bench/step.py --small end to end on the CPU: every part of the step is measured, the parts add up, the profiles
are filled, and the JSON carries what a step row and an evaluation row of the cost table need."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from bench_scripts import load_bench

step = load_bench("step", "bench_step")

MEASURED_PARTS = ("generation", "reward", "forward", "backward", "optimizer")  # each wrapper must have fired


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """One --small run for every test here, with the bench-only options (off by default) on. The decode graph each
    evaluation call ran with is kept in GRAPH_SEEN_BY_EVALUATION; decode_loop.STEP_GRAPH is restored afterwards."""
    from gmts_recipe.generation import decode_loop

    out = tmp_path_factory.mktemp("step")
    real = step.evaluation

    def evaluation(*args, **kwargs):
        GRAPH_SEEN_BY_EVALUATION.append(decode_loop.STEP_GRAPH)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(step, "evaluation", evaluation)
        mp.setattr(decode_loop, "STEP_GRAPH", decode_loop.STEP_GRAPH)  # restored when the run is done
        assert step.main(["--small", "--steps", "2", "--host_profile", "--skip_guard_eval",
                          "--step_graph", "whole_step", "--out", str(out)]) == 0
    return out, json.loads((out / "step-profile.json").read_text())


GRAPH_SEEN_BY_EVALUATION: list[str] = []


def test_small_run_breaks_a_real_step_into_parts_that_sum_to_its_total(small_run):
    out, r = small_run
    s = r["step"]
    assert {"model", "rows", "total_s"} <= set(s) and s["rows"] == 16  # 2 microbatches of 8 rows
    assert s["steps_in_median"] == 1 and len(s["steps"]) == 2  # the profiled step is reported apart
    for row in s["steps"]:
        assert set(step.PARTS) <= set(row)
        assert all(row[p] >= 0 for p in step.PARTS), row  # host_other < 0 would mean parts overlap
        assert abs(sum(row[p] for p in step.PARTS) - row["total_s"]) <= s["sum_tolerance_s"]
        assert all(row[p] > 0 for p in MEASURED_PARTS), row
        assert len(row["forward_per_microbatch_s"]) == len(row["backward_per_microbatch_s"]) == 2
    assert s["total_s"] == s["median_step"]["total_s"] and s["entropy_source"] == "generation"
    assert s["generation"]["decode_steps"] >= 1 and s["generation"]["ms_per_token_step"] > 0

    sp = r["step_profile"]  # CPU operators stand in for kernels without CUDA
    assert sp["top"] and sp["items"] > 0 and {"forward", "backward", "optimizer"} <= set(sp["by_phase"])
    assert any(o["op"] == "aten::mm" and o["input_dtypes"][0] == "float" for o in sp["matmul_ops"])

    for profile in (r["generation_profile"], r["eval"]["profile"]):
        assert [p["new_tokens"] for p in profile["points"]] == [4, 8] and profile["top"]
        assert "error" not in profile["per_token_step"] and profile["per_token_step"]["items"] > 0
        assert set(profile["per_token_step"]["runtime_calls"]) == set(step.RUNTIME_CALLS)  # per step; 0 on a CPU

    e = r["eval"]
    assert {"model", "samples", "seconds"} <= set(e) and e["samples"] == e["rows_per_batch"] == 6
    assert e["first_call_s"] > 0 and e["seconds"] > 0 and e["decode_steps"] == 8
    assert set(e["dynamo"]) == {"first_call", "second_call", "profiled_calls"}
    assert r["dtypes"]["merged_weight_in_generation"] == "torch.float32"
    for name in ("step-profile.json", "step-profile.txt"):
        assert (out / name).stat().st_size < 2 * 2**20
    assert "| host_other |" in (out / "step-profile.txt").read_text()


@pytest.mark.slow
def test_eval_first_evaluates_a_fresh_base_model_before_training(tmp_path):
    assert step.main(["--small", "--steps", "2", "--eval_first", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "step-profile.json").read_text())
    assert r["order"] == "eval, then training" and r["eval"]["evaluated"].startswith("base model")
    assert r["eval"]["seconds"] > 0 and r["step"]["total_s"] > 0


@pytest.mark.slow  # inductor compiles the decode step and the update on the CPU: ~45 s
def test_the_compiled_decode_loop_and_training_compile_are_measured_and_recorded(tmp_path):
    """With the compiled options (and the projections fused) the step, its generation (entropy from the loop) and the
    evaluation (decode steps counted through the loop, which never calls model.generate) are all measured, and the
    options recorded."""
    assert step.main(["--small", "--steps", "2", "--generation_decode_loop", "compiled_step", "--training_compile",
                      "true", "--generation_fused_projections", "true", "--out", str(tmp_path)]) == 0
    r = json.loads((tmp_path / "step-profile.json").read_text())
    options = r["step"]["generation_options"]
    assert options["generation_decode_loop"] == "compiled_step" and options["training_compile"] is True
    assert options["generation_fused_projections"] is True and r["eval"]["fused_projections"] is True
    assert r["step"]["entropy_source"] == "generation"
    assert "error" not in r["eval"] and r["eval"]["decode_loop"] == "compiled_step"
    assert r["eval"]["decode_steps"] > 0 and r["eval"]["seconds"] > 0


def test_breakdown_leaves_host_other_as_the_remainder_and_shows_overlap_as_negative():
    part = {"dataloader": [0.1], "generation": [1.0], "reward": [0.2], "generate_and_score": [1.5],
            "forward": [0.3, 0.3], "backward": [0.5, 0.5], "grad_clip": [0.05], "optimizer": [0.1], "log_save": [0.05]}
    row = step.breakdown({**part, "total_s": 4.0})
    assert row["scoring_rest"] == pytest.approx(0.3) and row["forward"] == pytest.approx(0.6)
    assert row["host_other"] == pytest.approx(4.0 - 3.4)
    assert step.breakdown({**part, "total_s": 3.0})["host_other"] < 0  # a part counted twice cannot hide


@pytest.mark.parametrize("name, dtype", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "bf16"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "tf32"),
    ("ampere_sgemm_128x64_tn", "fp32"),
    ("cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", "bf16"),
    ("cutlass_80_tensorop_s1688gemm_128x128_16x4_tn_align4", "tf32"),
    ("ampere_fp16_s16816gemm_fp16_128x64_ldg8_f2f_tn", "fp16"),
    ("triton_tem_fused_mm_0", "triton"),
    ("triton_per_fused_add_mean_mul_pow_rsqrt_0", None),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", None),
])
def test_gemm_dtype_reads_the_input_type_from_matmul_kernel_names(name, dtype):
    assert step.gemm_dtype(name) == dtype


def test_runtime_calls_that_do_not_scale_with_tokens_show_as_noise_not_as_counts():
    """A difference of two runs can be negative (the allocator freed at another time): the text says ~0 and keeps the
    raw value beside it; calls that scale with tokens show their count."""
    point = {"new_tokens": 4, "decode_steps": 4, "busy_s": 0.1, "items": 10, "wall_s": 0.2}
    t = {"gpu_busy_ms": 1.0, "items": 5.0, "graph_launches": 1.0, "profiled_wall_ms": 4.0, "intercept_busy_ms": 2.0,
         "intercept_items": 3.0, "runtime_calls": {"cudaGraphLaunch": 1.0, "cudaMemcpyAsync": 2.0, "cudaFree": -13.46,
                                                    "cudaMalloc": 0.04, "cudaStreamSynchronize": 0.0}}
    text = "\n".join(step.profile_lines("profile", {"points": [point], "per_token_step": t, "top": []}))
    assert "cudaGraphLaunch 1.00" in text and "cudaMemcpyAsync 2.00" in text
    assert "cudaFree ~0 (noise: -13.46)" in text and "cudaMalloc ~0 (noise: 0.04)" in text
    assert "cudaStreamSynchronize" not in text.split("CUDA runtime calls per token step:")[1].splitlines()[0]


def test_host_profile_reports_python_functions_per_token_step_in_json_and_text(small_run):
    out, r = small_run
    h = r["generation_profile"]["host_profile"]
    assert [p["new_tokens"] for p in h["points"]] == [4, 8] and all(p["functions"] > 0 for p in h["points"])
    assert h["points"][1]["decode_steps"] > h["points"][0]["decode_steps"]
    t = h["per_token_step"]
    # Times here are differences of two wall-clock runs on a shared CPU: their signs are noise (one CI run saw the
    # longer call finish 10 ms sooner), so only structure and call counts are asserted; the arithmetic is tested
    # exactly on fixed numbers below (benchmarks are not timed asserts).
    assert math.isfinite(t["profiled_wall_ms"]) and math.isfinite(t["own_ms_all_functions"])
    assert len(t["top_own"]) == step.HOST_TOP_OWN and len(t["top_cumulative"]) == step.HOST_TOP_CUMULATIVE
    assert [row["own_ms"] for row in t["top_own"]] == sorted((row["own_ms"] for row in t["top_own"]), reverse=True)
    assert any(row["calls"] >= 1 for row in t["top_own"] + t["top_cumulative"])  # functions every token step calls
    text = (out / "step-profile.txt").read_text()
    assert "| function, by own time (tottime) | calls per token step |" in text
    assert "| function, by cumulative time | calls per token step |" in text
    assert f"| {t['top_own'][0]['function'][:140]} | {t['top_own'][0]['calls']:.2f} |" in text
    assert "inflated" in text and f"{t['profiled_wall_ms']:.3f} ms under cProfile" in text


def test_host_per_token_step_is_the_difference_of_the_two_calls_over_the_extra_token_steps():
    short = {"decode_steps": 4, "wall_s": 0.10,
             "functions": {"f": {"calls": 8, "own_s": 0.040, "cumulative_s": 0.050},
                           "once": {"calls": 1, "own_s": 0.010, "cumulative_s": 0.090}}}
    long = {"decode_steps": 8, "wall_s": 0.14,
            "functions": {"f": {"calls": 16, "own_s": 0.080, "cumulative_s": 0.100},
                          "once": {"calls": 1, "own_s": 0.010, "cumulative_s": 0.130},
                          "late": {"calls": 4, "own_s": 0.002, "cumulative_s": 0.002}}}
    t = step.host_per_token_step([short, long])
    rows = {row["function"]: row for row in t["top_own"]}
    assert t["profiled_wall_ms"] == pytest.approx(10.0) and t["functions"] == 3
    assert rows["f"] == pytest.approx({"function": "f", "calls": 2.0, "own_ms": 10.0, "cumulative_ms": 12.5})
    assert rows["once"]["calls"] == 0 and rows["once"]["cumulative_ms"] == pytest.approx(10.0)
    assert rows["late"]["calls"] == 1.0  # only the long call ran it: counted from zero
    assert [row["function"] for row in t["top_own"]] == ["f", "late", "once"]
    assert "did not grow" in step.host_per_token_step([short, short])["error"]


def test_skip_guard_eval_runs_later_generations_in_the_stance_and_records_itself(small_run):
    out, r = small_run
    o = r["bench_options"]
    assert o["host_profile"] is True and o["skip_guard_eval"] is True
    c = o["skip_guard_eval_calls"]
    # 3 training steps (--steps 2 and the profiled one), the first with guards; 2 torch-profiler and 2 cProfile calls
    assert (c["calls_with_guards"], c["calls_with_a_new_shape"], c["calls_in_stance"]) == (1, 0, 2 + 2 + 2)
    assert "skip_guard_eval on (6 generation calls under torch.compiler.set_stance" in (
        out / "step-profile.txt").read_text()


def test_skip_guard_eval_enters_the_stance_only_for_shapes_that_compiled():
    """Only calls after the first step whose rows and static cache a guarded call compiled skip the guards."""
    in_stance = torch._dynamo.eval_frame._is_skip_guard_eval_unsafe_stance
    trainer = SimpleNamespace(args=SimpleNamespace(generation_compile=True), max_completion_length=8,
                              pad_to_multiple_of=None, _generate_single_turn=lambda prompt_ids, *a, **k: in_stance())
    clock = SimpleNamespace(steps=[])
    record = step.skip_guard_eval_after_first_step(trainer, clock)
    short, long = [[0] * 10] * 4, [[0] * 300] * 4  # static cache 256 and 512
    assert trainer._generate_single_turn(short) is False  # the first step compiles: guards on
    clock.steps.append({})
    assert trainer._generate_single_turn(short) is True
    assert trainer._generate_single_turn(long) is False  # a larger cache: not compiled yet
    assert trainer._generate_single_turn(long) is True and trainer._generate_single_turn(short) is True
    assert trainer._generate_single_turn(short * 2) is False  # other rows
    assert in_stance() is False  # left again after each call
    assert (record["calls_with_guards"], record["calls_with_a_new_shape"], record["calls_in_stance"]) == (3, 2, 3)


def test_bench_only_options_are_off_by_default():
    args, _ = step.parse_args(["--out", "x"])
    assert args.host_profile is False and args.skip_guard_eval is False and args.step_graph == "cudagraph_trees"


def test_the_whole_step_graph_is_recorded_and_compared_as_an_option(small_run, tmp_path, capsys):
    """--step_graph whole_step sets decode_loop.STEP_GRAPH for the training generation and is written to bench_options;
    the evaluation (another sampler, which a recording refuses) runs with cudagraph trees. The text report and
    --compare name it; files from before it, or from before another option that ran off, name nothing."""
    out, r = small_run
    assert r["bench_options"]["step_graph"] == "whole_step"
    assert GRAPH_SEEN_BY_EVALUATION == ["cudagraph_trees"] and r["eval"]["step_graph"] == "cudagraph_trees"
    assert "error" not in r["eval"]
    assert step.options_line(r["bench_options"]).endswith(", step_graph whole_step.")
    old = json.loads(json.dumps(r))
    del old["bench_options"]["step_graph"]  # as a file from before the option
    old["step"]["generation_options"].pop("use_liger_kernel", None)  # ... and from before this one (run off here)
    assert "step_graph" not in step.options_line(old["bench_options"])
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "whole.json").write_text(json.dumps(r))
    assert step.main(["--compare", str(tmp_path / "old.json"), str(tmp_path / "whole.json")]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]
    assert r["step"]["generation_options"]["use_liger_kernel"] is False
    assert rows[0][1] == "-" and rows[1][1] == "step_graph whole_step"
    with pytest.raises(SystemExit):
        step.parse_args(["--out", "x", "--step_graph", "whole"])


def test_compare_tabulates_each_profile_with_the_options_it_changed(small_run, tmp_path, capsys):
    """--compare on the small run and a copy with one option flipped and its decode slower: one row each, the first
    changes nothing, the second names the flipped option and carries its own per-token-step numbers."""
    out, r = small_run
    other = json.loads(json.dumps(r))
    other["step"]["generation_options"]["deterministic_kernels"] = True
    other["generation_profile"]["per_token_step"]["items"] = 1235.4
    other["step"]["generation"]["ms_per_token_step"] = 5.0
    other["step"]["steps"][-1]["generation_info"]["completion_tokens_mean"] += 1.0  # its last step decoded otherwise
    (tmp_path / "det.json").write_text(json.dumps(other))
    assert step.main(["--compare", str(out / "step-profile.json"), str(tmp_path / "det.json")]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")][1:]  # after the header
    assert [row[0] for row in rows] == ["| step-profile.json", "| det.json"]
    assert rows[0][1] == "-" and rows[1][1] == "deterministic_kernels True"
    assert rows[1][4] == "5.00" and rows[1][6] == "1235"
    assert rows[0][4] == f"{r['step']['generation']['ms_per_token_step']:.2f}"
    n = len(r["step"]["steps"])
    assert (rows[0][-1], rows[1][-1]) == (f"{n} of {n} |", f"{n - 1} of {n} |")


def test_compare_refuses_a_missing_file_in_one_line(tmp_path, capsys):
    assert step.main(["--compare", str(tmp_path / "nowhere.json")]) == 2
    assert capsys.readouterr().err == f"step.py: --compare: {tmp_path / 'nowhere.json'}: no such file\n"
    (tmp_path / "broken.json").write_text("{")
    assert step.main(["--compare", str(tmp_path / "broken.json")]) == 2
    assert capsys.readouterr().err.startswith(f"step.py: --compare: {tmp_path / 'broken.json'}: not valid JSON (")


def test_kernel_census_is_each_names_growth_per_added_step():
    """The token step's work items by name: long minus short over the added steps, names that do not grow by half an
    item per step left out (the prefill's, a one-off), most busy first, ties by name."""
    short = {"a": [16, 1.6], "b": [1, 5.0], "c": [2, 0.2], "e": [3, 0.3]}
    long = {"a": [40, 4.0], "b": [1, 5.0], "c": [14, 1.4], "d": [24, 2.4], "e": [14, 1.4]}
    census = step.kernel_census(short, long, 24)
    assert [(r["name"], r["per_step"], round(r["us_per_step"], 6)) for r in census] == [
        ("a", 1.0, 100.0), ("d", 1.0, 100.0), ("c", 0.5, 50.0)]  # b: no growth; e: 11/24 < 0.5
    lines = step.census_lines(census)
    assert lines[-1] == "(3 names, 2 items per token step; names growing by less than 0.5 per step left out)"
    assert step.census_lines(None) == [] and step.census_lines([]) == []


def test_small_run_has_a_kernel_census_of_its_token_step(small_run):
    """The small run's generation profile names the work items of one token step; their counts add up to the items per
    token step but for the names left out (each of those grows by less than CENSUS_MIN_COUNT per step)."""
    out, r = small_run
    g = r["generation_profile"]
    census, t = g["per_token_step"]["kernels"], g["per_token_step"]
    a, b = g["points"][0], g["points"][-1]
    steps = b["decode_steps"] - a["decode_steps"]
    left_out = [(b["by_name"].get(n, [0])[0] - a["by_name"].get(n, [0])[0]) / steps
                for n in b["by_name"].keys() | a["by_name"].keys() if n not in {row["name"] for row in census}]
    assert census and all(row["per_step"] >= step.CENSUS_MIN_COUNT for row in census)
    assert all(x < step.CENSUS_MIN_COUNT for x in left_out)
    assert sum(row["per_step"] for row in census) + sum(left_out) == pytest.approx(t["items"])
    assert "| work items of one token step" in (out / "step-profile.txt").read_text()


def test_decode_table_names_the_option_its_rows_and_the_share_of_identical_completions(tmp_path, capsys):
    """--decode_table: one row per setting of the option (pass@1 where every row scored its samples), then the speedup
    and the identical share with what that share means for this option."""
    rows = [{"label": "generate", "ms_per_token_step": 20.0, "seconds": 5.12, "pass@1": 0.5},
            {"label": "compiled step", "ms_per_token_step": 10.04, "seconds": 2.56, "pass@1": 0.5125}]
    result = {"option": "decode_loop", "model": "m", "samples": 64, "new_tokens": 256, "device": "cpu",
              "speedup": 2.0, "identical_completions": 0.25, "rows": rows}
    (tmp_path / "d.json").write_text(json.dumps(result))
    assert step.main(["--decode_table", str(tmp_path / "d.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:4] == ["| decoding loop | ms per token step | batch (s) | pass@1 |", "|---|---|---|---|",
                         "| generate | 20.0 | 5.12 | 0.500 |", "| compiled step | 10.0 | 2.56 | 0.512 |"]
    assert lines[5].startswith("m, 64 samples x 256 tokens on cpu: 2.00x. Identical completions at the same seed: 25.0% (")
    rows[0].pop("pass@1")
    (tmp_path / "d.json").write_text(json.dumps(result))
    assert step.main(["--decode_table", str(tmp_path / "d.json")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "| decoding loop | ms per token step | batch (s) |"


def test_task_table_gives_each_difficulty_and_prompt_its_base_pass_at_1(tmp_path, capsys):
    rows = [{"difficulty": d, "prompt": "steps", "temperature": 1.0, "pass@1": p, "n": 8, "mean_length": 90.4}
            for d, p in ((0, 0.375), (1, 0.125))]
    results = {"model": "m", "device": "cpu", "max_new_tokens": 128, "rows": rows}
    (tmp_path / "t.json").write_text(json.dumps(results))
    assert step.main(["--task_table", str(tmp_path / "t.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Base pass@1 of m on the generated task (8 tasks, 1 sample each, 128 new tokens, device cpu):"
    assert lines[-2:] == ["| 0 | steps | 1.0 | 37.5% | 90 |", "| 1 | steps | 1.0 | 12.5% | 90 |"]


@pytest.mark.parametrize("flag", ["--decode_table", "--task_table"])
def test_the_tables_refuse_a_missing_file_or_a_second_one_in_one_line(tmp_path, capsys, flag):
    assert step.main([flag, str(tmp_path / "missing.json")]) == 2
    assert step.main([flag, "a.json", "b.json"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith(f"step.py: {flag}: ") and "missing.json" in err[0]
    assert err[1] == f"step.py: {flag} needs one results file"
