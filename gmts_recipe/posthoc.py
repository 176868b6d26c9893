"""Analyses beyond an analysis plan: pooling the planned tests, leaving out collapsed runs, robust centres, a rank
test, multiplicity corrections, what a mechanism correlation is confounded with, how far each run's training reward
fell, and why a test could not decide (the variance of a per-seed delta taken apart, the seeds a decision needs). Pure
functions over per-seed deltas and per-task scores, then the text the documentation shows.

Why these are kept apart from the plan: each was chosen after the planned tests had run, so none of them may decide
anything; they say how large the effect plausibly is and how to size the next test. Every number comes from the
committed sweep files through these functions (update_readme.py prints them into the pages).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gmts_recipe.markdown import README_WIDTH, fill, item as _item
from gmts_recipe.stats import seed_t_interval, seeds_for_power, signed
from gmts_recipe.sweep.summary import CLAIMED, EARLY, LATE, POWER, training_reward_fell

COLLAPSED = "collapsed"  # an arm's verdict against the base: held-out pass@1 fell below the untrained model
LARGE_FALL = 0.05  # a fall in mean training reward (of 0 to 1) worth naming: smaller ones are a step's noise
HUBER_C = 1.345  # Huber's tuning constant: 95% efficiency at normal data (statsmodels' HuberT default)
TRIM = 0.1  # the share cut from each end for the trimmed mean


# ---------------------------------------------------------------------------- pure statistics
def fixed_effect_pool(per_seed_by_test: Sequence[Sequence[float]], confidence: float = 0.95) -> dict:
    """The tests' mean deltas pooled by inverse variance (each test's mean weighted by 1 / its squared standard
    error, a normal interval), with Cochran's Q and its chi-square p for heterogeneity between the tests.

    Why not one t interval over all seeds: the tests differ in size and spread; weighting each by its precision is
    the standard way to combine independent estimates, and Q says whether they disagree more than chance allows
    (a small p would make a pooled number meaningless)."""
    from scipy import stats as scipy_stats

    tests = [np.asarray(x, dtype=float) for x in per_seed_by_test]
    if len(tests) < 2 or any(t.size < 2 for t in tests):
        raise ValueError("pooling needs two or more tests of at least 2 seeds each")
    means = np.array([t.mean() for t in tests])
    variances = np.array([t.var(ddof=1) / t.size for t in tests])
    if np.any(variances == 0):
        raise ValueError("a test with no spread across its seeds cannot be weighted by its precision")
    w = 1 / variances
    delta = float((w * means).sum() / w.sum())
    se = float(w.sum() ** -0.5)
    z = float(scipy_stats.norm.ppf(0.5 + confidence / 2))
    q = float((w * (means - delta) ** 2).sum())
    return {"delta": delta, "low": delta - z * se, "high": delta + z * se, "se": se, "q": q,
            "p_heterogeneity": float(scipy_stats.chi2.sf(q, len(tests) - 1)), "n_seeds": int(sum(t.size for t in tests)),
            "n_tests": len(tests)}


def t_summary(per_seed: Sequence[float], confidence: float = 0.95) -> dict:
    """Mean of per-seed deltas with Student's t interval: the plan's own statistic, for a post-hoc subset."""
    x = np.asarray(per_seed, dtype=float)
    low, high = seed_t_interval(x, confidence)
    return {"delta": float(x.mean()) if x.size else None, "low": low, "high": high, "n_seeds": int(x.size)}


def without_seeds(seeds: Sequence[int], per_seed: Sequence[float], drop: Sequence[int]) -> dict:
    """t_summary over the seeds not in `drop`, and how far leaving them out moves the mean (`shift`: all minus the
    rest), so a reader sees how much a few runs carry."""
    if len(seeds) != len(per_seed):
        raise ValueError(f"{len(seeds)} seeds but {len(per_seed)} deltas")
    keep = [d for s, d in zip(seeds, per_seed) if s not in set(drop)]
    out = t_summary(keep)
    out["dropped"] = sorted(set(drop) & set(seeds))
    out["shift"] = float(np.mean(per_seed) - np.mean(keep)) if keep else None
    return out


def signed_rank_p(per_seed: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p for a median delta of 0 (scipy.stats.wilcoxon): robust to one runaway seed,
    where the t test is not."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.wilcoxon(np.asarray(per_seed, dtype=float)).pvalue)


def trimmed_mean(per_seed: Sequence[float], proportion: float = TRIM) -> float:
    """The mean after cutting `proportion` of the deltas from each end (scipy.stats.trim_mean)."""
    from scipy import stats as scipy_stats

    return float(scipy_stats.trim_mean(np.asarray(per_seed, dtype=float), proportion))


def huber_location(per_seed: Sequence[float], c: float = HUBER_C) -> float:
    """Huber's M-estimate of location: the mu where sum psi((x - mu) / s) = 0, psi(r) = r clipped to [-c, c] (the
    derivative of Huber's loss, which mu minimises), s the normal-consistent median absolute deviation
    (scipy.stats.median_abs_deviation), solved by scipy.optimize.brentq: the sum falls with mu, from >= 0 at the
    smallest delta to <= 0 at the largest. A delta within c s of mu counts as in the mean, one further out only by
    its sign.

    Why not statsmodels: it would add statsmodels, patsy and pandas to every install for one post-hoc number that
    scipy gives. Its RLM with HuberT differs only in the scale, the MAD of the residuals about the fit instead of
    about the median, which on the committed deltas moves the estimate by less than the rounding shown."""
    from scipy import optimize
    from scipy import stats as scipy_stats

    x = np.asarray(per_seed, dtype=float)
    if x.size == 0:
        raise ValueError("a location needs one or more deltas")
    s = float(scipy_stats.median_abs_deviation(x, scale="normal"))
    if s == 0:
        return float(np.median(x))
    psi_sum = lambda mu: float(np.clip((x - mu) / s, -c, c).sum())  # noqa: E731
    low, high = float(x.min()), float(x.max())
    return float(optimize.brentq(psi_sum, low, high, xtol=1e-14 * max(1.0, abs(low), abs(high))))


def hodges_lehmann(per_seed: Sequence[float]) -> float:
    """The median of the Walsh averages (x_i + x_j) / 2 over every i <= j: the centre a signed-rank test estimates."""
    x = np.asarray(per_seed, dtype=float)
    i, j = np.triu_indices(x.size)
    return float(np.median((x[i] + x[j]) / 2))


def robust_centres(per_seed: Sequence[float]) -> dict:
    """The mean beside three centres a runaway seed moves less: the trimmed mean, Huber's and Hodges-Lehmann's."""
    x = np.asarray(per_seed, dtype=float)
    return {"mean": float(x.mean()), "trimmed_mean": trimmed_mean(x), "huber": huber_location(x),
            "hodges_lehmann": hodges_lehmann(x), "n_seeds": int(x.size)}


def partial_correlation(x: Sequence[float], y: Sequence[float], z: Sequence[float]) -> dict:
    """Pearson's r of x and y with z held fixed (the correlation of their least-squares residuals on z), and its
    two-sided p from t with n - 3 degrees of freedom (one more spent on z than for a plain r). Why: a variable that
    is itself an outcome of how a run went (z) can carry a correlation that x alone does not."""
    from scipy import stats as scipy_stats

    a, b, c = (np.asarray(v, dtype=float) for v in (x, y, z))
    if not a.shape == b.shape == c.shape or a.ndim != 1:
        raise ValueError(f"a partial correlation needs three equal-length lists, got {a.shape}, {b.shape}, {c.shape}")
    n = int(a.size)
    if n < 4:
        raise ValueError(f"a partial correlation with its p needs 4 or more seeds, got {n}")
    design = np.column_stack([np.ones(n), c])
    residual = lambda v: v - design @ np.linalg.lstsq(design, v, rcond=None)[0]  # noqa: E731
    r = float(np.corrcoef(residual(a), residual(b))[0, 1])
    t = r * np.sqrt((n - 3) / max(1 - r * r, 1e-300))
    return {"r": r, "p": float(2 * scipy_stats.t.sf(abs(t), n - 3)), "n": n}


def share_confound(share: Sequence[float], zero_spread: Sequence[float], own_pass: Sequence[float],
                   gap: Sequence[float]) -> dict:
    """What a seed's share of kept tokens in zero-advantage answers (of one arm) goes with, besides the gap: the
    arm's own share of groups whose rewards are all equal (zero_spread, which sets how many such tokens there are)
    and its own pass@1; then its link to the gap with zero_spread held fixed."""
    from scipy import stats as scipy_stats

    pearson = lambda u, v: scipy_stats.pearsonr(np.asarray(u, dtype=float), np.asarray(v, dtype=float))  # noqa: E731
    gap_r = pearson(share, gap)
    return {"n": len(share), "gap": {"r": float(gap_r.statistic), "p": float(gap_r.pvalue)},
            "zero_spread": float(pearson(share, zero_spread).statistic),
            "own_pass": float(pearson(share, own_pass).statistic),
            "gap_given_zero_spread": partial_correlation(share, gap, zero_spread)}


def reward_fall(train_log: Sequence[dict]) -> dict | None:
    """The mean training reward of the first and the last logged steps (sweep.summary's EARLY and LATE windows, the
    ones training_reward_fell compares) and how far it fell: `drop` = first - last, positive where it fell. None
    where the log holds no reward."""
    rewards = [row["reward"] for row in train_log if isinstance(row.get("reward"), (int, float))]
    if not rewards:
        return None
    early, late = float(np.mean(rewards[EARLY])), float(np.mean(rewards[LATE]))
    return {"early": early, "late": late, "drop": early - late}


def fall_story(train_log: Sequence[dict], most: float = 0.5) -> dict:
    """How a run's reward fell, from its log: the first step from which most (`most`) of every step's completions ran
    to the length cap (TRL's `completions/clipped_ratio`) to the end, with the reward and that share over those
    steps and at the step before; where no such step exists, the reward over the last steps and the largest share
    cut at the cap."""
    rows = [r for r in train_log if isinstance(r.get("reward"), (int, float))]
    cut = [r.get("completions/clipped_ratio") for r in rows]
    onset = next((i for i in range(len(rows)) if all(isinstance(c, (int, float)) and c >= most for c in cut[i:])),
                 None)
    onset = None if onset == 0 else onset  # from its first step on: no step before to set it against
    tail = rows[onset:] if onset is not None else rows[LATE]
    out = {"onset_step": None, "first_step": tail[0]["step"], "last_step": tail[-1]["step"],
           "reward_low": min(r["reward"] for r in tail), "reward_high": max(r["reward"] for r in tail),
           "cut_max": max((c for c in cut if isinstance(c, (int, float))), default=None)}
    if onset is not None:
        before = rows[onset - 1]
        out.update(onset_step=rows[onset]["step"], cut_low=min(cut[onset:]), before_step=before["step"],
                   before_reward=before["reward"], before_cut=cut[onset - 1])
    return out


def pearson_p(r: float, n: int) -> float:
    """Two-sided p of Pearson's r over n pairs under no correlation (t = r sqrt((n - 2) / (1 - r^2)), n - 2 df): the
    same p scipy.stats.pearsonr gives, from the r a mechanism.json records."""
    from scipy import stats as scipy_stats

    if n < 3:
        raise ValueError(f"a p for r needs 3 or more pairs, got {n}")
    if abs(r) >= 1:
        return 0.0
    t = r * np.sqrt((n - 2) / (1 - r * r))
    return float(2 * scipy_stats.t.sf(abs(t), n - 2))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: with m tests the smallest p is multiplied by m, the
    next by m - 1, ..., each kept at least as large as the one before and at most 1. Several correlations tested at
    once will show some p below 0.05 by chance; the adjusted p says which survive."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def evaluation_noise_share(task_deltas_by_seed: Sequence[Sequence[float]]) -> float:
    """The share of the per-seed deltas' variance that evaluation explains: each seed's delta is a mean over tasks,
    so its sampling variance is the paired task-level variance over the number of tasks; averaged over seeds and
    divided by the variance of the deltas across seeds. Small: the spread comes from training, and more evaluation
    samples would not narrow the interval."""
    seeds = [np.asarray(x, dtype=float) for x in task_deltas_by_seed]
    if len(seeds) < 2:
        raise ValueError("the spread across seeds needs 2 or more seeds")
    evaluation = float(np.mean([x.var(ddof=1) / x.size for x in seeds]))
    across = float(np.var([x.mean() for x in seeds], ddof=1))
    return evaluation / across


def arms_correlation(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson's r of the two arms' pass@1 across seeds: what pairing them by seed removes (the variance of a - b is
    var a + var b - 2 cov; near 0, pairing helps little)."""
    return float(np.corrcoef(np.asarray(a, dtype=float), np.asarray(b, dtype=float))[0, 1])


def seeds_to_decide(per_seed: Sequence[float], gap: float, max_seeds: int = 1000) -> int | None:
    """Seeds at which a plan with thresholds `gap` apart can no longer leave the claim undecided, but for chance:
    where a t test's power is 50% at half the gap (stats.seeds_for_power at power 0.5), the interval's half-width is
    about half the gap, so the interval rarely holds both thresholds; from there on a fresh test of that size ends
    undecided only when its seeds happen to spread wider than these did and its mean lands between the thresholds."""
    return seeds_for_power(per_seed, gap / 2, power=0.5, max_seeds=max_seeds)


# ---------------------------------------------------------------------------- from the sweep files
def primary_rows(summary: dict) -> tuple[str, list[int], list[float]]:
    """(comparison, seeds, per-seed deltas) of a sweep's primary test, or of its first shared-learning-rate row of a
    comparison the paper claims (a pilot without a plan)."""
    p = summary.get("primary")
    if p and p.get("per_seed"):
        return p["comparison"], list(p["seeds_done"]), list(p["per_seed"])
    for row in summary.get("pooled", []):
        if row["comparison"] in CLAIMED and row.get("learning_rate") is not None and len(row["seeds"]) >= 2:
            return row["comparison"], list(row["seeds"]), list(row["per_seed"])
    raise ValueError(f"sweep '{summary.get('name', '?')}' has no primary test and no row of "
                     f"{', '.join(CLAIMED)} over 2 or more seeds")


def _setting(summary: dict) -> tuple[str, float]:
    p = summary.get("primary")
    if p:
        return p["variant"], p["learning_rate"]
    comparison, seeds, _ = primary_rows(summary)
    row = next(r for r in summary["pooled"] if r["comparison"] == comparison and r["seeds"] == seeds)
    return row["variant"], row["learning_rate"]


def collapsed_seeds(summary: dict) -> list[int]:
    """The seeds of the primary comparison where either arm collapsed below the untrained base (the verdict the sweep
    marks '*'): a rule fixed by the recipe, not a choice of seeds after the fact."""
    comparison, seeds, _ = primary_rows(summary)
    variant, lr = _setting(summary)
    pair = comparison.split(" - ")
    out = []
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) == (variant, lr) and cell["seed"] in seeds:
            if any(cell["arms"].get(arm, {}).get("verdict") == COLLAPSED for arm in pair):
                out.append(cell["seed"])
    return sorted(out)


