"""Seed claims: who runs which seeds of a plan, so that two machines never spend their time on the same seeds.

A claim is a small committed file in the sweep folder, `<sweep folder>/claims/<first>-<last>-<who>.json`, naming its
seeds, who took them and until when (UTC). `python sweep.py GRID --claim N --who NAME` writes one for the next N free
seeds in the plan's order (free: not run, and in no claim that still holds); committed and pushed (a pull request),
it tells everyone else. Then:

- `python sweep.py GRID --who NAME` runs only NAME's seeds that a claim still holds; a run without --who leaves the
  seeds of every claim that holds to their claimant (it runs the others, as before where nobody claimed anything);
- an expired claim frees its seeds: they are free to claim again, and a run without --who takes them;
- `--merge ARCHIVE` refuses a cell of a seed that someone else's claim holds (gmts_recipe.sweep.archive).

A claim is a promise between people, not a lock: nothing stops a run elsewhere, and the name is what its writer
typed. What it settles is whose cells are merged while it holds. The plan's order is kept whatever is claimed: a
sequential plan's look reads the first n seeds of the plan, so a claim that is never returned stalls the look at its
first seed until it expires (`--plan` names the claims that hold).
"""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

from gmts_recipe.sweep.grid import Grid, SweepError, jobs

FOLDER = "claims"  # in the sweep folder, beside the cells
HOURS = 48.0  # how long a claim holds unless --hours says otherwise
WHO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a name that is also part of a file name


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def stamp(t: datetime.datetime) -> str:
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Claim:
    """One claim file: its seeds (in the plan's order), who took them, when, until when, and where it lies."""

    seeds: tuple[int, ...]
    who: str
    claimed: datetime.datetime
    until: datetime.datetime
    path: Path

    def holds(self, now: datetime.datetime) -> bool:
        return now < self.until

    def line(self) -> str:
        return f"seeds {seed_span(list(self.seeds))} claimed by {self.who} until {stamp(self.until)} ({self.path.name})"


def seed_span(seeds: list[int]) -> str:
    """300-305 for consecutive seeds, else the list."""
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def check_who(who: str) -> str:
    if not WHO.fullmatch(who or ""):
        raise SweepError(f"--who {who!r}: a name of letters, digits, '.', '_' or '-' (at most 64), e.g. a GitHub "
                         f"handle: it names the claim's file")
    return who


def _time(value, where: str) -> datetime.datetime:
    try:
        t = datetime.datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise SweepError(f"{where}: times are UTC as 2026-12-09T12:00:00Z, not {value!r}") from None
    return t.replace(tzinfo=datetime.timezone.utc)


def read_claims(folder: Path) -> list[Claim]:
    """Every claim file of a sweep folder, in the order of their first seed; a file that is not a claim is one line."""
    out = []
    for path in sorted((folder / FOLDER).glob("*.json")):
        where = f"{path}"
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            seeds = tuple(int(s) for s in raw["seeds"])
            who = check_who(str(raw["who"]))
        except (OSError, ValueError, KeyError, TypeError, SweepError):
            raise SweepError(f"{where}: not a seed claim (a JSON object with seeds, who, claimed and until)") from None
        if not seeds:
            raise SweepError(f"{where}: claims no seed")
        out.append(Claim(seeds, who, _time(raw.get("claimed"), where), _time(raw.get("until"), where), path))
    return sorted(out, key=lambda c: (c.seeds[0], c.path.name))


def planned_seeds(grid: Grid) -> list[int]:
    """The plan's seeds in its order (a seed's first job), each once."""
    return list(dict.fromkeys(cell.seed for cell, _ in grid.jobs_in_order()))


def seeds_left(grid: Grid) -> list[int]:
    """The planned seeds with a job still to run, in the plan's order."""
    return list(dict.fromkeys(cell.seed for cell, _ in jobs(grid)))


def holding(claims: list[Claim], now: datetime.datetime) -> dict[int, Claim]:
    """Each seed that a claim still holds, with that claim (the earliest file where two overlap)."""
    out: dict[int, Claim] = {}
    for c in claims:
        if c.holds(now):
            for seed in c.seeds:
                out.setdefault(seed, c)
    return out


