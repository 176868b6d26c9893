"""Every number of a sweep from its cells' verified results files: the pooled comparisons, the best stable learning
rates, the analysis plan's primary and secondary tests (gmts_recipe/verify/sweep.py holds a sweep.json to them). A
cell holds only the arms its blocks run there; a sequential plan's cells run the recipe of the test it continues
(recipe_problem: its config but the seed, its execution options but SHOWN_NOT_TO_MOVE, its counter noise scheme and
reward reading)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import math
import statistics
from pathlib import Path

from gmts_recipe import sequential
from gmts_recipe.arms import arms as rule_arms, comparisons as rule_comparisons
from gmts_recipe.records import digest, evaluation_fields, numbers_close, recorded_reward_version, task_scores
from gmts_recipe.verify.file import load
from gmts_recipe.speed_options import recorded_noise_version
from gmts_recipe.stats import plan_decision, pooled_delta, sd_interval, seed_delta, seeds_for_power
from gmts_recipe.verify.cell import Evaluation, check_together, one_base, recorded
from gmts_recipe.sweep.failures import checked as failure_record, outcome as failure_outcome
from gmts_recipe.sweep import sensitivity
from gmts_recipe.sweep.grid import Grid, SweepError
# the rules' arms and compared pairs, read when used (a rule registered at run time counts)

SCHEMA = 1

# The gains over ETS the GMTS paper reports (pass@1, as fractions): the effects a grid must be able to detect.
CLAIMED = {"gmts - ets": (0.013, 0.034)}
POWER, MAX_SEEDS = 0.8, 1000


def _paired(a: dict[str, float], b: dict[str, float]) -> tuple[list[float], list[float]]:
    if a.keys() != b.keys():
        raise SweepError("two arms were evaluated on different tasks; cells of one sweep must share the held-out set")
    keys = sorted(a)
    return [a[k] for k in keys], [b[k] for k in keys]


def _pooled(scores: dict, a: tuple[str, float, str], b: tuple[str, float, str], seeds: list[int]) -> dict:
    """stats.pooled_delta of arm a against arm b, each given as (variant, learning rate, arm), over `seeds`, the
    per-task scores paired by task: the one computation behind every pooled row and the primary test."""
    pairs = [_paired(scores[(*a[:2], s, a[2])], scores[(*b[:2], s, b[2])]) for s in seeds]
    return pooled_delta([p[0] for p in pairs], [p[1] for p in pairs])


MECHANISM = ("selection/effective_answers", "selection/top_answer_weight_share", "selection/zero_advantage_kept_share",
             "update/cosine_prev", "grad_norm")


def _mechanism(train_log: list[dict]) -> dict[str, float | None]:
    """Median over the steps of how concentrated each update was: how many answers the kept tokens
    spread over, the top answer's share of the kept |omega| per group, the share of kept tokens that move nothing
    (advantage 0; logged since 2026-11-30d, None before), and how aligned successive updates were."""
    out = {}
    for key in MECHANISM:
        values = [row[key] for row in train_log if isinstance(row.get(key), (int, float))]
        out[key] = statistics.median(values) if values else None
    return out


LATE, EARLY = slice(-10, None), slice(None, 10)  # the last and the first 10 logged steps


def _mean_reward(train_log: list[dict], window: slice) -> float | None:
    """The mean training reward over `window` of the logged steps (None when the log has no reward)."""
    rewards = [row["reward"] for row in train_log if isinstance(row.get("reward"), (int, float))][window]
    return sum(rewards) / len(rewards) if rewards else None


def training_reward_fell(train_log: list[dict]) -> bool:
    """Training made the policy worse at its own task: the mean training reward of the last 10 steps lies below that
    of the first 10 (the training-side counterpart of collapsing below the base; windows overlap below 20 steps)."""
    late, early = _mean_reward(train_log, LATE), _mean_reward(train_log, EARLY)
    return late is not None and late < early


def _pooled_at_shared_rates(cells: list[dict], scores: dict) -> list[dict]:
    """Each rule comparison pooled over the seeds that ran both arms at one (variant, learning rate), with the seeds
    the paper's claimed gains would need at this spread."""
    pooled = []
    settings = sorted({(c["variant"], c["learning_rate"]) for c in cells})
    for variant, lr in settings:
        seeds = sorted(c["seed"] for c in cells if (c["variant"], c["learning_rate"]) == (variant, lr))
        for a, b in rule_comparisons():
            both = [s for s in seeds if (variant, lr, s, a) in scores and (variant, lr, s, b) in scores]
            if not both:
                continue
            d = _pooled(scores, (variant, lr, a), (variant, lr, b), both)
            pooled.append({"variant": variant, "learning_rate": lr, "comparison": f"{a} - {b}", "seeds": both,
                           "comparison_kind": "shared learning rate", **d})
            if f"{a} - {b}" in CLAIMED and len(both) >= 3:  # seeds this spread needs to detect the paper's gains
                pooled[-1]["per_seed_sd"] = dict(zip(("sd", "low", "high"), sd_interval(d["per_seed"])))
                pooled[-1]["seeds_for_power"] = {  # None: more than MAX_SEEDS
                    f"{100 * e:+.1f}": seeds_for_power(d["per_seed"], e, power=POWER, max_seeds=MAX_SEEDS)
                    for e in CLAIMED[f"{a} - {b}"]}
    return pooled


