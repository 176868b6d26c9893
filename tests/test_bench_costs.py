"""bench/costs.py: the real-model rows of bench/results-h200.json are what the script computes from committed files."""

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench_scripts import load_bench

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results-h200.json"


def _bench(name: str):
    return load_bench(name)


def _costs():
    return _bench("costs")


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _profile(grouped: bool, total: float, eval_s: float, options: dict | None = None, rows: int = 64,
             steps: list[float] | None = None) -> dict:
    """options: bench/step.py's generation_options (None: a profile from before it recorded them); steps: every
    step's total (None: a profile from before it recorded them)."""
    step = {"model": "m", "rows": rows, "total_s": total, "first_step_s": steps[0] if steps else 20.0,
            "steps_in_median": 3, "median_step": {"generation": 1.25, "forward": 0.25, "backward": 0.75},
            **({} if options is None else {"generation_options": options}),
            **({} if steps is None else {"steps": [{"total_s": t} for t in steps]})}
    return {"step": step, "eval": {"model": "m", "samples": 880, "seconds": eval_s, "first_call_s": 30.0,
                                   "grouped_attention": grouped, "full_test_estimate_s": 6 * eval_s}}


def _arm(steps: list[float], gen_s: float, wall: float, grouped: bool | None) -> dict:
    options = {"generation_compile": True}
    if grouped is not None:  # None: a cell from before the switch existed
        options["generation_grouped_attention"] = grouped
    return {"train_log": [{"step_time": s} for s in steps], "wall_minutes": wall, "generation_options": options,
            "eval": {"k": 4, "records": [{}] * 1319, "seconds": {"generation": gen_s, "scoring": 2.0}}}


def _cell(arms: dict, batch: int = 32) -> dict:
    return {"config": {"model_name_or_path": "m", "per_device_train_batch_size": batch,
                       "gradient_accumulation_steps": 2}, "versions": {"gpus": 1}, "arms": arms}