def claim(grid: Grid, folder: Path, n: int, who: str, hours: float = HOURS,
          now: datetime.datetime | None = None) -> Claim:
    """Write a claim of the next `n` free seeds (planned, not run, in no claim that holds) for `who`, holding `hours`;
    the claim written."""
    check_who(who)
    if n < 1 or not hours > 0:
        raise SweepError("--claim N takes 1 or more seeds, and --hours a number of hours above 0")
    now = now or utc_now()
    held = holding(read_claims(folder), now)
    free = [s for s in seeds_left(grid) if s not in held]
    if not free:
        taken = sorted({c.line() for c in held.values()})
        raise SweepError("no free seed to claim: every seed left is claimed (" + "; ".join(taken) + ")" if taken
                         else "no free seed to claim: every planned seed has run")
    seeds = tuple(free[:n])
    until = now + datetime.timedelta(hours=hours)
    path = folder / FOLDER / f"{seeds[0]}-{seeds[-1]}-{who}.json"
    if path.exists():
        raise SweepError(f"{path} exists: a claim of these seeds by {who} is there already")
    record = {"seeds": list(seeds), "who": who, "claimed": stamp(now), "until": stamp(until)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return Claim(seeds, who, now.replace(microsecond=0), until.replace(microsecond=0), path)


def runnable(grid: Grid, folder: Path, who: str | None, now: datetime.datetime | None = None) \
        -> tuple[Grid, list[str]]:
    """The grid a run on this machine may run, and the lines that say why: with `who`, only that person's seeds that a
    claim still holds (none: a SweepError saying how to claim); without, every seed but those someone's claim holds
    (the grid itself where nobody claimed a seed)."""
    now = now or utc_now()
    claims = read_claims(folder)
    held = holding(claims, now)
    if who is not None:
        check_who(who)
        mine = [s for s in planned_seeds(grid) if s in held and held[s].who == who]
        if not mine:
            lapsed = [c for c in claims if c.who == who and not c.holds(now)]
            why = f" (expired: {'; '.join(c.line() for c in lapsed)})" if lapsed else ""
            raise SweepError(f"no claim of {who} holds now{why}: claim seeds first, python sweep.py GRID --claim N "
                             f"--who {who}, then commit the file it writes")
        return restrict(grid, mine), [f"running only the seeds claimed by {who}: {seed_span(mine)}"]
    if not held:
        return grid, []
    others = [s for s in planned_seeds(grid) if s not in held]
    said = "; ".join(dict.fromkeys(c.line() for c in held.values()))
    if not others:
        raise SweepError(f"every planned seed is claimed ({said}): nothing to run here until a claim expires")
    return restrict(grid, others), [f"left to their claimants: {said}"]


def restrict(grid: Grid, seeds: list[int]) -> Grid:
    """The grid with each block's seeds cut to `seeds` (blocks left without one dropped), for running only: the
    summary and every check read the whole plan."""
    keep = set(seeds)
    blocks = [{**b, "seeds": [s for s in b["seeds"] if int(s) in keep]} for b in grid.blocks]
    return replace(grid, blocks=[b for b in blocks if b["seeds"]])


def foreign(claims: list[Claim], seed: int, who: str | None, now: datetime.datetime | None = None) -> Claim | None:
    """The claim that holds `seed` for someone other than `who` (None: the seed is free, or `who`'s)."""
    c = holding(claims, now or utc_now()).get(seed)
    return c if c is not None and c.who != who else None


def plan_lines(grid: Grid, folder: Path, now: datetime.datetime | None = None) -> list[str]:
    """--plan's lines on claims: each that holds, and what a look waits for (the plan's order is kept)."""
    now = now or utc_now()
    claims = read_claims(folder)
    held = holding(claims, now)
    lines = [f"claim: {c.line()}" for c in claims if c.holds(now)]
    expired = [c for c in claims if not c.holds(now)]
    if expired:
        lines.append(f"expired (their seeds free again): {'; '.join(c.line() for c in expired)}")
    left = seeds_left(grid)
    if held and left and left[0] in held:
        waits = ("the look that counts it waits for its cell" if grid.sequential is not None
                 else "it is left to its claimant")
        lines.append(f"the next seed in the plan's order, {left[0]}, is claimed: {waits} until "
                     f"{stamp(held[left[0]].until)}")
    return lines