def seed_records(summary: dict, root: Path) -> dict:
    """From the cells' results files at the primary setting, per seed of the primary comparison: the paired
    per-task differences, each arm's pass@1, the arms whose training reward fell, and each such fall (`falls`: its
    size, the arm's pass@1 and verdict, the length cap, and for a fall above LARGE_FALL how it went, fall_story)."""
    from gmts_recipe.records import task_scores
    from gmts_recipe.verify.file import read_results

    comparison, seeds, _ = primary_rows(summary)
    variant, lr = _setting(summary)
    a, b = comparison.split(" - ")
    out = {"comparison": comparison, "seeds": [], "task_deltas": [], "a": [], "b": [], "reward_fell": {}, "falls": []}
    for cell in sorted(summary["cells"], key=lambda c: c["seed"]):
        if (cell["variant"], cell["learning_rate"]) != (variant, lr) or cell["seed"] not in seeds:
            continue
        results = read_results(Path(root) / cell["path"])  # of any format, with its per-task records
        x = task_scores(results["arms"][a]["eval"], f"{cell['cell']} {a}")
        y = task_scores(results["arms"][b]["eval"], f"{cell['cell']} {b}")
        keys = sorted(x)
        out["seeds"].append(cell["seed"])
        out["task_deltas"].append([x[k] - y[k] for k in keys])
        out["a"].append(float(np.mean([x[k] for k in keys])))
        out["b"].append(float(np.mean([y[k] for k in keys])))
        for arm, entry in results["arms"].items():
            log = entry.get("train_log", [])
            if training_reward_fell(log):
                out["reward_fell"].setdefault(arm, []).append(cell["seed"])
                fall = reward_fall(log)
                out["falls"].append({"seed": cell["seed"], "arm": arm, **fall, "pass@1": cell["arms"][arm]["pass@1"],
                                     "verdict": cell["arms"][arm].get("verdict"),
                                     "cap": results["config"].get("max_completion_length"),
                                     "story": fall_story(log) if fall["drop"] > LARGE_FALL else None})
    return out


