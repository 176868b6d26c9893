"""Analyses beyond an analysis plan: pooling the planned tests, leaving out collapsed runs, a rank test, multiplicity
corrections, and why a test could not decide (the variance of a per-seed delta taken apart, the seeds a decision
needs). Pure functions over per-seed deltas and per-task scores, then the text the documentation shows.

Why these are kept apart from the plan: each was chosen after the planned tests had run, so none of them may decide
anything; they say how large the effect plausibly is and how to size the next test. Every number comes from the
committed sweep files through these functions (update_readme.py prints them into the pages).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from gmts_recipe.stats import seed_t_interval, seeds_for_power, signed
from gmts_recipe.sweep.summary import CLAIMED, POWER, training_reward_fell

COLLAPSED = "collapsed"  # an arm's verdict against the base: held-out pass@1 fell below the untrained model


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
    """Seeds after which a plan with thresholds `gap` apart decides either way about half the time: where a t
    test's power is 50% at half the gap, the interval's half-width is about half the gap, so the interval cannot hold
    both thresholds (stats.seeds_for_power at power 0.5)."""
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
    per-task differences, each arm's pass@1, and the arms whose training reward fell."""
    from gmts_recipe.records import read_results, task_scores

    comparison, seeds, _ = primary_rows(summary)
    variant, lr = _setting(summary)
    a, b = comparison.split(" - ")
    out = {"comparison": comparison, "seeds": [], "task_deltas": [], "a": [], "b": [], "reward_fell": {}}
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
            if training_reward_fell(entry.get("train_log", [])):
                out["reward_fell"].setdefault(arm, []).append(cell["seed"])
    return out


# ---------------------------------------------------------------------------- text
def _label(comparison: str) -> str:
    """gmts - ets -> GMTS - ETS (the arms' short names, gmts_recipe/arms.py)."""
    from gmts_recipe.arms import short_name

    return " - ".join(short_name(arm) for arm in comparison.split(" - "))


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


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
        lines.append(f"A decision either way (an interval narrower than the {100 * gap:.1f} points between {between}) "
                     f"takes about {'>1000' if k is None else k} seeds.")
    lines.append("Levers not yet tried: more rollouts or prompts per training step (less noise in each update, so "
                 "less spread across seeds), and a robust endpoint fixed in advance (the median delta, or a rank "
                 "test, which one runaway seed does not move).")
    return "\n".join(lines) + "\n"


def collapse_line(records: dict, arms: Sequence[str]) -> str:
    """Per arm, the runs whose training reward fell (the last 10 steps below the first 10), with their seeds."""
    parts = []
    for arm in arms:
        seeds = records["reward_fell"].get(arm, [])
        parts.append(f"{_label(arm)} {len(seeds)}" + (f" ({', '.join(map(str, seeds))})" if seeds else ""))
    return "training reward fell in " + ", ".join(parts) + f" of {len(records['seeds'])} runs per arm"


def posthoc(tests: list[tuple[str, dict]], pilot: tuple[str, dict] | None, mechanism: dict,
            roots: list[Path]) -> dict:
    """Every post-hoc number, from the planned tests' sweep summaries (first test first, the last one the largest:
    its collapses, rank test and variance are the ones reported), a pilot's, and the last test's mechanism.json."""
    per_seed = [primary_rows(s)[2] for _, s in tests]
    out = {"pooled": fixed_effect_pool(per_seed), "all_seeds": t_summary([d for x in per_seed for d in x])}
    if pilot is not None:
        out["with_pilot"] = fixed_effect_pool([*per_seed, primary_rows(pilot[1])[2]])
    name, last = tests[-1]
    comparison, seeds, deltas = primary_rows(last)
    out["last"] = {"name": name, "comparison": comparison, **t_summary(deltas)}
    out["without_collapsed"] = without_seeds(seeds, deltas, collapsed_seeds(last))
    out["signed_rank_p"] = signed_rank_p(deltas)
    rows = [r for r in mechanism["associations"] if r["pearson"] is not None]
    ps = [pearson_p(r["pearson"], r["n"]) for r in rows]
    out["mechanism"] = sorted(({"label": r["label"], "pearson": r["pearson"], "n": r["n"], "p": p, "holm": h}
                               for r, p, h in zip(rows, ps, holm(ps))), key=lambda x: x["p"])
    out["records"] = seed_records(last, roots[-1])
    return out