# summarize's results for a grid without a sequential plan, by the SHA-256 of everything it reads (`_inputs`), while
# `summaries_kept` holds them (check.py, for one sweep's check): a sequential sweep's check recomputes the test it
# continues (continued_test), then verifies that test's own sweep (look 0 in full), its 100 cells read once. None
# outside it: nothing is kept between checks.
_SUMMARIES: dict[str, tuple] | None = None


@contextlib.contextmanager
def summaries_kept():
    """Within it, summarize computes a grid's results once for the same files."""
    global _SUMMARIES
    before, _SUMMARIES = _SUMMARIES, {} if _SUMMARIES is None else _SUMMARIES
    try:
        yield
    finally:
        _SUMMARIES = before


def _inputs(grid: Grid, root: Path) -> str | None:
    """The SHA-256 of what summarize reads for `grid` (its plan as loaded, the rules known, every cell's results.json,
    whose recorded SHA-256s stand for its samples files), or None for a sequential grid, which reads more (its
    failure records and logs, the test it continues, its design file)."""
    if grid.sequential is not None:
        return None
    h = hashlib.sha256(json.dumps([grid.name, grid.config, grid.blocks, grid.variants, grid.primary, grid.secondary,
                                   list(rule_arms()), list(rule_comparisons())], sort_keys=True, default=str).encode())
    for cell in grid.cells():
        path = root / cell.name / "results.json"
        h.update(f"\0{cell.name}\0".encode())
        h.update(path.read_bytes() if path.is_file() else b"absent")
    return h.hexdigest()


def summarize(grid: Grid, index: list[Evaluation] | None = None, facts: dict | None = None,
              loaded: dict | None = None) -> dict:
    """Every number of the sweep, from the cells' verified results files (`load`, as check.py verifies a cell) alone;
    `index`: extended with every evaluation of its cells (verify.cell.Evaluation), for `verify` to hold against the
    sweeps beside it; `facts`: filled with each cell's cell_facts, keyed (variant, learning rate, seed); `loaded`: with
    each cell's results as verified, by cell name (read-only: verify.sweep.sweep_samples re-scores their samples).
    Within `summaries_kept`, a grid's are computed once for the same files."""
    key = None if _SUMMARIES is None else _inputs(grid, Path(grid.results_dir) / grid.name)
    found = None if key is None else _SUMMARIES.get(key)
    if found is None:
        evaluations: list[Evaluation] = []
        cell_facts_found: dict = {}
        results_found: dict = {}
        found = (_summarize(grid, evaluations, cell_facts_found, results_found), evaluations, cell_facts_found,
                 results_found)
    if key is not None:  # kept as computed; the caller gets its own copy (of all but the files, which none edits)
        _SUMMARIES[key] = found
        found = (*copy.deepcopy(found[:3]), found[3])
    out, evaluations, cell_facts_found, results_found = found
    if loaded is not None:
        loaded.update(results_found)
    if index is not None:
        index.extend(evaluations)
    if facts is not None:
        facts.update(cell_facts_found)
    return out


