"""The sweep's parts, one concern each; `python sweep.py` is the command over them.

- grid: the sweep file (Grid, Cell, load_grid and its checks) and the jobs it still holds;
- schedule: logs/timing.jsonl and the pace and time left read from it;
- local: the local pool of workers (run);
- ray_tasks: the cells as Ray tasks (run_ray);
- merge: cells run on another machine brought in (--merge);
- claims: who runs which seeds (--claim, --who);
- archive: the cells a machine ran in one file (--pack), checked whole before they are merged (--merge ARCHIVE:
  gmts_recipe.verify.plan.incoming_problems, what an incoming cell must show);
- pace: the time per card to a machine's first seed and each seed after it, from the timing logs;
- summary: every number of the sweep from its cells (summarize; gmts_recipe/verify/sweep.py verifies it);
- report: the tables and figures of a summary (render, plot, write_summary).

A sequential plan's own parts (its statistics, failures, cards, sensitivity comparison) are gmts_recipe.sequential's.

No module here imports torch, matplotlib or Ray before a function needs them: check.py verifies a sweep without them.
"""


class SweepError(ValueError):
    """A grid or summary that cannot be used; the message is the one-line reason (here, so that every module of the
    package reads it without importing another)."""
