"""--ray: each cell process as a Ray task on a worker that may be another machine; its files come back and enter the
grid through --merge's checks."""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import socket
import time
import uuid
from pathlib import Path

from gmts_recipe.sweep.grid import Cell, Grid, SweepError, by_cell, cell_command, jobs_to_start, log_name
from gmts_recipe.sweep.merge import merge
from gmts_recipe.sweep.schedule import refusal, seconds_per_arm, time_left, write_timing

# The clone this package sits in: what each Ray node runs recipe.py from.
TREE = Path(__file__).resolve().parents[2]
RAY_EXTRA = 'pip install -e ".[ray]"'
# What a task's copy of the tree leaves out: history, results (the cells travel themselves), caches, environments.
RAY_EXCLUDES = [".git/", "/results/", "/runs/", "/cache/", ".carry/", "venv/", ".venv/", "__pycache__/",
                "*.egg-info/", ".pytest_cache/", ".hypothesis/"]
# The files of a cell process that come back to the driver (paths in the task's sweep folder, {cell}: its name).
RETURNED = ("{cell}/results.json", "{cell}/samples-*.jsonl.xz", "base-evals/*.json",
            "base-evals/*.jsonl.xz")


class CellFailed(RuntimeError):
    """A cell process that exited non-zero on a Ray worker: its exit code, log and timing travel back (Ray retries
    the task first: a CUDA error or a full disk on one node need not fail the cell)."""

    def __init__(self, code: int, log: str, timing: dict):
        super().__init__(code, log, timing)
        self.code, self.log, self.timing = code, log, timing

    def __str__(self) -> str:
        why = refusal(self.log[-4000:])
        return f"recipe.py exited with code {self.code} on {self.timing.get('host')}" + (f": {why}" if why else "")


def run_cell_here(command: list[str], sweep_name: str, cell_name: str, *shipped: dict[str, bytes]) -> dict:
    """Run one cell process (the command `run` would start) on this node, in a fresh temporary sweep folder holding
    the `shipped` files (path in the sweep folder: bytes; the shared base evaluations, the cell's finished arms), and
    return the cell's files, its log and its timing. A worker imports it from the copy of the tree Ray ships
    (`ray_init_kwargs`: the same code as the driver's)."""
    sent = {rel: data for files in shipped for rel, data in files.items()}
    with tempfile.TemporaryDirectory(prefix="gmts-cell-") as tmp:
        root = Path(tmp) / sweep_name
        for rel, data in sent.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        command = [sys.executable, *command[1:]]  # this node's Python, running the tree's recipe.py
        command[command.index("--results_dir") + 1] = str(root)
        start = time.time()
        with open(Path(tmp) / "cell.log", "w", encoding="utf-8") as out:
            code = subprocess.call(command, stdout=out, stderr=subprocess.STDOUT)
        timing = {"gpu": os.environ.get("CUDA_VISIBLE_DEVICES"), "start": start, "end": time.time(),
                  "host": socket.gethostname(), "exit_code": code}
        log = (Path(tmp) / "cell.log").read_text(encoding="utf-8", errors="replace")
        if code != 0:
            raise CellFailed(code, log, timing)
        patterns = [p.format(cell=cell_name) for p in RETURNED]
        files = {}
        for path in root.rglob("*"):
            rel = path.relative_to(root).as_posix()
            if path.is_file() and any(fnmatch.fnmatchcase(rel, p) for p in patterns):
                data = path.read_bytes()
                if sent.get(rel) != data:  # what was shipped in unchanged stays out of the answer
                    files[rel] = data
        return {"files": files, "log": log, "timing": timing}


def _files_of(folder: Path, root: Path, patterns: tuple[str, ...]) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for pattern in patterns for p in sorted(folder.glob(pattern))
            if p.is_file()}


def _install_base(root: Path, files: dict[str, bytes]) -> None:
    """The base evaluations a task computed, into this tree's shared cache: samples first, each file atomically,
    none overwritten (a file already here is this tree's, which every local cell carries)."""
    for rel in sorted(files, key=lambda r: r.endswith(".json")):
        target = root / rel
        if rel.startswith("base-evals/") and not target.exists():
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(files[rel])
            os.replace(tmp, target)