# ---------------------------------------------------------------------------- text
def _label(comparison: str) -> str:
    """gmts - ets -> GMTS - ETS (the arms' short names, gmts_recipe/arms.py)."""
    from gmts_recipe.arms import short_name

    return " - ".join(short_name(arm) for arm in comparison.split(" - "))


def _pts(x: float, digits: int = 1) -> str:
    return f"{100 * x:+.{digits}f}"


def _ci(d: dict, digits: int = 1) -> str:
    return f"{100 * d['delta']:+.{digits}f} [{100 * d['low']:+.{digits}f}, {100 * d['high']:+.{digits}f}]"


def _p(p: float) -> str:
    return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def power_text(summary: dict, root: Path) -> str:
    """Why a sweep's comparison could or could not decide, and what would: the variance of a per-seed delta taken
    apart (evaluation against training), the arms' correlation across seeds, the seeds a test needs at the paper's
    gains and at this estimate, and the levers not yet tried. check.py --power prints it."""
    comparison, seeds, per_seed = primary_rows(summary)
    records = seed_records(summary, root)
    n, d = len(per_seed), np.asarray(per_seed, dtype=float)
    sd = float(d.std(ddof=1))
    share = evaluation_noise_share(records["task_deltas"])
    r = arms_correlation(records["a"], records["b"])
    estimate = round(float(d.mean()), 3)  # the effect as printed (+0.9): the number a reader plans with
    p = summary.get("primary")
    low_claim, high_claim = CLAIMED.get(comparison, (None, None))

    def need(effect: float) -> str:
        k = seeds_for_power(d, effect, power=POWER)
        return ">1000" if k is None else str(k)

    lines = [f"{_label(comparison)} over {n} seeds of '{summary['name']}': {_pts(d.mean())} points on average, per-seed SD "
             f"{100 * sd:.1f} points."]
    lines.append(f"Evaluation noise (each seed's paired task-level variance over its {len(records['task_deltas'][0])} "
                 f"tasks) is {100 * share:.0f}% of the per-seed variance"
                 + (": more evaluation samples would not narrow the interval; the training seed is the noise."
                    if share < 0.25 else ": more evaluation samples per task would narrow the interval."))
    a, b = np.asarray(records["a"]), np.asarray(records["b"])
    paired = float(np.var(a - b, ddof=1) / (np.var(a, ddof=1) + np.var(b, ddof=1)))
    lines.append(f"The arms' pass@1 correlate {r:+.2f} across seeds: the paired delta's variance is {100 * paired:.0f}% "
                 f"of what unpaired arms would give, so pairing by seed "
                 + ("adds to it." if paired >= 1 else "removes little of it." if paired > 0.7 else
                    "removes much of it."))
    sized = [f"{need(e)} at {_pts(e)}" for e in (low_claim, high_claim) if e is not None]
    lines.append(f"Seeds for {POWER:.0%} power (two-sided t, 5%) if the spread is what these seeds show: "
                 + (f"{', '.join(sized)} (the paper's claimed gains), " if sized else "")
                 + f"{need(estimate)} at {_pts(estimate)} (this estimate).")
    gap, between = (None, "")
    if p and p.get("refuted_below_points") is not None:
        gap = (p["refuted_below_points"] - p["reproduced_above_points"]) / 100
        between = f"the plan's thresholds {signed(p['reproduced_above_points'])} and {signed(p['refuted_below_points'])}"
    elif low_claim is not None:
        gap, between = low_claim, f"0 and the paper's smallest gain {_pts(low_claim)}"
    if gap:
        k = seeds_to_decide(d, gap)
        lines.append(f"A fresh test that rarely ends undecided (its interval narrower than the {100 * gap:.1f} points "
                     f"between {between}, so it cannot hold both) takes about {'>1000' if k is None else k} seeds.")
    lines.append("Levers not yet tried: more rollouts or prompts per training step (less noise in each update, so "
                 "less spread across seeds), and a robust endpoint fixed in advance (the median delta, or a rank "
                 "test, which one runaway seed does not move).")
    return "\n".join(lines) + "\n"


