"""bench/scaling.py: the committed scaling file is what the script computes from the committed runs."""

import json

from bench_scripts import load_bench


def _module():
    return load_bench("scaling")


def test_scaling_file_is_recomputed_from_the_runs():
    scaling = _module()
    committed = json.loads(scaling.OUT.read_text())
    assert committed == json.loads(json.dumps(scaling.measure()))
    ways = committed["ways"]
    assert committed["data_parallel_speedup"] == ways["alone"]["total_s"] / ways["data_parallel"]["total_s"]
    assert all(r["steps"] >= 10 for w in ways.values() for r in w["runs"])
