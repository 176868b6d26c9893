"""bench/repeat.py: what of a repeated run differs from the first, counted."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import repeat  # noqa: E402

from bench_scripts import assert_refuses_bad_json_files  # noqa: E402
from gmts_recipe.records import config_hash  # noqa: E402


def _run() -> dict:
    records = [{"task": i, "hash": f"h{i}", "scores": [1, 0], "lengths": [10, 12]} for i in range(4)]
    arm = {"train_log": [{"step": 1, "loss": 0.5, "reward": 0.25, "step_time": 1.2},
                         {"step": 2, "loss": 0.4, "reward": 0.5, "step_time": 1.1}],
           "rollout_digests": {"0": ["aa", "bb"], "1": ["cc", "dd"]},
           "eval": {"pass@1": 0.5, "records": records}}
    return {"config_hash": "x", "base": {"evals": [{"seed": 0, "pass@1": 0.5, "records": copy.deepcopy(records)}]},
            "arms": {"ets": arm, "gmts": copy.deepcopy(arm)}}


def test_a_repeat_with_other_wall_clock_times_is_identical():
    other = _run()
    other["arms"]["ets"]["train_log"][0]["step_time"] = 9.0
    assert repeat.compare(_run(), other)["identical"]


def test_each_difference_is_counted_where_it_is():
    other = _run()
    other["base"]["evals"][0]["records"][2]["scores"] = [1, 1]
    other["arms"]["gmts"]["eval"]["records"][0]["lengths"] = [10, 13]
    other["arms"]["gmts"]["train_log"][1]["loss"] = 0.41
    other["arms"]["ets"]["rollout_digests"]["1"] = ["cc", "de"]
    got = repeat.compare(_run(), other)
    assert not got["identical"]
    assert got["base"]["0"]["tasks_differing"] == 1
    assert got["arms"]["gmts"]["eval_tasks_differing"] == 1 and got["arms"]["gmts"]["train_steps_differing"] == 1
    assert got["arms"]["ets"]["rollout_steps_differing"] == 1 and got["arms"]["ets"]["train_steps_differing"] == 0
    # where it starts, in training steps from 1: the log's step 2; rollout_digests key "1" is drawn for step 2
    assert got["arms"]["gmts"]["first_train_step_differing"] == {"step": 2, "fields": {"loss": [0.4, 0.41]}}
    assert got["arms"]["gmts"]["first_rollout_step_differing"] is None
    assert got["arms"]["ets"]["first_rollout_step_differing"] == 2
    assert got["arms"]["ets"]["first_train_step_differing"] is None
    shorter = _run()
    shorter["arms"]["ets"]["train_log"].pop()
    assert repeat.compare(_run(), shorter)["arms"]["ets"]["first_train_step_differing"] == {"step": 2, "fields": {}}
    missing = _run()
    del missing["arms"]["gmts"]
    assert repeat.compare(missing, _run())["arms"]["gmts"] == {"missing": True}
    base_only = _run()
    base_only["arms"] = {}
    assert repeat.compare(_run(), base_only) == {"identical": True, "arms": {}, "deltas": {},
                                                 "base": repeat.compare(_run(), _run())["base"]}


def test_records_pair_by_the_tasks_index_across_task_key_versions():
    """A run keying its tasks by question and gold answer beside one keyed by the question alone: other hashes, the
    same tasks; the records pair by index, so identical scores read identical (a hash pairing read every task as
    differing)."""
    other = _run()
    for ev in [*other["base"]["evals"], *(a["eval"] for a in other["arms"].values())]:
        for r in ev["records"]:
            r["hash"] = "new-" + r["hash"]
    assert repeat.compare(_run(), other)["identical"]
    other["base"]["evals"][0]["records"][3]["scores"] = [0, 0]
    assert repeat.compare(_run(), other)["base"]["0"]["tasks_differing"] == 1
    hash_only = _run()
    for r in hash_only["base"]["evals"][0]["records"]:
        del r["task"]
    assert repeat.compare(hash_only, _run())["base"]["0"]["tasks_differing"] == 0  # paired by hash


def test_each_runs_paired_delta_is_kept_and_a_differing_one_printed(tmp_path, capsys):
    first, other = _run(), _run()
    first["summary"] = {"comparisons": {"gmts_vs_ets": {"delta": -0.032}}}
    other["summary"] = {"comparisons": {"gmts_vs_ets": {"delta": -0.020}}}
    assert repeat.compare(first, other)["deltas"] == {"gmts_vs_ets": [-0.032, -0.020]}
    table = repeat.markdown({"reference": "first", "compared": {"again": repeat.compare(first, other)}})
    assert "Paired deltas that differ from first's, points: again GMTS - ETS -2.0 against -3.2." in table
    same = repeat.markdown({"reference": "first", "compared": {"again": repeat.compare(first, first)}})
    assert "Paired deltas" not in same


def test_the_file_written(tmp_path, capsys):
    paths = []
    first, again = _run(), _run()  # the first from before gradient_checkpointing moved into the arms, run again without
    first["config"] = {"seed": 1, "gradient_checkpointing": True}
    again["config"] = {"seed": 1}
    again["config_hash"] = config_hash(again["config"])  # as recipe.py writes it today
    for arm in again["arms"].values():
        arm["generation_options"] = {"gradient_checkpointing": False}
    for i, results in enumerate([first, again]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(results))
    out = tmp_path / "repeat.json"
    assert repeat.main(["--out", str(out), f"cold={paths[0]}", f"warm={paths[1]}"]) == 0
    written = json.loads(out.read_text())
    assert written["identical"] and written["reference"] == "cold" and set(written["compared"]) == {"warm"}
    assert written["generation_options"] == {"cold": {"ets": {"gradient_checkpointing": True},
                                                      "gmts": {"gradient_checkpointing": True}},
                                             "warm": {"ets": {"gradient_checkpointing": False},
                                                      "gmts": {"gradient_checkpointing": False}}}
    assert written["config_hash"] == {"cold": again["config_hash"], "warm": again["config_hash"]}
    assert written["step_time_s"] == {"cold": {"ets": 1.1, "gmts": 1.1}, "warm": {"ets": 1.1, "gmts": 1.1}}
    assert repeat.main(["--out", str(out), f"cold={paths[0]}"]) == 2
    assert repeat.main(["--out", str(out), "cold", f"warm={paths[1]}"]) == 2


def test_the_table(tmp_path, capsys):
    other = _run()
    other["arms"]["gmts"]["eval"]["records"][0]["lengths"] = [10, 13]
    paths = []
    for i, results in enumerate([_run(), other]):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(results))
    out = tmp_path / "repeat.json"
    repeat.main(["--out", str(out), f"cold={paths[0]}", f"warm={paths[1]}"])
    capsys.readouterr()
    assert repeat.main(["--markdown", str(out)]) == 0
    assert capsys.readouterr().out.splitlines()[2] == \
        "| warm | cold | 0 | ets 0, gmts 0 | ets 0, gmts 0 | ets 0, gmts 1 | no | ets -; gmts - |"
    assert_refuses_bad_json_files(repeat.main, "--markdown", tmp_path, capsys)  # argparse's one line, no traceback
    assert repeat.main([]) == 2


def test_the_median_step_leaves_the_first_out_and_is_printed_under_the_table():
    run = _run()
    run["arms"]["ets"]["train_log"] = [{"step": i + 1, "step_time": t} for i, t in enumerate([30.0, 1.5, 1.7, 1.4])]
    run["arms"]["gmts"]["train_log"] = [{"step": 1, "step_time": 20.0}]  # nothing after the compiling step
    assert repeat.step_time_s(run) == {"ets": 1.5, "gmts": None}
    comparison = {"reference": "a", "compared": {"b": repeat.compare(_run(), _run())},
                  "step_time_s": {"a": repeat.step_time_s(run), "b": {"ets": 1.25}}}
    assert repeat.markdown(comparison).splitlines()[-1] == \
        "Median training step, its first left out: a ets 1.50 s, gmts ?; b ets 1.25 s."
    del comparison["step_time_s"]  # a file from before the field: the table alone
    assert repeat.markdown(comparison).splitlines()[-1].startswith("| b | a |")


def test_the_table_says_where_a_difference_starts():
    other = _run()
    other["arms"]["gmts"]["train_log"][0].update(grad_norm=0.10780801624, loss=0.51, reward=0.3, entropy=1.0)
    other["arms"]["gmts"]["rollout_digests"]["1"] = ["cc", "de"]
    comparison = {"reference": "alone", "compared": {"shared": repeat.compare(_run(), other)}}
    lines = repeat.markdown(comparison).splitlines()
    assert lines[2].endswith("| no | below |")  # a long answer goes below the table, the row stays short
    assert lines[3:6] == ["", "Where a difference starts:", ""]
    assert lines[6] == ("- shared vs alone: ets -; gmts: metrics at step 1 (entropy None vs 1, grad_norm None vs "
                        "0.107808, loss 0.5 vs 0.51, 1 more); rollouts from step 2")
    for v in comparison["compared"]["shared"]["arms"].values():  # a file written before these fields
        del v["first_train_step_differing"], v["first_rollout_step_differing"]
    assert repeat.markdown(comparison).splitlines()[2].endswith("| no | ets ?; gmts ? |")


def test_the_determinism_table_gives_each_setting_its_verdicts_step_times_and_failures(tmp_path, capsys):
    """bench/repeat.py --determinism: per file and setting, the mean of the runs' median steps alone and two at once,
    each shared run's verdict against the run alone, and the first failed run's reason."""
    ok = {"status": "ok", "median_step_s": 1.0}
    same = {"identical": True, "steps": [{}, {}]}
    moved = {"identical": False, "first_step_metrics_differ": 2, "first_step_rollouts_differ": None, "steps": [{}, {}]}
    unknown = {"identical": None, "reason": "a run failed"}
    runs = {"off": {"alone": ok, "shared": [ok, {**ok, "median_step_s": 2.0}]},
            "on": {"alone": {"status": "failed", "reason": "RecipeError: no"}, "shared": [ok, ok]}}
    result = {"measured": "2026-12-01 23:01 UTC", "runs": runs,
              "comparison": {"off": {"shared-1 vs alone": same, "shared-2 vs alone": moved},
                             "on": {"shared-1 vs alone": unknown, "shared-2 vs alone": unknown}}}
    (tmp_path / "d.json").write_text(json.dumps(result))
    assert repeat.main(["--determinism", str(tmp_path / "d.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == ("| d.json | off | 2026-12-01 23:01 UTC | 1.00 | 1.50 | identical (2 steps) | differs from step 2 "
                        "(rollouts the same) | - |")
    assert lines[3] == ("| d.json | on | 2026-12-01 23:01 UTC | - | 1.00 | not compared (a run failed) | not compared "
                        "(a run failed) | below |")
    assert lines[4:] == ["", "Failed runs:", "", "- d.json, on: RecipeError: no"]
