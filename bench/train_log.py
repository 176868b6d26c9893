"""What the bench scripts read alike from the runs' own logs, written once: costs.py, scaling.py and complete_run.py
import it (each puts bench/ on sys.path)."""

from __future__ import annotations

import statistics


def median_step_s(train_log: list[dict]) -> float:
    """The median `step_time` of a train_log (recipe.py's rows, step 1 first) after its first step: the first step
    compiles (torch.compile's graphs, the CUDA graphs' capture), so it times the compiler, not a step. A log of one step
    or none has no such median (statistics.StatisticsError); a row without `step_time` is a KeyError."""
    return statistics.median(row["step_time"] for row in train_log[1:])
