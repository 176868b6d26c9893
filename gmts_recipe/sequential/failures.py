"""A sequential plan's failed cells, fixed in advance (its `failures:` keys) and recorded by the runner, never by a
person: what is run again, and what a failure counts as, so that a failed seed never stalls the looks after it and "run
it again" never repeats a deterministic failure for ever.

What raised decides the kind (`kind_of`: a fixed list, MACHINE_FAULTS), never someone who can see the other arm's score:
- "machine": the card, driver or host failed: a CUDA error (an ECC error, an illegal access, a launch failure), an
  out-of-memory on the card, an NCCL or other process-group error, a warm worker's recompile limit (its process's
  history, not the arm's), or a process ended by a signal (a lost or preempted worker, the kernel's OOM killer). The
  cell runs again, whole but for the arms that failed on their own, `machine_fault_retries` times (once), on any card
  the plan allows; once its machine faults exceed that, every arm it does not hold counts as failed on its own (a fault
  that recurs on its retry is taken for the arm's own).
- "arm": everything else an arm raises (an exception of the recipe, a loss that is not finite, a refusal of its
  records): an outcome, never run again. The plan scores it as `arm_failure: base`: the failed arm's held-out scores
  are the untrained base model's (its first sampling seed's per-task scores, the ones every arm is paired with). A run
  that fails leaves the model it started from: scored as the base, it counts as a collapse to the base, a loss of the
  arm's whole gain (~20 points here), never as a 0 pass@1 that no evaluated model came near and whose 50-point outlier
  would swamp every standard error; both arms are scored by the same rule.
The recipe's refusals of its inputs (RecipeError, ModelError, RulesError: a typo, a missing model or file, the same for
every arm and cell) are no arm's failure: the process stops, nothing is recorded, and the cell runs once the command
is fixed; a failure outside every arm (a process that exits non-zero without a signal or a report) is recorded neither.

Who writes what: recipe.py reports each arm that raised (`report`: one line in the cell's log) and, with several arms,
goes on to the next after an arm's own failure; the runner (sweep.py's local pool) ends each cell process's part of
its log with the exit code and, for a sequential plan, writes failure.json from that part (`record_exit`): per failed
attempt the arm, the kind, the card, the traceback's last lines and where the log bore it out (its path, the part's
first byte, the log's length and SHA-256 then: logs only grow). `check` (sweep.py --summarize, check.py) derives the
attempts again from the committed log (`attempts_in`) and refuses a record it does not bear out, a card or arm the plan
does not name, another seed's record, and an arm's own failure in a cell that holds that arm's results.
"""

from __future__ import annotations

import hashlib
import json
import re
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path

from gmts_recipe.records import write_json
from gmts_recipe.sweep import SweepError
from gmts_recipe.sequential.cards import card_allowed

FILE = "failure.json"
KINDS = ("machine", "arm")
# What raised, by class (subclasses included), that makes a failure the machine's; anything else is the arm's own.
MACHINE_FAULTS = ("torch.OutOfMemoryError", "torch.AcceleratorError", "torch.cuda.CudaError",
                  "torch.distributed.DistError", "torch._dynamo.exc.FailOnRecompileLimitHit")
MARK = "[recipe] arm failed: "  # recipe.py's report of an arm that raised, then a JSON object
EXIT = re.compile(r"^=== exit (-?\d+)$", re.M)  # the runner's last line of a cell process's part of its log
TRAINING = re.compile(r"^\[recipe\] training (\w+)", re.M)  # an arm starting (progress.ArmConsole)
ARMS = re.compile(r" --arm (\S+)")  # the process's arms, in the runner's first line of its part
TAIL = 4  # the traceback's last lines a record keeps


def kind_of(error: BaseException) -> str:
    """"machine" where what raised, or what it was raised from, is of a class in MACHINE_FAULTS; else "arm"."""
    while error is not None:
        if any(f"{k.__module__}.{k.__qualname__}" in MACHINE_FAULTS for k in type(error).__mro__):
            return "machine"
        error = error.__cause__
    return "arm"


def report(arm: str, error: BaseException) -> str:
    """recipe.py's side: an arm that raised, as one line of its log (the arm, the kind, the traceback's last lines)
    for the runner to read; the kind."""
    kind = kind_of(error)
    lines = "".join(traceback.format_exception(error)).rstrip("\n").splitlines()
    print(MARK + json.dumps({"arm": arm, "kind": kind, "error": lines[-TAIL:]}), flush=True)
    return kind


def attempts_in(part: str) -> list[dict]:
    """The failed attempts one cell process's part of its log shows (from the runner's first line to its exit line):
    each arm the recipe reported, and, for a process ended by a signal other than Ctrl-C's, a machine fault of the arm
    it was training (its first arm before any started) unless that arm reported one. The runner writes these; check
    derives them again from the committed log."""
    out = []
    for line in part.splitlines():
        if line.startswith(MARK):
            said = json.loads(line[len(MARK):])
            out.append({"arm": str(said["arm"]), "kind": str(said["kind"]), "error": list(said["error"])})
    code = [int(c) for c in EXIT.findall(part)]
    if code and code[-1] < 0 and code[-1] != -2:  # a signal (-2: SIGINT, an interrupted sweep)
        trained, arms = TRAINING.findall(part), ARMS.search(part)
        running = trained[-1] if trained else arms.group(1).split(",")[0] if arms else "?"
        if running not in [a["arm"] for a in out]:
            out.append({"arm": running, "kind": "machine", "error": [f"the process ended by signal {-code[-1]}"]})
    return out