def _summarize(grid: Grid, index: list[Evaluation], facts: dict, loaded: dict) -> dict:
    """summarize's work, its out-parameters filled."""
    from tqdm.auto import tqdm

    root = Path(grid.results_dir) / grid.name
    cells, scores, seen, training, cards, origins, memo = [], {}, [], {}, {}, {}, {}
    base_hashes, base_scores, failed = set(), None, {}
    planned = grid.planned_arms()
    recipe = continued_recipe(grid) if grid.sequential is not None else None  # what each new seed runs
    # each cell's file verified (digest, records, summaries), the long part of a sweep's check: a bar on a terminal
    for cell in tqdm(list(grid.cells()), desc="verifying cells", unit="cell", leave=False, disable=None):
        path = root / cell.name / "results.json"
        results = load(path) if path.is_file() else None
        if grid.sequential is not None:
            rec = failure_record(root / cell.name, cell.seed, grid.sequential, (results or {}).get("arms", {}))
            if rec is not None:  # as the runner wrote it from the committed log, or refused
                failed[cell.seed] = rec
        if results is None:
            continue
        stray = [arm for arm in results.get("arms", {}) if arm not in planned[cell]]
        if stray:  # an arm no block runs here would enter the pooled rows and the plan's comparisons unplanned
            raise SweepError(f"{path}: holds arm {stray[0]}, which the plan does not run in {cell.name} (its blocks "
                             f"run {', '.join(planned[cell])} there): a cell's arms are its blocks' arms")
        if recipe is not None:
            problem = recipe_problem(recipe_of(results), recipe, grid.variants.get(cell.variant, {}))
            if problem:
                raise SweepError(f"{path}: {problem}")
        seen.append(recorded(cell, results, grid.name, memo, path.parent))
        loaded[cell.name] = results
        s = results["summary"]
        base_scores = task_scores(results["base"]["evals"][0], f"{cell.name} base")
        base_hashes.add(json.dumps(sorted(base_scores.items())))
        arms = {}
        cards[cell.seed] = recorded_cards(results)
        origins[(cell.variant, cell.learning_rate, cell.seed)] = cell_facts(results)
        for arm, entry in results.get("arms", {}).items():
            scores[(cell.variant, cell.learning_rate, cell.seed, arm)] = task_scores(entry["eval"], f"{cell.name} {arm}")
            training[(cell.variant, cell.learning_rate, cell.seed, arm)] = entry.get("train_log", [])
            a = s["arms"][arm]
            arms[arm] = {"pass@1": a["pass@1"], "vs_base": a["vs_base"], "verdict": a["verdict"],
                         "late_reward": _mean_reward(entry.get("train_log", []), LATE),
                         "mechanism": _mechanism(entry.get("train_log", []))}
        cells.append({"cell": cell.name, "variant": cell.variant, "learning_rate": cell.learning_rate,
                      "seed": cell.seed, "path": str(path.relative_to(root)), "digest": results["digest"],
                      "base_mean": s["base"]["mean"], "noise_floor": s["base"]["noise_floor"], "arms": arms})
    check_together(seen)
    index.extend(ev for c in seen for ev in c.evaluations)
    facts.update(origins)
    one_base(base_hashes)
    pooled = _pooled_at_shared_rates(cells, scores)
    best = best_stable(training)
    for variant in sorted({c["variant"] for c in cells}):
        lr_of = {row["arm"]: row["learning_rate"] for row in best if row["variant"] == variant}
        for a, b in rule_comparisons():
            if a not in lr_of or b not in lr_of or lr_of[a] == lr_of[b]:
                continue  # same learning rate: already a "shared learning rate" row
            key_a, key_b = (variant, lr_of[a]), (variant, lr_of[b])
            both = sorted({s for (v, lr, s, arm) in scores if (v, lr, arm) == (*key_a, a)}
                          & {s for (v, lr, s, arm) in scores if (v, lr, arm) == (*key_b, b)})
            if not both:
                continue
            d = _pooled(scores, (*key_a, a), (*key_b, b), both)
            pooled.append({"variant": variant, "learning_rate": None, "learning_rates": {a: lr_of[a], b: lr_of[b]},
                           "comparison": f"{a} - {b}", "seeds": both,
                           "comparison_kind": "each arm at its own best stable learning rate", **d})
    out = {"schema": SCHEMA, "kind": "sweep", "name": grid.name, "config": grid.config, "cells": cells,
           "pooled": pooled, "best_stable": best}
    if grid.primary is not None:
        out["primary"] = primary_test(grid.primary, scores)
    if grid.secondary:
        out["secondary"] = [secondary_test(spec, grid.primary, scores) for spec in grid.secondary]
    if grid.sequential is not None:
        out["sequential"] = sequential_test(grid.sequential, scores, cards, continued_test(grid), failed, base_scores,
                                            origins, grid.path(grid.sequential["design"]))
    out["digest"] = digest(out)
    return out


