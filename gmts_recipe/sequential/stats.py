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


class NoSpread(ValueError):
    """Deltas that are all equal: no standard error, so no look can be read (a tiny model scoring 0 everywhere)."""


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
        raise NoSpread(f"the {x.size} per-seed deltas have no spread (each {mean:+.2f} points): a t statistic is "
                       f"undefined")
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


def stagewise_estimate(per_seed: Sequence[float], design: Design, confidence: float = 0.95, paths: int = 200_000,
                       seed: int = 0) -> dict | None:
    """After the test ends (a decision at a look, or undecided at the last), the median-unbiased estimate of the true
    mean delta and its confidence interval under the stage-wise ordering (Jennison & Turnbull, ch. 8): outcomes are
    ordered first by the look they stop at (an earlier stop above the boundaries ranks above every later outcome, an
    earlier stop below under every later one), then by the mean at that look. The estimate is the true mean under
    which an outcome at least as high as the observed one has chance 1/2; the interval's ends, chance (1 -
    confidence) / 2 and (1 + confidence) / 2. Unlike the repeated confidence interval printed at every look (mean -/+
    c se, valid whatever the stopping), it accounts for the test having stopped where it did, without the naive
    mean's bias after an early stop. The SD is taken as known (the SD of the deltas at the stop) and the chances are
    read off `paths` simulated paths with common random numbers (seeded: reproducible). A stop above both boundaries
    at once ("a gain smaller than claimed", possible only past the planned looks here) counts by its side of the
    thresholds' midpoint. None while the test goes on."""
    now = state(per_seed, design)
    if now["decision"] is None:
        return None
    stop = now["looks"][-1]["look"]
    x = np.asarray(per_seed, dtype=float)[:design.looks[stop]]
    observed, sd = float(x.mean()), float(x.std(ddof=1))
    n = np.asarray(design.looks, dtype=float)
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.standard_normal((paths, n.size)) * np.sqrt(np.diff(np.concatenate([[0.0], n]))), axis=1)
    se = sd / np.sqrt(n)
    upper = design.reproduced_above + np.asarray(design.reproduced_critical) * se  # "reproduced" above, in points
    lower = design.refuted_below - np.asarray(design.refuted_critical) * se  # "refuted" below
    middle = (design.reproduced_above + design.refuted_below) / 2

    def at_least(mu: float) -> float:
        mean = mu + sd * walk / n  # (paths, looks)
        crossed = (mean > upper) | (mean < lower)
        first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), n.size)
        f = np.minimum(first, n.size - 1)
        at_stop = mean[np.arange(paths), f]
        above, below = at_stop > upper[f], at_stop < lower[f]
        up = np.where(above & below, at_stop > middle, above)  # the side it stopped on
        early = first < stop
        return float(((early & up) | (~early & (mean[:, stop] >= observed))).mean())

    def solve(target: float) -> float:
        half = 12 * sd / math.sqrt(n[stop])
        lo, hi = observed - half, observed + half
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if at_least(mid) < target else (lo, mid)
        return (lo + hi) / 2

    tail = (1 - confidence) / 2
    return {"look": stop, "seeds": int(x.size), "mean": observed, "median_unbiased": solve(0.5),
            "low": solve(tail), "high": solve(1 - tail), "confidence": confidence, "paths": paths}


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


def boundary(t: np.ndarray, first_critical: float, error: float, first_exact: float | None = None) -> float:
    """The constant c for every look after the first such that, over these null paths (paths, looks), the share that
    crosses first_critical at the first look or c at any later one is `error`: the smallest such c, read off the
    paths that do not cross at the first look. Where the first look alone already spends the whole error (a world
    whose deltas make the fixed-size test's own quantile too loose), nothing is left for later looks: math.inf, the
    direction can no longer be decided after the first look (never an exception: a simulation over many such worlds
    goes on).

    `first_exact`: the first look's crossing share where it is known exactly (`first_look_share`), used as a control
    variate: the error splits into P(first) + P(not first) x P(later | not first), and only the second factor is read
    off the paths (those that do not cross first), so the first look's Monte Carlo noise no longer moves c."""
    return boundary_and_se(t, first_critical, error, first_exact)[0]


