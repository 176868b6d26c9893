"""bench/scaling.py: the committed scaling file is what the script computes from the committed runs."""

import json

import pytest

from bench_scripts import load_bench


def _module():
    return load_bench("scaling")


@pytest.mark.slow
def test_scaling_file_is_recomputed_from_the_runs():
    """Every run's results file read (120 of them, a minute on 2 cores): the unit suite's part is the test below."""
    scaling = _module()
    committed = json.loads(scaling.OUT.read_text())
    assert committed == json.loads(json.dumps(scaling.measure()))
    ways = committed["ways"]
    assert committed["data_parallel_speedup"] == ways["alone"]["total_s"] / ways["data_parallel"]["total_s"]
    assert all(r["steps"] >= 10 for w in ways.values() for r in w["runs"])


def test_each_ways_first_run_the_cell_processes_and_the_breakdown_are_recomputed():
    """The committed scaling file's rows that a few files give: each way's first run, the cell processes and the
    step's breakdown, as scaling.py computes them (every run, and the medians over them: the slow test above)."""
    scaling = _module()
    committed = json.loads(scaling.OUT.read_text())
    assert list(committed["ways"]) == list(scaling.RUNS)
    for way, runs in scaling.RUNS.items():
        assert committed["ways"][way]["runs"][0] == json.loads(json.dumps(scaling._run(*runs[0]))), way
    assert committed["cell_processes"] == json.loads(json.dumps(scaling.processes()))
    assert committed["breakdown"] == json.loads(json.dumps(scaling.breakdown()))


def test_a_cell_process_lasts_at_least_its_two_arms():
    """Whole-process minutes (sweep log, Ray timing file, driver's marks) against the arms' own clocks: a process runs
    ETS then GMTS, so it cannot be shorter than their wall minutes together; the Ray file's base-evaluation process
    (15 s) is no cell."""
    scaling = _module()
    p = scaling.processes()["ways"]
    assert [len(p[w]["processes"]) for w in ("alone_levers", "mps_four", "ray_four", "mps_two", "warm_one",
                                              "warm_two")] == [1, 4, 4, 2, 21, 12]
    read = {}  # a cell's results file, read once for both its arms
    for way, entry in p.items():
        arms = {}
        for source, arm in scaling.RUNS[way]:
            if source not in read:
                read[source] = json.loads(scaling._results_file(source).read_text())
            results = read[source]
            arms.setdefault(results["config_name"], []).append(results["arms"][arm]["wall_minutes"])
        for row in entry["processes"]:
            assert len(arms[row["cell"]]) == 2 and sum(arms[row["cell"]]) <= row["minutes"], (way, row)
    assert p["mps_two"]["group_minutes"] >= max(r["minutes"] for r in p["mps_two"]["processes"])
    assert p["ray_four"]["group_minutes"] >= max(r["minutes"] for r in p["ray_four"]["processes"])


def test_a_run_read_from_a_results_file_and_a_timing_not_found_once(tmp_path, monkeypatch):
    scaling = _module()
    runs = [scaling._run(*r) for r in scaling.RUNS["mps_two"]]
    assert all(r["steps"] == 40 and r["source"].endswith("-results.json") for r in runs)
    (tmp_path / "sweep.log").write_text("[sweep] 1/2 c-s1 ets,gmts on gpu 0: ok, 4.0 min\n"
                                        "[sweep] 2/2 c-s1 ets,gmts on gpu 0: ok, 5.0 min\n")
    (tmp_path / "timing.jsonl").write_text(json.dumps({"cell": "c-s2", "arms": ["base"], "start": 0, "end": 15}) + "\n"
                                           + json.dumps({"cell": "c-s2", "arms": ["ets", "gmts"], "start": 15,
                                                         "end": 615}) + "\n")
    (tmp_path / "marks.log").write_text("100 A sweep rc=0\n400 B rerun-s3 rc=0\n")
    monkeypatch.setattr(scaling, "ROOT", tmp_path)
    assert scaling._process_minutes("ray", "timing.jsonl", "c-s2", None) == 10.0
    assert scaling._process_minutes("marks", "marks.log", "c-s3", "A sweep rc=0") == 5.0
    for clock, path, cell in (("sweep", "sweep.log", "c-s1"), ("sweep", "sweep.log", "c-s9"),
                              ("marks", "marks.log", "c-s4")):
        with pytest.raises(ValueError, match="timings of"):
            scaling._process_minutes(clock, path, cell, "A sweep rc=0")


def test_warm_worker_cells_leave_out_each_workers_first_cell_and_ran_as_labelled():
    """The warm-worker ways count steady cells only: no cell that was its worker's first training job (it loaded the
    model and compiled), by the sweep's own job counter; and each ran where its label says (one GPU alone, or a GPU
    of a machine whose other GPU ran a cell at the same time)."""
    scaling = _module()
    lines = [json.loads(line) for line in (scaling.ROOT / scaling.TIMING).read_text().splitlines() if line.strip()]
    for way, seeds in (("warm_one", scaling.WARM_ONE), ("warm_two", scaling.WARM_TWO)):
        for seed in seeds:
            (i, t), = [(i, t) for i, t in enumerate(lines) if t["cell"] == f"coupled-lr0.0001-s{seed}"
                       and t["arms"] == ["ets", "gmts"]]
            # the job-1 line of its worker's process: the last one on its GPU up to this cell's
            job_1 = lines[max(j for j in range(i + 1)
                              if lines[j]["gpu"] == t["gpu"] and lines[j].get("job_in_process") == 1)]
            assert t["warm"] and t["exit_code"] == 0
            assert t["job_in_process"] > (2 if job_1["arms"] == ["base"] else 1), seed
            others = [u for u in lines if u["gpu"] != t["gpu"] and u["start"] < t["end"] and t["start"] < u["end"]]
            assert bool(others) == (way == "warm_two"), seed
    committed = json.loads(scaling.OUT.read_text())
    warm = committed["cell_processes"]["ways"]
    one, two = warm["warm_one"]["cell_minutes"], warm["warm_two"]["cell_minutes"]
    assert committed["warm_two_gpus_throughput"] == 2 * one / two
