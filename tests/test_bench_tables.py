"""bench/tables.py: the markdown table every bench script builds, and the tables of the finished studies printed from
their results files (the committed files' tables are the pages' generated blocks, which tests/test_readme.py checks;
here hand-made files: ratios, failures, complete runs, two arms of a path)."""

import pytest

from bench_scripts import load_bench

tables = load_bench("tables", "bench_tables")


def test_a_table_is_its_header_rule_and_rows_and_a_written_row_stays_as_written():
    assert tables.markdown_table(["a", "b"], [[1, "x"], "| y | |"]) == ["| a | b |", "|---|---|", "| 1 | x |",
                                                                       "| y | |"]


def _steps(median, first=40.0, setup=20.0, rewards=(0.25, 0.75)):
    return {"status": "ok", "median_step_s": median, "first_step_s": first, "setup_s": setup, "rows": 64,
            "max_completion_length": 256, "rewards": list(rewards)}


def test_side_by_side_gives_ratios_to_c_failures_and_complete_runs_when_there():
    r = {"reference": "ours", "arm": "gmts", "steps": 3, "vllm_gpu_memory_utilization": 0.1,
         "versions": {"gpu": "NVIDIA H200", "torch": "2.11.0", "transformers": "5.17.0", "trl": "1.16.0"},
         "paths": {"ours": {"steps": {**_steps(1.6), "step_s": [40.0, 1.5, 1.6, 1.7, 1.6]},
                            "complete_run": {"status": "ok", "gpu_minutes": 5.0}},
                   "trl": {"steps": _steps(17.6), "max_steps": 4,
                           "complete_run": {"status": "failed", "reason": "recipe.py exited 1"}},
                   "vllm": {"steps": {"status": "unavailable", "reason": "vllm is not installed"}}}}
    table = tables.side_by_side(r)  # a file from before max_steps: the count of step times; the file-wide "steps" unread
    assert ("| (a) TRL's generation | gmts | 17.60 | 11.00x | 40.0 | 20.0 | 4 | 0.50 | - | "
            "failed: recipe.py exited 1 | - | - |" in table)
    assert ("| (c) this recipe's generation | gmts | 1.60 | 1.00x | 40.0 | 20.0 | 5 | 0.50 | - | 5.00 | 1.00x | - |"
            in table)
    assert "| (b) TRL + vLLM, colocate | gmts | unavailable: vllm is not installed | | | | | | - | not run | - | - |" \
        in table
    assert table.index("| (a)") < table.index("| (b)") < table.index("| (c)")
    assert "Per step, (c) is 11.00x as fast as (a)." in table and "NVIDIA H200" in table and "64 rollouts" in table


def test_side_by_side_splits_off_evaluations_and_labels_an_estimate():
    def complete(minutes, eval_s, loop):
        return {"status": "ok", "gpu_minutes": minutes, "training_steps": {"ets": 40, "gmts": 40},
                "evaluations": [{"phase": "base", "seconds": s} for s in eval_s],
                "generation_options": {"generation_grouped_attention": True, "generation_decode_loop": loop},
                "compile_cache": {"warm": True}}

    r = {"reference": "ours", "versions": {"gpu": "NVIDIA H200"}, "vllm_gpu_memory_utilization": 0.15,
         "paths": {"ours:gmts": {"steps": _steps(1.5, 20.0, 3.0, [0.5]),
                                 "complete_run": complete(5.0, [30] * 5, "compiled_step")},
                   "vllm:gmts": {"steps": _steps(3.0, 20.0, 3.0, [0.5]),
                                 "complete_run": complete(10.0, [60] * 5, "transformers")},
                   "trl:gmts": {"steps": _steps(18.0, 20.0, 3.0, [0.5])}}}
    table = tables.side_by_side(r)
    assert "| 5.00 | 1.00x | 2.50 |" in table and "| 10.00 | 2.00x | 5.00 |" in table  # 150 s, 300 s of evaluations
    assert "| (a) TRL's generation | gmts | 18.00 | 12.00x | 20.0 | 3.0 | - | 0.50 | - | not run | - | - |" in table
    assert ("(a) TRL's generation: no complete run timed; an estimate, not a measurement: at its median step the 80 "
            "training steps of one take 24.0 min before any evaluation." in table)
    assert ("(b) TRL + vLLM, colocate: evaluations decoded with grouped attention on, decode loop transformers, "
            "compile cache warm." in table)


def test_side_by_side_keeps_two_arms_of_a_path_apart_with_their_checks():
    check = {"ok": True, "claims": {"kept_tokens = ceil(ratio x valid tokens) every step (logged)": "ok (2 steps)"}}
    r = {"reference": "ours", "arm": "gmts",  # "ours" from before --arm: read as the file-wide arm
         "paths": {"ours": {"steps": _steps(1.0)},
                   "vllm:ets": {"arm": "ets", "steps": _steps(3.0), "selection_check": check},
                   "vllm:gmts": {"arm": "gmts", "steps": _steps(2.0), "selection_check": check,
                                 "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"}}}}
    assert set(tables.entries(r)) == {"ours:gmts", "vllm:ets", "vllm:gmts"}
    table = tables.side_by_side(r)
    assert "| (b) TRL + vLLM, colocate | ets | 3.00 | - |" in table  # no (c) of the ets arm: no ratio
    assert "| (b) TRL + vLLM, colocate | gmts | 2.00 | 2.00x |" in table and "| ok |" in table
    assert table.index("| ets |") < table.index("| (b) TRL + vLLM, colocate | gmts |") < table.index("| (c)")
    assert "Per step, (c) is 2.00x as fast as (b) (gmts)." in table
    assert "Set for a path's process: (b) VLLM_USE_FLASHINFER_SAMPLER=0." in table
    assert "Selection, (b) ets: kept_tokens = ceil(ratio x valid tokens) every step (logged): ok (2 steps)." in table


@pytest.mark.parametrize("text,said", [(None, "no such file"), ("[", "not valid JSON")])
def test_a_missing_or_broken_results_file_is_one_line(tmp_path, capsys, text, said):
    path = tmp_path / "r.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        tables.main(["scaling", str(path)])
    assert exit_.value.code == 2 and f"argument results: {path}: {said}" in capsys.readouterr().err

