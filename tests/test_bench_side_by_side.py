"""bench/side_by_side.py: each path's settings, the results file (merged across calls, a failure kept as its reason)
and its table; end to end on the CPU with the tiny model (slow): (a) and (c) train, (b) is recorded as unavailable
where vLLM is not installed."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from bench_scripts import assert_refuses_bad_json_files, load_bench

ROOT = Path(__file__).resolve().parent.parent


def _module():
    return load_bench("side_by_side")


sbs = _module()


def test_each_path_sets_only_the_generation_fields_and_c_takes_them_from_the_paper_config():
    from gmts_recipe.records import read_yaml_mapping

    paper = read_yaml_mapping(ROOT / "configs" / "paper.yaml", ValueError, "a config")
    ours, trl, vllm = (sbs.path_options(p, 0.2) for p in ("ours", "trl", "vllm"))
    assert set(ours) == set(trl) == set(sbs.generation_fields())
    assert ours["generation_decode_loop"] == paper["generation_decode_loop"] == "compiled_step"
    assert ours["generation_merge_adapter"] is True and ours["generation_compile_regions"] is True
    assert trl["generation_merge_adapter"] is False and trl["generation_decode_loop"] == "transformers"
    assert not any(trl[k] for k in trl if isinstance(trl[k], bool))  # every switch off
    # (b): paper.yaml's values beside vLLM (they act on the evaluations), the ones vLLM replaces at their defaults
    assert vllm == {**ours, **{k: trl[k] for k in sbs.VLLM_REPLACED}, "use_vllm": True, "vllm_mode": "colocate",
                    "vllm_gpu_memory_utilization": 0.2}
    assert vllm["generation_grouped_attention"] is True and vllm["generation_decode_loop"] == "transformers"
    assert vllm["generation_decode_kernel"] == paper["generation_decode_kernel"] == "matmul"
    assert not set(sbs.SHARED_OPTIONS) & set(ours)  # the training-side options are the command line's, shared


def test_each_path_parses_as_a_recipe_command_line(tmp_path):
    import recipe

    for path in sbs.PATHS:
        argv = sbs.recipe_argv(["--config", "configs/smoke.yaml"], sbs.path_options(path, 0.1), tmp_path, 3)
        _, train, _, _ = recipe.parse(argv)
        assert train.max_steps == 3 and train.token_selection in ("gmts", "all")
        assert train.use_vllm == (path == "vllm") and train.generation_merge_adapter == (path != "trl")


def test_a_child_that_dies_leaves_its_exit_status_and_last_error_line(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('noise', file=sys.stderr); sys.exit('RuntimeError: out of memory')"]
    record = sbs.child(cmd, tmp_path / "never-written.json")
    assert record == {"status": "failed", "reason": "exited 1: RuntimeError: out of memory"}


def test_the_results_file_keeps_other_paths_and_refuses_other_arguments(tmp_path, monkeypatch):
    calls = []

    def fake_child(cmd, record_file, env=None):
        calls.append(cmd)
        path = cmd[cmd.index("--one") + 1]
        return {"status": "ok", "step_s": [9.0, 2.0, 4.0], "first_step_s": 9.0, "median_step_s": 3.0,
                "setup_s": 1.0, "rows": 64, "max_completion_length": 256, "rewards": [0.5]} if path != "vllm" else \
            {"status": "failed", "reason": "ImportError: libcuda.so.1"}

    monkeypatch.setattr(sbs, "child", fake_child)
    out = tmp_path / "r.json"
    base = ["--out", str(out), "--work", str(tmp_path / "w"), "--", "--config", "configs/smoke.yaml"]
    assert sbs.main(["--paths", "ours,vllm", *base]) == 0
    assert sbs.main(["--paths", "trl", "--steps", "3", *base]) == 0
    r = json.loads(out.read_text())
    assert list(r["paths"]) == ["ours:gmts", "vllm:gmts", "trl:gmts"]
    assert r["paths"]["vllm:gmts"]["steps"]["status"] == "failed"
    # each path keeps the steps it was run with; no file-wide count that the last call would overwrite
    assert [r["paths"][f"{p}:gmts"]["max_steps"] for p in ("ours", "vllm", "trl")] == [5, 5, 3] and "steps" not in r
    assert "--use_vllm" in calls[1] and "--use_vllm" not in calls[0] + calls[2]
    assert sbs.main(["--paths", "trl", *base[:-1], "configs/quickstart.yaml"]) == 2  # other arguments: refused
    table = sbs.markdown(r)
    assert "| (b) TRL + vLLM, colocate | gmts | failed: ImportError: libcuda.so.1 | | | | | | - |" in table
    # records without selection metrics (a trainer from before them): nothing verified, nothing failed
    assert "| (a) TRL's generation | gmts | 3.00 | 1.00x | 9.0 | 1.0 | 3 | 0.50 | 0 of 1 verified |" in table
    assert table.index("| (a)") < table.index("| (b)") < table.index("| (c)")


def test_the_table_gives_ratios_to_c_and_complete_runs_when_there(tmp_path, capsys):
    def steps(median):
        return {"status": "ok", "median_step_s": median, "first_step_s": 40.0, "setup_s": 20.0, "rows": 64,
                "max_completion_length": 256, "rewards": [0.25, 0.75]}

    r = {"reference": "ours", "arm": "gmts", "steps": 3, "vllm_gpu_memory_utilization": 0.1,
         "versions": {"gpu": "NVIDIA H200", "torch": "2.11.0", "transformers": "5.17.0", "trl": "1.16.0"},
         "paths": {"ours": {"steps": {**steps(1.6), "step_s": [40.0, 1.5, 1.6, 1.7, 1.6]},
                            "complete_run": {"status": "ok", "gpu_minutes": 5.0}},
                   "trl": {"steps": steps(17.6), "max_steps": 4,
                           "complete_run": {"status": "failed", "reason": "recipe.py exited 1"}},
                   "vllm": {"steps": {"status": "unavailable", "reason": "vllm is not installed"}}}}
    table = sbs.markdown(r)  # a file from before max_steps: the count of step times; the file-wide "steps" unread
    assert ("| (a) TRL's generation | gmts | 17.60 | 11.00x | 40.0 | 20.0 | 4 | 0.50 | - | "
            "failed: recipe.py exited 1 | - | - |" in table)
    assert ("| (c) this recipe's generation | gmts | 1.60 | 1.00x | 40.0 | 20.0 | 5 | 0.50 | - | 5.00 | 1.00x | - |"
            in table)
    assert "Per step, (c) is 11.00x as fast as (a)." in table
    assert "unavailable: vllm is not installed" in table and "NVIDIA H200" in table and "64 rollouts" in table
    assert_refuses_bad_json_files(sbs.main, "--markdown", tmp_path, capsys)


def test_vllm_without_flashinfer_runs_with_the_pytorch_sampler_and_the_file_says_so(tmp_path, monkeypatch, capsys):
    envs = {}

    def fake_child(cmd, record_file, env=None):
        envs[cmd[cmd.index("--one") + 1]] = env
        return {"status": "ok", "step_s": [4.0, 3.0], "first_step_s": 4.0, "median_step_s": 3.0, "setup_s": 1.0,
                "rows": 64, "max_completion_length": 256, "rewards": [0.5]}

    real_find_spec = importlib.util.find_spec
    installed = {"flashinfer": None, "vllm": real_find_spec("json")}  # vLLM there, flashinfer not
    monkeypatch.setattr(sbs.importlib.util, "find_spec",
                        lambda name, *a: installed[name] if name in installed else real_find_spec(name, *a))
    monkeypatch.setattr(sbs, "child", fake_child)
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    out = tmp_path / "r.json"
    base = ["--out", str(out), "--work", str(tmp_path / "w"), "--steps", "2", "--", "--config", "configs/smoke.yaml"]
    assert sbs.main(["--paths", "vllm,ours", *base]) == 0
    assert envs == {"vllm": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}, "ours": {}}
    r = json.loads(out.read_text())
    assert r["paths"]["vllm:gmts"]["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    assert r["paths"]["ours:gmts"]["env"] == {}
    printed = [line for line in capsys.readouterr().out.splitlines() if "VLLM_USE_FLASHINFER_SAMPLER" in line]
    assert printed == ["[side_by_side] (b) TRL + vLLM, colocate: flashinfer is not installed: "
                       "VLLM_USE_FLASHINFER_SAMPLER=0 (vLLM's top-k/top-p sampler in PyTorch)"]
    assert "Set for a path's process: (b) VLLM_USE_FLASHINFER_SAMPLER=0." in sbs.markdown(r)
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")  # the caller's choice stands
    assert sbs.main(["--paths", "vllm", *base]) == 0
    assert envs["vllm"] == {} and json.loads(out.read_text())["paths"]["vllm:gmts"]["env"] == {}
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER")
    installed["vllm"] = None  # no vLLM: the path is unavailable, nothing to set
    assert sbs.env_overrides("vllm") == {} and sbs.env_overrides("ours") == {}
    installed["vllm"] = real_find_spec("json")
    assert sbs.env_overrides("vllm") == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}


def test_a_child_gets_the_added_environment(tmp_path):
    record = tmp_path / "record.json"
    code = ("import json, os, sys; json.dump({'status': 'ok', 'sampler': os.environ.get('VLLM_USE_FLASHINFER_SAMPLER'),"
            " 'usage': os.environ.get('VLLM_NO_USAGE_STATS')}, open(sys.argv[1], 'w'))")
    got = sbs.child([sys.executable, "-c", code, str(record)], record, {"VLLM_USE_FLASHINFER_SAMPLER": "0"})
    assert got == {"status": "ok", "sampler": "0", "usage": "1"}


def test_bad_arguments_are_one_line_errors(capsys):
    for argv in (["--out", "x.json", "--paths", "ours,sglang"], ["--out", "x.json", "--steps", "0"], [],
                 ["--out", "x.json", "--vllm_memory", "15"]):
        with pytest.raises(SystemExit) as err:
            sbs.main(argv)
        assert err.value.code == 2
    assert "sglang" in capsys.readouterr().err


def test_vllm_gets_the_same_gigabytes_on_a_smaller_card():
    h200, h100 = 143771 * 2**20, 81559 * 2**20  # nvidia-smi's memory.total, MiB
    assert sbs.vllm_share(h200) == sbs.VLLM_MEMORY == 0.15  # the share the H200 rows were measured with
    assert sbs.vllm_share(h100) == 0.27
    assert sbs.vllm_share(h100) * h100 >= sbs.VLLM_MEMORY_BYTES > (sbs.vllm_share(h100) - 0.01) * h100


@pytest.mark.slow
def test_small_run_trains_a_and_c_and_records_b(tmp_path):
    out = tmp_path / "small.json"
    assert sbs.main(["--small", "--steps", "2", "--out", str(out), "--work", str(tmp_path / "w")]) == 0
    r = json.loads(out.read_text())
    assert list(r["paths"]) == ["trl:gmts", "vllm:gmts", "ours:gmts"] and r["small"]
    for path in ("trl", "ours"):
        s = r["paths"][f"{path}:gmts"]["steps"]
        assert s["status"] == "ok", s
        assert len(s["step_s"]) == 2 and s["median_step_s"] == s["step_s"][1] > 0 and s["rows"] == 16
        assert s["entropy_source"] == "generation" and len(s["trl_step_time_s"]) == 2
        assert s["arm"] == "gmts" and s["selection_ratio"] == 0.2 and s["selection"]["step"] == [1, 2]
        assert [p["kept_tokens"] for p in s["selection_probe"]] == s["selection"]["selection/kept_tokens"]
        check = r["paths"][f"{path}:gmts"]["selection_check"]
        assert check["ok"] is True and all(v.startswith("ok") for v in check["claims"].values()), check
    b = r["paths"]["vllm:gmts"]["steps"]
    if importlib.util.find_spec("vllm") is None:
        assert b == {"status": "unavailable", "reason": "vllm is not installed (import vllm: no module named 'vllm')"}
    table = sbs.markdown(r)
    assert table.count("\n| (") == 3 and "| (c) this recipe's generation | gmts |" in table
    assert table.count("| ok |") == 2


# ---------------------------------------------------------------------------- selection, per step, per arm
def _ok_record(**overrides) -> dict:
    """A path's record as measure_steps writes it, with selection metrics of two steps (ratio 0.2, batch scope)."""
    record = {"status": "ok", "step_s": [4.0, 3.0], "first_step_s": 4.0, "median_step_s": 3.0, "setup_s": 1.0,
              "rows": 16, "max_completion_length": 10, "rewards": [0.5], "token_selection": "gmts",
              "selection_ratio": 0.2, "selection_scope": "batch",
              "selection": {"step": [1, 2], "selection/kept_tokens": [30.0, 28.0],
                            "selection/valid_tokens": [146.0, 140.0], "selection/kept_fraction": [30 / 146, 0.2]},
              "selection_probe": [{"step": 1, "valid_tokens": 146, "kept_tokens": 30},
                                  {"step": 2, "valid_tokens": 140, "kept_tokens": 28}]}
    return {**record, **overrides}