def boundary_and_se(t: np.ndarray, first_critical: float, error: float,
                    first_exact: float | None = None) -> tuple[float, float | None]:
    """`boundary`'s c and its Monte Carlo standard error (None where c is math.inf), from one sort of the paths: c is
    a sample quantile of the later looks' maximum among the paths that do not cross first, so its error is the
    share's binomial error over the density there (Siddiqui's estimate from the order statistics around c). Without
    `first_exact` the first look's own binomial noise is in the share's error too."""
    first = t[:, 0] > first_critical
    rest = np.sort(t[~first, 1:].max(axis=1))[::-1]
    if first_exact is None:
        spare = error * first.size - int(first.sum())  # paths still allowed to cross later
    else:
        spare = (error - first_exact) / (1 - first_exact) * rest.size
    if spare <= 0:
        return math.inf, None
    j = int(spare)  # the (j+1)-th largest: exactly j paths lie above it
    paths, share = (first.size, error) if first_exact is None else (rest.size, j / rest.size)
    return float(rest[j]), quantile_se(rest, j, paths, share)


def quantile_se(descending: np.ndarray, j: int, paths: int, share: float) -> float:
    """The standard error of the value descending[j] as an estimate of the level at which a share `share` of `paths`
    paths lies above: sqrt(share (1 - share) / paths) over the density of the values there per path, the density
    from the spacing of the order statistics k either side (k ~ the square root of j, at least 10)."""
    k = max(10, int(math.sqrt(j)))
    lo, hi = max(0, j - k), min(descending.size - 1, j + k)
    spacing = float(descending[lo] - descending[hi])
    if spacing <= 0:
        return 0.0
    density = (hi - lo) / paths / spacing
    return math.sqrt(share * (1 - share) / paths) / density


def first_look_share(n: int, critical: float, rate: float = 0.0, jump: float = 0.0) -> float:
    """The exact chance that a look over n per-seed deltas, standard normal and each moved by `jump` (in their SDs;
    negative: down) with probability `rate`, the mixture centred to mean 0, has t = mean / se > critical.

    Given k moved seeds the mean times sqrt(n) is normal (mean sqrt(n) (k/n - rate) jump, variance 1) and independent
    of the sum of squares about the mean, a noncentral chi-square with n - 1 degrees of freedom and noncentrality
    jump^2 k (n - k) / n: the share is a binomial mixture over k of one integral over that chi-square each (rate 0:
    Student's t tail). The control variate `boundary` reads the first look's share from."""
    from scipy import integrate, stats as scipy_stats

    df, total = n - 1, 0.0
    for k in range(n + 1):
        weight = float(scipy_stats.binom.pmf(k, n, rate)) if rate > 0 else float(k == 0)
        if weight < 1e-15:
            continue
        shift = math.sqrt(n) * (k / n - rate) * jump
        lam = jump * jump * k * (n - k) / n
        w = scipy_stats.chi2(df) if lam == 0 else scipy_stats.ncx2(df, lam)
        value, _ = integrate.quad(lambda v: scipy_stats.norm.sf(critical * math.sqrt(v / df) - shift) * w.pdf(v),
                                  w.ppf(1e-13), w.isf(1e-13), limit=200)
        total += weight * value
    return total


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


CONDITIONAL_MODELS = ("normal", "resampled", "collapse_down", "collapse_up")  # new deltas given the first stage


def conditional_noise(observed: Sequence[float], model: str, size: tuple[int, int], rng: np.random.Generator,
                      rate: float = 0.0, jump_sds: float = 0.0) -> np.ndarray:
    """New per-seed deltas about a true gap of 0 (points), given the first stage observed: `normal` with its SD;
    `resampled` from its residuals; `collapse_down` / `collapse_up` normal with its clean SD (its SD without the
    largest outlier, the one seed the contamination model says is a collapse) of which a share `rate` carries a jump
    of `jump_sds` clean SDs down (the first arm of the comparison collapsing: against "reproduced") or up (the second:
    against "refuted"), the mixture centred."""
    x = np.asarray(observed, dtype=float)
    if model == "normal":
        return rng.standard_normal(size) * x.std(ddof=1)
    if model == "resampled":
        return (x - x.mean())[rng.integers(0, x.size, size)]
    if model not in CONDITIONAL_MODELS:
        raise ValueError(f"conditional model {model!r}: one of {', '.join(CONDITIONAL_MODELS)}")
    clean = float(np.std(np.delete(x, int(np.argmax(np.abs(x - np.median(x))))), ddof=1))
    sign = -1.0 if model == "collapse_down" else 1.0
    return clean * (rng.standard_normal(size) + sign * jump_sds * ((rng.random(size) < rate) - rate))