# What a sequential plan's cells may run otherwise than the continued test's, beside their seed: how an arm executes,
# where the repository showed the numbers do not move (gradient checkpointing: the same gradients bit for bit,
# tests/test_trainer.py; results/LOG.md and bench/README.md "Runs that repeat"). tests/test_extension_recipe.py holds
# the extension's first cell, as sweep.py starts it, to seed 299's record with the same allowance.
SHOWN_NOT_TO_MOVE = frozenset({"gradient_checkpointing"})


def recipe_of(results: dict) -> dict:
    """What a cell ran beside its seed, as its file records it (records.current_record's form): its config record
    without the seed, each arm's execution options (generation_options, but SHOWN_NOT_TO_MOVE and the counter noise's
    key scheme, read apart), each arm's counter noise version (speed_options.recorded_noise_version), and the reward
    reading of every evaluation (its samples file's version) and every arm (the version it trained with)."""
    arms = results.get("arms") or {}
    rewards = {f"{where}.samples.reward": ev["samples"].get("reward", 1)
               for where, ev in evaluation_fields(results) if isinstance(ev.get("samples"), dict)}
    rewards.update({f"arms.{arm}.reward_version": recorded_reward_version(entry) for arm, entry in arms.items()})
    options = {arm: dict(entry.get("generation_options") or {}) for arm, entry in arms.items()}
    return {"config": {k: v for k, v in (results.get("config") or {}).items() if k != "seed"},
            "options": {arm: {k: v for k, v in o.items() if k not in SHOWN_NOT_TO_MOVE | {"counter_noise_version"}}
                        for arm, o in options.items()},
            "noise": {arm: recorded_noise_version(o) for arm, o in options.items()},
            "rewards": rewards}


def recipe_problem(new: dict, old: dict, variant: dict) -> str | None:
    """Why a sequential plan's cell (`new`, recipe_of) did not run the continued test's recipe (`old`: recipe_of its
    last planned seed's cell), None where it did: the same config record but for the seed, the same execution options
    for each arm but those SHOWN_NOT_TO_MOVE, the same counter noise scheme and one reward reading, the continued
    test's, for every evaluation and arm, which is also the one the plan's variant pins where it pins one
    (reward_version, counter_noise_version: a new seed scored by another reading, or drawing other noise, measures
    another delta). Each problem one clause naming the field."""
    def said(values: dict, k: str) -> str:
        return repr(values[k]) if k in values else "unset (the recipe's default)"

    config = [k for k in sorted(set(new["config"]) | set(old["config"]))
              if k not in new["config"] or k not in old["config"]
              or not numbers_close(new["config"][k], old["config"][k])]
    if config:
        k = config[0]
        return (f"config.{k} is {said(new['config'], k)}, the continued test's {said(old['config'], k)} (a sequential "
                f"plan's seeds run the continued test's recipe: only config.seed differs)")
    reference = next(iter(old["options"].values()), {})
    for arm, options in new["options"].items():
        theirs = old["options"].get(arm, reference)
        differ = sorted(k for k in set(options) | set(theirs) if k not in options or k not in theirs
                        or options[k] != theirs[k])
        if differ:
            k = differ[0]
            return (f"arms.{arm}.generation_options.{k} is {said(options, k)}, the continued test's {said(theirs, k)} "
                    f"(only {', '.join(sorted(SHOWN_NOT_TO_MOVE))} may differ, shown to move no number)")
    pins = (("counter_noise_version", "noise", "counter noise version"),
            ("reward_version", "rewards", "reward version"))
    for key, field_, words in pins:
        readings = set(old[field_].values())
        if len(readings) != 1:
            return f"the continued test's last seed records {len(readings)} {words}s ({sorted(map(str, readings))})"
        pinned = next(iter(readings))
        if key in variant and str(variant[key]) != str(pinned):
            return f"the plan's variant pins {key} {variant[key]!r}, the continued test ran {words} {pinned!r}"
        for where, value in new[field_].items():
            if str(value) != str(pinned):
                name = f"arms.{where}.generation_options.counter_noise_version" if field_ == "noise" else where
                return f"{name} is {value!r}, the continued test's {words} is {pinned!r} (pinned: one reading)"
    return None