def _vllm_fields(**weights) -> dict:
    logged = {f"sampling/importance_sampling_ratio/{k}": weights.get(k, v)
              for k, v in {"min": [0.5, 0.6], "mean": [1.1, 1.0], "max": [3.0, 2.0]}.items()}
    probe = [{"step": s, "valid_tokens": v, "kept_tokens": k, "weight_finite": True, "weight_not_one_tokens": 40,
              "omega_max_relative_error": 0.0, "kept_set_matches_recomputed": True, "kept_tokens_changed_by_weight": 9}
             for s, v, k in ((1, 146, 30), (2, 140, 28))]
    return {"selection": {**_ok_record()["selection"], **logged}, "selection_probe": probe,
            "vllm": {"importance_sampling": {"vllm_importance_sampling_correction": True}}}


def test_selection_log_keeps_the_training_steps_selection_and_importance_sampling_metrics():
    history = [{"loss": 0.1, "reward": 0.5, "selection/kept_fraction": 0.2, "selection/kept_tokens": 3.0,
                "sampling/importance_sampling_ratio/min": 0.5, "step": 1},
               {"loss": 0.2, "selection/kept_fraction": 0.25, "step": 2},
               {"eval_loss": 0.3, "eval_selection/kept_fraction": 0.2, "step": 2},  # eval: not a training step
               {"train_runtime": 9.0, "step": 2}]
    assert sbs.selection_log(history) == {
        "step": [1, 2], "sampling/importance_sampling_ratio/min": [0.5, None],
        "selection/kept_fraction": [0.2, 0.25], "selection/kept_tokens": [3.0, None]}
    assert sbs.selection_log([{"loss": 1.0, "step": 1}]) == {"step": []}