def fall_line(records: dict, arms: Sequence[str]) -> str:
    """Per arm, the runs whose training reward fell (the last logged steps' mean below the first steps'), each with
    how far it fell, then the falls above LARGE_FALL: a fall of a few thousandths is a step's noise, not a collapse."""
    parts, large = [], []
    n = len(records["seeds"])
    for arm in arms:
        falls = [f for f in records["falls"] if f["arm"] == arm]
        sizes = ", ".join(f"{f['drop']:.3f} (seed {f['seed']})" for f in falls)
        parts.append(f"in {len(falls)} of {n} {_label(arm)} runs" + (f", by {sizes}" if falls else ""))
        big = [f["seed"] for f in falls if f["drop"] > LARGE_FALL]
        large.append(f"{_label(arm)} {len(big)}" + (f" (seed{'s' * (len(big) > 1)} {', '.join(map(str, big))})"
                                                     if big else ""))
    return (f"training reward fell (the mean of the last {-LATE.start} logged steps' rewards, of 0 to 1, below that "
            f"of the first {EARLY.stop}) " + "; ".join(parts) + f". By more than {LARGE_FALL:g}: "
            + ", ".join(large) + ".")


def fall_stories(records: dict) -> list[str]:
    """Each fall above LARGE_FALL as its log tells it (fall_story), one sentence per run."""
    out = []
    for f in records["falls"]:
        st = f["story"]
        if st is None:
            continue
        cap = f"the {f['cap']}-token cap" if f.get("cap") else "the length cap"
        head = (f"Seed {f['seed']}, {_label(f['arm'])} (held-out pass@1 {100 * f['pass@1']:.1f}%"
                + (", collapsed below the base" if f["verdict"] == COLLAPSED else "") + f"): training reward "
                f"{f['early']:.2f} over the first {EARLY.stop} steps, {f['late']:.2f} over the last {-LATE.start}")
        if st["onset_step"] is not None:
            tail = (f"from step {st['onset_step']} on, at least {100 * st['cut_low']:.1f}% of its completions ran to "
                    f"{cap} at every step (step {st['before_step']}: {100 * st['before_cut']:.0f}%), and its reward "
                    f"lay at {st['reward_low']:.2f}-{st['reward_high']:.2f} over steps {st['onset_step']}-"
                    f"{st['last_step']} (step {st['before_step']}: {st['before_reward']:.2f}).")
        else:
            cut = "-" if st["cut_max"] is None else f"{100 * st['cut_max']:.0f}%"
            tail = (f"at most {cut} of a step's completions ran to {cap}; its reward lay at "
                    f"{st['reward_low']:.2f}-{st['reward_high']:.2f} over steps {st['first_step']}-{st['last_step']}.")
        out.append(f"{head}; {tail}")
    return out