def _fixture(root: Path) -> None:
    _write(root / "bench" / "step-profile-h200-on.json", _profile(True, 2.5, 6.5))
    _write(root / "bench" / "step-profile-h200-off.json", _profile(False, 3.5, 19.5))
    _write(root / "bench" / "step-profile-h200-all-levers.json", _profile(True, 2.0, 6.0, {
        "generation_grouped_attention": True, "generation_deferred_stop": True, "gradient_checkpointing": False}))
    _write(root / "bench" / "step-profile-h200-all-levers-matmul.json", _profile(True, 1.75, 5.0, {
        "generation_grouped_attention": True, "generation_deferred_stop": True, "gradient_checkpointing": False,
        "generation_decode_kernel": "matmul"}))
    every_lever = {"generation_grouped_attention": True, "generation_deferred_stop": True,
                   "gradient_checkpointing": False, "generation_decode_kernel": "matmul"}
    _write(root / "bench" / "step-profile-h200-decode-loop.json", _profile(True, 1.6, 4.8, {
        **every_lever, "generation_decode_loop": "compiled_step"}, steps=[40.0, 1.6, 1.6]))
    _write(root / "bench" / "step-profile-h200-decode-loop-compile.json", _profile(True, 1.25, 4.0, {
        **every_lever, "generation_decode_loop": "compiled_step", "training_compile": True},
        steps=[20.0, 10.0, 1.25, 1.25]))
    _write(root / "bench" / "step-profile-h200-compile-only.json", _profile(True, 1.0, 4.0, {  # no column
        **every_lever, "training_compile": True}))
    _write(root / "bench" / "step-profile-h200-rows32.json", _profile(True, 2.25, 7.5, {  # the scaling study's
        "generation_grouped_attention": True, "generation_deferred_stop": False, "gradient_checkpointing": True}, 32))
    _write(root / "results" / "qwen" / "earlier-8rows" / "results.json", _cell({  # 8 rows per step: no 64-row row
        "ets": _arm([9.0, 1.0, 1.0], 30.0, 1.0, True), "gmts": _arm([9.0, 1.0, 1.0], 30.0, 1.0, True)}, batch=4))
    _write(root / "results" / "qwen" / "cell-on" / "results.json", _cell({
        "ets": _arm([30.0, 2.0, 3.0, 2.5], 30.0, 2.5, True),
        "gmts": _arm([3.0, 2.25, 2.75], 46.0, 2.25, True),
        "grpo": _arm([9.0, 4.0, 5.0, 6.0, 7.0], 38.0, 3.0, True)}))
    _write(root / "results" / "qwen" / "paper-lr0.0002-s17" / "results.json", _cell({  # no switch: off
        "ets": _arm([25.0, 4.0], 118.0, 5.0, None), "gmts": _arm([25.0, 3.75], 130.0, 5.5, None)}))
    # costs.SHARED says s18's arms shared a GPU: rows kept, no complete run, out of the medians
    _write(root / "results" / "qwen" / "paper-lr0.0001-s18" / "results.json", _cell({
        "ets": _arm([25.0, 7.0], 280.0, 10.0, None), "gmts": _arm([25.0, 7.0], 280.0, 10.0, None)}))
    timed = {"model": "m", "rows": 64, "gpus": 1, "gpu_minutes": 4.75, "wall_s": 285.0, "returncode": 0,
             "gradient_checkpointing": False, "generation_options": {
                 "generation_grouped_attention": True, "generation_deferred_stop": True,
                 "generation_decode_kernel": "matmul", "generation_decode_loop": "compiled_step",
                 "training_compile": True}}
    _write(root / "bench" / "complete-run-h200.json", {**timed, "compile_s": 174.0,
                                                        "first_step_s": {"ets": 122.5, "gmts": 1.5},
                                                        "evaluations": [
        {"phase": p, "seed": 0, "samples": 5276, "seconds": s, "compile_seconds": 0.0}
        for p, s in (("base", 54.0), ("base", 20.0), ("base", 21.0), ("ets", 42.0), ("gmts", 20.5))]})
    _write(root / "bench" / "complete-run-h200-crashed.json", {**timed, "gpu_minutes": 1.0, "returncode": 1,
                                                                "evaluations": [{"phase": "base", "seed": 0,
                                                                                 "samples": 5276, "seconds": 99.0}]})
    # the same levers again on the machine that had compiled them (complete_run.py's compile_cache: warm)
    _write(root / "bench" / "complete-run-h200-warm.json", {**timed, "gpu_minutes": 3.5, "compile_s": 30.0,
                                                             "first_step_s": {"ets": 20.0, "gmts": 1.5},
                                                             "compile_cache": {"dir": "/c", "warm": True}})
    # decoder layers as nested compile regions: a column of their own (a faster run must not enter the loop column's
    # median)
    _write(root / "bench" / "complete-run-h200-regions.json", {**timed, "gpu_minutes": 2.0, "generation_options": {
        **timed["generation_options"], "training_compile": False, "generation_compile_regions": True}})
    # from a recipe.py before compile seconds were recorded (and of 32 rows: no row of the table)
    _write(root / "bench" / "complete-run-h200-older.json", {**timed, "rows": 32, "gpu_minutes": 9.0})
    _write(root / "results" / "qwen" / "base-evals" / "h.json", {
        "eval_config": {"model": {"model_name_or_path": "m"}},
        "evals": [{"seed": 0, "k": 4, "records": [{}] * 1319, "seconds": {"generation": 146.0, "scoring": 2.0}}]})