def test_selection_check_passes_exact_counts_and_fails_one_token_off():
    check = sbs.selection_check(_ok_record(), "ours", "gmts")
    assert check["ok"] is True and set(check["claims"].values()) == {"ok (2 steps)", "ok (2 batches)"}
    off = _ok_record()
    off["selection"] = {**off["selection"], "selection/kept_tokens": [30.0, 29.0]}  # ceil(0.2 x 140) is 28
    check = sbs.selection_check(off, "ours", "gmts")
    assert check["ok"] is False
    assert check["claims"]["kept_tokens = ceil(ratio x valid tokens) every step (logged)"] == \
        "failed: step 2: 29 of 140, want 28"
    assert check["claims"]["kept_fraction = kept_tokens / valid_tokens (logged)"] == "failed: steps [2]"
    probe_off = _ok_record(selection_probe=[{"step": 1, "valid_tokens": 146, "kept_tokens": 29}])
    assert sbs.selection_check(probe_off, "ours", "ets")["ok"] is False
    assert sbs.selection_check(_ok_record(), "ours", "grpo")["ok"] is False  # grpo keeps every token, not 20%
    no_counts = _ok_record(selection={"step": [1], "selection/kept_fraction": [0.2]}, selection_probe=[])
    check = sbs.selection_check(no_counts, "ours", "gmts")
    assert check["ok"] is True and list(check["claims"].values()) == [
        "not verified: the trainer logged no token counts (a trainer from before kept_tokens)"]
    twice = _ok_record()
    twice["selection_probe"] = [*twice["selection_probe"], {"step": 2, "valid_tokens": 140, "kept_tokens": 28}]
    assert sbs.selection_check(twice, "ours", "gmts")["claims"][
        "kept_tokens = ceil(ratio x valid tokens) every step (logged)"].startswith("not verified: a step made several")
    averaged = _ok_record(selection_scope="microbatch")
    assert sbs.selection_check(averaged, "ours", "gmts")["claims"][
        "kept_tokens = ceil(ratio x valid tokens) every step (logged)"].startswith("not verified: selection_scope")
    assert sbs.selection_check({"status": "unavailable"}, "vllm", "gmts")["ok"] is None