def falls_block(summary: dict, root: Path) -> str:
    """The documentation's block on training reward that fell at a test's primary setting: every fall with its size,
    then each fall above LARGE_FALL as its log tells it."""
    records = seed_records(summary, root)
    line = fall_line(records, records["comparison"].split(" - "))
    lines = [fill(line[0].upper() + line[1:])]
    stories = fall_stories(records)
    return "\n".join(lines + ([""] + [_item(s) for s in stories] if stories else [])) + "\n"


def _same_setting(summary: dict) -> dict[int, dict]:
    """Seed -> its cell at the primary setting."""
    variant, lr = _setting(summary)
    return {c["seed"]: c for c in summary["cells"] if (c["variant"], c["learning_rate"]) == (variant, lr)}


def confound(mechanism: dict, summary: dict) -> dict:
    """share_confound for the mechanism's question variable (its first: ETS's share of kept tokens in zero-advantage
    answers), over the seeds that logged it and the arm's share of zero-spread groups, with the arm's pass@1 read
    from the sweep's cells; `label` and `arm` say which variable."""
    from gmts_recipe.mechanism import VARIABLES, ZERO_SPREAD

    arm, key = VARIABLES[0]
    cells = _same_setting(summary)
    rows = [r for r in mechanism["per_seed"] if r["arms"][arm][key] is not None
            and r["arms"][arm].get(ZERO_SPREAD) is not None]
    if len(rows) < 4:
        raise ValueError(f"{len(rows)} seeds of '{mechanism.get('grid', '?')}' log both {key} and {ZERO_SPREAD}: "
                         f"4 or more are needed (a mechanism.json without {ZERO_SPREAD}? run python -m "
                         f"gmts_recipe.plots mechanism on its sweep.json)")
    out = share_confound([r["arms"][arm][key] for r in rows], [r["arms"][arm][ZERO_SPREAD] for r in rows],
                         [cells[r["seed"]]["arms"][arm]["pass@1"] for r in rows], [r["delta_points"] for r in rows])
    label = next(a["label"] for a in mechanism["associations"] if (a["arm"], a["key"]) == (arm, key))
    return {**out, "arm": arm, "label": label}