def test_rows_and_medians_on_fixture_files(tmp_path):
    costs = _costs()
    _fixture(tmp_path)
    m = costs.measure(tmp_path)
    by = {(r.get("cell"), r.get("arm"), r["grouped_attention"], r["rows"], r["deferred_stop"], r["decode_kernel"]): r
          for r in m["e2e"] if r["decode_loop"] == "transformers" and not r["training_compile"]}
    assert by[(None, None, True, 64, False, "sdpa")] == {
        "model": "m", "rows": 64, "total_s": 2.5, "first_step_s": 20.0, "steps": 3, "generation_s": 1.25,
        "forward_s": 0.25, "backward_s": 0.75, "grouped_attention": True, "deferred_stop": False,
        "gradient_checkpointing": True, "decode_kernel": "sdpa", "decode_loop": "transformers",
        "training_compile": False, "compile_regions": False, "fused_projections": False,
        "deterministic_kernels": False, "source": "bench/step-profile-h200-on.json",
        "measured_by": "bench/step.py"}
    assert by[(None, None, False, 64, False, "sdpa")]["total_s"] == 3.5
    assert costs.levers(by[(None, None, True, 64, True, "sdpa")]) == "all"
    assert costs.levers(by[(None, None, True, 64, True, "matmul")]) == "matmul"
    assert costs.levers({**by[(None, None, True, 64, False, "sdpa")], "decode_kernel": "matmul"}) is None  # no column
    assert costs.levers(by[(None, None, True, 32, False, "sdpa")]) == "on"  # a column, but the table keeps 64 rows
    loop = [r for r in m["e2e"] if r.get("decode_loop") == "compiled_step"]
    assert sorted(costs.levers(r) for r in loop) == ["compiled", "loop"]
    assert [r.get("step_times_s") for r in loop if costs.levers(r) == "loop"] == [
        [40.0, 1.6, 1.6]]
    assert costs.levers({**loop[0], "deferred_stop": False}) is None  # the loop without every lever: no column
    by = {(r.get("cell"), r.get("arm"), r["grouped_attention"]): r for r in m["e2e"] if r["rows"] == 64}
    ets = by[("cell-on", "ets", True)]
    assert (ets["total_s"], ets["first_step_s"], ets["steps"], ets["rows"]) == (2.5, 30.0, 3, 64)
    assert by[("cell-on", "gmts", True)]["total_s"] == 2.5  # median of 2.25 and 2.75: the first step left out
    assert by[("cell-on", "grpo", True)]["total_s"] == 5.5
    assert by[("paper-lr0.0002-s17", "ets", False)]["arms_per_gpu"] == 1
    assert by[("paper-lr0.0001-s18", "ets", False)]["arms_per_gpu"] == 2
    evals = {(r.get("cell"), r.get("arm"), r["grouped_attention"]): r for r in m["evaluation"]
             if r.get("rows", 64) == 64 and not r.get("deferred_stop")}
    assert (evals[("cell-on", "ets", True)]["samples"], evals[("cell-on", "ets", True)]["seconds"]) == (5276, 32.0)
    assert evals[(None, None, True)]["samples"] == 880 and evals[(None, None, True)]["seconds"] == 6.5
    assert evals[(None, "base", False)]["seconds"] == 148.0
    runs = {r["cell"]: r for r in m["complete_run"]}
    assert set(runs) == {"cell-on", "paper-lr0.0002-s17"}  # s18 shared its GPU; earlier-8rows is not 64 rows
    assert runs["cell-on"]["base_eval_estimate_s"] == 40.0  # mean of 32 and 48 s
    assert runs["cell-on"]["gpu_minutes"] == 2.5 + 2.25 + 3 * 40.0 / 60
    assert runs["paper-lr0.0002-s17"]["gpu_minutes"] == 5.0 + 5.5 + 3 * 126.0 / 60
    timed = {r["source"]: r for r in m["complete_run_timed"]}
    assert set(timed) == {"bench/complete-run-h200.json", "bench/complete-run-h200-older.json",
                          "bench/complete-run-h200-warm.json", "bench/complete-run-h200-regions.json"}  # not the crashed
    assert costs.levers(timed["bench/complete-run-h200-regions.json"]) == "regions"
    assert costs.levers({**timed["bench/complete-run-h200-regions.json"], "compile_regions": False}) == "loop"
    # fused projections: no column until a GPU measured them (a faster row must not enter another column's median)
    assert costs.levers({**timed["bench/complete-run-h200-regions.json"], "fused_projections": True}) is None
    # deterministic kernels: slower by design, never a speed column's median
    assert costs.levers({**timed["bench/complete-run-h200-regions.json"], "deterministic_kernels": True}) is None
    # regions on top of training compile: no column (none measured)
    assert costs.levers({**timed["bench/complete-run-h200-regions.json"], "training_compile": True}) is None
    assert {s: r["compile_cache"] for s, r in timed.items()} == {  # no field: cold
        "bench/complete-run-h200.json": "cold", "bench/complete-run-h200-older.json": "cold",
        "bench/complete-run-h200-warm.json": "warm", "bench/complete-run-h200-regions.json": "cold"}
    assert timed["bench/complete-run-h200.json"]["compile_gpu_minutes"] == 174.0 / 60
    assert timed["bench/complete-run-h200.json"]["first_step_s"] == {"ets": 122.5, "gmts": 1.5}
    assert "compile_gpu_minutes" not in timed["bench/complete-run-h200-older.json"]