def test_selection_check_of_vllm_needs_finite_weights_and_omega_that_carries_them():
    good = sbs.selection_check(_ok_record(**_vllm_fields()), "vllm", "gmts")
    assert good["ok"] is True and all(v.startswith("ok") for v in good["claims"].values()), good
    assert good["claims"]["TRL's importance-sampling weight logged every step and finite"] == \
        "ok (weight min 0.5, max 3 over 2 steps)"
    assert "vLLM's own log-probs" in good["not_checked_here"]
    nan = sbs.selection_check(_ok_record(**_vllm_fields(max=[3.0, float("nan")])), "vllm", "gmts")
    assert nan["claims"]["TRL's importance-sampling weight logged every step and finite"].startswith("failed")
    fields = _vllm_fields()
    missing = {**fields, "selection": {k: v for k, v in fields["selection"].items() if "importance" not in k}}
    assert sbs.selection_check(_ok_record(**missing), "vllm", "gmts")["claims"][
        "TRL's importance-sampling weight logged every step and finite"].startswith("failed: logged none")
    omega_claim = "omega as ranked = advantage x TRL's weight on every valid token (recomputed, not logged)"
    wrong = _vllm_fields()
    wrong["selection_probe"][1].update(omega_max_relative_error=0.4, kept_set_matches_recomputed=False)
    check = sbs.selection_check(_ok_record(**wrong), "vllm", "gmts")
    assert check["ok"] is False and check["claims"][omega_claim] == "failed: max relative difference 0.4"
    assert check["claims"]["kept set = top of the arm's score with that omega (recomputed)"] == "failed"
    ones = _vllm_fields()
    for row in ones["selection_probe"]:
        row["weight_not_one_tokens"] = 0
    assert sbs.selection_check(_ok_record(**ones), "vllm", "gmts")["claims"][omega_claim].startswith("not verified")
    unprobed = sbs.selection_check(_ok_record(**{**_vllm_fields(), "selection_probe": []}), "vllm", "gmts")
    assert unprobed["claims"][omega_claim].startswith("not verified: no batch-scope selection")