def controls(summary: dict) -> list[dict]:
    """The planned comparisons that hold a control arm (selection.control_arms), as sweep.json's secondary entries
    hold them: their intervals, never a decision."""
    from gmts_recipe.arms import control_arms

    return [s for s in summary.get("secondary", []) if s["delta"] is not None
            and any(arm in control_arms() for arm in s["comparison"].split(" - "))]


def _control_text(entries: list[dict]) -> str | None:
    """The control's comparisons in one sentence, which reading they lean toward and that they decide neither."""
    by = {e["comparison"]: e for e in entries}
    step, weight = by.get("ets_nz - ets"), by.get("gmts - ets_nz")
    if step is None or weight is None:
        return None
    seeds = _span(step["seeds_done"])
    lean = ("not spending ETS's slots on tokens that move nothing (ETS's smaller effective step)"
            if step["delta"] > weight["delta"] else "the |advantage| weighting")
    holds = all(e["t_low"] <= 0 <= e["t_high"] for e in (step, weight))
    return (f"The control arm ETS-nz (planned, seeds {seeds}, intervals only): {_label(step['comparison'])} "
            f"{_ci({'delta': step['delta'], 'low': step['t_low'], 'high': step['t_high']})}, "
            f"{_label(weight['comparison'])} "
            f"{_ci({'delta': weight['delta'], 'low': weight['t_low'], 'high': weight['t_high']})} points: it leans "
            f"toward a gain from {lean}; " + ("both intervals hold 0, so it decides neither reading."
                                                if holds else "one interval excludes 0: still no planned decision."))