def recorded_cards(results: dict) -> list[str]:
    """The GPU (or "CPU") each arm of a cell's file recorded it ran on, each name once: a plan that allows several
    cards records every cell's."""
    names = []
    for entry in results.get("arms", {}).values():
        p = entry.get("provenance") if isinstance(entry.get("provenance"), dict) else results.get("versions") or {}
        name = str(p.get("gpu") or (results.get("versions") or {}).get("gpu") or "CPU")
        if name not in names:
            names.append(name)
    return names


def cell_facts(results: dict) -> dict:
    """What the sensitivity comparison reads of a cell, as its arms record it (run_setup.provenance): card(s) by short
    label, commit, day and library versions (sensitivity.versions_label), each arm's pass@1 (points) and the arms whose
    verdict against the base is "collapsed"; "unrecorded" where a file records none (cells of the time before arms
    kept their provenance: their versions are the file's own)."""
    arms = results.get("arms", {})
    prov = [e["provenance"] for e in arms.values() if isinstance(e.get("provenance"), dict)]
    commits = sorted({str(p.get("commit") or "unrecorded")[:10] for p in prov}) or ["unrecorded"]
    days = sorted({str(p.get("started") or "unrecorded")[:10] for p in prov}) or ["unrecorded"]
    versions = sorted({sensitivity.versions_label(p.get("versions")) for p in prov}) or \
        [sensitivity.versions_label(results.get("versions"))]
    s = results["summary"]["arms"]
    return {"card": ", ".join(sensitivity.card_label(c) for c in recorded_cards(results)), "commit": ", ".join(commits),
            "day": ", ".join(days), "versions": "; ".join(versions),
            "pass@1": {a: 100 * s[a]["pass@1"] for a in arms}, "collapsed": [a for a in arms
                                                                               if s[a]["verdict"] == "collapsed"]}


def verdict_meaning(spec: dict, per_seed_points: list[float], design: sequential.Design,
                    design_file: Path | None = None) -> dict:
    """What the plan's verdicts mean, computed (never typed): "reproduced" says a gain above reproduced_above, not its
    size, nor the paper's claimed gain (`claimed`, points); "a gain smaller than claimed" needs an interval (c_r + c_f)
    se wide to fit between the two thresholds, so the seeds it takes at the spread so far (None past every planned look:
    it cannot happen), and whether the mean so far lies between the thresholds (a gain there reaches no verdict by the
    last look when that count lies past it); the continued test's own error, spent at its look; and, from the design
    file where it lies (`design_file`: Grid.path, beside the plan, whatever the current directory), the error per
    direction over the whole sequence under each adopted model, the nearby collapse models under which it exceeds the
    plan's (with what the first look alone spends in them), and the chance of each false decision given the seeds
    already seen under each conditional model (gmts_recipe.sequential.design)."""
    from scipy import stats as scipy_stats

    sd = float(statistics.stdev(per_seed_points))
    width = design.reproduced_critical[-1] + design.refuted_critical[-1]
    gap = design.refuted_below - design.reproduced_above
    smaller = math.ceil((sd * width / gap) ** 2) + 1
    n0 = design.looks[0]
    path = Path(spec["design"]) if design_file is None else design_file
    d = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    error = spec["error_per_direction"]
    whole = {dr: {m: e[dr]["error"] for m, e in d.get("errors", {}).items() if m in ("normal", "contaminated")}
             for dr in (sequential.REPRODUCED, sequential.REFUTED)}
    over = [r for r in d.get("contamination_sensitivity", []) if r["error"] > error]
    nearby = {"models": len(d.get("contamination_sensitivity", [])), "over": len(over),
              "error": [min(r["error"] for r in over), max(r["error"] for r in over)] if over else None,
              "first_look": [min(r["first_look"] for r in over), max(r["first_look"] for r in over)] if over else None}
    conditional = {dr: {m: r["error"] for m, r in rows.items()} for dr, rows in d.get("conditional", {}).items()}
    claimed = CLAIMED.get(spec["comparison"])
    mean = statistics.fmean(per_seed_points)
    return {"error_per_direction": error,
            "continued_error": float(scipy_stats.t.sf(design.reproduced_critical[0], n0 - 1)),
            "smaller_needs_seeds": smaller, "smaller_possible": smaller <= design.looks[-1], "sd": sd,
            "between_thresholds": design.reproduced_above <= mean <= design.refuted_below,
            "claimed": None if claimed is None else [100 * v for v in claimed],
            "whole_sequence": whole if d else None, "nearby": nearby if d else None,
            "conditional": conditional or None}