def section(tests: list[tuple[str, dict]], pilot: tuple[str, dict] | None, mechanism: dict, roots: list[Path]) -> str:
    """The documentation's "Beyond the plan" block: each number labelled with what it is, none a decision."""
    r = posthoc(tests, pilot, mechanism, roots)
    pooled, last, drop = r["pooled"], r["last"], r["without_collapsed"]
    names = " and ".join(name.lower() for name, _ in tests)
    lines = ["Chosen after the planned tests ran: estimates to size the next test, never a decision.", ""]
    lines.append(f"- Both tests pooled ({names}, {pooled['n_seeds']} seeds; each test's mean weighted by its "
                 f"precision, normal 95%): {_label(r['last']['comparison'])} {_ci(pooled, 2)} points; heterogeneity "
                 f"between the tests: Cochran's Q {pooled['q']:.2f}, p {_p(pooled['p_heterogeneity'])}; one t "
                 f"interval over all {pooled['n_seeds']} seeds, each weighted alike: {_ci(r['all_seeds'], 2)}.")
    if "with_pilot" in r:
        wp = r["with_pilot"]
        lines.append(f"- With the pilot's seeds too ({pilot[0]}, {wp['n_seeds']} seeds in all): {_ci(wp, 2)} points "
                     f"(Q p {_p(wp['p_heterogeneity'])}).")
    fell = ", ".join(f"seed {s}" for s in drop["dropped"]) or "none"
    lines.append(f"- {last['name']} test without the seeds where an arm collapsed below the base (the sweep's '*'; "
                 f"{fell}): {_ci(drop, 2)} points over {drop['n_seeds']} seeds, against {_ci(last, 2)} with them: "
                 f"{'one seed moves' if len(drop['dropped']) == 1 else 'these seeds move'} the mean by "
                 f"{100 * drop['shift']:.2f} points.")
    lines.append(f"- {last['name']} test, Wilcoxon signed-rank test of a median delta of 0 (robust to one runaway "
                 f"seed): p {_p(r['signed_rank_p'])}.")
    top = r["mechanism"][:2]
    lines.append(f"- Mechanism correlations of the {last['name'].lower()} test, {len(r['mechanism'])} tested at "
                 f"once, Holm-adjusted: " + "; ".join(f"{m['label']} r {m['pearson']:+.2f}, p {_p(m['p'])}, adjusted "
                                                     f"{m['holm']:.3f}" for m in top)
                 + f"; the other {len(r['mechanism']) - len(top)} adjusted p are "
                 f"{min(m['holm'] for m in r['mechanism'][2:]):.2f} or more." if len(r["mechanism"]) > 2 else "")
    rec = r["records"]
    lines.append(f"- Collapses named ({last['name'].lower()} test): {collapse_line(rec, rec['comparison'].split(' - '))}.")
    lines += ["", "Why the test could not decide, and what would (`python check.py --power SWEEP_JSON` prints this "
              "for any sweep):", ""]
    lines += [f"- {line}" for line in power_text(tests[-1][1], roots[-1]).splitlines()]
    return "\n".join(lines) + "\n"


def first_screen_line(tests: list[tuple[str, dict]], roots: list[Path]) -> str:
    """One labelled line for the README's first screen: the pooled estimate against the paper's claimed gains."""
    pooled = fixed_effect_pool([primary_rows(s)[2] for _, s in tests])
    comparison = primary_rows(tests[-1][1])[0]
    low, high = CLAIMED[comparison]

    def against(claim: float) -> str:
        return f"its {_pts(claim)} is {'excluded' if not pooled['low'] <= claim <= pooled['high'] else 'not'}"

    return (f"Beyond the plan (post hoc, never a decision): both tests pooled, best estimate about "
            f"{100 * pooled['delta']:+.0f} point ({_ci(pooled)}); the paper's {against(high)[4:]}, "
            f"{against(low)} ([docs/results.md](docs/results.md#beyond-the-plan-post-hoc-never-a-decision)).\n")
