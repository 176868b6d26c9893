"""A group-sequential continuation of a fixed-size test over per-seed deltas: its looks, its boundary, its decision.

A planned test over seeds (sweep.summary.primary_test: Student's t over the per-seed deltas of two arms, two-sided 95%,
"reproduced" if the interval lies above one threshold, "refuted" if it lies below another) can end undecided. Adding
seeds and looking again inflates the chance of a false decision unless the looks and the boundary are fixed first and
the boundary accounts for every look, the one already made included. This module is that rule, as pure functions:

- at a look over n seeds, with mean m and standard error se = sd / sqrt(n) of the per-seed deltas (points):
  "reproduced" if (m - reproduced_above) / se > c, "refuted" if (m - refuted_below) / se < -c, both at once "a gain
  smaller than claimed", neither "continue" (at the last look: "undecided"). Equivalently the interval m -/+ c se lies
  above reproduced_above, or below refuted_below: the confirmatory test's own rule with a wider interval.
- the looks' totals and critical values: the first look is the one already made (its critical value that test's t
  quantile), every later look shares one constant c (Pocock's shape: the same boundary at each look);
- `boundary`: c by simulation, so that over the whole sequence, the look already made included, the chance of
  "reproduced" when the true mean is reproduced_above (and, by the same symmetry, of "refuted" when it is
  refuted_below) is `error`. The other direction's stops are ignored (non-binding): the error holds whether or not a
  procedure stops early the other way. Under normal deltas the t statistics at the looks depend only on each block's
  sum and sum of squares, so each path costs one normal and one chi-square draw per block (exact, fast);
- `operating_characteristics`: given the deltas already observed, how often each outcome follows and how many new
  seeds it takes, if the true gap were g (new deltas normal with the observed spread, or the observed deltas' residuals
  resampled around g).

`python -m gmts_recipe.sweep.design PLAN.yaml --out DESIGN.json` computes the boundaries and the operating
characteristics (`design`) from the plan's own keys and the continued test's per-seed deltas (recomputed from its
cells), with the seeds given, so the output is reproducible on any CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

REPRODUCED, REFUTED, SMALLER, CONTINUE, UNDECIDED = ("reproduced", "refuted", "a gain smaller than claimed",
                                                    "continue", "undecided")


@dataclass(frozen=True)
class Design:
    """The looks of a sequential test: the total seeds at each (the look already made first), each look's critical
    value for "reproduced" and for "refuted" (the per-seed deltas can be skewed, so the two tails need not share one),
    and the two thresholds in points."""

    looks: tuple[int, ...]
    reproduced_critical: tuple[float, ...]
    refuted_critical: tuple[float, ...]
    reproduced_above: float
    refuted_below: float

    def __post_init__(self):
        if not len(self.looks) == len(self.reproduced_critical) == len(self.refuted_critical) or len(self.looks) < 2:
            raise ValueError("a sequential design needs both critical values for each of at least two looks")
        if any(b <= a for a, b in zip(self.looks, self.looks[1:])) or self.looks[0] < 2:
            raise ValueError(f"looks must be increasing seed totals from 2 on, got {list(self.looks)}")
        if not all(c > 0 for c in (*self.reproduced_critical, *self.refuted_critical)):  # inf: never (spent)
            raise ValueError("critical values must be positive numbers")
        if not self.reproduced_above < self.refuted_below:
            raise ValueError("reproduced_above must lie below refuted_below")


def look(per_seed: Sequence[float], reproduced_critical: float, refuted_critical: float, reproduced_above: float,
         refuted_below: float, last: bool = False) -> dict:
    """One look over the per-seed deltas (points): mean, standard error, both statistics, the interval from mean -
    reproduced_critical x se to mean + refuted_critical x se, and the decision (CONTINUE where neither boundary is
    crossed, UNDECIDED if that is the last look)."""
    x = np.asarray(per_seed, dtype=float)
    if x.size < 2:
        raise ValueError("a look needs at least 2 seeds")
    mean, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(x.size))
    if se == 0.0:
        raise ValueError("the per-seed deltas have no spread: a t statistic is undefined")
    z_reproduced, z_refuted = (mean - reproduced_above) / se, (mean - refuted_below) / se
    return {"seeds": int(x.size), "mean": mean, "se": se, "reproduced_critical": reproduced_critical,
            "refuted_critical": refuted_critical, "z_reproduced": z_reproduced, "z_refuted": z_refuted,
            "low": mean - reproduced_critical * se, "high": mean + refuted_critical * se,
            "decision": decide(z_reproduced > reproduced_critical, z_refuted < -refuted_critical, last)}


def decide(above: bool, below: bool, last: bool = False) -> str:
    """The decision at a look from whether each boundary is crossed."""
    if above and below:
        return SMALLER
    if above:
        return REPRODUCED
    if below:
        return REFUTED
    return UNDECIDED if last else CONTINUE


def state(per_seed: Sequence[float], design: Design) -> dict:
    """Where a sequential test stands with the per-seed deltas run so far, in the planned order: every planned look
    those seeds reach (each with `look`'s numbers), the decision of the last one reached (the test stops at the first
    decision; a decision is read only at a planned look), and the next look with the seeds it still needs."""
    x = [float(v) for v in per_seed]
    looks, decision = [], None
    for i, n in enumerate(design.looks):
        if len(x) < n:
            break
        looks.append({"look": i, **look(x[:n], design.reproduced_critical[i], design.refuted_critical[i],
                                        design.reproduced_above, design.refuted_below,
                                        last=i == len(design.looks) - 1)})
        if looks[-1]["decision"] != CONTINUE:
            decision = looks[-1]["decision"]
            break
    nxt = None if decision is not None or len(looks) == len(design.looks) else design.looks[len(looks)]
    return {"seeds_done": len(x), "looks": looks, "decision": decision, "next_look": nxt,
            "seeds_to_next_look": None if nxt is None else nxt - len(x)}


def _t_at_looks(sums: np.ndarray, squares: np.ndarray, looks: Sequence[int]) -> np.ndarray:
    """(paths, looks) t statistics of the mean against 0 from each block's sum and within-block sum of squares about
    the block mean (paths, blocks), block j holding looks[j] - looks[j-1] seeds."""
    n = np.asarray(looks, dtype=float)
    sizes = np.diff(np.concatenate([[0.0], n]))
    total = np.cumsum(sums, axis=1)
    # sum of squares about the overall mean = within-block + between-block parts
    ss = np.cumsum(squares + sums**2 / sizes, axis=1) - total**2 / n
    return (total / n) / np.sqrt(ss / (n - 1) / n)


def null_paths(looks: Sequence[int], paths: int, rng: np.random.Generator) -> np.ndarray:
    """(paths, looks) t statistics of normal per-seed deltas with mean 0 (any spread: t does not depend on it)."""
    sizes = np.diff(np.concatenate([[0], np.asarray(looks)]))
    sums = rng.standard_normal((paths, sizes.size)) * np.sqrt(sizes)
    squares = rng.chisquare(sizes - 1, (paths, sizes.size))
    return _t_at_looks(sums, squares, looks)


def resampled_paths(residuals: Sequence[float], looks: Sequence[int], paths: int,
                    rng: np.random.Generator) -> np.ndarray:
    """(paths, looks) t statistics of per-seed deltas drawn with replacement from `residuals` (centred: mean 0)."""
    r = np.asarray(residuals, dtype=float)
    r = r - r.mean()
    out = np.empty((paths, len(looks)))
    chunk = 20_000
    for start in range(0, paths, chunk):
        x = r[rng.integers(0, r.size, (min(chunk, paths - start), looks[-1]))]
        blocks = np.split(x, looks[:-1], axis=1)
        sums = np.stack([b.sum(axis=1) for b in blocks], axis=1)
        squares = np.stack([((b - b.mean(axis=1, keepdims=True)) ** 2).sum(axis=1) for b in blocks], axis=1)
        out[start:start + x.shape[0]] = _t_at_looks(sums, squares, looks)
    return out


def boundary(t: np.ndarray, first_critical: float, error: float) -> float:
    """The constant c for every look after the first such that, over these null paths (paths, looks), the share that
    crosses first_critical at the first look or c at any later one is `error`: the smallest such c, read off the
    paths that do not cross at the first look. Where the first look alone already spends the whole error (a world
    whose deltas make the fixed-size test's own quantile too loose), nothing is left for later looks: math.inf, the
    direction can no longer be decided after the first look (never an exception: a simulation over many such worlds
    goes on)."""
    first = t[:, 0] > first_critical
    rest = t[~first, 1:].max(axis=1)
    spare = error * t.shape[0] - int(first.sum())  # paths still allowed to cross later
    if spare <= 0:
        return math.inf
    return float(np.sort(rest)[::-1][int(spare)])  # the (spare+1)-th largest: exactly `spare` paths lie above it


def contaminated_paths(looks: Sequence[int], paths: int, rng: np.random.Generator, rate: float, jump: float,
                       clean: Sequence[float] | None = None, chunk: int = 20_000) -> np.ndarray:
    """(paths, looks) t statistics of per-seed deltas with mean 0 that are clean (standard normal, or with `clean`
    given, drawn with replacement from those values' residuals) and, with probability `rate` each, moved by `jump`
    (in clean SDs for normal deltas, in the clean values' units otherwise): an arm's rare collapse in one direction.
    The mixture is centred, so its mean is 0. The upper tail of -t is the lower tail of t: one set of paths serves
    both directions (a jump down for "reproduced", up for "refuted")."""
    n = np.asarray(looks, dtype=int)
    at = n - 1
    sizes = n.astype(float)
    r = None if clean is None else np.asarray(clean, dtype=float) - float(np.mean(clean))
    out = np.empty((paths, n.size))
    for start in range(0, paths, chunk):
        m = min(chunk, paths - start)
        x = rng.standard_normal((m, n[-1])) if r is None else r[rng.integers(0, r.size, (m, n[-1]))]
        x += jump * (rng.random((m, n[-1])) < rate) - rate * jump
        total, squares = np.cumsum(x, axis=1)[:, at], np.cumsum(x * x, axis=1)[:, at]
        mean = total / sizes
        out[start:start + m] = mean / np.sqrt((squares - sizes * mean**2) / (sizes - 1) / sizes)
    return out


def crossing_rate(t: np.ndarray, critical: Sequence[float]) -> float:
    """Share of paths (paths, looks) whose t crosses the look's critical value at some look."""
    return float((t > np.asarray(critical)).any(axis=1).mean())


def operating_characteristics(observed: Sequence[float], design: Design, gap: float, paths: int,
                              rng: np.random.Generator, resample: bool = False) -> dict:
    """Given the per-seed deltas already observed (the first look's seeds, points), the outcomes if the true gap were
    `gap`: new deltas normal around gap with the observed SD, or (resample) the observed residuals drawn around gap.
    Each path stops at its first decision. Returns each outcome's share and the mean number of new seeds run."""
    x = np.asarray(observed, dtype=float)
    if x.size != design.looks[0]:
        raise ValueError(f"the observed deltas must be the first look's {design.looks[0]} seeds, got {x.size}")
    new = design.looks[-1] - x.size
    if resample:
        draws = (x - x.mean())[rng.integers(0, x.size, (paths, new))] + gap
    else:
        draws = rng.standard_normal((paths, new)) * x.std(ddof=1) + gap
    all_seeds = np.concatenate([np.broadcast_to(x, (paths, x.size)), draws], axis=1)
    n = np.asarray(design.looks[1:], dtype=float)
    at = np.asarray(design.looks[1:]) - 1  # the column of each look's last seed
    total, squares = np.cumsum(all_seeds, axis=1)[:, at], np.cumsum(all_seeds**2, axis=1)[:, at]
    mean = total / n
    se = np.sqrt((squares - n * mean**2) / (n - 1) / n)
    above = (mean - design.reproduced_above) / se > np.asarray(design.reproduced_critical[1:])
    below = (mean - design.refuted_below) / se < -np.asarray(design.refuted_critical[1:])
    decided = above | below
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), len(n))  # index of the stopping look (len: none)
    rows = np.arange(paths)
    stop = np.minimum(first, len(n) - 1)
    hit_above, hit_below = above[rows, stop] & (first < len(n)), below[rows, stop] & (first < len(n))
    seeds_run = np.asarray(design.looks[1:])[stop] - x.size
    return {"gap": gap, "resampled": resample, "paths": paths,
            REPRODUCED: float((hit_above & ~hit_below).mean()), REFUTED: float((hit_below & ~hit_above).mean()),
            SMALLER: float((hit_above & hit_below).mean()), UNDECIDED: float((first == len(n)).mean()),
            "new_seeds": float(seeds_run.mean())}


def first_critical(seeds: int, confidence: float = 0.95) -> float:
    """The critical value of a fixed-size test's two-sided t interval over `seeds` per-seed deltas."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(0.5 + confidence / 2, seeds - 1))


GAPS = (0.0, 0.65, 0.9, 1.3, 2.0)  # true gaps (points) at which the design's outcomes are simulated
SENSITIVITY_RATES = (0.01, 0.02, 0.05)  # collapse rates and sizes (clean SDs) at which the adopted boundaries' error
SENSITIVITY_JUMPS = (4.0, 6.0, 8.0)  # is published beside the model the plan fixed
OUTLIER_RATES = (0.01, 0.02, 0.03, 0.05)  # the first stage's largest outlier added back at these rates


def mc_error(share: float, paths: int) -> float:
    """The Monte Carlo standard error of a share estimated over `paths` independent paths."""
    return math.sqrt(share * (1 - share) / paths)


def _finite(c: float) -> float | None:
    return None if math.isinf(c) else c


def design(spec: dict, observed: Sequence[float], minutes_per_seed: float | None = None) -> dict:
    """Everything the plan's boundaries rest on, from the plan's `sequential` keys (looks, error_per_direction,
    thresholds, the error model fixed a priori, simulation seed and sizes) and the continued test's per-seed deltas
    (points), reproducible from the seed.

    For each direction ("reproduced": the upper tail of t when the true gap is the lower threshold; "refuted": the
    lower tail when it is the upper threshold) the boundary under two models fixed before the new seeds, neither
    fitted to the first stage's outliers: normal deltas, and normal deltas of which a share `contamination.rate`
    carries an arm's collapse of `contamination.jump_sds` SDs in the direction that direction fears (down for
    "reproduced", up for "refuted"). The plan adopts the larger, rounded up to 2 decimals, so the boundary does not
    move with the first stage's draws. Beside it, never adopted: the error of the adopted boundaries with the observed
    deltas' residuals resampled (the first stage's own shape, outliers included), with the first stage's largest
    outlier added back at OUTLIER_RATES, and under the contamination model at each of SENSITIVITY_RATES x
    SENSITIVITY_JUMPS (a model under which the first look alone spends the whole error is marked: no boundary after
    it can hold the error there). Every share with its Monte Carlo standard error. Then the outcomes given the
    observed deltas at each of GAPS, with the GPU-minutes that many new seeds take."""
    looks = [len(observed), *spec["looks"]]
    sim, error, model = spec["simulation"], spec["error_per_direction"], spec["contamination"]
    c0 = first_critical(looks[0])
    rng = np.random.default_rng(sim["seed"])
    signs = {"reproduced": 1.0, "refuted": -1.0}  # "refuted" crosses when t < -c: the upper tail of -t
    normal = null_paths(looks, sim["paths"], rng)
    # jumps up: the upper tail of -t is "refuted"'s; by symmetry the upper tail of t under jumps down is the same
    contaminated = contaminated_paths(looks, sim["contaminated_paths"], rng, model["rate"], model["jump_sds"])
    fitted = {"normal": {d: normal * sign for d, sign in signs.items()},
              "contaminated": {d: -contaminated for d in signs}}
    found = {d: {k: _finite(boundary(fitted[k][d], c0, error)) for k in fitted} for d in signs}
    needed = {d: max(math.inf if v is None else v for v in found[d].values()) for d in signs}
    # a direction whose first look alone spent the error under a model: never decided after it (math.inf, null)
    chosen = {d: math.inf if math.isinf(v) else math.ceil(v * 100) / 100 for d, v in needed.items()}
    later = len(spec["looks"])
    crit = {dr: (c0, *[chosen[dr]] * later) for dr in signs}
    d = Design(tuple(looks), crit["reproduced"], crit["refuted"], spec["reproduced_above_points"],
               spec["refuted_below_points"])

    def rates(t: dict) -> dict:
        n = next(iter(t.values())).shape[0]
        return {dr: {"error": crossing_rate(t[dr], crit[dr]), "first_look": float((t[dr][:, 0] > c0).mean()),
                     "mc_error": mc_error(crossing_rate(t[dr], crit[dr]), n)} for dr in t}

    errors = {k: rates(t) for k, t in fitted.items()}
    x = np.asarray(observed, dtype=float)
    resampled = resampled_paths(x, looks, sim["resampled_paths"], rng)
    errors["resampled"] = rates({dr: resampled * sign for dr, sign in signs.items()})
    resampled_needed = {dr: _finite(boundary(resampled * sign, c0, error)) for dr, sign in signs.items()}
    far = int(np.argmax(np.abs(x - np.median(x))))
    rest = np.delete(x, far)
    jump = float(x[far] - rest.mean())  # the largest outlier's distance from the other deltas' mean
    outlier = []
    for rate in OUTLIER_RATES:
        t = contaminated_paths(looks, sim["sensitivity_paths"], rng, rate, jump, clean=rest)
        dr = "refuted" if jump > 0 else "reproduced"
        t = -t if jump > 0 else t
        row = rates({dr: t})[dr]
        outlier.append({"rate": rate, "direction": dr, **row,
                        "spent_by_first_look": row["first_look"] >= error})
    sensitivity = []
    for rate in SENSITIVITY_RATES:
        for size in SENSITIVITY_JUMPS:
            t = -contaminated_paths(looks, sim["sensitivity_paths"], rng, rate, size)
            row = rates({"refuted": t})["refuted"]  # jumps up against "refuted"; "reproduced" mirrors it
            sensitivity.append({"rate": rate, "jump_sds": size, **row,
                                "spent_by_first_look": row["first_look"] >= error})
    outcomes = [operating_characteristics(observed, d, g, sim["outcome_paths"], rng, resample=r)
                for g in GAPS for r in (False, True)]
    for row in outcomes:
        row["gpu_minutes"] = None if minutes_per_seed is None else row["new_seeds"] * minutes_per_seed
    first_look = look(observed, c0, c0, spec["reproduced_above_points"], spec["refuted_below_points"])
    mad_sd = float(1.4826 * np.median(np.abs(x - np.median(x))))
    return {"looks": looks, "first_critical": c0, "error_per_direction": error, "contamination": model,
            "boundaries": found, "critical": {k: _finite(v) for k, v in chosen.items()}, "errors": errors,
            "resampled_boundaries": resampled_needed, "simulation": sim,
            "observed": {"seeds": len(observed), "mean": first_look["mean"], "sd": float(np.std(x, ddof=1)),
                         "robust_sd": mad_sd, "decision": first_look["decision"],
                         "largest_outlier": {"delta": float(x[far]), "rest_mean": float(rest.mean()),
                                             "rest_sd": float(np.std(rest, ddof=1))}},
            "outlier_sensitivity": outlier, "contamination_sensitivity": sensitivity,
            "minutes_per_seed": minutes_per_seed, "outcomes": outcomes}