def _install_cell(grid: Grid, root: Path, cell: Cell, files: dict[str, bytes]) -> str:
    """A cell a Ray task ran, into the grid only through `merge`: written to a staging folder (a sweep folder of its
    own beside the cells), verified there as any incoming cell is (plan_merge), then written file by file atomically.
    A refused cell stays in the staging folder, named in the SweepError, and the grid is untouched."""
    staging = root / ".incoming" / f"{cell.name}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    if (root / "base-evals").is_dir():  # the shared base evaluations the cell's records name (../base-evals/)
        (staging / "base-evals").symlink_to((root / "base-evals").resolve(), target_is_directory=True)
    for rel, data in files.items():
        if rel.startswith(f"{cell.name}/"):
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
    try:
        lines = merge(grid, staging)
    except SweepError as e:
        raise SweepError(f"{e} (its files: {staging})") from None
    shutil.rmtree(staging)
    if not any((root / ".incoming").iterdir()):
        (root / ".incoming").rmdir()
    return "; ".join(lines)


def ray_init_kwargs(address: str | None) -> dict:
    """ray.init's arguments for a sweep. The tree travels as the job's working_dir (Ray packs it once and every node
    unpacks it): each node runs this very recipe.py, uncommitted edits included, with no shared filesystem or
    checkout to keep in step; the cells' files travel as task arguments and answers. Quiet: each cell's output goes
    to its log."""
    return {"address": address, "logging_level": logging.WARNING, "log_to_driver": False,
            "runtime_env": {"working_dir": str(TREE), "excludes": RAY_EXCLUDES}}


def _answers(address: str, timeout: float = 10.0) -> OSError | None:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        return e
    return None


def _ray_address(address: str | None) -> str | None:
    """The address for ray.init, checked first: ray.init waits minutes on a HOST:PORT that does not answer. None:
    RAY_ADDRESS, else the cluster `ray start` made on this machine (Ray's /tmp/ray/ray_current_cluster) if it still
    answers (a head killed without `ray stop` leaves the file behind), else "local", a new local cluster."""
    if address is None:
        if os.environ.get("RAY_ADDRESS"):
            return None
        latest = Path("/tmp/ray/ray_current_cluster")
        found = latest.read_text().strip() if latest.is_file() else ""
        return None if found and _answers(found, 2.0) is None else "local"
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "://" not in address:  # else "auto" or a ray:// client address: Ray's to resolve
        error = _answers(address)
        if error is not None:
            raise SweepError(f"--ray {address}: no Ray head answers there ({error.strerror or error}); start one "
                             f"with `ray start --head` and give the address it prints") from None
    return address


def _connect(ray, address: str | None) -> bool:
    """ray.init on the cluster at `address` unless Ray is initialized already (the caller's, as it is: tests give it
    ray_init_kwargs and fake resources); whether it was started here (and is to be shut down here)."""
    if ray.is_initialized():
        return False
    address = _ray_address(address)
    try:
        ray.init(**ray_init_kwargs(address))
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise SweepError(f"--ray {address or ''}: cannot reach the Ray cluster ({str(e).splitlines()[0]}; a head "
                         f"started with a token needs RAY_AUTH_MODE=token here: docs/scale.md)") from None
    return True