def record_exit(sweep_dir: Path, cell_name: str, seed: int, log: Path, start: int, card: str) -> dict | None:
    """The runner's side, once a cell process has ended and its exit line is in its log (`log`, its part from byte
    `start`): the attempts that part shows added to the cell's failure.json; the record, or None where it shows none."""
    data = log.read_bytes()
    attempts = attempts_in(data[start:].decode("utf-8", "replace"))
    if not attempts:
        return None
    cell_dir = Path(sweep_dir) / cell_name
    rec = read(cell_dir) or {"seed": seed, "attempts": []}
    where = {"card": card, "log": log.relative_to(sweep_dir).as_posix(), "log_from": start, "log_bytes": len(data),
             "log_sha256": hashlib.sha256(data).hexdigest()}
    rec["attempts"] += [{**a, **where} for a in attempts]
    cell_dir.mkdir(parents=True, exist_ok=True)
    write_json(cell_dir / FILE, rec)
    return rec


FIELDS = {"arm": str, "kind": str, "card": str, "error": list, "log": str, "log_from": int, "log_bytes": int,
          "log_sha256": str}


def read(cell_dir: Path) -> dict | None:
    """A cell's failure record, its form checked; None where the cell has none. One-line SweepError naming the file."""
    path = Path(cell_dir) / FILE
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
        ok = isinstance(rec["seed"], int) and rec["attempts"] and all(
            set(a) == set(FIELDS) and a["kind"] in KINDS and all(isinstance(a[k], t) for k, t in FIELDS.items())
            for a in rec["attempts"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise SweepError(f"{path}: a failure record holds seed (an integer) and attempts, each with "
                         f"{', '.join(FIELDS)} (kind {' or '.join(KINDS)})")
    return rec


def check(rec: dict, cell_dir: Path, seed: int, spec: dict, held: Iterable[str]) -> None:
    """Refuse (one SweepError line naming the file) a failure record that the runner did not write as the committed
    log bears it out: its seed is the cell's, each attempt's arm one of the plan's comparison and its card one the plan
    names, the sweep's logs/ holds its log beginning with the bytes the runner read, whose part shows that attempt
    (`attempts_in`); and no arm failed on its own in a cell that holds that arm's results (`held`)."""
    path, arms, held = Path(cell_dir) / FILE, spec["comparison"].split(" - "), set(held)
    if rec["seed"] != seed:
        raise SweepError(f"{path}: records seed {rec['seed']}, in the folder of seed {seed}")
    for i, a in enumerate(rec["attempts"], 1):
        at = f"{path}: attempt {i} ({a['arm']}, {a['kind']})"
        if a["arm"] not in arms:
            raise SweepError(f"{at}: not an arm of the plan's comparison ({', '.join(arms)})")
        if not card_allowed(a["card"], spec["cards"]):
            raise SweepError(f"{at}: card {a['card']!r} is not one the plan names ({', '.join(spec['cards'])})")
        if a["kind"] == "arm" and a["arm"] in held:
            raise SweepError(f"{at}: the cell holds {a['arm']}'s results, and an arm's own failure is never run again")
        log = Path(cell_dir).parent / a["log"]
        data = log.read_bytes()[: a["log_bytes"]] if Path(a["log"]).parent == Path("logs") and log.is_file() else b""
        if len(data) != a["log_bytes"] or hashlib.sha256(data).hexdigest() != a["log_sha256"] \
                or a["log_from"] < 0 or not data[a["log_from"]:].startswith(b"\n=== "):
            raise SweepError(f"{at}: the sweep's logs/ holds no {a['log']} that begins with the bytes the runner read")
        try:
            shown = attempts_in(data[a["log_from"]:].decode("utf-8", "replace"))
        except (ValueError, KeyError, TypeError):  # a report line that is not the recipe's
            shown = []
        if {k: a[k] for k in ("arm", "kind", "error")} not in shown:
            raise SweepError(f"{at}: its log's part shows "
                             + ("; ".join(f"{s['arm']} {s['kind']}" for s in shown) or "no failed attempt"))


def checked(cell_dir: Path, seed: int, spec: dict, held: Iterable[str]) -> dict | None:
    """A cell's failure record as the runner wrote it (`read`, then `check`); None where the cell has none."""
    rec = read(cell_dir)
    if rec is not None:
        check(rec, cell_dir, seed, spec, held)
    return rec


def outcome(rec: dict | None, planned: Sequence[str], held: Iterable[str], retries: int) -> tuple[set[str], set[str]]:
    """What a cell's failures count as under the plan: (the arms that failed on their own, scored as the plan says and
    never run again; the arms it still waits for). Once the cell's machine faults exceed `retries`, every planned arm
    it does not hold counts as failed on its own."""
    attempts, held = (rec or {}).get("attempts", []), set(held)
    own = {a["arm"] for a in attempts if a["kind"] == "arm"} - held
    missing = {a for a in planned if a not in held and a not in own}
    if sum(a["kind"] == "machine" for a in attempts) > retries:
        return own | missing, set()
    return own, missing