def test_table_on_fixture_files(tmp_path):
    costs = _costs()
    _fixture(tmp_path)
    lines = costs.table(costs.merged({"e2e": []}, costs.measure(tmp_path))).splitlines()
    # no rows32, no compile-only (1.0 s: training compile without the loop is no column)
    assert "| step, bench/step.py (s, 64 rows) | 3.50 | 2.50 | 2.00 | 1.75 | 1.60 | 1.25 | - | <= 1.5 | met |" in lines
    assert ("| step, the arms' training logs (s, 64 rows) | 3.88 (3.75-4.00) | 2.50 (2.50-5.50) | - | - | - | - | - | <= 1.5 "
            "| not met |") in lines  # s18's 7.0 s (shared GPU) and the 8-row cell's 1.0 s left out
    assert "| 880-row evaluation batch (s) | 19.50 | 6.50 | 6.00 | 5.00 | 4.80 | 4.00 | - | - | - |" in lines  # not rows32's
    # evaluation does not depend on training rows; the timed run's five evaluations (its first compiles) in its
    # levers' column, the crashed run's none
    assert ("| full-test evaluation, 5276 samples (s) | 132 (120-148) | 32 (32-48) | - | - | - | 21 (20-54) | - | <= 45 "
            "| met by the median, not by the slowest |") in lines
    assert ("| complete run: 3 base evaluations + ETS + GMTS (GPU min) | 16.8 | 6.8 | - | - | - | - | - | <= 5 "
            "| not met |" in lines)
    # every recorded step as it ran (older profiles: the first, 20 s), the rest of the 80 at the median, 5 evaluations
    # of six batches, the evaluation's compilation (first call 30 s minus one batch): off (20 + 79 * 3.5 + 5 * 117 +
    # 10.5) / 60 = 14.87, on (20 + 79 * 2.5 + 5 * 39 + 23.5) / 60 = 7.27, all levers (20 + 79 * 2 + 5 * 36 + 24) / 60
    # = 6.37, matmul (20 + 79 * 1.75 + 5 * 30 + 25) / 60 = 5.55, loop (43.2 + 77 * 1.6 + 5 * 28.8 + 25.2) / 60 = 5.59,
    # compiled (32.5 + 76 * 1.25 + 5 * 24 + 26) / 60 = 4.56 (its second step's recompile, 10 s, counted)
    assert ("| complete run estimated from the bench/step.py row (GPU min) | 14.9 | 7.3 | 6.4 | 5.6 | 5.6 | 4.6 "
            "| - | <= 5 | met |") in lines
    # bench/complete_run.py's file, in its levers' column; the run that exited 1 is no complete run
    # cold and warm compile caches apart: a first run on a machine and a later one are different numbers
    cold = next(i for i, line in enumerate(lines) if line.startswith("| complete run timed, cold"))
    assert lines[cold] == ("| complete run timed, cold compile cache (a first run on a machine): one recipe.py process,"
                           " start to exit (GPU min) | - | - | - | - | - | 4.8 | 2.0 | <= 5 | met |")
    # of it, compiling: 174 s on one GPU, 2.9 GPU min, the row under it; the note says what is counted
    assert lines[cold + 1] == ("| of which compiling: torch.compile's own time, every phase (GPU min) "
                               "| - | - | - | - | - | 2.9 | - | - | - |")
    assert lines[cold + 2] == ("| complete run timed, warm compile cache (a machine that ran it before): one recipe.py "
                               "process, start to exit (GPU min) | - | - | - | - | - | 3.5 | - | <= 5 | met |")
    assert lines[cold + 3] == ("| of which compiling: torch.compile's own time, every phase (GPU min) "
                               "| - | - | - | - | - | 0.5 | - | - | - |")
    note = next(line for line in lines if line.startswith("Of the timed run bench/complete-run-h200.json"))
    assert "(4.75 GPU min, cold compile cache), compiling took 2.90" in note and "CUDA-graph recording" in note
    assert note.endswith("which compiles the update: ETS 122.5 s, GMTS 1.5 s.")