class RayTasks:
    """The cell processes of one sweep as Ray tasks: submitted, waited for, their logs and timing written here and
    their cells installed through --merge's checks."""

    def __init__(self, ray, grid: Grid, extra: list[str], runs_per_gpu: int, retries: int):
        self.ray, self.grid, self.extra, self.runs_per_gpu = ray, grid, extra, runs_per_gpu
        self.root = Path(grid.results_dir) / grid.name
        self.log_dir = self.root / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.gpus = ray.cluster_resources().get("GPU", 0)
        self.share = {"num_gpus": 1 / runs_per_gpu} if self.gpus else {"num_cpus": 1}
        self.task = ray.remote(run_cell_here).options(max_retries=retries, retry_exceptions=True, **self.share)

    def submit(self, cell: Cell, arms: tuple[str, ...], *shipped):
        return self.task.remote(cell_command(self.grid, cell, arms, self.extra), self.grid.name, cell.name, *shipped)

    def finish(self, cell: Cell, arms: tuple[str, ...], ref) -> tuple[dict | None, str | None]:
        """The task's answer (None if it failed for good), its log and timing written, and why it failed."""
        ray, name = self.ray, log_name(cell, arms)
        try:
            answer, reason = ray.get(ref), None
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if type(cause).__name__ == "CellFailed":  # by name: the worker's copy of the class, not this one
                answer, reason = {"log": cause.log, "timing": cause.timing}, str(cause)
            else:
                answer, reason = None, str(cause or e).strip().splitlines()[-1]
        except ray.exceptions.RayError as e:  # the worker or its node was lost, more often than retried
            answer, reason = None, str(e).strip().splitlines()[0]
        if answer is not None:
            t = answer["timing"]
            with open(self.log_dir / name, "a", encoding="utf-8") as out:
                out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t['start']))} Ray task on "
                          f"{t['host']} (gpu {t['gpu']}) {' '.join(cell_command(self.grid, cell, arms, self.extra))}\n")
                out.write(answer["log"])
            write_timing(self.log_dir, cell, arms, t["gpu"], self.runs_per_gpu, t["start"], t["end"], t["exit_code"],
                         t["host"])
        return (None if reason else answer), (f"{cell.name} {','.join(arms)}: {reason} (see {self.log_dir / name})"
                                              if reason else None)

    def run_base(self, first: Cell) -> str | None:
        """The base evaluations as one task, installed into this tree's shared cache; why it failed, if it did."""
        base_sent = _files_of(self.root / "base-evals", self.root, ("*.json", "*.jsonl.xz"))
        answer, failure = self.finish(first, ("base",), self.submit(first, ("base",), base_sent))
        if not failure:
            _install_base(self.root, answer["files"])
        return failure

    def run_cells(self, units: list[tuple[Cell, tuple[str, ...]]]) -> list[str]:
        """Every cell process as a task, the shared base evaluations shipped once to every node; each cell installed
        as its task ends, with a line and the time left. Returns the failed ones."""
        base_ref = self.ray.put(_files_of(self.root / "base-evals", self.root, ("*.json", "*.jsonl.xz")))
        refs = {}
        for cell, arms in units:
            own = _files_of(self.root / cell.name, self.root, ("results.json", "samples-*.jsonl.xz"))  # finished arms
            refs[self.submit(cell, arms, base_ref, own)] = (cell, arms)
        failed, done = [], 0
        pending = list(refs)
        slots = max(1, int((self.gpus * self.runs_per_gpu) if self.gpus else
                           self.ray.cluster_resources().get("CPU", 1)))
        begun = [time.time()] * min(slots, len(pending))  # start times: a task starts when a slot frees
        took: list[tuple[float, int]] = []  # (seconds, arms) of each finished task
        while pending:
            ready, pending = self.ray.wait(pending, num_returns=1)
            cell, arms = refs[ready[0]]
            failure, status = self.install(cell, arms, ready[0])
            if failure:
                failed.append(failure)
            done += 1
            now = time.time()
            begun.sort()
            took.append((now - begun.pop(0), len(arms)))  # the earliest started ends first, as far as we can tell
            if done + len(begun) < len(units):
                begun.append(now)
            left = [len(refs[r][1]) for r in pending]  # in submission order: the first len(begun) are running
            eta = time_left(seconds_per_arm(took), list(zip((now - b for b in sorted(begun)), left)),
                            left[len(begun):], slots)
            print(f"[sweep] {done}/{len(units)} {cell.name} {','.join(arms)}: {status}; about {eta / 60:.0f} min "
                  f"left", flush=True)
        return failed

    def install(self, cell: Cell, arms: tuple[str, ...], ref) -> tuple[str | None, str]:
        """An ended task's cell into the grid (_install_cell): (why it failed or None, its status for the line)."""
        answer, failure = self.finish(cell, arms, ref)
        if answer is not None:
            try:
                return None, f"ok, {_install_cell(self.grid, self.root, cell, answer['files'])}"
            except SweepError as e:
                failure = f"{cell.name} {','.join(arms)}: refused: {e}"
        return failure, "FAILED"


def run_ray(grid: Grid, extra: list[str], only: str | None = None, base_only: bool = False,
            address: str | None = None, runs_per_gpu: int = 1, retries: int = 2) -> list[str]:
    """Every missing cell process as a Ray task asking for 1/runs_per_gpu GPU (one CPU on a cluster without GPUs), on
    the cluster at `address` (None: the running one `ray start` made here, else a new local one; an initialized Ray
    is used as it is). The base evaluations run first as one task and are shipped to every cell task, so no node
    computes them again; each task is retried `retries` times (a failed process or a lost worker); its cell enters
    the grid through _install_cell. Returns the failed cells, as `run` does."""
    try:
        import ray  # an optional extra (RAY_EXTRA): only --ray needs it
    except ImportError:
        raise SweepError(f"--ray needs Ray, which is not installed here: {RAY_EXTRA}") from None
    todo = jobs_to_start(grid, only, base_only)
    if not todo:
        return []
    started_here = _connect(ray, address)
    try:
        tasks = RayTasks(ray, grid, extra, runs_per_gpu, retries)
        units = by_cell(todo)
        print(f"[sweep] {grid.name}: {len(todo)} job(s) in {len(units)} cell process(es) as Ray tasks on "
              f"{ray.cluster_resources().get('CPU', 0):g} CPU(s), {tasks.gpus:g} GPU(s), {tasks.share}; base "
              f"evaluations first")
        failure = tasks.run_base(todo[0][0])
        if failure:
            return [failure]
        return [] if base_only else tasks.run_cells(units)
    finally:
        if started_here:
            ray.shutdown()