def _confound_text(c: dict, n_seeds: int) -> str:
    """The question variable's correlation with the gap, and what it is an outcome of."""
    g, part = c["gap"], c["gap_given_zero_spread"]
    reading = ("it is no evidence against the step-size reading, nor for it" if part["p"] >= 0.05 else
               "held fixed, the link remains")
    return (f"Across {c['n']} seeds, {c['label'].replace(': ', chr(39) + 's ', 1)} goes with a "
            f"{'smaller' if g['r'] < 0 else 'larger'} GMTS - ETS gap (r {g['r']:+.2f}, p {_p(g['p'])}), but it is "
            f"an outcome of that arm's own run: r {c['zero_spread']:+.2f} with its share of groups whose rewards are "
            f"all equal (TRL's frac_reward_zero_std), {c['own_pass']:+.2f} with its own pass@1. Holding the first "
            f"fixed (partial correlation, n - 3 df), its link to the gap is {part['r']:+.2f} (p {_p(part['p'])}): "
            f"{reading}.")


def _span(seeds: Sequence[int]) -> str:
    seeds = list(seeds)
    return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))


def posthoc(tests: list[tuple[str, dict]], pilot: tuple[str, dict] | None, mechanism: dict,
            roots: list[Path]) -> dict:
    """Every post-hoc number, from the planned tests' sweep summaries (first test first, the last one the largest:
    its collapses, robust centres, rank test, control and variance are the ones reported), a pilot's, and the last
    test's mechanism.json."""
    per_seed = [primary_rows(s)[2] for _, s in tests]
    out = {"pooled": fixed_effect_pool(per_seed), "all_seeds": t_summary([d for x in per_seed for d in x])}
    if pilot is not None:
        out["with_pilot"] = fixed_effect_pool([*per_seed, primary_rows(pilot[1])[2]])
    name, last = tests[-1]
    comparison, seeds, deltas = primary_rows(last)
    out["last"] = {"name": name, "comparison": comparison, **t_summary(deltas)}
    dropped = collapsed_seeds(last)
    out["without_collapsed"] = without_seeds(seeds, deltas, dropped)
    out["pooled_without_collapsed"] = fixed_effect_pool(
        [*per_seed[:-1], [d for s, d in zip(seeds, deltas) if s not in dropped]])
    out["robust"] = robust_centres(deltas)
    out["signed_rank_p"] = signed_rank_p(deltas)
    rows = [r for r in mechanism["associations"] if r["pearson"] is not None]
    ps = [pearson_p(r["pearson"], r["n"]) for r in rows]
    out["mechanism"] = sorted(({"label": r["label"], "pearson": r["pearson"], "n": r["n"], "p": p, "holm": h}
                               for r, p, h in zip(rows, ps, holm(ps))), key=lambda x: x["p"])
    out["confound"] = confound(mechanism, last)
    out["controls"] = controls(last)
    out["records"] = seed_records(last, roots[-1])
    return out


def _pooled_items(r: dict, tests: list[tuple[str, dict]], pilot: tuple[str, dict] | None) -> list[str]:
    """The pooled estimates: both tests, without the collapsed seeds, with the pilot, and what pooling mixes."""
    pooled, last, drop = r["pooled"], r["last"], r["without_collapsed"]
    names = " and ".join(name.lower() for name, _ in tests)
    items = [f"Both tests pooled ({names}, {pooled['n_seeds']} seeds; each test's mean weighted by its precision, "
             f"normal 95%): {_label(last['comparison'])} {_ci(pooled, 2)} points; heterogeneity between the tests: "
             f"Cochran's Q {pooled['q']:.2f}, p {_p(pooled['p_heterogeneity'])}; one t interval over all "
             f"{pooled['n_seeds']} seeds, each weighted alike: {_ci(r['all_seeds'], 2)}."]
    fell = ", ".join(f"seed {s}" for s in drop["dropped"]) or "no seed"
    firsts = [(name, s["primary"]) for name, s in tests[:-1] if s.get("primary")]
    variants = [(name, s["primary"]["variant"]) for name, s in tests if s.get("primary")]
    items.append(f"The same pooling without {fell} of the {last['name'].lower()} test (where an arm collapsed below "
                 f"the base; the other test keeps all its seeds): {_ci(r['pooled_without_collapsed'], 2)} points over "
                 f"{r['pooled_without_collapsed']['n_seeds']} seeds. A pooled interval is no decision: it mixes "
                 + (f"variants ({', '.join(f'{v} in the {n.lower()} test' for n, v in variants)}) and "
                    if len({v for _, v in variants}) > 1 else "")
                 + "; ".join(f"a {name.lower()} test whose plan was fixed {p['fixed_on']}" for name, p in firsts)
                 + ".")
    if pilot is not None:
        wp = r["with_pilot"]
        items.append(f"With the pilot's seeds too ({pilot[0]}, {wp['n_seeds']} seeds in all): {_ci(wp, 2)} points "
                     f"(Q p {_p(wp['p_heterogeneity'])}).")
    return items


