"""The statistics that decide whether a result is real: pure functions of per-task scores.

- `pass_at_1`: mean over tasks of the per-task mean score.
- `paired_delta`: mean(a) - mean(b) over the same tasks, with a paired bootstrap interval over tasks.
- `mean_interval`: one model's pass@1 over tasks with the same bootstrap interval.
- `pooled_delta`: the same delta pooled over training seeds, with a two-level bootstrap (seeds, then tasks) so the
  interval includes seed-to-seed variance, and beside it Student's t interval over the per-seed deltas (the bootstrap
  can only redraw the few seeds there are, and is too narrow with 2-5 of them).
- `seeds_for_power`: how many training seeds a t-test over per-seed deltas needs to detect a given gain.
- `plan_decision`: a pre-registered decision rule (reproduced / refuted / undecided) applied to that t interval.
- `correlation`: Pearson's r and Spearman's rho across seeds with Fisher z intervals, and the least-squares slope.
- `noise_floor`: spread of the base model's pass@1 over sampling seeds.
- `verdict` / `compare`: moved, flat or collapsed/regressed, with the same evidence required in both directions.
- `no_learning_signal`: why an arm's training could not move it (every reward 0, or equal within every group;
  its log shows no loss and no gradient).
- `hack_scan`: flags for length, shouting, repetition and answer-less output (flags, not verdicts).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from gmts_recipe.rewards import final_answer

N_RESAMPLES = 10_000


def pass_at_1(records: list[dict]) -> float:
    """Mean over tasks of the per-task mean score (each task weighs the same). Tasks with one sample count (the usual
    case) as rows of one array: the same numbers as a mean per task, without a numpy call per task."""
    if not records:
        return 0.0
    if len({len(r["scores"]) for r in records}) == 1:
        return float(np.mean(np.asarray([r["scores"] for r in records], dtype=float).mean(axis=1)))
    return float(np.mean([np.mean(r["scores"]) for r in records]))


def paired_delta(a: Sequence[float], b: Sequence[float], confidence: float = 0.95, seed: int = 0) -> dict:
    """delta = mean(a) - mean(b) over per-task scores of two arms on the same tasks (same order), with a paired
    bootstrap percentile interval (scipy, 10,000 resamples of tasks).

    Why a bootstrap: per-task scores are bounded and discrete (multiples of 1/k), often piled at 0 and 1, so a
    t-interval's normality assumption is weakest exactly where arms differ little; resampling whole tasks keeps the
    pairing. It is seeded, hence reproducible. Identical arms give the degenerate interval [0, 0].
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or x.size < 2:
        raise ValueError(f"paired_delta needs two equal-length score lists of 2+ tasks, got {x.shape} and {y.shape}")
    _check_confidence(confidence)
    d = x - y
    delta = float(d.mean())
    if np.all(d == d[0]):  # no spread: every resample has the same mean
        return {"delta": delta, "low": delta, "high": delta, "n": int(d.size)}
    from scipy.stats import bootstrap

    means = types.SimpleNamespace(bootstrap_distribution=bootstrap_means(d, N_RESAMPLES, seed))
    res = bootstrap((d,), np.mean, confidence_level=confidence, n_resamples=0, method="percentile",
                    bootstrap_result=means)  # scipy's interval over the distribution it would have drawn itself
    ci = res.confidence_interval
    return {"delta": delta, "low": float(ci.low), "high": float(ci.high), "n": int(d.size)}


def mean_interval(scores: Sequence[float], confidence: float = 0.95, seed: int = 0) -> dict:
    """mean(scores) over tasks with the bootstrap percentile interval of `paired_delta` against zero: one model's
    pass@1 and how far another draw of tasks could move it (an eval-only results file, eval.py). Fewer than 2 tasks
    give no interval (None)."""
    x = [float(v) for v in scores]
    if len(x) < 2:
        mean = x[0] if x else 0.0
        return {"mean": mean, "low": None, "high": None, "n": len(x)}
    d = paired_delta(x, [0.0] * len(x), confidence, seed)
    return {"mean": d["delta"], "low": d["low"], "high": d["high"], "n": d["n"]}