def conditional_paths(observed: Sequence[float], design: Design, model: str, paths: int, rng: np.random.Generator,
                      rate: float = 0.0, jump_sds: float = 0.0, chunk: int = 20_000) -> dict[str, np.ndarray]:
    """Given the first stage observed (design.looks[0] deltas, points), each path's largest statistic over the later
    looks for each direction, with new deltas `conditional_noise` about that direction's threshold: "reproduced"
    (mean - reproduced_above) / se with the true gap at reproduced_above, "refuted" (refuted_below - mean) / se with it
    at refuted_below (one draw of noise serves both). A path crosses a direction's later boundary c where its value
    exceeds c; the other direction's stops are not counted on (non-binding), as in the whole sequence's error."""
    x = np.asarray(observed, dtype=float)
    if x.size != design.looks[0]:
        raise ValueError(f"the observed deltas must be the first look's {design.looks[0]} seeds, got {x.size}")
    n = np.asarray(design.looks[1:], dtype=float)
    at = np.asarray(design.looks[1:]) - x.size - 1  # each later look's last new seed
    out = {REPRODUCED: np.empty(paths), REFUTED: np.empty(paths)}
    for start in range(0, paths, chunk):
        m = min(chunk, paths - start)
        noise = conditional_noise(x, model, (m, design.looks[-1] - x.size), rng, rate, jump_sds)
        csum, csq = np.cumsum(noise, axis=1)[:, at], np.cumsum(noise * noise, axis=1)[:, at]
        for direction, gap, sign in ((REPRODUCED, design.reproduced_above, 1.0), (REFUTED, design.refuted_below, -1.0)):
            # the new deltas are gap + noise: sums and sums of squares of all seeds up to each later look
            total = x.sum() + csum + gap * (n - x.size)
            squares = (x * x).sum() + csq + 2 * gap * csum + gap * gap * (n - x.size)
            mean = total / n
            se = np.sqrt((squares - n * mean**2) / (n - 1) / n)
            out[direction][start:start + m] = (sign * (mean - gap) / se).max(axis=1)
    return out


def conditional_rates(largest: np.ndarray, critical: float, error: float) -> dict:
    """One model's and direction's conditional numbers from `conditional_paths`: the chance of a false decision at the
    plan's `critical` with its Monte Carlo error, and the boundary that would make it exactly `error` with its Monte
    Carlo error."""
    share = float((largest > critical).mean()) if not math.isinf(critical) else 0.0
    descending = np.sort(largest)[::-1]
    j = int(error * largest.size)
    return {"error": share, "mc_error": mc_error(share, largest.size), "boundary": float(descending[j]),
            "boundary_se": quantile_se(descending, j, largest.size, error)}


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


MARGIN_SE = 2.0  # a critical value lies at least this many Monte Carlo SEs above each boundary it must hold


def _ceil2(v: float) -> float:
    return math.inf if math.isinf(v) else math.ceil(v * 100) / 100


def required_critical(boundaries: dict, conditional: dict) -> float:
    """The least critical value one direction may adopt: the largest boundary it must hold, over the whole sequence
    (each model's {"boundary", "se"}) and given the first stage (each conditional model's "boundary" and
    "boundary_se"), plus MARGIN_SE of that boundary's Monte Carlo error, so that a boundary that drew high or low in
    the simulation cannot carry the error past the plan's by chance; math.inf where a model leaves nothing to spend."""
    values = [math.inf if b["boundary"] is None else b["boundary"] + MARGIN_SE * b["se"] for b in boundaries.values()]
    values += [c["boundary"] + MARGIN_SE * c["boundary_se"] for c in conditional.values()]
    return max(values)


