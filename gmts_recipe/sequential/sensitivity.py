"""A sequential plan's sensitivity comparison: the continued test's seeds (old) against the new ones, printed at the
plan's looks beside the verdict and never part of it.

Why: the new seeds run on other cards (H100 beside the old seeds' H200), other days, other commits and maybe other
library versions. If any of these moved GMTS - ETS, the pooled mean the looks read would mix two effects. The plan
cannot test that away (a seed's card is not randomised, and the comparison has little power: `welch_power`), so it
fixes in advance what is compared, what raises an alarm, and what follows an alarm:

- the groups: the old seeds, then the new ones by card (the recorded name as its short label, cards.CARDS), by
  library versions (torch, transformers, trl, CUDA) and by each other key of the plan's `sensitivity` (commit, day);
- each new group against the old seeds: the difference of the mean per-seed delta by Welch's t (95% interval), the
  Hodges-Lehmann shift (median of all pairwise differences, Moses' 95% interval), the ratio of the SDs; each arm's
  mean pass@1, collapse counts (an arm's verdict "collapsed" against the base, or its own failure scored as the base:
  failures) and failed attempts (failure.json) by arm;
- the alarms, from the card groups only (the follow-up is card-stratified): ALARMS, fixed before any new
  seed's cell was committed, and written in docs/results.md's plan;
- after an alarm: the card-stratified estimates (mean delta and Student's t interval per card, old and new seeds
  together) printed beside the verdict, which then says it rests on card homogeneity.

Pure functions over per-seed rows (points); looks.sensitivity_at_look builds them from each cell's facts
(looks.cell_facts), report prints the result.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np

from gmts_recipe.sequential.cards import CARDS
from gmts_recipe.stats import seed_t_interval
from gmts_recipe.tables import seed_span

CONFIDENCE = 0.95  # Welch's and Hodges-Lehmann's intervals
SD_RATIO_ALARM = 1.5  # a new card group's SD over the old seeds' SD above this
COLLAPSE_ALARM, COLLAPSE_WINDOW = 3, 40  # this many collapses of one arm within this many consecutive new seeds
PASS_GAP_ALARM = 2.0  # points: one arm's mean pass@1 this far apart between two groups on different cards
CARD_SHIFT = 0.65  # points: the card shift whose power is printed (half the paper's smallest claimed gain, 1.3)
POWER_ALPHA = 0.05  # Welch's test, two-sided, at which that power is computed
ALARMS = (f"a new card group's Welch {CONFIDENCE:.0%} interval against the old seeds excludes 0",
          f"its SD over the old seeds' above {SD_RATIO_ALARM:g}",
          f"{COLLAPSE_ALARM} or more collapses of one arm within {COLLAPSE_WINDOW} consecutive new seeds",
          f"one arm's mean pass@1 more than {PASS_GAP_ALARM:g} points apart between two cards")
HOMOGENEITY = ("The verdict rests on card homogeneity (old and new seeds pooled as one population); the "
               "card-stratified estimates are printed beside it.")


def welch(new: Sequence[float], old: Sequence[float], confidence: float = CONFIDENCE) -> dict | None:
    """mean(new) - mean(old) with Welch's t interval (unequal variances, Welch-Satterthwaite degrees of freedom);
    None with fewer than 2 values on a side or no spread on either (no t statistic)."""
    from scipy import stats as scipy_stats

    x, y = np.asarray(new, dtype=float), np.asarray(old, dtype=float)
    if x.size < 2 or y.size < 2 or (x.std() == 0 and y.std() == 0):
        return None
    ci = scipy_stats.ttest_ind(x, y, equal_var=False).confidence_interval(confidence)
    return {"difference": float(x.mean() - y.mean()), "low": float(ci.low), "high": float(ci.high)}


def hodges_lehmann(new: Sequence[float], old: Sequence[float], confidence: float = CONFIDENCE) -> dict | None:
    """The Hodges-Lehmann shift of new against old: the median of all len(new) x len(old) differences new_i - old_j,
    robust to a collapsed seed where a mean is not. Its interval (Moses): the k-th smallest and k-th largest of those
    differences, k = floor(mn/2 - z sqrt(mn(m+n+1)/12)), the normal approximation to the Mann-Whitney statistic's
    quantile (floor: never narrower than it); None where k < 1 (too few seeds for any interval at that confidence).
    None without a value on either side."""
    from scipy import stats as scipy_stats

    x, y = np.asarray(new, dtype=float), np.asarray(old, dtype=float)
    if x.size == 0 or y.size == 0:
        return None
    d = np.sort(np.subtract.outer(x, y).ravel())
    m, n = x.size, y.size
    z = float(scipy_stats.norm.ppf(1 - (1 - confidence) / 2))
    k = math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12))
    low, high = (float(d[k - 1]), float(d[m * n - k])) if k >= 1 else (None, None)
    return {"shift": float(np.median(d)), "low": low, "high": high}


def sd_ratio(new: Sequence[float], old: Sequence[float]) -> float | None:
    """The new group's SD over the old one's (sample SDs); None with fewer than 2 values on a side or no old spread."""
    if len(new) < 2 or len(old) < 2 or statistics.stdev(old) == 0:
        return None
    return statistics.stdev(new) / statistics.stdev(old)


def welch_power(shift: float, sd: float, n_new: int, n_old: int, alpha: float = POWER_ALPHA) -> float:
    """The chance that Welch's two-sided test at `alpha` finds a true shift `shift` between n_new and n_old seeds of
    common SD `sd`: the noncentral t with the Welch-Satterthwaite degrees of freedom."""
    from scipy import stats as scipy_stats

    if n_new < 2 or n_old < 2 or sd <= 0:
        raise ValueError(f"power needs 2 seeds a side and a positive SD (got {n_new}, {n_old}, SD {sd})")
    a, b = sd ** 2 / n_new, sd ** 2 / n_old
    df = (a + b) ** 2 / (a ** 2 / (n_new - 1) + b ** 2 / (n_old - 1))
    ncp = shift / math.sqrt(a + b)
    crit = float(scipy_stats.t.ppf(1 - alpha / 2, df))
    return float(scipy_stats.nct.sf(crit, df, ncp) + scipy_stats.nct.cdf(-crit, df, ncp))


def card_label(name: str) -> str:
    """A recorded card name as its short label (H100, H200; cards.CARDS), any other as recorded."""
    return CARDS.get(name, name)


def versions_label(v: dict | None) -> str:
    """torch, transformers, trl and CUDA as a run recorded them (run_setup.versions); "unrecorded" for a key a file
    lacks (runs before CUDA was recorded), "none" for CUDA on a build without it."""
    v = v or {}
    cuda = "unrecorded" if "cuda" not in v else (v["cuda"] or "none")
    return ", ".join([*(f"{k} {v.get(k) or 'unrecorded'}" for k in ("torch", "transformers", "trl")), f"CUDA {cuda}"])


def _group(by: str, label: str, rows: list[dict], old: list[dict] | None, arms: Sequence[str]) -> dict:
    """One group's numbers: its seeds, mean and SD of the delta, each arm's mean pass@1 and collapses; against `old`
    (None: this is the old group) Welch, Hodges-Lehmann and the SD ratio."""
    x = [r["delta"] for r in rows]
    out = {"by": by, "group": label, "seeds": len(x), "mean": statistics.fmean(x),
           "sd": statistics.stdev(x) if len(x) > 1 else None,
           "pass@1": {a: statistics.fmean(r["pass@1"][a] for r in rows) for a in arms},
           "collapses": {a: sum(a in r["collapsed"] for r in rows) for a in arms}}
    if old is not None:
        y = [r["delta"] for r in old]
        out.update(welch=welch(x, y), hodges_lehmann=hodges_lehmann(x, y), sd_ratio=sd_ratio(x, y))
    return out


def compare(old: list[dict], new: list[dict], arms: Sequence[str], failures: list[dict], by: Sequence[str] = (),
            look: int | None = None) -> dict:
    """The comparison at a look. `old`, `new`: one row per seed in the planned order, each {"seed", "delta" (points),
    "card" (short label), "versions" (versions_label), one entry per `by` key (commit, day), "pass@1" {arm: points},
    "collapsed" [arms]}; `failures`: one row per failed attempt of a new seed, {"seed", "arm", "card"}; `by`: the
    plan's sensitivity keys (card and versions always lead). Returns the old group, the new groups (by card, versions,
    then each other key), the failed attempts by card and arm, the alarms raised (ALARMS), the card-stratified
    estimates where one is, and the power to find a CARD_SHIFT card shift with every new seed on one card against the
    old ones (the best case)."""
    if len(old) < 2 or not new:
        raise ValueError(f"a sensitivity comparison needs 2 old seeds and a new one (got {len(old)}, {len(new)})")
    cards = sorted({r["card"] for r in old})
    head = _group("old", f"seeds {seed_span([r['seed'] for r in old])}", old, None, arms)
    head["card"] = cards[0] if len(cards) == 1 else None  # a card to hold the new ones' pass@1 against
    head["versions"] = "; ".join(sorted({r["versions"] for r in old}))
    groups = []
    for key in ["card", "versions", *(k for k in by if k != "card")]:
        for value in sorted({r[key] for r in new}):
            groups.append(_group(key, value, [r for r in new if r[key] == value], old, arms))
    alarms = _alarms(head, [g for g in groups if g["by"] == "card"], new, arms)
    stratified = []
    if alarms:
        for card in sorted({r["card"] for r in [*old, *new]}):
            x = [r["delta"] for r in [*old, *new] if r["card"] == card]
            low, high = seed_t_interval(x)
            stratified.append({"card": card, "seeds": len(x), "mean": statistics.fmean(x), "low": low, "high": high})
    sd = statistics.stdev(r["delta"] for r in old)
    power = {"shift": CARD_SHIFT, "sd": sd, "new_seeds": len(new), "old_seeds": len(old), "alpha": POWER_ALPHA,
             "power": welch_power(CARD_SHIFT, sd, len(new), len(old)) if len(new) > 1 and sd > 0 else None}
    failed = [{"card": card, **{a: sum(f["arm"] == a for f in failures if f["card"] == card) for a in arms}}
              for card in sorted({f["card"] for f in failures})]  # a card may hold failed attempts and no seed
    return {"look": look, "seeds": len(old) + len(new), "new_seeds": len(new), "old": head, "groups": groups,
            "failures": failed, "alarms": alarms, "stratified": stratified, "power": power}


def _alarms(old: dict, cards: list[dict], new: list[dict], arms: Sequence[str]) -> list[dict]:
    """The ALARMS raised, each {"alarm", "what"}: the card groups' intervals and SD ratios against the old seeds,
    collapses of one arm within COLLAPSE_WINDOW consecutive new seeds (any card), and each arm's pass@1 between groups
    on different cards (the old seeds under their card where they share one)."""
    out = []
    for g in cards:
        w = g["welch"]
        if w is not None and (w["low"] > 0 or w["high"] < 0):
            out.append({"alarm": "interval", "what": f"new {g['group']} - old: {w['difference']:+.2f} points, Welch "
                                                     f"[{w['low']:+.2f}, {w['high']:+.2f}] excludes 0"})
        if g["sd_ratio"] is not None and g["sd_ratio"] > SD_RATIO_ALARM:
            out.append({"alarm": "sd ratio", "what": f"new {g['group']}'s SD is {g['sd_ratio']:.2f} x the old "
                                                     f"seeds' (above {SD_RATIO_ALARM:g})"})
    width = min(COLLAPSE_WINDOW, len(new))
    for a in arms:
        hits = [a in r["collapsed"] for r in new]
        most, start = max((sum(hits[i:i + width]), -i) for i in range(len(new) - width + 1))
        if most >= COLLAPSE_ALARM:
            window = list(zip(new, hits))[-start:-start + width]
            out.append({"alarm": "collapses", "what": f"{a} collapsed in {most} of {width} consecutive new seeds "
                                                      f"(seeds {', '.join(str(r['seed']) for r, h in window if h)})"})
    placed = ([("old", old["card"], old)] if old["card"] is not None else []) + [("new", g["group"], g) for g in cards]
    for a in arms:
        pairs = [(f"{w} {c}", g["pass@1"][a], f"{v} {d}", h["pass@1"][a])
                 for i, (w, c, g) in enumerate(placed) for v, d, h in placed[i + 1:] if c != d]  # other cards only
        x, px, y, py = max(pairs, key=lambda t: abs(t[1] - t[3]), default=("", 0.0, "", 0.0))
        if abs(px - py) > PASS_GAP_ALARM:
            out.append({"alarm": "pass@1", "what": f"{a} pass@1 {px:.1f}% on {x} against {py:.1f}% on {y}: "
                                                   f"{abs(px - py):.1f} points apart"})
    return out


def due(state: dict) -> int | None:
    """The look (seeds in all) at which the comparison is printed, from sequential.state: the last planned look
    reached beyond the continued test's, while the seeds counted are exactly that look's or the test has stopped
    there; None between looks and before the first new one (the comparison is read at looks only, as the verdict)."""
    looks = state["looks"]
    if len(looks) < 2:
        return None
    n = looks[-1]["seeds"]
    return n if state["seeds_done"] == n or state["decision"] is not None else None