def sensitivity_at_look(spec: dict, design: sequential.Design, continued: dict, counted: list[int],
                        deltas: list[float], facts: dict, failed: dict[int, dict], scored_as_base: dict[str, str],
                        base_scores: dict | None) -> dict | None:
    """The plan's sensitivity comparison (gmts_recipe.sweep.sensitivity), never a decision: at a look beyond the
    continued test's (sensitivity.due), the continued test's seeds against the new ones counted up to it, by card,
    library versions and the plan's other `sensitivity` keys; None between looks. `facts`: the new cells' cell_facts
    keyed (variant, learning rate, seed); an arm scored as the base (`scored_as_base`) has the base's pass@1 and counts
    as a collapse (sweep.failures: a collapse to the base); `failed`: the cells' failure records, each attempt a
    failure on its card."""
    per_seed = [100 * d for d in [*continued["per_seed"], *deltas]]
    look = sensitivity.due(sequential.state(per_seed, design))
    if look is None:
        return None
    arms = spec["comparison"].split(" - ")
    key = (spec["variant"], spec["learning_rate"])
    base = 100 * statistics.fmean(base_scores.values()) if base_scores else None

    def row(seed: int, delta: float, f: dict, as_base: str | None = None) -> dict:
        f = {"card": "unrecorded", "commit": "unrecorded", "day": "unrecorded", "versions": "unrecorded",
             "pass@1": {}, "collapsed": [], **f}
        return {"seed": seed, "delta": 100 * delta, **{k: f[k] for k in ("card", "commit", "day", "versions")},
                "pass@1": {a: base if a == as_base else f["pass@1"].get(a, base) for a in arms},
                "collapsed": [a for a in arms if a in f["collapsed"] or a == as_base]}

    old = [row(s, d, continued["facts"].get((*key, s), {}))
           for s, d in zip(continued["seeds_done"], continued["per_seed"])]
    new_seeds = counted[:look - len(old)]
    new = [row(s, d, facts.get((*key, s), {}), scored_as_base.get(str(s))) for s, d in zip(new_seeds, deltas)]
    attempts = [{"seed": s, "arm": a["arm"], "card": sensitivity.card_label(a["card"])}
                for s, rec in sorted(failed.items()) if s in new_seeds for a in rec["attempts"] if a["arm"] in arms]
    return sensitivity.compare(old, new, arms, attempts, spec["sensitivity"], look)


def continued_test(grid: Grid) -> dict:
    """The primary test a sequential plan continues, recomputed from its own cells (its sweep file, under this grid's
    results_dir): it must be complete, since its seeds are the first look."""
    from gmts_recipe.sweep.grid import load_grid

    continued = load_grid(grid.path(grid.sequential["continues"]))
    continued.results_dir = grid.results_dir
    facts: dict = {}
    primary = summarize(continued, facts=facts).get("primary")
    if primary is None or len(primary["seeds_done"]) != len(primary["seeds"]):
        raise SweepError(f"{grid.sequential['continues']}: its primary test is not complete under "
                         f"{grid.results_dir}/{continued.name}; a sequential plan continues a finished test")
    return {**primary, "facts": facts}  # its cells' facts: the sensitivity comparison's old seeds


def continued_recipe(grid: Grid) -> dict:
    """recipe_of the cell of the continued test's last planned seed (its primary test's variant and learning rate),
    as that test's own check verifies the file (`load`): what every new seed of a sequential plan runs. Read alone,
    before the continued test's other cells, so that a cell of another recipe is refused first."""
    from gmts_recipe.sweep.grid import load_grid

    continued = load_grid(grid.path(grid.sequential["continues"]))
    spec = continued.primary or {}
    last = next((c for c in continued.cells() if spec and (c.variant, c.learning_rate, c.seed) ==
                 (spec["variant"], spec["learning_rate"], spec["seeds"][-1])), None)
    path = None if last is None else Path(grid.results_dir) / continued.name / last.name / "results.json"
    if path is None or not path.is_file():
        raise SweepError(f"{grid.sequential['continues']}: its primary test is not complete under "
                         f"{grid.results_dir}/{continued.name}; a sequential plan continues a finished test")
    return recipe_of(load(path))


