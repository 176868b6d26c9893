"""Selection is global across data-parallel processes: the union of the per-process masks equals the
single-process mask on the concatenated batch. Two real processes (gloo on CPU)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from selection import RULES, kept_count
from tiny import free_port

CASES = ["batch-gmts", "group-gmts", "microbatch-gmts", "batch-entropy_nonzero_omega"]  # as dist_selection.py runs them


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", free_port(),
           str(Path(__file__).parent / "dist_selection.py"), str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return {case: [torch.load(out / f"{case}-rank{r}.pt") for r in (0, 1)] for case in CASES}


def _concat(parts, key):
    width = max(p[key].size(1) for p in parts)
    return torch.cat([torch.nn.functional.pad(p[key], (0, width - p[key].size(1))) for p in parts])


@pytest.mark.parametrize("case", CASES)
def test_union_of_process_masks_is_the_single_process_mask(records, case):
    parts = records[case]
    scope, rule = case.split("-")
    entropy, omega, mask, keep = (_concat(parts, k) for k in ("entropy", "omega", "mask", "keep"))
    single = RULES[rule].select(entropy, omega, mask, 0.2, group_size=parts[0]["group_size"])
    assert torch.equal(keep, single)
    assert parts[0]["kept_global"] == parts[1]["kept_global"] == int(keep.sum())
    if scope != "group":
        assert int(keep.sum()) == kept_count(int(mask.sum()), 0.2)
    assert not torch.equal(parts[0]["entropy"], parts[1]["entropy"][: parts[0]["entropy"].size(0)]), \
        "both processes saw the same rows: the test would not tell a global threshold from a local one"
