"""bench/quickstart_time.py on hand-made blocks and results files: the README's block as run, each command timed,
a failing command stopping the block, and the generated lines exactly."""

import json

import pytest
from bench_scripts import assert_refuses_bad_json_files, load_bench

quickstart_time = load_bench("quickstart_time", "bench_quickstart_time")

README = """# x

## Quick start

```bash
# a comment line, not a command
echo one
sleep 0.2                # a trailing comment stays with its command
false
echo never
```

## Next
"""


def test_the_block_is_the_readmes_commands_in_order():
    commands = quickstart_time.quick_start_block((quickstart_time.ROOT / "README.md").read_text())
    assert commands[0].startswith("python3 -m venv .venv") and commands[-1].startswith("python -m pytest -q")
    assert any(c.startswith("python recipe.py --arm all --config configs/quickstart.yaml") for c in commands)
    assert not any(c.lstrip().startswith("#") for c in commands)


def test_each_command_is_timed_and_a_failing_one_stops_the_block(tmp_path):
    (tmp_path / "README.md").write_text(README)
    log = tmp_path / "block.log"
    rows = quickstart_time.run_block(log, tmp_path, tmp_path)
    assert [r["command"] for r in rows] == ["echo one", "sleep 0.2", "false", "echo never"]
    assert rows[0]["seconds"] >= 0 and rows[1]["seconds"] >= 0.2
    assert rows[2]["seconds"] is None and rows[3]["seconds"] is None  # set -e: the block stopped at `false`
    assert quickstart_time.command_output(log, 0) == "one\n" and "never" not in log.read_text()


def test_the_readme_lines_name_the_total_the_machine_the_setting_and_each_command(tmp_path):
    path = tmp_path / "block.json"
    path.write_text(json.dumps({
        "machine": {"cores": 2, "cpu": "CPU", "python": "3.11", "date": "2026-12-06 06:30 UTC", "load_before": 0.04,
                    "commit": "abc1234"},
        "log": "bench/logs/quickstart-block-2026-12-06-abc1234.log", "finished": True, "total_s": 1500.0,
        "load_after": 0.5, "commands": [{"command": "python3 -m venv .venv", "seconds": 3.2},
                                         {"command": "export A=1 B=2", "seconds": 0.001},
                                         {"command": "python check.py x", "seconds": 0.6},
                                         {"command": "python recipe.py --arm all", "seconds": 600.0}]}))
    text = quickstart_time.readme(path)
    assert text.replace("\n", " ") == (  # wrapped as the documentation's prose (gmts_recipe.markdown)
        "The block as written took 25.0 min on a fresh clone (2 idle cores, load average 0.0 before it; 2026-12-06, "
        "commit abc1234, `A=1 B=2`; [its console](bench/logs/quickstart-block-2026-12-06-abc1234.log)): "
        "`python3 -m venv .venv` 3 s; `python check.py x` under 1 s; `python recipe.py --arm all` 10.0 min. ")
    assert text.endswith(".\n") and max(len(line) for line in text.splitlines()) <= 155


def test_the_threads_table_and_its_ratios(tmp_path):
    rows = [{"setting": label, "env": env, "busy_cores": busy, "steps_s": [1.0], "median_step_s": step,
             "eval_s": 10.0, "wall_s": 100.0, "cpu_s": cpu}
            for (label, env, busy), step, cpu in zip(quickstart_time.SETTINGS, (20, 10, 11, 20, 40, 25),
                                                     (100, 180, 150, 100, 130, 100))]
    path = tmp_path / "threads.json"
    path.write_text(json.dumps({"machine": {"cores": 2, "cpu": "CPU", "date": "D", "commit": "c"},
                                "workload": "w", "rows": rows}))
    text = quickstart_time.markdown(path)
    assert "| 2 threads, passive wait | 1 | 25.0 s | 10 s | 100 s | 100 s |" in text
    assert ("Idle: 2 threads' step over 1 thread's: 0.50 spinning, 0.55 sleeping; CPU time over wall time: 1.00 "
            "(1 thread), 1.80 (spinning), 1.50 (sleeping).") in text
    assert "One core taken: 2 threads' step over 1 thread's: 2.00 spinning, 1.25 sleeping" in text


@pytest.mark.parametrize("option", ["--readme", "--markdown"])
def test_a_missing_or_broken_file_is_one_line(tmp_path, capsys, option):
    assert_refuses_bad_json_files(quickstart_time.main, option, tmp_path, capsys)


def test_no_mode_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        quickstart_time.main([])
    assert exit_.value.code == 2 and "name a mode" in capsys.readouterr().err


def test_the_reference_keeps_every_samples_file_its_results_name(tmp_path):
    run, reference = tmp_path / "runs" / "quickstart", tmp_path / "results" / "quickstart-cpu"
    (run.parent / "base-evals").mkdir(parents=True)
    run.mkdir()
    names = {"../base-evals/b-seed0.jsonl.xz": b"base", "samples-gmts.jsonl.xz": b"gmts"}
    for name, data in names.items():
        (run / name).write_bytes(data)
    results = {"base": {"evals": [{"samples": {"path": "../base-evals/b-seed0.jsonl.xz", "sha256": "0"}}]},
               "arms": {"gmts": {"eval": {"samples": {"path": "samples-gmts.jsonl.xz", "sha256": "0"}}}}}
    (run / "results.json").write_text(json.dumps(results))
    for name in ("curves.png", "curves-selection.png"):
        (run / name).write_bytes(b"png")
    quickstart_time.keep_reference(run, reference, "console\n")
    assert (reference / "run.log").read_text() == "console\n"
    assert json.loads((reference / "results.json").read_text()) == results
    for name, data in names.items():
        assert (reference / name).read_bytes() == data  # ../base-evals/ beside the reference, as check.py reads it