def test_targets_judge_each_target_by_its_best_measure(tmp_path):
    costs = _costs()
    assert costs.targets(tmp_path).splitlines()[2:] == [  # nothing measured yet: every row says so
        "| paper-config step at 64 rollouts <= 1 s | - | - | not measured |",
        "| complete run (3 base evaluations, ETS, GMTS) on a warm compile cache <= 3 GPU-min | - | - | not measured |",
        "| complete run (3 base evaluations, ETS, GMTS) on a cold compile cache <= 3.5 GPU-min | - | - "
        "| not measured |",
        "| arm-runs per GPU-hour >= 1.8x one fresh process per cell | - | results/confirm/logs/timing.jsonl "
        "| not measured |"]
    _fixture(tmp_path)
    line = {"cell": "c", "gpu": "0", "workers_on_gpu": 1, "start": 0.0, "exit_code": 0, "host": "h"}
    (tmp_path / "results" / "confirm" / "logs").mkdir(parents=True)
    (tmp_path / "results" / "confirm" / "logs" / "timing.jsonl").write_text("".join(json.dumps(x) + "\n" for x in (
        {**line, "arms": ["ets", "gmts"], "end": 240.0},  # fresh: 2 min per arm
        {**line, "arms": ["base"], "end": 30.0, "warm": True, "job_in_process": 1},  # no arm-run: left out
        {**line, "arms": ["ets"], "end": 90.0, "warm": True, "job_in_process": 2},  # paid the start: it counts
        {**line, "arms": ["ets", "gmts"], "end": 90.0, "warm": True, "job_in_process": 3})))  # 1 min per arm in all
    for name in ("step-profile-h200-rows8.json", "complete-run-h200-rows8.json"):  # not the paper config: no measure
        like = name.replace("rows8", "rows32" if "step" in name else "older")
        other = json.loads((tmp_path / "bench" / like).read_text())
        _write(tmp_path / "bench" / name, {**other, "gpu_minutes": 0.5, "rows": 8} if "complete" in name else
               {**other, "step": {**other["step"], "rows": 8, "total_s": 0.5}})
    _write(tmp_path / "bench" / "scaling-h200.json", {"mps_two_throughput": 1.25, "mps_four_throughput": 1.5})
    _write(tmp_path / "bench" / "side-by-side-h200.json", {"paths": {
        "trl": {"label": "(a) T", "steps": {"status": "ok", "median_step_s": 18.0}},
        "ours": {"label": "(c) O", "steps": {"status": "ok", "median_step_s": 1.5},
                 "complete_run": {"status": "ok", "gpu_minutes": 5.0}}}})
    assert costs.targets(tmp_path).splitlines()[2:] == [
        # the fastest profile of any options (compile-only, no column of the cost table) meets 1.0 s
        "| paper-config step at 64 rollouts <= 1 s | 1.00 s | step-profile-h200-compile-only.json | met |",
        "| complete run (3 base evaluations, ETS, GMTS) on a warm compile cache <= 3 GPU-min | 3.50 GPU-min "
        "| complete-run-h200-warm.json | not met |",
        "| complete run (3 base evaluations, ETS, GMTS) on a cold compile cache <= 3.5 GPU-min | 2.00 GPU-min "
        "| complete-run-h200-regions.json | met |",  # the crashed run (1.0) is no complete run
        "| arm-runs per GPU-hour >= 1.8x one fresh process per cell | 2.00x in warm workers (1.00 min per arm, "
        "starts included, 3 arm-runs; fresh 2.00, 2) | results/confirm/logs/timing.jsonl | met |",
        "| arm-runs per GPU-hour >= 1.8x one per GPU, cells sharing a GPU under CUDA MPS (their runs do not repeat a "
        "cell run alone) | two at once 1.25x, four at once 1.50x | scaling-h200.json | not met |",
        "| side by side: the step of TRL's paths over this recipe's | (a) T 12.00x | side-by-side-h200.json "
        "| measured |",
        "| side by side: a complete run of each path | (c) O 5.00 GPU-min | side-by-side-h200.json "
        "| not measured: (a) T |"]
    # a later file, keyed "path:arm": its own rows, the ratio to (c) beside each complete run; the selection check's
    # file (a few steps per arm) and another arm's entries are not read
    _write(tmp_path / "bench" / "side-by-side-complete-h200.json", {"paths": {
        "vllm:gmts": {"label": "(b) V", "arm": "gmts", "steps": {"status": "ok", "median_step_s": 3.0},
                      "complete_run": {"status": "ok", "gpu_minutes": 10.0}},
        "ours:gmts": {"label": "(c) O", "arm": "gmts", "steps": {"status": "ok", "median_step_s": 1.5},
                      "complete_run": {"status": "ok", "gpu_minutes": 5.0}},
        "ours:ets": {"label": "(c) O", "arm": "ets", "steps": {"status": "ok", "median_step_s": 9.0}}}})
    _write(tmp_path / "bench" / "side-by-side-selection-h200.json", {"paths": {}})
    assert costs.targets(tmp_path).splitlines()[-4:-2] == [
        "| side by side: the step of TRL's paths over this recipe's | (b) V 2.00x | side-by-side-complete-h200.json "
        "| measured |",
        "| side by side: a complete run of each path | (b) V 10.00 GPU-min (2.00x), (c) O 5.00 GPU-min "
        "| side-by-side-complete-h200.json | measured |"]


