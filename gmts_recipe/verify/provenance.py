"""Where each run ran (run_setup.provenance), printed as recorded by the one renderer of it: check.py's block for a
file (`provenance_lines`) and its lines on where a sweep's cells ran (`cell_origin`, `origin_lines`). Only the code a
run ran is verified: its recorded digest matched against git (code_digest.code_commit)."""

from __future__ import annotations

from pathlib import Path

from gmts_recipe.arms import short_name
from gmts_recipe.code_digest import code_commit
from gmts_recipe.speed_options import recorded_noise_version


# What this level checks (check.py --checks): the rest of a run's provenance is printed as recorded, not verified.
CHECKS = ("nothing: it is printed as recorded, but for each run's code, whose recorded digest is matched against "
          "git: the commit whose code ran is named beside the recorded one where they differ (a stale .git), or said "
          "to be none",)


def code_note(provenance: dict, root: Path | None = None) -> str:
    """What check.py says of a run's code beside its recorded commit (code_commit): "" where the run recorded no
    digest; "code as committed" where its code is its recorded commit's; else which commit's code ran, or that none
    holds it."""
    match = code_commit(provenance, root)
    if match is None:
        return ""
    kind, commit = match
    if kind == "recorded":
        return "code as committed"
    return f"code of commit {commit[:10]}" if kind == "other" else "code of no commit in this history"


def provenance_lines(results: dict) -> list[str]:
    """One compact block: where each arm ran, or where an evaluation-only file's evaluations ran (run_setup.provenance:
    commit, uncommitted changes, times, host, GPUs, libraries, execution options), or, for a file whose arms record
    none, the file-wide versions it records."""
    arms = results.get("arms", {})
    counter = (results.get("config") or {}).get("sampling_noise") == "counter"
    lines = [f"  {short_name(arm)}: {provenance_text(entry['provenance'], counter)}" for arm, entry in arms.items()
             if isinstance(entry.get("provenance"), dict)]
    if lines:
        return ["Provenance (recorded by each arm, outside the config hash):", *lines]
    if isinstance(results.get("provenance"), dict):
        return [f"Provenance (recorded by the evaluation, outside the config hash): "
                f"{provenance_text(results['provenance'])}."]
    v = results.get("versions")
    if isinstance(v, dict):
        libs = ", ".join(f"{k} {x}" for k, x in v.items() if k not in ("gpu", "gpus"))
        gpu = f"{v.get('gpus', 0)} x {v['gpu']}" if v.get("gpu") else "CPU"
        whose = "the arms record none" if arms else "the file records no commit, host or times"
        return [f"Provenance: {whose}; the file's versions: {gpu}; {libs}."]
    return []


def provenance_text(p: dict, counter_noise: bool = False) -> str:
    """One run's provenance in a line; `counter_noise`: the run drew counter noise, whose key scheme is said."""
    changed = p.get("changed_files") or []
    commit = str(p.get("commit") or "unknown")[:12] + (
        f" (uncommitted changes: {', '.join(changed[:3])}{', ...' if len(changed) > 3 else ''})" if changed else
        " (uncommitted changes)" if p.get("dirty") else "")
    note = code_note(p)  # the commit whose code ran, from the code's digest (a stale .git names another)
    if note and (note != "code as committed" or p.get("dirty")):
        commit += f" [{note}]"
    gpu = f"{p.get('gpus', 0)} x {p['gpu']}" if p.get("gpu") else "CPU"
    libs = ", ".join(f"{k} {v}" for k, v in (p.get("versions") or {}).items() if k not in ("gpu", "gpus"))
    recorded = dict(p.get("options") or {})
    if counter_noise:  # the key scheme of its counter noise
        recorded["counter_noise_version"] = recorded_noise_version(recorded)
    else:  # no counter noise: the scheme keyed nothing
        recorded.pop("counter_noise_version", None)
    options = ", ".join(k if v is True else f"{k}={v}" for k, v in recorded.items()
                        if v not in (False, None))  # the options that were on
    return (f"commit {commit}, {p.get('started', '?')} to {p.get('finished', '?')}, host {p.get('host', '?')}, "
            f"{gpu}; {libs}" + (f"; {options}" if options else ""))


def _seed_ranges(seeds: list[int]) -> str:
    """200-212, 298-299: runs of consecutive seeds as spans."""
    spans: list[list[int]] = []
    for seed in sorted(seeds):
        if spans and seed == spans[-1][-1] + 1:
            spans[-1].append(seed)
        else:
            spans.append([seed])
    return ", ".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else str(s[0]) for s in spans)


def cell_origin(results: dict) -> str:
    """Where a cell's arms ran, "commit, card": each arm's recorded provenance (run_setup.provenance: the project
    commit, whether the tree had uncommitted changes, the GPU's name), else the file's versions (its card; no commit
    recorded). A run that recorded its code's digest (code_digest) is named by the commit whose code it is, its recorded
    commit beside it where they differ (a stale .git). Arms that ran apart and differ are named."""
    def one(entry: dict) -> str:
        p = entry.get("provenance")
        if isinstance(p, dict):
            match = code_commit(p)  # its code's digest matched against git: the commit whose code ran
            if match and match[0] == "other":  # a stale .git named another commit: the code's is the one
                return f"{match[1][:7]} (recorded {str(p.get('commit'))[:7]}), {p.get('gpu') or 'CPU'}"
            commit = str(p["commit"])[:7] if p.get("commit") else "commit not recorded"
            if match is None:
                commit += " (uncommitted changes)" if p.get("dirty") else ""
            elif match[0] == "recorded":  # other files may differ (docs, results): the code did not
                commit += " (code as committed)" if p.get("dirty") else ""
            else:
                commit += " (code of no commit)"
            return f"{commit}, {p.get('gpu') or 'CPU'}"
        return f"commit not recorded, {(results.get('versions') or {}).get('gpu') or 'CPU'}"

    per_arm = {arm: one(entry) for arm, entry in results.get("arms", {}).items()}
    if len(set(per_arm.values())) <= 1:
        return next(iter(per_arm.values()), "no arm yet")
    return "; ".join(f"{short_name(arm)} {where}" for arm, where in per_arm.items())


def origin_lines(origins: list[tuple[int, str]]) -> list[str]:
    """check.py's lines on where a sweep's cells ran: one per (commit, card), with its seeds, in the order first
    seen."""
    if not origins:  # no cell yet: nothing to say, no empty heading
        return []
    groups: dict[str, list[int]] = {}
    for seed, where in origins:
        groups.setdefault(where, []).append(seed)
    return ["Where the cells ran (project commit, card):"] + [
        f"  {where}: seed{'s' * (len(set(seeds)) > 1)} {_seed_ranges(sorted(set(seeds)))} ({len(seeds)} "
        f"cell{'s' * (len(seeds) > 1)})" for where, seeds in groups.items()]