def _stand_in_vllm_record(tmp_path, arm: str, drop_weight: bool = False) -> dict:
    """Two training steps of TRL's vLLM branch with tests/test_vllm_selection.py's stand-in engine, recorded as
    measure_steps records a path (its probe and selection metrics)."""
    from test_vllm_selection import make_trainer

    from gmts_recipe.arms import arm_named

    trainer = make_trainer(tmp_path, "token_truncate", noise=0.6, max_steps=2, logging_steps=1,
                           token_selection=arm_named(arm).rule)
    if drop_weight:  # a trainer whose omega forgot TRL's weight: what the check is there to catch
        import torch

        omega = trainer._omega
        trainer._omega = lambda batch, *a, **k: omega(
            {**batch, "importance_sampling_ratio": torch.ones_like(batch["importance_sampling_ratio"])}, *a, **k)
    probe = sbs.SelectionProbe(trainer)
    trainer.train()
    return {"status": "ok", "arm": arm, **sbs.selection_record(trainer, probe),
            "vllm": {"importance_sampling": sbs.importance_sampling_settings(trainer.args)}}


# Each record trains two steps through the stand-in engine (a forward per sampled token: tens of seconds on 2 cores):
# the GMTS arm's runs in the unit suite, the ETS arm's and the check that must fail in the slow set.
@pytest.mark.parametrize("arm", ["gmts", pytest.param("ets", marks=pytest.mark.slow)])
def test_the_stand_in_vllm_path_keeps_ceil_20_percent_with_trls_weight_in_omega(tmp_path, arm):
    record = _stand_in_vllm_record(tmp_path, arm)
    logged = record["selection"]
    assert logged["step"] == [1, 2] and record["selection_ratio"] == 0.2 and record["token_selection"] == \
        {"gmts": "gmts", "ets": "entropy"}[arm]
    assert all(logged[n] and None not in logged[n] for n in (*sbs.IS_METRICS, "selection/kept_tokens"))
    assert [r["step"] for r in record["selection_probe"]] == [1, 2]
    check = sbs.selection_check(record, "vllm", arm)
    assert check["ok"] is True and all(v.startswith("ok") for v in check["claims"].values()), check
    changed = check["claims"]["kept set = top of the arm's score with that omega (recomputed)"]
    if arm == "ets":  # ETS ranks by entropy alone: the weight reaches omega (and the metrics), not the kept set
        assert changed == "ok (0 kept tokens differ from a ranking without the weight)"
    else:
        assert changed != "ok (0 kept tokens differ from a ranking without the weight)"


@pytest.mark.slow
def test_the_stand_in_check_fails_when_omega_drops_trls_weight(tmp_path):
    check = sbs.selection_check(_stand_in_vllm_record(tmp_path, "gmts", drop_weight=True), "vllm", "gmts")
    assert check["ok"] is False
    assert check["claims"]["omega as ranked = advantage x TRL's weight on every valid token (recomputed, not logged)"] \
        .startswith("failed: max relative difference")
    assert check["claims"]["kept set = top of the arm's score with that omega (recomputed)"] == "failed"


