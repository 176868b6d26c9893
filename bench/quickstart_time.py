"""How long the README's Quick start takes on a CPU, measured as a user meets it.

    python bench/quickstart_time.py threads                 # which thread setting: short runs, idle and with a core taken
    python bench/quickstart_time.py block --reference results/quickstart-cpu
                                                            # the Quick start block as written, on a fresh clone
    python bench/quickstart_time.py --markdown bench/quickstart-threads-2core.json    # bench/README.md's table
    python bench/quickstart_time.py --readme bench/quickstart-block-2core.json        # the README's time lines

`threads` runs the Quick start's config for 3 steps and its evaluation (`--arm grpo --max_steps 3`) once per setting:
one or as many torch threads as cores, OpenMP's waiting threads spinning (its default) or sleeping
(`OMP_WAIT_POLICY=PASSIVE`), on an idle machine and with one core taken by another process (a busy loop, standing in
for another user's job). It records each step's time, the evaluation's, the wall time and the CPU time the run used:
CPU time beyond the wall time x threads is spinning, taken from whoever shares the machine.

`block` clones the repository's HEAD into a temporary folder, takes the bash block under the README's "## Quick start"
heading as it is written, and runs it in one bash process (`set -e`, as a user's terminal that stops at an error),
timing each command. Nothing of this machine's environment leaks in but PATH without a virtual environment and the
pip configuration; HOME is a new empty folder, so no pip cache and no converted model are at hand. Its console goes to bench/logs/quickstart-block-DATE-COMMIT.log. `--reference DIR` then keeps
the run it made as the committed reference: results.json, both figures, and the recipe's console as run.log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from gmts_recipe.records import json_file

# (label, environment, busy cores): the settings `threads` compares
SETTINGS = (
    ("1 thread", {"OMP_NUM_THREADS": "1"}, 0),
    ("2 threads", {"OMP_NUM_THREADS": "2"}, 0),
    ("2 threads, passive wait", {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}, 0),
    ("1 thread", {"OMP_NUM_THREADS": "1"}, 1),
    ("2 threads", {"OMP_NUM_THREADS": "2"}, 1),
    ("2 threads, passive wait", {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}, 1),
)
MARK = "@@quickstart-time"  # the block's lines around each command: MARK start|end INDEX UNIX_TIME
START, END = f"{MARK} start", f"{MARK} end"
# the short run `threads` times under each setting (recipe.py's arguments)
WORKLOAD = ["--arm", "grpo", "--config", "configs/quickstart.yaml", "--max_steps", "3"]


def machine() -> dict:
    """What the numbers were measured on."""
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    return {"cores": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "load_before": os.getloadavg()[0],
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True, check=False).stdout.strip()}


def one_setting(label: str, env: dict, busy: int, workdir: Path) -> dict:
    """One short Quick start run under `env`, with `busy` cores taken by busy loops."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    out = workdir / f"run-{len(list(workdir.iterdir()))}"
    start = time.perf_counter()
    try:
        proc = subprocess.Popen([sys.executable, "recipe.py", *WORKLOAD, "--results_dir", str(out), "--experiment", "t"],
                                cwd=ROOT,
                                env={**os.environ, "TOKENIZERS_PARALLELISM": "false", "CUDA_VISIBLE_DEVICES": "", **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # the recipe's own CPU time, not the busy loops'
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"the run under {label!r} failed (status {status}); run it by hand to see why")
    cpu = usage.ru_utime + usage.ru_stime
    arm = json.loads((out / "t" / "results.json").read_text())["arms"]["grpo"]
    steps = [row["step_time"] for row in arm["train_log"] if "step_time" in row]
    return {"setting": label, "env": env, "busy_cores": busy, "steps_s": steps,
            "median_step_s": statistics.median(steps), "eval_s": arm["eval_minutes"] * 60, "wall_s": wall,
            "cpu_s": cpu}


def threads(path: Path) -> None:
    """Every setting of SETTINGS, in turn, into `path`; the machine's record is taken as the file is written."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, env, busy in SETTINGS:
            rows.append(one_setting(label, env, busy, Path(tmp)))
            r = rows[-1]
            print(f"{label}, {busy} core(s) taken: step {r['median_step_s']:.1f} s, eval {r['eval_s']:.0f} s, "
                  f"wall {r['wall_s']:.0f} s, CPU {r['cpu_s']:.0f} s", flush=True)
    path.write_text(json.dumps({"machine": machine(), "workload": " ".join(["recipe.py", *WORKLOAD]),
                                "rows": rows}, indent=1) + "\n")


def quick_start_block(readme: str) -> list[str]:
    """The commands of the README's Quick start block, one per line, comments kept (bash ignores them)."""
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def clean_env(home: str) -> dict:
    """A terminal's environment: no virtual environment, no thread settings, the pip configuration kept."""
    path = [p for p in os.environ["PATH"].split(":") if not (os.environ.get("VIRTUAL_ENV") and
                                                            p.startswith(os.environ["VIRTUAL_ENV"]))]
    keep = {k: v for k, v in os.environ.items() if k.startswith(("PIP_", "LANG", "LC_", "SSL_", "REQUESTS_CA"))}
    return {**keep, "PATH": ":".join(path), "HOME": home, "TERM": "dumb"}


def run_block(log: Path, clone: Path, home: Path) -> list[dict]:
    """The block in one bash process, each command between two timestamped markers; its console into `log`. `home`:
    a new user's, without a pip cache or a converted model."""
    commands = quick_start_block((clone / "README.md").read_text())
    script = ["set -e"]
    for i, command in enumerate(commands):
        script += [f'echo "{START} {i} $(date +%s.%N)"', command, f'echo "{END} {i} $(date +%s.%N)"']
    with log.open("w") as out:
        proc = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=clone, env=clean_env(str(home)),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            print(line, end="", flush=True)
        proc.wait()
    marks = {(m[1], int(m[2])): float(m[3]) for m in re.finditer(rf"^{MARK} (start|end) (\d+) ([\d.]+)$",
                                                                   log.read_text(), re.MULTILINE)}
    return [{"command": c.split("  #")[0].strip(), "seconds": marks[("end", i)] - marks[("start", i)]
             if ("end", i) in marks else None} for i, c in enumerate(commands)]


def command_output(log: Path, index: int) -> str:
    """What command `index` printed, from the block's log."""
    text = log.read_text()
    return text.split(f"{START} {index} ", 1)[1].split("\n", 1)[1].split(f"{END} {index} ", 1)[0]


def keep_reference(run: Path, reference: Path, console: str) -> None:
    """The run's results.json, figures and console into `reference`, with every samples file it names at the same
    relative path (a base evaluation's in the shared ../base-evals/), so that check.py re-scores the reference."""
    from gmts_recipe.records import evaluations
    from gmts_recipe.samples import samples_path

    results = json.loads((run / "results.json").read_text())
    reference.mkdir(parents=True, exist_ok=True)
    for name in ("results.json", "curves.png", "curves-selection.png"):
        shutil.copy2(run / name, reference / name)
    for where, evaluation in evaluations(results):
        target = samples_path(reference, evaluation, where)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(samples_path(run, evaluation, where), target)
    (reference / "run.log").write_text(console)


def block(json_path: Path, reference: Path | None) -> int:
    """The Quick start block on a fresh clone of HEAD, timed; its result kept as `reference` if asked."""
    info = machine()
    log = ROOT / "bench" / "logs" / f"quickstart-block-{info['date'][:10]}-{info['commit']}.log"
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "gmts"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        start = time.perf_counter()
        home = Path(tmp) / "home"
        home.mkdir()
        rows = run_block(log, clone, home)
        total = time.perf_counter() - start
        finished = all(r["seconds"] is not None for r in rows)
        json_path.write_text(json.dumps({"machine": info, "log": str(log.relative_to(ROOT)), "finished": finished,
                                         "total_s": total, "load_after": os.getloadavg()[0], "commands": rows},
                                        indent=1) + "\n")
        if finished and reference is not None:
            recipe = next(i for i, r in enumerate(rows) if r["command"].startswith("python recipe.py"))
            keep_reference(clone / "runs" / "quickstart", reference, command_output(log, recipe))
    print(f"{'finished' if finished else 'stopped'} in {total / 60:.1f} min: {json_path}")
    return 0 if finished else 1


def _minutes(seconds: float) -> str:
    """90 s as 1.5 min; under a minute in seconds."""
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def readme(path: Path) -> str:
    """The README's paragraph: the block's total and each command's time, with the machine and thread setting."""
    data = json.loads(path.read_text())
    m, rows = data["machine"], data["commands"]
    setting = next((r["command"].split("export ", 1)[1] for r in rows if r["command"].startswith("export ")), "")
    each = "; ".join(f"`{r['command']}` {_minutes(r['seconds']) if r['seconds'] >= 1 else 'under 1 s'}"
                     for r in rows if not r["command"].startswith("export "))
    from gmts_recipe.markdown import README_WIDTH, fill  # the README's wrapped prose

    return fill(f"The block as written took {_minutes(data['total_s'])} on a fresh clone ({m['cores']} idle cores, "
                f"load average {m['load_before']:.1f} before it; {m['date'][:10]}, commit {m['commit']}, `{setting}`; "
                f"[its console]({data['log']})): {each}.", README_WIDTH) + "\n"


def markdown(path: Path) -> str:
    """bench/README.md's table of the thread settings."""
    data = json.loads(path.read_text())
    from tables import markdown_table  # bench/tables.py, beside this script

    lines = markdown_table(["setting", "cores taken by another job", "median step", "evaluation", "wall",
                            "CPU time used"],
                           [[r["setting"], r["busy_cores"], f"{r['median_step_s']:.1f} s", f"{r['eval_s']:.0f} s",
                             f"{r['wall_s']:.0f} s", f"{r['cpu_s']:.0f} s"] for r in data["rows"]])
    by = {(r["setting"], r["busy_cores"]): r for r in data["rows"]}
    for busy, where in ((0, "Idle"), (1, "One core taken")):
        one, spin, sleep = (by.get((label, busy)) for label, _, b in SETTINGS if b == busy)
        if one and spin and sleep:
            ratio = (f"{where}: 2 threads' step over 1 thread's: {spin['median_step_s'] / one['median_step_s']:.2f} "
                     f"spinning, {sleep['median_step_s'] / one['median_step_s']:.2f} sleeping; CPU time over wall "
                     f"time: {one['cpu_s'] / one['wall_s']:.2f} (1 thread), {spin['cpu_s'] / spin['wall_s']:.2f} "
                     f"(spinning), {sleep['cpu_s'] / sleep['wall_s']:.2f} (sleeping).")
            lines += ["", ratio]
    m = data["machine"]
    lines += ["", f"`{data['workload']}`, {m['cores']} cores ({m['cpu']}), finished {m['date']}, commit {m['commit']}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=["threads", "block"])
    parser.add_argument("--out", type=Path, help="results file (default: bench/quickstart-MODE-Ncore.json)")
    parser.add_argument("--reference", type=Path, help="with block: keep the run as this reference folder")
    parser.add_argument("--readme", type=json_file, help="print the README's time lines from a block results file")
    parser.add_argument("--markdown", type=json_file, help="print the table of a threads results file")
    args = parser.parse_args(argv)
    if args.readme or args.markdown:
        print(readme(Path(args.readme)) if args.readme else markdown(Path(args.markdown)), end="")
        return 0
    if args.mode is None:
        parser.error("name a mode (threads, block) or --readme/--markdown FILE")
    out = args.out or ROOT / "bench" / f"quickstart-{args.mode}-{os.cpu_count()}core.json"
    if args.mode == "threads":
        threads(out)
        return 0
    return block(out, args.reference)


if __name__ == "__main__":
    sys.exit(main())
