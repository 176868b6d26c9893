"""A warm worker: one Python process that runs a script (recipe.py) many times, one job after another, so that a
sweep's cells on one GPU pay the imports, the CUDA context and the compiled generation step once per worker instead
of once per cell (sweep.py --warm_workers).

Why it is safe: each job re-executes the script as `__main__` (runpy) with its own `sys.argv`, so the script's own
state is fresh; what persists is what the imported modules keep, which recipe.py's arms already share within one
process (the compiled decode step, dynamo's graphs, PyTorch's deterministic-algorithms switch that each experiment
sets): an arm is a function of its seed and config whatever ran before it in the process (tests/test_repeatable.py).

Protocol (the sweep's side is `WarmWorker`): one JSON object per line on stdin, {"argv": [script, args...], "log":
path}; the job's stdout and stderr, file descriptors included (C extensions, tqdm, a crash's message), go to the end
of that log; one line `PREFIX {"exit_code": n}` answers on the worker's original stdout. A job that exits non-zero
ends the worker (a failed experiment may leave the process in any state: CUDA errors are sticky), and the sweep's
side starts a fresh one for the next job.

    python -m gmts_recipe.worker      # run by WarmWorker; not meant to be typed
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

PREFIX = "[gmts-worker]"  # marks the answer lines on the control channel; anything else there is ignored


def run_job(argv: list[str], log: str) -> int:
    """Run `argv[0]` as __main__ with `argv[1:]`, its output appended to `log`; its exit code (1 for an exception,
    whose traceback goes to the log)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    saved_argv = sys.argv
    with open(log, "a", encoding="utf-8") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, (int, type(None))):
                print(e.code, file=sys.stderr)
        except BaseException:  # noqa: BLE001 - KeyboardInterrupt included: the job failed, the worker ends
            traceback.print_exc()
            code = 1
        finally:
            sys.argv = saved_argv
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return code


def serve(requests=None) -> int:
    """The worker's loop: jobs from stdin until it closes (exit 0) or a job fails (exit with the job's code)."""
    control = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # between jobs stray output goes to stderr, never into the control channel
    if os.getcwd() not in sys.path:  # the scripts' own imports (recipe.py imports check, gmts_trainer)
        sys.path.insert(0, os.getcwd())
    for line in requests if requests is not None else sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        code = run_job(job["argv"], job["log"])
        control.write(f"{PREFIX} {json.dumps({'exit_code': code})}\n")
        if code != 0:
            return code
    return 0


class WarmWorker:
    """The sweep's side of one warm worker process, started on the first job and again after a job that failed (or a
    worker that died: its exit code is the job's). `env` is the process's environment (e.g. CUDA_VISIBLE_DEVICES)."""

    def __init__(self, env: dict | None = None, cwd: str | Path | None = None):
        self.env, self.cwd, self.proc = env, cwd, None
        self.started = 0  # processes started so far (one, unless a job failed)

    def run(self, argv: list[str], log: str | Path) -> int:
        """Run one job (argv[0]: the script, then its arguments) in the warm process; its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-m", "gmts_recipe.worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=self.env, cwd=self.cwd, text=True, bufsize=1)
            self.started += 1
        try:
            self.proc.stdin.write(json.dumps({"argv": [str(a) for a in argv], "log": str(log)}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died before reading: its exit code below
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                code = json.loads(line[len(PREFIX):])["exit_code"]
                if code != 0:
                    self.proc.wait()
                return code
        code = self.proc.wait()  # the process ended without answering (killed, crashed)
        return code if code != 0 else 1

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        self.proc = None


if __name__ == "__main__":
    try:
        sys.exit(serve())
    except KeyboardInterrupt:  # Ctrl-C between jobs: the sweep stops too
        sys.exit(130)
