"""bench/side_by_side.py: each path's settings, the results file (merged across calls, a failure kept as its reason)
and its table; end to end on the CPU with the tiny model (slow): (a) and (c) train, (b) is recorded as unavailable
where vLLM is not installed."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from bench_scripts import load_bench

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
    assert vllm == {**trl, "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.2}
    assert not set(sbs.SHARED_OPTIONS) & set(ours)  # the training-side options are the command line's, shared


def test_each_path_parses_as_a_recipe_command_line(tmp_path):
    import recipe

    for path in sbs.PATHS:
        argv = sbs.recipe_argv(["--config", "configs/smoke.yaml"], sbs.path_options(path, 0.1), tmp_path, 3)
        _, train, _, _ = recipe.parse(argv)
        assert train.max_steps == 3 and train.token_selection in ("gmts", "all")
        assert train.use_vllm == (path == "vllm") and train.generation_merge_adapter == (path == "ours")


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
    assert list(r["paths"]) == ["ours", "vllm", "trl"] and r["paths"]["vllm"]["steps"]["status"] == "failed"
    # each path keeps the steps it was run with; no file-wide count that the last call would overwrite
    assert [r["paths"][p]["max_steps"] for p in ("ours", "vllm", "trl")] == [5, 5, 3] and "steps" not in r
    assert "--use_vllm" in calls[1] and "--use_vllm" not in calls[0] + calls[2]
    assert sbs.main(["--paths", "trl", *base[:-1], "configs/quickstart.yaml"]) == 2  # other arguments: refused
    table = sbs.markdown(r)
    assert "| (b) TRL + vLLM, colocate | failed: ImportError: libcuda.so.1 |" in table
    assert "| (a) TRL's generation | 3.00 | 1.00x | 9.0 | 1.0 | 3 | 0.50 |" in table
    assert table.index("| (a)") < table.index("| (b)") < table.index("| (c)")


def test_the_table_gives_ratios_to_c_and_complete_runs_when_there(tmp_path):
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
    assert ("| (a) TRL's generation | 17.60 | 11.00x | 40.0 | 20.0 | 4 | 0.50 | failed: recipe.py exited 1 | - |"
            in table)
    assert "| (c) this recipe's generation | 1.60 | 1.00x | 40.0 | 20.0 | 5 | 0.50 | 5.00 | 1.00x |" in table
    assert "Per step, (c) is 11.00x as fast as (a)." in table
    assert "unavailable: vllm is not installed" in table and "NVIDIA H200" in table and "64 rollouts" in table
    assert sbs.main(["--markdown", str(tmp_path / "missing.json")]) == 2


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
    assert r["paths"]["vllm"]["env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"} and r["paths"]["ours"]["env"] == {}
    printed = [line for line in capsys.readouterr().out.splitlines() if "VLLM_USE_FLASHINFER_SAMPLER" in line]
    assert printed == ["[side_by_side] (b) TRL + vLLM, colocate: flashinfer is not installed: "
                       "VLLM_USE_FLASHINFER_SAMPLER=0 (vLLM's top-k/top-p sampler in PyTorch)"]
    assert "Set for a path's process: (b) VLLM_USE_FLASHINFER_SAMPLER=0." in sbs.markdown(r)
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")  # the caller's choice stands
    assert sbs.main(["--paths", "vllm", *base]) == 0
    assert envs["vllm"] == {} and json.loads(out.read_text())["paths"]["vllm"]["env"] == {}
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
    for argv in (["--out", "x.json", "--paths", "ours,sglang"], ["--out", "x.json", "--steps", "0"], []):
        with pytest.raises(SystemExit) as err:
            sbs.main(argv)
        assert err.value.code == 2
    assert "sglang" in capsys.readouterr().err


@pytest.mark.slow
def test_small_run_trains_a_and_c_and_records_b(tmp_path):
    out = tmp_path / "small.json"
    assert sbs.main(["--small", "--steps", "2", "--out", str(out), "--work", str(tmp_path / "w")]) == 0
    r = json.loads(out.read_text())
    assert list(r["paths"]) == ["trl", "vllm", "ours"] and r["small"]
    for path in ("trl", "ours"):
        s = r["paths"][path]["steps"]
        assert s["status"] == "ok", s
        assert len(s["step_s"]) == 2 and s["median_step_s"] == s["step_s"][1] > 0 and s["rows"] == 16
        assert s["entropy_source"] == "generation" and len(s["trl_step_time_s"]) == 2
    b = r["paths"]["vllm"]["steps"]
    if importlib.util.find_spec("vllm") is None:
        assert b == {"status": "unavailable", "reason": "vllm is not installed (import vllm: no module named 'vllm')"}
    table = sbs.markdown(r)
    assert table.count("\n| (") == 3 and "| (c) this recipe's generation |" in table