def _last_test_items(r: dict) -> list[str]:
    """The largest test alone: without its collapsed seeds, robust centres, the rank test."""
    last, drop, rc = r["last"], r["without_collapsed"], r["robust"]
    fell = ", ".join(f"seed {s}" for s in drop["dropped"]) or "none"
    return [f"{last['name']} test without the seeds where an arm collapsed below the base (the sweep's '*'; {fell}): "
            f"{_ci(drop, 2)} points over {drop['n_seeds']} seeds, against {_ci(last, 2)} with them: "
            f"{'one seed moves' if len(drop['dropped']) == 1 else 'these seeds move'} the mean by "
            f"{100 * drop['shift']:.2f} points.",
            f"{last['name']} test, centres of its {rc['n_seeds']} deltas that a runaway seed moves less: "
            f"{100 * TRIM:.0f}% trimmed mean {_pts(rc['trimmed_mean'], 2)} (scipy.stats.trim_mean), Huber "
            f"{_pts(rc['huber'], 2)} (c {HUBER_C}, scale the normal-consistent MAD), Hodges-Lehmann "
            f"{_pts(rc['hodges_lehmann'], 2)} (the median of the Walsh averages), against the mean "
            f"{_pts(rc['mean'], 2)} points.",
            f"{last['name']} test, Wilcoxon signed-rank test of a median delta of 0 (robust to one runaway seed): "
            f"p {_p(r['signed_rank_p'])}."]


def _mechanism_items(r: dict) -> list[str]:
    """The mechanism correlations after Holm, the question variable's confound, the control."""
    last, top = r["last"], r["mechanism"][:2]
    items = [f"Mechanism correlations of the {last['name'].lower()} test, {len(r['mechanism'])} tested at once, "
             f"Holm-adjusted: " + "; ".join(f"{m['label']} r {m['pearson']:+.2f}, p {_p(m['p'])}, adjusted "
                                             f"{m['holm']:.3f}" for m in top)
             + (f"; the other {len(r['mechanism']) - len(top)} adjusted p are "
                f"{min(m['holm'] for m in r['mechanism'][2:]):.2f} or more." if len(r["mechanism"]) > 2 else ".")]
    items.append(_confound_text(r["confound"], r["last"]["n_seeds"]))
    control = _control_text(r["controls"])
    return items + ([control] if control else [])


def section(tests: list[tuple[str, dict]], pilot: tuple[str, dict] | None, mechanism: dict, roots: list[Path]) -> str:
    """The documentation's "Beyond the plan" block: each number labelled with what it is, none a decision."""
    r = posthoc(tests, pilot, mechanism, roots)
    rec = r["records"]
    items = [*_pooled_items(r, tests, pilot), *_last_test_items(r), *_mechanism_items(r),
             f"{r['last']['name']} test: " + fall_line(rec, rec["comparison"].split(" - "))]
    lines = ["Chosen after the planned tests ran: estimates to size the next test, never a decision.", ""]
    lines += [_item(x) for x in items]
    lines += ["", "Why the test could not decide, and what would (`python check.py --power SWEEP_JSON` prints this "
              "for any sweep):", ""]
    lines += [_item(line) for line in power_text(tests[-1][1], roots[-1]).splitlines()]
    return "\n".join(lines) + "\n"


def reading(summary: dict, mechanism: dict) -> str:
    """The README's lines on what the mechanism results allow: the control's comparisons and the question
    variable's confound, each as a wrapped list item."""
    items = [x for x in (_control_text(controls(summary)), _confound_text(confound(mechanism, summary),
                                                                            len(primary_rows(summary)[1]))) if x]
    return "\n".join(_item(x, README_WIDTH) for x in items) + "\n"
