"""Every number of a sweep from its cells' verified results files: the pooled comparisons, the best stable learning
rates, the analysis plan's primary and secondary tests (gmts_recipe/verify/sweep.py holds a sweep.json to them). A
cell holds only the arms its blocks run there; a sequential plan's cells run the recipe of the test it continues
(sequential.looks.recipe_problem), and its summary takes that test's, as the caller computed it
(`continued_summary`)."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import statistics
from pathlib import Path

from gmts_recipe.arms import arms as rule_arms, comparisons as rule_comparisons
from gmts_recipe.records import digest, task_scores
from gmts_recipe.sequential.cards import recorded_cards
from gmts_recipe.sequential.failures import checked as failure_record
from gmts_recipe.sequential.looks import cell_facts, continued_test, recipe_of, recipe_problem, sequential_test
from gmts_recipe.stats import plan_decision, pooled_delta, sd_interval, seeds_for_power
from gmts_recipe.sweep.grid import Grid, SweepError, load_grid
from gmts_recipe.verify.cell import Evaluation, arms_problem, check_together, one_base, recorded
from gmts_recipe.verify.file import load
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
# continues (continued_summary), then verifies that test's own sweep (look 0 in full), its 100 cells read once. None
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
              continued: dict | None = None, loaded: dict | None = None) -> dict:
    """Every number of the sweep, from the cells' verified results files (`load`, as check.py verifies a cell) alone;
    `index`: extended with every evaluation of its cells (verify.cell.Evaluation), for `verify` to hold against the
    sweeps beside it; `facts`: filled with each cell's cell_facts, keyed (variant, learning rate, seed); `continued`:
    for a sequential plan's grid, the summary of the test it continues as the caller computed it
    (`continued_summary`); `loaded`: with each cell's results as verified, by cell name (read-only:
    verify.sweep.sweep_samples re-scores their samples). Within `summaries_kept`, a grid's are computed once for the
    same files."""
    if (continued is None) != (grid.sequential is None):
        raise ValueError(f"{grid.name}: a sequential plan's grid, and it alone, is summarized with its continued test")
    key = None if _SUMMARIES is None else _inputs(grid, Path(grid.results_dir) / grid.name)
    found = None if key is None else _SUMMARIES.get(key)
    if found is None:
        evaluations: list[Evaluation] = []
        cell_facts_found: dict = {}
        results_found: dict = {}
        found = (_summarize(grid, evaluations, cell_facts_found, continued, results_found), evaluations,
                 cell_facts_found, results_found)
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


def _summarize(grid: Grid, index: list[Evaluation], facts: dict, continued: dict | None, loaded: dict) -> dict:
    """summarize's work, its out-parameters filled."""
    from tqdm.auto import tqdm

    root = Path(grid.results_dir) / grid.name
    cells, scores, seen, training, cards, origins, memo = [], {}, [], {}, {}, {}, {}
    base_hashes, base_scores, failed = set(), None, {}
    planned = grid.planned_arms()
    look0 = None if continued is None else continued_test(continued, grid)  # complete, with the recipe new seeds run
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
        problem = arms_problem(cell, results.get("arms", {}), planned[cell])
        if problem:
            raise SweepError(f"{path}: {problem}")
        if look0 is not None:
            problem = recipe_problem(recipe_of(results), look0["recipe"], grid.variants.get(cell.variant, {}))
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
        out["sequential"] = sequential_test(grid.sequential, scores, cards, look0, failed, base_scores, origins,
                                            grid.path(grid.sequential["design"]),
                                            CLAIMED.get(grid.sequential["comparison"]))
    out["digest"] = digest(out)
    return out


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


def continued_summary(grid: Grid) -> dict | None:
    """What summarize takes as `continued` for a sequential plan's grid (None for another): the summary of the test it
    continues from that test's cells under this grid's results_dir, with their cell_facts ("facts")."""
    if grid.sequential is None:
        return None
    continued = load_grid(grid.path(grid.sequential["continues"]))
    continued.results_dir = grid.results_dir
    facts: dict = {}
    return {**summarize(continued, facts=facts), "facts": facts}


def with_plan(summary: dict, plan: dict | None) -> dict:
    """The summary with the record of the plan it was made from (verify.plan.record), sealed again; None: as it is (a
    summary that records no plan)."""
    if plan is None:
        return summary
    out = {**{k: v for k, v in summary.items() if k != "digest"}, "plan": plan}
    out["digest"] = digest(out)
    return out