def test_the_verdict_judges_the_fastest_column_not_the_last():
    """A lever that costs more than it saves (training_compile on a 40-step complete run): the verdict is on the
    column with the lowest median."""
    costs = _costs()
    values = {c: [] for c in costs.LEVERS}
    values.update(loop=[4.8, 4.7, 5.4], compiled=[5.1, 6.3])
    assert costs.best_values(values) == [4.8, 4.7, 5.4]
    assert costs._verdict(costs.best_values(values), 5.0) == "met by the median, not by the slowest"
    assert costs.best_values({c: [] for c in costs.LEVERS}) == []


def test_committed_rows_are_recomputed_from_the_committed_files():
    """A hand edit of a real-model row, or a committed file changed without rerunning the script, fails here."""
    costs = _costs()
    committed = json.loads(RESULTS.read_text())
    assert committed == json.loads(json.dumps(costs.merged(committed, costs.measure())))
    assert any(r["rows"] == 64 and r["source"].startswith("bench/step-profile") for r in committed["e2e"]
               if "source" in r)
    assert len(committed["complete_run"]) >= 2


def test_every_row_says_model_rows_and_time():
    """The step rows: e2e rows have model, rows, total_s (None only for a failed option); evaluation rows model,
    samples, seconds; the random-weight rows say so in their model."""
    results = json.loads(RESULTS.read_text())
    for r in results["e2e"]:
        assert r["model"] and r["rows"] > 0, r.get("option", r.get("source"))
        assert (r["total_s"] is None) == ("error" in r) and (r["total_s"] is None or r["total_s"] > 0)
        assert ("source" in r) or r["model"].startswith("random-init")
    assert results["evaluation"]
    for r in results["evaluation"]:
        assert r["model"] and r["samples"] > 0 and r["seconds"] > 0