def design(spec: dict, observed: Sequence[float], minutes_per_seed: float | None = None) -> dict:
    """Everything the plan's boundaries rest on, from the plan's `sequential` keys (looks, error_per_direction,
    thresholds, the contamination model, simulation seed and sizes, and its critical values once fixed) and the
    continued test's per-seed deltas (points), reproducible from the seed.

    For each direction ("reproduced": the upper tail of t when the true gap is the lower threshold; "refuted": the
    lower tail when it is the upper threshold):
    - over the whole sequence, the look already made included, the boundary under normal deltas and under the plan's
      contamination model (a share `contamination.rate` of seeds carries an arm's collapse of
      `contamination.jump_sds` SDs in the direction that direction fears: down for "reproduced", up for "refuted").
      That model was chosen after the first stage was seen (its rate twice the one collapse among those seeds, seed
      227's, its size a collapse to the base), so it is the plan's, not a model fixed before any data. The first
      look's share under each model is known exactly (`first_look_share`) and serves as a control variate;
    - given the first stage observed, the boundary that keeps the conditional chance of a false decision at the
      error under each of CONDITIONAL_MODELS (normal, resampled, collapses down, collapses up), its own stream of
      draws (seed [seed, 1]);
    - each with its Monte Carlo standard error; the critical value must exceed every one of them by MARGIN_SE of its
      error (`required_critical`). A plan with no critical value yet adopts that, rounded up to 2 decimals; a plan
      with one is checked against it (`meets`), never moved by it.
    Beside it, never adopted: the error of the critical values with the observed deltas' residuals resampled (the
    first stage's own shape, outliers included), with the first stage's largest outlier added back at OUTLIER_RATES
    in its own direction and mirrored (seed [seed, 2]), and under the contamination model at each of
    SENSITIVITY_RATES x SENSITIVITY_JUMPS in both directions (a model under which the first look alone spends the
    whole error is marked: no boundary after it can hold the error there). Every share with its Monte Carlo
    standard error. Then the outcomes given the observed deltas at each of GAPS, with the GPU-minutes that many new
    seeds take."""
    looks = [len(observed), *spec["looks"]]
    sim, error, model = spec["simulation"], spec["error_per_direction"], spec["contamination"]
    c0 = first_critical(looks[0])
    rng = np.random.default_rng(sim["seed"])
    fitted, exact, whole = _whole_sequence(looks, c0, sim, model, error, rng)
    x = np.asarray(observed, dtype=float)
    plain = Design(tuple(looks), (c0, *[1.0] * len(spec["looks"])), (c0, *[1.0] * len(spec["looks"])),
                   spec["reproduced_above_points"], spec["refuted_below_points"])  # its looks and thresholds only
    crng = np.random.default_rng([sim["seed"], 1])
    largest = {m: conditional_paths(x, plain, m, sim["conditional_paths"], crng, model["rate"], model["jump_sds"])
               for m in CONDITIONAL_MODELS}
    required = {d: required_critical(whole[d], {m: conditional_rates(largest[m][d], math.inf, error)
                                                for m in CONDITIONAL_MODELS}) for d in SIGNS}
    planned = spec.get("critical")
    chosen = {d: (_ceil2(required[d]) if planned is None else float(planned[d])) for d in SIGNS}
    crit = {dr: (c0, *[chosen[dr]] * len(spec["looks"])) for dr in SIGNS}
    d = Design(tuple(looks), crit["reproduced"], crit["refuted"], spec["reproduced_above_points"],
               spec["refuted_below_points"])
    conditional = {dr: {m: conditional_rates(largest[m][dr], chosen[dr], error) for m in CONDITIONAL_MODELS}
                   for dr in SIGNS}
    errors = {k: _rates(t, crit) for k, t in fitted.items()}
    resampled = resampled_paths(x, looks, sim["resampled_paths"], rng)
    errors["resampled"] = _rates({dr: resampled * sign for dr, sign in SIGNS.items()}, crit)
    resampled_needed = {dr: _finite(boundary(resampled * sign, c0, error)) for dr, sign in SIGNS.items()}
    outlier, sensitivity, largest_outlier = _beside(x, looks, crit, error, sim, rng)
    outcomes = [operating_characteristics(observed, d, g, sim["outcome_paths"], rng, resample=r)
                for g in GAPS for r in (False, True)]
    for o in outcomes:
        o["gpu_minutes"] = None if minutes_per_seed is None else o["new_seeds"] * minutes_per_seed
    first_look = look(observed, c0, c0, spec["reproduced_above_points"], spec["refuted_below_points"])
    mad_sd = float(1.4826 * np.median(np.abs(x - np.median(x))))
    return {"looks": looks, "first_critical": c0, "error_per_direction": error, "contamination": model,
            "first_look_exact": exact, "boundaries": {dr: {k: b["boundary"] for k, b in v.items()}
                                                     for dr, v in whole.items()},
            "boundary_se": {dr: {k: b["se"] for k, b in v.items()} for dr, v in whole.items()},
            "conditional": conditional, "margin_se": MARGIN_SE,
            "required": {k: _finite(v) for k, v in required.items()},
            "critical": {k: _finite(v) for k, v in chosen.items()},
            "meets": {k: chosen[k] >= required[k] for k in SIGNS}, "errors": errors,
            "resampled_boundaries": resampled_needed, "simulation": sim,
            "observed": {"seeds": len(observed), "mean": first_look["mean"], "sd": float(np.std(x, ddof=1)),
                         "robust_sd": mad_sd, "decision": first_look["decision"],
                         "largest_outlier": largest_outlier},
            "outlier_sensitivity": outlier, "contamination_sensitivity": sensitivity,
            "minutes_per_seed": minutes_per_seed, "outcomes": outcomes}


