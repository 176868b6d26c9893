"""A sequential plan at its looks, from what sweep.summary reads of the cells: look 0, the test it continues (its summary
computed by the caller, held complete), the recipe new seeds run; each cell's facts; where the plan stands, what its
verdicts mean and, at a look, the sensitivity comparison."""

from __future__ import annotations

import json
import math
import statistics
from itertools import takewhile
from pathlib import Path

from gmts_recipe.records import evaluation_fields, numbers_close, recorded_reward_version
from gmts_recipe.sequential import sensitivity, stats as sequential
from gmts_recipe.sequential.cards import recorded_cards
from gmts_recipe.sequential.failures import outcome as failure_outcome
from gmts_recipe.speed_options import recorded_noise_version
from gmts_recipe.stats import seed_delta
from gmts_recipe.sweep.grid import Grid, SweepError


def continued_test(summary: dict, grid: Grid) -> dict:
    """The primary test a sequential plan continues, its first look, from that test's summary as the caller computed
    it from its own cells under this grid's results_dir (sweep.summary.continued_summary, each cell's `cell_facts`
    under "facts": the sensitivity comparison's old seeds): it must be complete. With it, under "recipe", what every
    new seed runs: the recipe of its last planned seed's cell."""
    primary, facts = summary.get("primary"), summary["facts"]
    if primary is None or len(primary["seeds_done"]) != len(primary["seeds"]):
        raise SweepError(f"{grid.sequential['continues']}: its primary test is not complete under {grid.results_dir}/"
                         f"{summary['name']}; a sequential plan continues a finished test")
    last = facts[(primary["variant"], primary["learning_rate"], primary["seeds"][-1])]
    return {**primary, "facts": facts, "recipe": last["recipe"]}


def seed_minutes(continued: dict, comparison: str) -> float | None:
    """The median over the continued test's seeds (`continued_test`) of the GPU-minutes its cells' files record for the
    two compared arms (training and evaluation of each, without process start-up or the shared base evaluations):
    what a new seed of a sequential plan costs."""
    arms, per_seed = comparison.split(" - "), []
    for (_, _, seed), f in continued["facts"].items():
        minutes = [f["gpu_minutes"].get(a) for a in arms]
        if seed in continued["seeds"] and all(isinstance(m, (int, float)) for m in minutes):
            per_seed.append(sum(minutes))
    return statistics.median(per_seed) if per_seed else None


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


def cell_facts(results: dict) -> dict:
    """What a sequential plan reads of a cell, as its arms record it (run_setup.provenance): for the sensitivity
    comparison its card(s) by short label, commit, day and library versions (sensitivity.versions_label), each arm's
    pass@1 (points) and the arms whose verdict against the base is "collapsed", "unrecorded" where a file records none
    (cells of the time before arms kept their provenance: their versions are the file's own); the recipe it ran
    (`recipe_of`) and each arm's GPU-minutes (training and evaluation, as its file records them)."""
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
                                                                               if s[a]["verdict"] == "collapsed"],
            "recipe": recipe_of(results), "gpu_minutes": {a: e.get("gpu_minutes") for a, e in arms.items()}}


def sequential_test(spec: dict, scores: dict, cards: dict[int, list[str]], continued: dict,
                    failed: dict[int, dict] | None = None, base_scores: dict | None = None,
                    origins: dict[tuple, dict] | None = None, design_file: Path | None = None,
                    claimed: tuple[float, float] | None = None) -> dict:
    """A sequential plan where it stands: the continued test's per-seed deltas, then the new seeds' in the planned
    order, counted only up to the first planned seed that has not run both arms (a later seed waits for it: no seed is
    skipped), and the look they reach (stats.state: a decision is read only at a planned look; look 0 at its own t
    quantile, every later one at the plan's critical values). A seed whose arm failed on its own (`failed`: the cells'
    failure records, failures) counts as the plan's `failures` say: that arm, which holds no results (an arm with
    results is scored by them), scored as the base model (`base_scores`, the base's first sampling seed per task), so
    it never stalls the looks after it; a machine fault with a retry left waits for its retry. `claimed`: the paper's gains for the comparison (fractions), which
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
    counted = list(takewhile(lambda s: s in done, spec["seeds"]))  # up to the first seed not done
    deltas = []
    for s in counted:  # each seed's arms paired by task (every evaluation of a sweep holds its held-out tasks)
        x, y = scores[(*key, s, a)], scores[(*key, s, b)]
        deltas.append(seed_delta([x[k] for k in sorted(x)], [y[k] for k in sorted(x)]))
    if spec["critical"] is None:
        raise SweepError("the sequential plan has no critical value yet: compute its design (python -m "
                         "gmts_recipe.sweep.design PLAN --out DESIGN) and write its critical into the plan")
    n0, later, critical = len(continued["seeds"]), len(spec["looks"]), spec["critical"]
    c0 = sequential.first_critical(n0)
    design = sequential.Design((n0, *spec["looks"]), (c0, *[critical["reproduced"]] * later),
                               (c0, *[critical["refuted"]] * later), spec["reproduced_above_points"],
                               spec["refuted_below_points"])
    per_seed = [*continued["per_seed"], *deltas]
    points = [100 * d for d in per_seed]
    try:
        state = sequential.state(points, design)
    except sequential.NoSpread as e:  # a refusal of the sweep's numbers, in one line, as any other
        raise SweepError(f"the sequential plan cannot read its look: {e}") from None
    return {**spec, "continued_seeds": continued["seeds"], "seeds_done": counted,
            "seeds_waiting": [s for s in done if s not in counted],
            "first_critical": design.reproduced_critical[0], "per_seed": per_seed,
            "cell_cards": {str(s): cards.get(s, []) for s in counted}, "scored_as_base": scored_as_base,
            "retrying": retrying, "sensitivity_comparison": sensitivity_at_look(
                spec, state, continued, counted, deltas, origins or {}, failed, scored_as_base, base_scores),
            "meaning": verdict_meaning(spec, points, design, design_file, claimed), "state": state,
            "estimate": sequential.stagewise_estimate(points, design)}


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


def sensitivity_at_look(spec: dict, state: dict, continued: dict, counted: list[int],
                        deltas: list[float], facts: dict, failed: dict[int, dict], scored_as_base: dict[str, str],
                        base_scores: dict | None) -> dict | None:
    """The plan's sensitivity comparison (sensitivity), never a decision: at a look beyond the continued test's
    (sensitivity.due of `state`, where the test stands), the continued test's seeds against the new ones counted up to
    it, by card, library versions and the plan's other `sensitivity` keys; None between looks. `facts`: the new cells'
    cell_facts keyed (variant, learning rate, seed); an arm scored as the base (`scored_as_base`) has the base's pass@1
    and counts as a collapse (failures: a collapse to the base); `failed`: the cells' failure records, each attempt a
    failure on its card."""
    look = sensitivity.due(state)
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