@settings(max_examples=50, deadline=None)
@given(first=st.floats(0, 1e4), later=st.lists(st.floats(0.01, 100), min_size=1, max_size=40))
def test_median_step_leaves_out_the_first_step_whatever_it_took(first, later):
    """bench/complete_run.py's median_step_s: the first step (it compiles) never moves the median of the steps after it."""
    median_step_s = _bench("complete_run").median_step_s
    log = [{"step": i + 1, "step_time": t} for i, t in enumerate([first, *later])]
    assert median_step_s(log) == statistics.median(later)
    assert min(later) <= median_step_s(log) <= max(later)


def test_median_step_edge_cases_and_the_scripts_that_read_it(tmp_path, monkeypatch):
    """No median without a step after the first, no step without its time; costs.py and complete_run.py both take
    their median step from it (a stand-in for it shows in each one's number); complete_run.py records null for an arm
    of one step or none, as before (costs.py still refuses such a log: the error above)."""
    median_step_s = _bench("complete_run").median_step_s
    assert median_step_s([{"step": 1, "step_time": 90.0}, {"step": 2, "step_time": 1.5}]) == 1.5
    for log, error in (([], statistics.StatisticsError), ([{"step": 1, "step_time": 90.0}], statistics.StatisticsError),
                       ([{"step": 1, "step_time": 90.0}, {"step": 2}], KeyError)):
        with pytest.raises(error):
            median_step_s(log)

    def stand_in(train_log: list[dict]) -> float:
        return 1000.0 + len(train_log)

    costs = _costs()
    monkeypatch.setattr(costs, "median_step_s", stand_in)
    cell = tmp_path / "results" / "qwen" / "cell" / "results.json"
    _write(cell, _cell({"ets": _arm([20.0, 2.0, 3.0], 40.0, 9.0, None)}))
    e2e, _ = costs.arm_rows(cell, tmp_path)
    assert e2e[0]["total_s"] == 1003.0
    complete_run = _bench("complete_run")
    monkeypatch.setattr(complete_run, "median_step_s", stand_in)
    evaluation = {"pass@1": 0.5, "k": 4, "records": [{}], "seconds": {"generation": 1.0, "scoring": 0.0}}
    logs = {"ets": [{"step": i, "step_time": 2.0} for i in (1, 2, 3)], "gmts": [{"step": 1, "step_time": 2.0}],
            "grpo": []}
    results = _cell({arm: {"wall_minutes": 1.0, "train_log": log, "eval": evaluation} for arm, log in logs.items()})
    assert complete_run.summary(results, 60.0, 0, [])["median_step_s"] == {"ets": 1003.0, "gmts": None, "grpo": None}


def test_a_profile_whose_evaluation_failed_gives_its_step_row_and_no_evaluation_row(tmp_path):
    """A bench run whose evaluation failed (its file says why) still measured the step: the step row counts, grouped
    attention read from the generation options; no evaluation row is made up."""
    costs = _costs()
    failed = _profile(True, 2.25, 6.0, {"generation_grouped_attention": True})
    failed["eval"] = {"error": "ValueError: ...", "model": "m"}
    _write(tmp_path / "bench" / "step-profile-h200-failed-eval.json", failed)
    step_row, evaluation = costs.step_profile_rows(tmp_path / "bench" / "step-profile-h200-failed-eval.json", tmp_path)
    assert evaluation is None and step_row["total_s"] == 2.25 and step_row["grouped_attention"] is True
    m = costs.measure(tmp_path)
    assert [r["total_s"] for r in m["e2e"]] == [2.25] and m["evaluation"] == []