SIGNS = {REPRODUCED: 1.0, REFUTED: -1.0}  # "refuted" crosses when t < -c: the upper tail of -t


def _whole_sequence(looks: list[int], c0: float, sim: dict, model: dict, error: float,
                    rng: np.random.Generator) -> tuple[dict, dict, dict]:
    """The null paths of the whole sequence under normal deltas and the plan's contamination model (each direction's
    upper tail), the first look's exact share under each, and each model's boundary and its Monte Carlo error."""
    normal = null_paths(looks, sim["paths"], rng)
    # jumps up: the upper tail of -t is "refuted"'s; by symmetry the upper tail of t under jumps down is the same
    contaminated = contaminated_paths(looks, sim["contaminated_paths"], rng, model["rate"], model["jump_sds"])
    fitted = {"normal": {d: normal * sign for d, sign in SIGNS.items()},
              "contaminated": {d: -contaminated for d in SIGNS}}
    exact = {"normal": first_look_share(looks[0], c0),
             "contaminated": first_look_share(looks[0], c0, model["rate"], -model["jump_sds"])}
    whole: dict = {d: {} for d in SIGNS}
    for d in SIGNS:
        for k in fitted:
            c, se = boundary_and_se(fitted[k][d], c0, error, exact[k])
            whole[d][k] = {"boundary": _finite(c), "se": se}
    return fitted, exact, whole


def _rates(t: dict, crit: dict) -> dict:
    """Each direction's (paths, looks) statistics against its critical values: the error over the whole sequence,
    the first look's share and the error's Monte Carlo standard error."""
    n = next(iter(t.values())).shape[0]
    return {dr: {"error": crossing_rate(t[dr], crit[dr]), "first_look": float((t[dr][:, 0] > crit[dr][0]).mean()),
                 "mc_error": mc_error(crossing_rate(t[dr], crit[dr]), n)} for dr in t}


def _beside(x: np.ndarray, looks: list[int], crit: dict, error: float, sim: dict,
            rng: np.random.Generator) -> tuple[list[dict], list[dict], dict]:
    """What the design publishes beside the plan, never adopted: the first stage's largest outlier added back to the
    other deltas at OUTLIER_RATES, in its own direction (`rng`) and mirrored (its own stream, seed [seed, 2]), and the
    contamination grid of SENSITIVITY_RATES x SENSITIVITY_JUMPS in both directions; each row the critical values'
    error over the whole sequence. Returns the outlier rows, the grid's rows and the outlier's description."""
    far = int(np.argmax(np.abs(x - np.median(x))))
    rest = np.delete(x, far)
    jump = float(x[far] - rest.mean())  # the largest outlier's distance from the other deltas' mean

    def row(size: float, t: np.ndarray, **keys) -> dict:
        dr, t = (REFUTED, -t) if size > 0 else (REPRODUCED, t)  # up: against "refuted", read in -t's upper tail
        r = _rates({dr: t}, crit)[dr]
        return {**keys, "direction": dr, **r, "spent_by_first_look": r["first_look"] >= error}

    n = sim["sensitivity_paths"]
    outlier = [row(jump, contaminated_paths(looks, n, rng, rate, jump, clean=rest), rate=rate)
               for rate in OUTLIER_RATES]
    grid = [row(size, contaminated_paths(looks, n, rng, rate, size), rate=rate, jump_sds=size)
            for rate in SENSITIVITY_RATES for size in SENSITIVITY_JUMPS]
    mirror = np.random.default_rng([sim["seed"], 2])  # the other direction, the same sizes
    outlier += [row(-jump, contaminated_paths(looks, n, mirror, rate, -jump, clean=rest), rate=rate)
                for rate in OUTLIER_RATES]
    grid += [row(-size, contaminated_paths(looks, n, mirror, rate, -size), rate=rate, jump_sds=size)
             for rate in SENSITIVITY_RATES for size in SENSITIVITY_JUMPS]
    return outlier, grid, {"delta": float(x[far]), "rest_mean": float(rest.mean()),
                           "rest_sd": float(np.std(rest, ddof=1))}