def seed_minutes(grid: Grid) -> float | None:
    """The median over the continued test's seeds of the GPU-minutes its cells' files record for the two compared arms
    (training and evaluation of each, without process start-up or the shared base evaluations): what a new seed of a
    sequential plan costs."""
    from gmts_recipe.sweep.grid import load_grid

    continued = load_grid(grid.path(grid.sequential["continues"]))
    arms = grid.sequential["comparison"].split(" - ")
    per_seed = []
    for cell in continued.cells():
        path = Path(grid.results_dir) / continued.name / cell.name / "results.json"
        if cell.seed in continued.primary["seeds"] and path.is_file():
            entries = load(path)["arms"]
            minutes = [entries.get(a, {}).get("gpu_minutes") for a in arms]
            if all(isinstance(m, (int, float)) for m in minutes):
                per_seed.append(sum(minutes))
    return statistics.median(per_seed) if per_seed else None


def sequential_design(spec: dict, continued_seeds: int) -> sequential.Design:
    """The plan's looks as a Design: the continued test's look (its own t quantile for both directions), then the
    plan's critical values at each later look."""
    if spec["critical"] is None:
        raise SweepError("the sequential plan has no critical value yet: compute its design (python -m "
                         "gmts_recipe.sweep.design PLAN --out DESIGN) and write its critical into the plan")
    c0, later = sequential.first_critical(continued_seeds), len(spec["looks"])
    return sequential.Design((continued_seeds, *spec["looks"]), (c0, *[spec["critical"]["reproduced"]] * later),
                             (c0, *[spec["critical"]["refuted"]] * later), spec["reproduced_above_points"],
                             spec["refuted_below_points"])


def sequential_test(spec: dict, scores: dict, cards: dict[int, list[str]], continued: dict,
                    failed: dict[int, dict] | None = None, base_scores: dict | None = None,
                    origins: dict[tuple, dict] | None = None, design_file: Path | None = None) -> dict:
    """A sequential plan where it stands: the continued test's per-seed deltas, then the new seeds' in the planned
    order, counted only up to the first planned seed that has not run both arms (a later seed waits for it: no seed is
    skipped), and the look they reach (sequential.state: a decision is read only at a planned look). A seed whose arm
    failed on its own (`failed`: the cells' failure records, gmts_recipe.sweep.failures) counts as the plan's
    `failures` say: that arm, which holds no results (an arm with results is scored by them), scored as the base
    model (`base_scores`, the base's first sampling seed per task), so it never stalls the looks after it; a machine
    fault with a retry left waits for its retry."""
    failed = failed or {}
    scores = dict(scores)
    key = (spec["variant"], spec["learning_rate"])
    a, b = spec["comparison"].split(" - ")
    scored_as_base, retrying = {}, []
    for seed, rec in sorted(failed.items()):
        if seed not in spec["seeds"]:
            continue
        held = [arm for arm in (a, b) if (*key, seed, arm) in scores]  # an arm with results is scored by them
        own, missing = failure_outcome(rec, (a, b), held, spec["failures"]["machine_fault_retries"])
        if missing:
            retrying.append(seed)
        elif own and base_scores is not None:  # the arms' own failures: an outcome, scored as the base
            scores.update({(*key, seed, arm): base_scores for arm in own})
            scored_as_base[str(seed)] = ", ".join(sorted(own))
    new = _planned_comparison(spec["comparison"], spec["variant"], spec["learning_rate"], spec["seeds"], scores)
    done = set(new["seeds_done"])
    counted = []
    for seed in spec["seeds"]:
        if seed not in done:
            break
        counted.append(seed)
    deltas = [seed_delta(*_paired(scores[(*key, s, a)], scores[(*key, s, b)])) for s in counted]
    per_seed = [*continued["per_seed"], *deltas]
    design = sequential_design(spec, len(continued["seeds"]))
    return {**spec, "continued_seeds": continued["seeds"], "seeds_done": counted,
            "seeds_waiting": [s for s in new["seeds_done"] if s not in counted],
            "first_critical": design.reproduced_critical[0], "per_seed": per_seed,
            "cell_cards": {str(s): cards.get(s, []) for s in counted}, "scored_as_base": scored_as_base,
            "retrying": retrying, "sensitivity_comparison": sensitivity_at_look(
                spec, design, continued, counted, deltas, origins or {}, failed, scored_as_base, base_scores),
            "meaning": verdict_meaning(spec, [100 * d for d in per_seed], design, design_file),
            "state": sequential.state([100 * d for d in per_seed], design),
            "estimate": sequential.stagewise_estimate([100 * d for d in per_seed], design)}


