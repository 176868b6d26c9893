"""Where a sequential plan stands (`sequential_test`): the continued test's per-seed deltas, then the new seeds' in
the planned order, the looks they reach (stats.state), what its verdicts mean (`verdict_meaning`, from the design
file) and, at a look, the sensitivity comparison (`sensitivity_at_look`). Pure functions over the scores
sweep.summary reads from the cells, and the continued test as `continued.continued_test` gives it."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from gmts_recipe.sequential import sensitivity, stats as sequential
from gmts_recipe.sequential.failures import outcome as failure_outcome
from gmts_recipe.stats import seed_delta
from gmts_recipe.sweep.grid import SweepError


def sequential_design(spec: dict, continued_seeds: int) -> sequential.Design:
    """The plan's looks as a Design: the continued test's look (its own t quantile for both directions), then the
    plan's critical values at each later look."""
    if spec["critical"] is None:
        raise SweepError("the sequential plan has no critical value yet: compute its design (python -m "
                         "gmts_recipe.sequential.design PLAN --out DESIGN) and write its critical into the plan")
    c0, later = sequential.first_critical(continued_seeds), len(spec["looks"])
    return sequential.Design((continued_seeds, *spec["looks"]), (c0, *[spec["critical"]["reproduced"]] * later),
                             (c0, *[spec["critical"]["refuted"]] * later), spec["reproduced_above_points"],
                             spec["refuted_below_points"])


def sequential_test(spec: dict, scores: dict, cards: dict[int, list[str]], continued: dict,
                    failed: dict[int, dict] | None = None, base_scores: dict | None = None,
                    origins: dict[tuple, dict] | None = None, design_file: Path | None = None,
                    claimed: tuple[float, float] | None = None) -> dict:
    """A sequential plan where it stands: the continued test's per-seed deltas, then the new seeds' in the planned
    order, counted only up to the first planned seed that has not run both arms (a later seed waits for it: no seed is
    skipped), and the look they reach (sequential.state: a decision is read only at a planned look). A seed whose arm
    failed on its own (`failed`: the cells' failure records, failures) counts as the plan's
    `failures` say: that arm, which holds no results (an arm with results is scored by them), scored as the base
    model (`base_scores`, the base's first sampling seed per task), so it never stalls the looks after it; a machine
    fault with a retry left waits for its retry. `claimed`: the paper's gains for the comparison (fractions), which
    `verdict_meaning` says a verdict is not."""
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
    done = [s for s in spec["seeds"] if (*key, s, a) in scores and (*key, s, b) in scores]
    counted = []
    for seed in spec["seeds"]:
        if seed not in done:
            break
        counted.append(seed)
    deltas = []
    for s in counted:  # each seed's arms paired by task (every evaluation of a sweep holds its held-out tasks)
        x, y = scores[(*key, s, a)], scores[(*key, s, b)]
        deltas.append(seed_delta([x[k] for k in sorted(x)], [y[k] for k in sorted(x)]))
    per_seed = [*continued["per_seed"], *deltas]
    design = sequential_design(spec, len(continued["seeds"]))
    return {**spec, "continued_seeds": continued["seeds"], "seeds_done": counted,
            "seeds_waiting": [s for s in done if s not in counted],
            "first_critical": design.reproduced_critical[0], "per_seed": per_seed,
            "cell_cards": {str(s): cards.get(s, []) for s in counted}, "scored_as_base": scored_as_base,
            "retrying": retrying, "sensitivity_comparison": sensitivity_at_look(
                spec, design, continued, counted, deltas, origins or {}, failed, scored_as_base, base_scores),
            "meaning": verdict_meaning(spec, [100 * d for d in per_seed], design, design_file, claimed),
            "state": sequential.state([100 * d for d in per_seed], design),
            "estimate": sequential.stagewise_estimate([100 * d for d in per_seed], design)}


def verdict_meaning(spec: dict, per_seed_points: list[float], design: sequential.Design,
                    design_file: Path | None = None, claimed: tuple[float, float] | None = None) -> dict:
    """What the plan's verdicts mean, computed (never typed): "reproduced" says a gain above reproduced_above, not its
    size, nor the paper's claimed gain (`claimed`, points); "a gain smaller than claimed" needs an interval (c_r + c_f)
    se wide to fit between the two thresholds, so the seeds it takes at the spread so far (None past every planned look:
    it cannot happen), and whether the mean so far lies between the thresholds (a gain there reaches no verdict by the
    last look when that count lies past it); the continued test's own error, spent at its look; and, from the design
    file where it lies (`design_file`: Grid.path, beside the plan, whatever the current directory), the error per
    direction over the whole sequence under each adopted model, the nearby collapse models under which it exceeds the
    plan's (with what the first look alone spends in them), and the chance of each false decision given the seeds
    already seen under each conditional model (stats.design)."""
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
    """The plan's sensitivity comparison (sensitivity), never a decision: at a look beyond the
    continued test's (sensitivity.due), the continued test's seeds against the new ones counted up to it, by card,
    library versions and the plan's other `sensitivity` keys; None between looks. `facts`: the new cells' cell_facts
    keyed (variant, learning rate, seed); an arm scored as the base (`scored_as_base`) has the base's pass@1 and counts
    as a collapse (failures: a collapse to the base); `failed`: the cells' failure records, each attempt a
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