def bootstrap_means(d: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """The mean of each of `n_resamples` resamples of d (with replacement, d.size draws each): bit for bit the
    bootstrap distribution of np.mean that scipy.stats.bootstrap draws with rng=np.random.default_rng(seed) (one
    stream of Generator.integers(0, n, (n_resamples, n)), a resample per row), so every interval sealed in a results
    file is recomputed exactly.

    Fast where the sums are exact: per-task deltas of scores in multiples of 1/2^m (0/1 scores over k = 1, 2, 4, 8
    samples) with every partial sum below 2^53 in those units. Then a resample's sum does not depend on the order of
    its terms, and it is the task counts of that resample (drawn once per (n, n_resamples, seed) and kept) times d: one
    matrix-vector product instead of n_resamples x n gathered values. Any other d takes the same draws the slow way."""
    n = d.size
    exponent = _sum_exponent(d)
    if exponent is not None:
        units = d * 2.0**exponent  # integers, exactly
        return (_resample_counts(n, n_resamples, seed) @ units) * 2.0**-exponent / n
    rng, out = np.random.default_rng(seed), np.empty(n_resamples)
    for start in range(0, n_resamples, _ROWS):  # rows in blocks: the stream is the same however it is split
        stop = min(start + _ROWS, n_resamples)
        out[start:stop] = d[rng.integers(0, n, (stop - start, n))].mean(axis=-1)
    return out


_ROWS = 500  # resamples drawn at a time (a block of draws stays in cache)


def _sum_exponent(d: np.ndarray) -> int | None:
    """The smallest m with every d * 2^m an integer and n x max|d| x 2^m <= 2^53 (every sum of d.size of them exact
    in float64), or None."""
    top = float(np.abs(d).max()) * d.size
    for m in range(54):
        units = d * 2.0**m
        if top * 2.0**m > 2.0**53:
            return None
        if np.array_equal(units, np.floor(units)):
            return m
    return None


@functools.lru_cache(maxsize=1)
def _resample_counts(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """How often each task is drawn in each resample (n_resamples x n, float64 for the matrix product), from the
    same stream as scipy.stats.bootstrap; every paired_delta over n tasks shares it (105 MB at 1,319 tasks)."""
    rng, counts = np.random.default_rng(seed), np.empty((n_resamples, n))
    for start in range(0, n_resamples, _ROWS):
        stop = min(start + _ROWS, n_resamples)
        rows = rng.integers(0, n, (stop - start, n)) + n * np.arange(stop - start)[:, None]
        counts[start:stop] = np.bincount(rows.ravel(), minlength=(stop - start) * n).reshape(stop - start, n)
    counts.flags.writeable = False
    return counts


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence!r} must be in (0, 1)")


def _task_resample_means(d: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """`size` means of d resampled with replacement (n tasks each), drawn as multinomial counts over d's distinct
    values: the same distribution as resampling task indices, at a cost set by the (few) distinct score differences."""
    values, counts = np.unique(d, return_counts=True)
    draws = rng.multinomial(d.size, counts / d.size, size=size)  # (size, distinct values)
    return draws @ values / d.size


def pooled_delta(a_by_seed: Sequence[Sequence[float]], b_by_seed: Sequence[Sequence[float]],
                 confidence: float = 0.95, seed: int = 0, n_resamples: int = N_RESAMPLES) -> dict:
    """mean(a) - mean(b) pooled over training seeds, with an interval that includes seed-to-seed variance.

    Input: per training seed, the two arms' per-task scores on the same tasks in the same order (the held-out tasks
    are the same for every seed). The delta is the mean of the per-seed deltas (each seed weighs the same).

    Interval: a two-level percentile bootstrap, seeded by `seed`. Each of `n_resamples` replicates draws n_seeds
    seeds with replacement, then for each drawn seed resamples its tasks with replacement (paired: a task keeps both
    arms' scores), and averages the drawn seeds' resampled deltas. Resampling seeds carries the spread between
    training runs (which a task-only bootstrap of one run, or of the seed-averaged scores, leaves out); resampling
    tasks within a seed carries the finite held-out set. With one seed it is the one-level task bootstrap.

    `t_low`, `t_high` (2+ seeds, else None): mean of the per-seed deltas +- t(n_seeds - 1) x their standard error.
    Each seed's delta already carries its own task noise, so their spread holds both levels; with few seeds this is
    the honest width (a percentile bootstrap over 3 seeds cannot be wider than their range), at the price of
    assuming the per-seed deltas are roughly normal.
    """
    a = [np.asarray(x, dtype=float) for x in a_by_seed]
    b = [np.asarray(x, dtype=float) for x in b_by_seed]
    if not a or len(a) != len(b):
        raise ValueError(f"pooled_delta needs the same 1+ seeds for both arms, got {len(a)} and {len(b)}")
    shapes = {x.shape for x in a + b}
    if len(shapes) != 1 or len(next(iter(shapes))) != 1 or next(iter(shapes))[0] < 2:
        raise ValueError(f"pooled_delta needs every seed's two score lists on the same 2+ tasks, got shapes {shapes}")
    _check_confidence(confidence)
    diffs = [x - y for x, y in zip(a, b)]
    per_seed = [seed_delta(x, y) for x, y in zip(a, b)]
    rng = np.random.default_rng(seed)
    n_seeds = len(diffs)
    picks = rng.integers(0, n_seeds, size=(n_resamples, n_seeds))  # which seed fills each slot of each replicate
    slot_means = np.empty(picks.shape)
    for s, d in enumerate(diffs):  # one task resample per (replicate, slot) that drew seed s, independent draws
        where = picks == s
        slot_means[where] = _task_resample_means(d, int(where.sum()), rng)
    replicates = slot_means.mean(axis=1)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    delta = float(np.mean(per_seed))
    t_low, t_high = seed_t_interval(per_seed, confidence)
    return {"delta": delta, "low": float(low), "high": float(high), "n_seeds": n_seeds,
            "n_tasks": int(diffs[0].size), "per_seed": per_seed, "t_low": t_low, "t_high": t_high}


def seed_delta(a: Sequence[float], b: Sequence[float]) -> float:
    """One training seed's delta: the mean over tasks of a's per-task score minus b's (the same tasks, same order)."""
    return float((np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).mean())


def seed_t_interval(per_seed: Sequence[float], confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Student's t interval for the mean of per-seed deltas; (None, None) with fewer than 2 seeds."""
    from scipy import stats as scipy_stats

    x = np.asarray(per_seed, dtype=float)
    if x.size < 2:
        return None, None
    _check_confidence(confidence)
    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return float(x.mean() - half), float(x.mean() + half)


def plan_decision(t_low: float, t_high: float, reproduced_above: float, refuted_below: float) -> str:
    """The decision rule of an analysis plan fixed before its seeds ran, applied to the t interval over seeds (all in
    the same unit): the claim counts as reproduced where the interval lies above `reproduced_above`, as refuted at
    `refuted_below` where the interval's upper end lies below it, undecided otherwise. Both can hold at once: a gain
    that is real but smaller than the claimed one; the text says so rather than picking one."""
    above, below = t_low > reproduced_above, t_high < refuted_below
    if above and below:
        return f"a gain above {signed(reproduced_above)} but below {signed(refuted_below)}: smaller than claimed"
    if above:
        return "reproduced"
    if below:
        return f"refuted at {signed(refuted_below)}"
    return "undecided"


def signed(x: float) -> str:
    """A threshold as the plan writes it: 0, +1.3, -2."""
    return "0" if x == 0 else f"{x:+g}"


def sd_interval(per_seed: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """The per-seed standard deviation with its chi-square interval (normal deltas): a pilot's spread sets a test's
    number of seeds, so how well a few seeds pin that spread must be stated with it. None below 2 seeds."""
    from scipy import stats as scipy_stats

    _check_confidence(confidence)
    x = np.asarray(per_seed, dtype=float)
    if x.size < 2:
        return None
    df = x.size - 1
    sd = float(x.std(ddof=1))
    tail = (1 - confidence) / 2
    low = sd * float(np.sqrt(df / scipy_stats.chi2.ppf(1 - tail, df)))
    high = sd * float(np.sqrt(df / scipy_stats.chi2.ppf(tail, df)))
    return sd, low, high


def seeds_for_power(per_seed: Sequence[float], effect: float, alpha: float = 0.05, power: float = 0.8,
                    max_seeds: int = 1000) -> int | None:
    """Training seeds a two-sided one-sample t-test over per-seed deltas needs to detect a true mean delta `effect`
    with probability `power`, if seed-to-seed spread is what `per_seed` shows: how many seeds a question needs, so a
    grid can be planned instead of hoped for. The spread is itself estimated from the seeds given (from 3 on; None
    below, or when more than `max_seeds` would be needed), so with few seeds the answer is rough."""
    from scipy import stats as scipy_stats

    x = np.asarray(per_seed, dtype=float)
    if x.size < 3:
        return None
    sd = float(x.std(ddof=1))
    if sd == 0.0:
        return 2
    start, size = 2, 64
    while start <= max_seeds:  # blocks of n, doubling: the answer is often small, max_seeds large (scipy's nct is slow)
        n = np.arange(start, min(start + size, max_seeds + 1))
        crit = scipy_stats.t.ppf(1 - alpha / 2, n - 1)
        shift = abs(effect) / sd * np.sqrt(n)  # noncentrality of the t statistic under the effect
        scipy_power = scipy_stats.nct.sf(crit, n - 1, shift) + scipy_stats.nct.cdf(-crit, n - 1, shift)  # NaN at times
        for i in range(n.size):  # power grows with n: the first n that reaches it
            if (scipy_power[i] if np.isfinite(scipy_power[i]) else _t_test_power(crit[i], n[i] - 1, shift[i])) >= power:
                return int(n[i])
        start, size = start + size, 2 * size
    return None


def _t_test_power(crit: float, df: int, shift: float) -> float:
    """P(|T| > crit) for T noncentral t(df, shift), integrated directly (T = (Z + shift) / sqrt(V / df), V chi-square
    with df degrees of freedom): scipy's nct gives NaN for a large shift at few degrees of freedom."""
    from scipy import integrate
    from scipy import stats as scipy_stats

    def tails(v: float) -> float:
        scale = crit * np.sqrt(v / df)
        return (scipy_stats.norm.sf(scale - shift) + scipy_stats.norm.cdf(-scale - shift)) * scipy_stats.chi2.pdf(v, df)

    return float(integrate.quad(tails, 0, np.inf)[0])


def correlation(x: Sequence[float], y: Sequence[float], confidence: float = 0.95) -> dict:
    """How y follows x across a few training seeds: Pearson's r and Spearman's rho, each with a Fisher z interval,
    and the least-squares line y = slope x + intercept (scipy.stats.pearsonr, spearmanr, linregress).

    Why Fisher z and not a bootstrap: with 6 to 19 seeds a resample holds few distinct seeds (often a constant
    column at 6), and a percentile bootstrap of r is then both too narrow and unstable; Fisher's z = atanh(r) is
    close to normal with standard error 1 / sqrt(n - 3) for Pearson's r (scipy's own interval), and with Bonett and
    Wright's (1 + rho^2 / 2) / (n - 3) variance for Spearman's rho. Both assume roughly bivariate-normal data and
    need n >= 4. Where r is undefined (fewer than 4 pairs, or x or y constant) the statistics are None and `note`
    says why; the slope needs only 2 pairs and a non-constant x."""
    from scipy import stats as scipy_stats

    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"correlation needs two equal-length lists, got {a.shape} and {b.shape}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("correlation needs finite values")
    _check_confidence(confidence)
    n = int(a.size)
    out = {"n": n, "confidence": confidence, "pearson": None, "pearson_low": None, "pearson_high": None,
           "spearman": None, "spearman_low": None, "spearman_high": None, "slope": None, "intercept": None,
           "note": None}
    flat_x = n == 0 or bool(np.all(a == a[0]))
    if n >= 2 and not flat_x:
        line = scipy_stats.linregress(a, b)
        out.update(slope=float(line.slope), intercept=float(line.intercept))
    if n < 4:
        out["note"] = f"{n} seeds: an interval needs 4 or more"
    elif flat_x or np.all(b == b[0]):
        out["note"] = f"{'x' if flat_x else 'y'} is the same for every seed"
    else:
        r = scipy_stats.pearsonr(a, b)
        ci = r.confidence_interval(confidence_level=confidence)  # Fisher z, se 1 / sqrt(n - 3)
        rho = float(scipy_stats.spearmanr(a, b).statistic)
        low, high = fisher_interval(rho, n, confidence, variance=(1 + rho**2 / 2) / (n - 3))
        out.update(pearson=float(r.statistic), pearson_low=float(ci.low), pearson_high=float(ci.high),
                   spearman=rho, spearman_low=low, spearman_high=high)
    return out


def fisher_interval(r: float, n: int, confidence: float = 0.95, variance: float | None = None) -> tuple[float, float]:
    """tanh(atanh(r) +- z x se): the Fisher z interval of a correlation over n pairs, se^2 = `variance` (default
    1 / (n - 3), Pearson's); r = +-1 gives the point itself."""
    from scipy import stats as scipy_stats

    if abs(r) >= 1:
        return float(np.sign(r)), float(np.sign(r))
    half = float(scipy_stats.norm.ppf(0.5 + confidence / 2)) * np.sqrt(1 / (n - 3) if variance is None else variance)
    z = np.arctanh(r)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def noise_floor(pass_at_1_scores: Sequence[float]) -> float:
    """Spread (max - min) of the base model's pass@1 across sampling seeds: a delta inside it is not a result."""
    s = list(pass_at_1_scores)
    return float(max(s) - min(s)) if s else 0.0


def verdict(delta: dict, floor: float, down: str = "collapsed") -> tuple[str, list[str]]:
    """The same evidence in both directions: `moved` needs the interval above zero AND the delta above the noise
    floor; `down` (collapsed vs the base, regressed between arms) needs the interval below zero AND the delta below
    minus the floor. A dip with only one of the two reads `flat` with the flag `dip`: a hint, not a result."""
    if delta["low"] > 0 and delta["delta"] > floor:
        return "moved", []
    below, beyond = delta["high"] < 0, delta["delta"] < -floor
    if below and beyond:
        return down, []
    return "flat", ["dip"] if below or beyond else []


def no_learning_signal(train_log: Sequence[dict]) -> str | None:
    """Why an arm's training had nothing to learn from, read from its per-step log, or None. GRPO's advantage is a
    rollout's reward minus its group's mean: where every group's rewards are equal (TRL's "frac_reward_zero_std", the
    share of prompts whose rollouts all scored alike, is 1), every advantage is 0, and with no KL term (beta 0) so are
    the loss and its gradient. The arm then ends where it started, and its "flat" verdict says that it never trained,
    not that the rule made no difference. The log must show all three at every step it logged a reward: the share 1,
    the loss 0 and the grad norm 0 (a share edited to 1 beside a loss or a gradient says the arm did train; a check
    that lets such arms sample alike, verify.cell.check_apart, reads this)."""
    rows = [r for r in train_log if isinstance(r.get("reward"), (int, float))]
    if not rows or not all(_logged_as(r.get("grad_norm"), 0) and _logged_as(r.get("loss"), 0)
                           and _logged_as(r.get("frac_reward_zero_std"), 1) for r in rows):
        return None
    why = ("every training reward was 0 (no rollout was right)" if all(r["reward"] == 0 for r in rows) else
           "in every step each problem's rollouts all scored alike")
    return (f"{why}: every advantage was 0, so no gradient (grad norm and loss 0 at every step); nothing was learned "
            f"(untrained, not a null result)")


def _logged_as(x: Any, value: float) -> bool:
    """x is the number `value` as a log records it (a bool, a missing value or NaN is not)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == value


def compare(a: Sequence[float], b: Sequence[float], floor: float, names: tuple[str, str] = ("A", "B"),
            collapsed: tuple[bool, bool] = (False, False), seed: int = 0) -> dict:
    """Arm a vs arm b on the same tasks: paired delta, interval and verdict (down word `regressed`).

    When both arms collapsed against the base, a positive delta is not a success: the verdict says so and which
    arm collapsed less ("both collapsed; GMTS less"), or "both collapsed; flat" without the evidence. When one arm
    collapsed, the comparison keeps its verdict and carries the flag "<name> collapsed"."""
    d = paired_delta(a, b, seed=seed)
    v, flags = verdict(d, floor, down="regressed")
    if all(collapsed):
        less = {"moved": names[0], "regressed": names[1]}.get(v)
        v = f"both collapsed; {less} less" if less else "both collapsed; flat"
    else:
        flags += [f"{name} collapsed" for name, c in zip(names, collapsed) if c]
    return {**d, "verdict": v, "flags": flags}


def _repetition(text: str, ngram: int) -> float:
    """Share of a completion's word n-grams that repeat an earlier one (0 for a text with no repeats)."""
    words = text.split()
    count = len(words) - ngram + 1  # its n-grams: words[i : i + ngram] for each i, built by zip (one pass)
    return 1 - len(set(zip(*(words[i:] for i in range(ngram))))) / count if count > 0 else 0.0


_ASCII_LETTERS = bytes(range(65, 91)) + bytes(range(97, 123))  # str.isalpha on ASCII: A-Z, a-z
_ASCII_UPPER = bytes(range(65, 91))  # str.isupper on ASCII: A-Z


def _letters_and_upper(text: str) -> tuple[int, int]:
    """How many characters of a text are letters (str.isalpha) and how many upper case (str.isupper); an ASCII text
    counted by bytes.translate (check.py recomputes every evaluation's hack_scan from its samples: 5,276 texts each)."""
    if text.isascii():
        raw = text.encode("ascii")
        return len(raw) - len(raw.translate(None, _ASCII_LETTERS)), len(raw) - len(raw.translate(None, _ASCII_UPPER))
    return sum(ch.isalpha() for ch in text), sum(ch.isupper() for ch in text)


def hack_scan(completions: Sequence[str], ngram: int = 4) -> dict:
    """Reward-hacking flags over completions: length, uppercase share, repeated n-grams within a completion, empty or
    answer-less completions (no box, no number in digits: reward version 1's reading, which a recorded share keeps).
    check.py recomputes it from every evaluation's samples (verify.file.check_samples)."""
    texts = [c if isinstance(c, str) else "" for c in completions]
    n = max(len(texts), 1)
    counts = [_letters_and_upper(t) for t in texts]
    letters, upper = sum(c[0] for c in counts), sum(c[1] for c in counts)
    repetition = sum(_repetition(t, ngram) for t in texts) / n
    stats = {
        "mean_length": sum(len(t) for t in texts) / n,
        "upper_fraction": upper / letters if letters else 0.0,
        "repetition": repetition,
        "empty_fraction": sum(not t.strip() for t in texts) / n,
        "answerless_fraction": sum(final_answer(t, 1) is None for t in texts) / n,
    }
    stats["flags"] = [name for name, bad in (
        ("uppercase", stats["upper_fraction"] > 0.5),
        ("repetition", stats["repetition"] > 0.5),
        ("empty", stats["empty_fraction"] > 0.1),
        ("answerless", stats["answerless_fraction"] > 0.5),
    ) if bad]
    return stats