def _planned_comparison(comparison: str, variant: str, learning_rate: float, seeds: list[int], scores: dict) -> dict:
    """A comparison over the planned seeds that have run both arms: those seeds and, from two on, the pooled delta
    with its t interval and per-seed values (None and [] before); the computation behind the primary test and each
    secondary one."""
    a, b = comparison.split(" - ")
    key = (variant, learning_rate)
    done = [s for s in seeds if (*key, s, a) in scores and (*key, s, b) in scores]
    out = {"seeds_done": done, "delta": None, "t_low": None, "t_high": None, "per_seed": []}
    if len(done) >= 2:
        d = _pooled(scores, (*key, a), (*key, b), done)
        out.update(delta=d["delta"], t_low=d["t_low"], t_high=d["t_high"], per_seed=d["per_seed"])
    return out


def primary_test(spec: dict, scores: dict) -> dict:
    """The analysis plan's primary test: its comparison over its planned seeds only (a seed counts once both arms
    have run), Student's t over the per-seed deltas, and the plan's decision, which is "interim" until every planned
    seed has run: the plan commits to running all of them whatever the interim rows show."""
    out = {**spec, **_planned_comparison(spec["comparison"], spec["variant"], spec["learning_rate"], spec["seeds"],
                                         scores)}
    complete = len(out["seeds_done"]) == len(spec["seeds"])
    out["decision"] = plan_decision(100 * out["t_low"], 100 * out["t_high"], spec["reproduced_above_points"],
                                    spec["refuted_below_points"]) if complete else "interim"
    return out


def secondary_test(spec: dict, primary: dict, scores: dict) -> dict:
    """A secondary comparison of the plan: over its planned seeds that have run both arms, at the primary test's
    variant and learning rate, Student's t over the per-seed deltas; an interval, never a decision ("interim" until
    every planned seed has run)."""
    out = {**spec, "variant": primary["variant"], "learning_rate": primary["learning_rate"],
           **_planned_comparison(spec["comparison"], primary["variant"], primary["learning_rate"], spec["seeds"],
                                 scores)}
    out["status"] = "complete" if len(out["seeds_done"]) == len(spec["seeds"]) else "interim"
    return out


def best_stable(training: dict[tuple[str, float, int, str], list[dict]]) -> list[dict]:
    """Each arm's best stable learning rate per variant, from the training logs alone, keyed (variant, learning rate,
    seed, arm): the held-out scores are not among the inputs (choosing on the test set would inflate the chosen arm).
    Stable: no seed's training reward fell (training_reward_fell) and every seed logged a reward. Best: among the
    stable ones, the highest late training reward (mean reward of the last 10 steps, averaged over seeds); a tie goes
    to the smaller learning rate."""
    out = []
    for variant in sorted({v for v, _, _, _ in training}):
        for arm in rule_arms():
            by_lr: dict[float, list[list[dict]]] = {}
            for (v, lr, _, a), log in training.items():
                if (v, a) == (variant, arm):
                    by_lr.setdefault(lr, []).append(log)
            stable = {lr: [_mean_reward(log, LATE) for log in logs] for lr, logs in by_lr.items()
                      if all(_mean_reward(log, LATE) is not None and not training_reward_fell(log) for log in logs)}
            if stable:
                lr = max(stable, key=lambda x: (sum(stable[x]) / len(stable[x]), -x))
                out.append({"variant": variant, "arm": arm, "learning_rate": lr,
                            "late_reward": sum(stable[lr]) / len(stable[lr]), "seeds": len(stable[lr])})
    return out


def with_plan(summary: dict, plan: dict | None) -> dict:
    """The summary with the record of the plan it was made from (sweep.plan.record), sealed again; None: as it is (a
    summary that records no plan)."""
    if plan is None:
        return summary
    out = {**{k: v for k, v in summary.items() if k != "digest"}, "plan": plan}
    out["digest"] = digest(out)
    return out