def test_two_arms_of_a_path_keep_their_own_entries_and_rows(tmp_path, monkeypatch):
    argvs = []

    def fake_child(cmd, record_file, env=None):
        argvs.append(cmd)
        arm = cmd[cmd.index("--arm") + 1]
        return _ok_record(**_vllm_fields(), median_step_s={"ets": 3.0, "gmts": 2.0}[arm])

    monkeypatch.setattr(sbs, "child", fake_child)
    out = tmp_path / "r.json"
    rest = ["--config", "configs/smoke.yaml"]
    old = {"recipe_argv": rest, "arm": "gmts", "reference": "ours",  # a file from before --arm
           "paths": {"ours": {"label": sbs.PATHS["ours"], "max_steps": 2, "steps": _ok_record(median_step_s=1.0)}}}
    out.write_text(json.dumps(old))
    base = ["--out", str(out), "--work", str(tmp_path / "w"), "--paths", "vllm", "--steps", "2", "--", *rest]
    assert sbs.main(["--arm", "ets", *base]) == 0
    assert sbs.main(["--arm", "gmts", *base]) == 0
    assert [c[c.index("--arm") + 1] for c in argvs] == ["ets", "gmts"]
    r = json.loads(out.read_text())
    assert list(r["paths"]) == ["ours:gmts", "vllm:ets", "vllm:gmts"] and "arm" not in r
    assert r["paths"]["ours:gmts"]["arm"] == "gmts" and r["paths"]["vllm:ets"]["arm"] == "ets"
    for arm in ("ets", "gmts"):
        entry = r["paths"][f"vllm:{arm}"]
        assert entry["selection_check"]["ok"] is True and entry["steps"]["selection"]["selection/kept_tokens"]
    table = sbs.markdown(r)
    assert "| (b) TRL + vLLM, colocate | ets | 3.00 | - |" in table  # no (c) of the ets arm: no ratio
    assert "| (b) TRL + vLLM, colocate | gmts | 2.00 | 2.00x |" in table and "| ok |" in table
    assert "| (c) this recipe's generation | gmts | 1.00 | 1.00x |" in table
    assert table.index("| ets |") < table.index("| (b) TRL + vLLM, colocate | gmts |") < table.index("| (c)")
    assert "Selection, (b) ets: kept_tokens = ceil(ratio x valid tokens) every step (logged): ok (2 steps)" in table
    with pytest.raises(SystemExit):
        sbs.main(["--arm", "bogus", *base])


def test_complete_runs_split_off_their_evaluations_and_a_path_without_one_gets_a_labelled_estimate():
    def steps(median):
        return {"status": "ok", "median_step_s": median, "first_step_s": 20.0, "setup_s": 3.0, "rows": 64,
                "max_completion_length": 256, "rewards": [0.5]}

    def complete(minutes, eval_s, grouped, loop):
        return {"status": "ok", "gpu_minutes": minutes, "training_steps": {"ets": 40, "gmts": 40},
                "evaluations": [{"phase": "base", "seconds": s} for s in eval_s],
                "generation_options": {"generation_grouped_attention": grouped, "generation_decode_loop": loop},
                "compile_cache": {"warm": True}}

    r = {"reference": "ours", "versions": {"gpu": "NVIDIA H200"}, "vllm_gpu_memory_utilization": 0.15,
         "paths": {"ours:gmts": {"steps": steps(1.5), "complete_run": complete(5.0, [30, 30, 30, 30, 30], True,
                                                                                  "compiled_step")},
                   "vllm:gmts": {"steps": steps(3.0), "complete_run": complete(10.0, [60, 60, 60, 60, 60], True,
                                                                                  "transformers")},
                   "trl:gmts": {"steps": steps(18.0)}}}
    table = sbs.markdown(r)
    assert "| 5.00 | 1.00x | 2.50 |" in table and "| 10.00 | 2.00x | 5.00 |" in table  # 150 s, 300 s of evaluations
    assert "| (a) TRL's generation | gmts | 18.00 | 12.00x | 20.0 | 3.0 | - | 0.50 | - | not run | - | - |" in table
    # 80 steps (the reference run's) at 18 s: 24.0 min, said to be an estimate
    assert ("(a) TRL's generation: no complete run timed; an estimate, not a measurement: at its median step the 80 "
            "training steps of one take 24.0 min before any evaluation." in table)
    assert ("(b) TRL + vLLM, colocate: evaluations decoded with grouped attention on, decode loop transformers, "
            "compile cache warm." in table)
