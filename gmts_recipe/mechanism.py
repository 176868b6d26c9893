"""Does the per-seed gap GMTS - ETS follow what the arms' updates looked like? Across the seeds of one grid's test,
each seed's difference in held-out pass@1 (as sweep.json pools it) beside the mean over training steps of what the
trainer logged about each arm's update, and the association of the two across seeds (stats.correlation).

The variable the question is about is ETS's share of kept tokens in zero-advantage answers: there omega is 0 and the
token moves nothing, so a seed where ETS spent more of its 20% there took a smaller effective step. GMTS ranks those
tokens last, so its share is 0 except on steps where fewer than 20% of the batch's tokens carry a nonzero advantage;
it is kept per seed but not correlated (a correlation would rest on the few seeds where it is not 0). The share is
also an outcome of the arm's own run: the more groups of a batch whose rewards are all equal (TRL's
`frac_reward_zero_std`, kept per seed and arm too), the more zero-advantage tokens there are to keep, so a link
between the share and the gap may be one between how the run went and the gap (gmts_recipe.posthoc.share_confound
holds that fixed). Beside it: the
effective answers the kept tokens spread over, the top answer's share of the kept |omega|, the gradient norm (each
per arm), and, where both arms recorded their rollouts' digests (the coupled grid), how long the two arms drew the
same completions (records.rollout_agreement).

    python -m gmts_recipe.plots mechanism results/coupled/sweep.json   # writes mechanism.json and mechanism.png

`analyse` is pure (hand-made inputs in tests/test_mechanism.py); `read_grid` gathers its inputs from a sweep.json,
the grid file beside it and the cells' results files, each cell checked against the digest sweep.json holds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from gmts_recipe.records import digest, read_yaml_mapping, rollout_agreement
from gmts_recipe.stats import correlation, seed_t_interval

PAIR = ("gmts", "ets")  # delta = pass@1(gmts) - pass@1(ets)
ZERO = "selection/zero_advantage_kept_share"
EFFECTIVE = "selection/effective_answers"
TOP = "selection/top_answer_weight_share"
GRAD = "grad_norm"
ZERO_SPREAD = "frac_reward_zero_std"  # TRL's share of groups whose rewards are all equal: their answers' omega is 0
AGREEMENT = "rollout_agreement"
PER_ARM = (ZERO, EFFECTIVE, TOP, GRAD, ZERO_SPREAD)  # the per-step means kept for every seed and arm
# (arm, key) of each variable the per-seed delta is set against; arm None: a quantity of the pair (its rollouts).
VARIABLES = (("ets", ZERO), ("ets", EFFECTIVE), ("gmts", EFFECTIVE), ("ets", TOP), ("gmts", TOP), ("ets", GRAD),
             ("gmts", GRAD), (None, AGREEMENT))
LABELS = {ZERO: "share of kept tokens in zero-advantage answers", EFFECTIVE: "effective answers per batch",
          TOP: "top answer's share of kept |omega|", GRAD: "gradient norm",
          AGREEMENT: "share of identical rollouts, ETS vs GMTS"}
INTERVAL = ("Fisher z, 95%: Pearson's r with se 1/sqrt(n - 3) (scipy.stats.pearsonr), Spearman's rho with "
            "Bonett-Wright se sqrt((1 + rho^2/2)/(n - 3))")


class MechanismError(ValueError):
    """Inputs the analysis cannot use; the message is the one-line reason."""


def variable_name(arm: str | None, key: str) -> str:
    """'ets selection/zero_advantage_kept_share', or the key alone for a quantity of the pair."""
    return key if arm is None else f"{arm} {key}"


def variable_label(arm: str | None, key: str) -> str:
    """What a reader sees: 'ETS: share of kept tokens in zero-advantage answers'."""
    from gmts_recipe.arms import short_name

    return LABELS[key] if arm is None else f"{short_name(arm)}: {LABELS[key]}"


def step_mean(train_log: Sequence[dict], key: str) -> tuple[float | None, int]:
    """The mean of `key` over the logged steps, and how many steps held a value that is not a finite number (left out
    of the mean and counted, never dropped unseen). None where no step logged it."""
    present = [row[key] for row in train_log if key in row and row[key] is not None]
    finite = [x for x in present if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]
    return (sum(finite) / len(finite) if finite else None), len(present) - len(finite)


def seed_record(seed: int, delta: float, arms: dict[str, dict]) -> dict:
    """One seed: its delta in points, each arm's per-step means of PER_ARM, and the share of identical completions
    of the two arms per step ([step, share] pairs from the arms' `rollout_digests`; None where either lacks them)."""
    missing = [a for a in PAIR if a not in arms]
    if missing:
        raise MechanismError(f"seed {seed}: arm {missing[0]} is missing")
    record: dict = {"seed": seed, "delta_points": 100 * delta, "arms": {}}
    nonfinite = {}
    for arm in PAIR:
        log = arms[arm].get("train_log", [])
        record["arms"][arm] = {}
        for key in PER_ARM:
            record["arms"][arm][key], bad = step_mean(log, key)
            if bad:
                nonfinite[f"{arm} {key}"] = bad
    if nonfinite:
        record["nonfinite_steps"] = nonfinite
    digests = [arms[a].get("rollout_digests") for a in PAIR]
    shares = rollout_agreement(*digests) if all(digests) else None
    record[AGREEMENT] = [[step, share] for step, share in shares] if shares else None
    record[f"{AGREEMENT}_mean"] = sum(s for _, s in shares) / len(shares) if shares else None
    return record


def value_of(record: dict, arm: str | None, key: str) -> float | None:
    return record[f"{AGREEMENT}_mean"] if arm is None else record["arms"][arm][key]


def agreement_by_step(records: Sequence[dict]) -> list[dict]:
    """Per step, the share of identical completions over the seeds that recorded it: mean and 95% t band."""
    by_step: dict[int, list[float]] = {}
    for r in records:
        for step, share in r[AGREEMENT] or []:
            by_step.setdefault(step, []).append(share)
    out = []
    for step in sorted(by_step):
        low, high = seed_t_interval(by_step[step])
        out.append({"step": step, "n": len(by_step[step]), "mean": sum(by_step[step]) / len(by_step[step]),
                    "low": low, "high": high})
    return out


def analyse(deltas: dict[int, float], arms_by_seed: dict[int, dict[str, dict]], planned_seeds: Sequence[int],
            confidence: float = 0.95) -> dict:
    """The mechanism analysis of one grid's test, from its inputs alone.

    deltas: seed -> pass@1(GMTS) - pass@1(ETS) as a fraction (sweep.json's per-seed deltas); arms_by_seed: seed ->
    arm -> the arm's entry of the cell's results file (its train_log and, where recorded, rollout_digests);
    planned_seeds: every seed the grid plans for this test (the analysis is interim until all have run).

    Returns per seed the delta and the per-step means (`per_seed`), and per variable of VARIABLES the association
    with the delta across the seeds that logged it (`associations`: stats.correlation, its n and seeds named)."""
    if set(deltas) != set(arms_by_seed):
        raise MechanismError(f"seeds with a delta {sorted(deltas)} and seeds with logs {sorted(arms_by_seed)} differ")
    if not deltas:
        raise MechanismError("no seed has run both arms")
    seeds = sorted(deltas)
    planned = sorted(int(s) for s in planned_seeds)
    outside = sorted(set(seeds) - set(planned))
    if outside:
        raise MechanismError(f"seeds {outside} ran but are not among the planned seeds {planned}")
    records = [seed_record(s, deltas[s], arms_by_seed[s]) for s in seeds]
    associations = []
    for arm, key in VARIABLES:
        pairs = [(r["seed"], value_of(r, arm, key), r["delta_points"]) for r in records
                 if value_of(r, arm, key) is not None]
        stats = correlation([p[1] for p in pairs], [p[2] for p in pairs], confidence)
        if not pairs:
            stats["note"] = "not logged for these seeds"
        associations.append({"variable": variable_name(arm, key), "arm": arm, "key": key,
                             "label": variable_label(arm, key), "seeds": [p[0] for p in pairs],
                             "x_min": min((p[1] for p in pairs), default=None),
                             "x_max": max((p[1] for p in pairs), default=None), **stats})
    return {"comparison": f"{PAIR[0]} - {PAIR[1]}", "planned_seeds": planned, "seeds": seeds,
            "status": "complete" if len(seeds) == len(planned) else "interim", "interval": INTERVAL,
            "slope_unit": "points of GMTS - ETS per unit of the variable", "per_seed": records,
            "associations": associations, "agreement_by_step": agreement_by_step(records)}


# ---------------------------------------------------------------------------- the inputs of a committed grid
def setting_of_test(summary: dict, grid: dict) -> tuple[str, float, list[int], dict[int, float]]:
    """The grid's test of GMTS - ETS: (variant, learning rate, planned seeds, seed -> delta). The analysis plan's
    primary test where the grid has one (its planned seeds and per-seed deltas); otherwise the one setting whose
    blocks run both arms (every seed those blocks plan), with sweep.json's pooled row for it."""
    comparison = f"{PAIR[0]} - {PAIR[1]}"
    p = summary.get("primary")
    if p is not None:
        if p["comparison"] != comparison:
            raise MechanismError(f"the primary test compares {p['comparison']}, not {comparison}")
        return p["variant"], p["learning_rate"], list(p["seeds"]), dict(zip(p["seeds_done"], p["per_seed"]))
    planned: dict[tuple[str, float], set[int]] = {}
    for block in grid.get("blocks") or []:
        if set(PAIR) <= set(block.get("arms", [])):
            for lr in block["learning_rates"]:
                planned.setdefault((block.get("variant", "paper"), float(lr)), set()).update(map(int, block["seeds"]))
    if len(planned) != 1:
        raise MechanismError(f"no primary test, and {len(planned)} settings run both arms "
                             f"({', '.join(f'{v} lr {lr:g}' for v, lr in sorted(planned)) or 'none'}): "
                             f"which one is the test is not clear")
    (variant, lr), seeds = next(iter(planned.items()))
    rows = [r for r in summary["pooled"] if (r["variant"], r["learning_rate"], r["comparison"]) ==
            (variant, lr, comparison)]
    deltas = dict(zip(rows[0]["seeds"], rows[0]["per_seed"])) if rows else {}
    return variant, lr, sorted(seeds), deltas


def read_grid(sweep_path: str | Path) -> tuple[dict, dict]:
    """(inputs of `analyse` as keyword arguments, what they were read from) for a committed sweep.json: its grid file
    (grid.yaml beside it, the copy sweep.py keeps of configs/sweeps/<name>.yaml) and each test cell's results file,
    whose digest must be the one sweep.json recorded (else the cell changed after the summary was written)."""
    path = Path(sweep_path)
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise MechanismError(f"cannot read {path}: {e}") from None
    if not isinstance(summary, dict) or summary.get("kind") != "sweep":
        raise MechanismError(f"{path} is not a sweep.json (sweep.py's summary)")
    if summary.get("digest") != digest(summary):
        raise MechanismError(f"{path}: digest mismatch: the file was edited after sweep.py wrote it")
    grid = read_yaml_mapping(path.parent / "grid.yaml", MechanismError, "must be a sweep file")
    variant, lr, planned, deltas = setting_of_test(summary, grid)
    arms_by_seed = {}
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) == (variant, lr) and cell["seed"] in deltas:
            results = json.loads((path.parent / cell["path"]).read_text(encoding="utf-8"))
            if results.get("digest") != cell["digest"] or digest(results) != cell["digest"]:
                raise MechanismError(f"{path.parent / cell['path']} is not the file sweep.json summarized "
                                     f"(digest differs): run python check.py {path}")
            arms_by_seed[cell["seed"]] = {a: {k: results["arms"][a].get(k) for k in ("train_log", "rollout_digests")}
                                          for a in PAIR if a in results["arms"]}
    source = {"grid": summary["name"], "sweep_digest": summary["digest"],
              "variant": variant, "learning_rate": lr}
    return {"deltas": deltas, "arms_by_seed": arms_by_seed, "planned_seeds": planned}, source


def grid_analysis(sweep_path: str | Path) -> dict:
    """The analysis of a committed grid, headed by what it was read from: the content of its mechanism.json."""
    inputs, source = read_grid(sweep_path)
    return {**source, **analyse(**inputs)}
