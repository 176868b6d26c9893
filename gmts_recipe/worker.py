"""A warm worker: one Python process that runs a script (recipe.py) many times, one job after another, so that a
sweep's cells on one GPU pay the imports, the CUDA context and the compiled generation step once per worker instead
of once per cell (sweep.py --warm_workers).

Why it is safe: each job re-executes the script as `__main__` (runpy) with its own `sys.argv`, so the script's own
state is fresh; what persists is what the imported modules keep, which recipe.py's arms already share within one
process (the compiled decode step, dynamo's graphs, PyTorch's deterministic-algorithms switch that each experiment
sets): an arm is a function of its seed and config whatever ran before it in the process (tests/test_repeatable.py).
Between jobs the worker drops what a fresh process would not hold (`between_jobs`). Not covered: a thread a job
leaves running writes into the next job's log (the job's log names such threads); and `deterministic_kernels` can
only be turned on before a process's first CUDA work, so a sweep refuses warm workers when its cells differ in it.

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
import threading
import traceback
from pathlib import Path

PREFIX = "[gmts-worker]"  # marks the answer lines on the control channel; anything else there is ignored


def _exit_code(code: object) -> int:
    """A SystemExit's code as the process's exit status would be: None 0, an int (or bool) modulo 256, else 1."""
    if code is None:
        return 0
    return int(code) & 0xFF if isinstance(code, int) else 1


def run_job(argv: list[str], log: str) -> int:
    """Run `argv[0]` as __main__ with `argv[1:]`, its output appended to `log`; its exit code as a fresh process's
    would be (1 for an exception, whose traceback goes to the log; 130 for Ctrl-C)."""
    with open(log, "a", encoding="utf-8") as out:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        saved_argv, threads = sys.argv, set(threading.enumerate())
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            sys.argv = list(argv)
            runpy.run_path(argv[0], run_name="__main__")
            code = 0
        except SystemExit as e:
            code = _exit_code(e.code)
            if code == 1 and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # noqa: BLE001 - whatever the script raised: the job failed, the worker ends
            traceback.print_exc()
            code = 1
        finally:
            sys.argv = saved_argv
            left = [th.name for th in threading.enumerate() if th not in threads and th.is_alive() and not th.daemon]
            if left:  # their later output would land in the next job's log
                print(f"{PREFIX} threads this job started still run: {', '.join(left)}", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return code


def between_jobs() -> None:
    """What a fresh process would not hold: the last cell's decode buffers (its model is gone) and the memory the
    allocator keeps. And from the second job on, a compile that hits dynamo's recompile limit fails its cell instead of
    falling back to eager code silently (counts accumulate over a process's cells; a fresh process starts at zero)."""
    import gc

    decode_loop = sys.modules.get("gmts_recipe.generation.decode_loop")
    if decode_loop is not None:  # imported by a job: not imported here, so a worker of other scripts needs no torch
        decode_loop.release_buffers()
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    dynamo_config = sys.modules.get("torch._dynamo.config")
    if dynamo_config is not None and hasattr(dynamo_config, "fail_on_recompile_limit_hit"):
        dynamo_config.fail_on_recompile_limit_hit = True


def serve(requests=None) -> int:
    """The worker's loop: jobs from stdin until it closes (exit 0) or a job fails (exit with the job's code). The jobs
    read nothing: their stdin is /dev/null, as the control channel must not be theirs."""
    control = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    if requests is None:
        requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
    os.dup2(2, 1)  # between jobs stray output goes to stderr, never into the control channel
    if os.getcwd() not in sys.path:  # the scripts' own imports (recipe.py imports check, gmts_trainer)
        sys.path.insert(0, os.getcwd())
    for line in requests:
        if not line.strip():
            continue
        job = json.loads(line)
        code = run_job(job["argv"], job["log"])
        control.write(f"{PREFIX} {json.dumps({'exit_code': code})}\n")
        if code != 0:
            return code
        between_jobs()
    return 0


class WarmWorker:
    """The sweep's side of one warm worker process, started on the first job and again after a job that failed (or a
    worker that died: its exit code is the job's). `env` is the process's environment (e.g. CUDA_VISIBLE_DEVICES)."""

    def __init__(self, env: dict | None = None, cwd: str | Path | None = None):
        self.env, self.cwd, self.proc = env, cwd, None
        self.started = 0  # processes started so far (one, unless a job failed)
        self.jobs = 0  # jobs the current process has taken, the last one included (1: it paid the process's start)

    def run(self, argv: list[str], log: str | Path) -> int:
        """Run one job (argv[0]: the script, then its arguments) in the warm process; its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.proc = subprocess.Popen([sys.executable, "-m", "gmts_recipe.worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env=self.env, cwd=self.cwd, text=True, bufsize=1)
            self.started += 1
            self.jobs = 0
        self.jobs += 1
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
        """End the process (it finishes its job first) and close its pipes."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:  # it died with a line unread
                pass
            self.proc.wait()
            self.proc.stdout.close()
        self.proc = None


if __name__ == "__main__":
    try:
        sys.exit(serve())
    except KeyboardInterrupt:  # Ctrl-C between jobs: the sweep stops too
        sys.exit(130)
