"""curves.png: one figure that a reader understands without the README.

    python -m gmts_recipe.plots results/quickstart-cpu/results.json    # redraw curves.png next to a results file
    python -m gmts_recipe.plots --sweep results/qwen/sweep.json        # one sweep's figure
    python -m gmts_recipe.plots --tests Confirmatory=results/confirm/sweep.json First=results/qwen/sweep.json
                                                                         # the README's headline figure
    python -m gmts_recipe.plots mechanism results/coupled/sweep.json   # mechanism.json and mechanism.png beside it

Panel 1 is the answer (held-out pass@1 of the base model and of every trained arm, with the 95% paired interval of
each arm's gain over the base and its verdict); the other panels are the training curves behind it. Fractions are
drawn on a fixed [0, 1] axis so that a constant such as the kept fraction (0.2000-0.2010) cannot look like signal.
Arms that are missing are left out; the figure never needs all of them.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np

from gmts_recipe.arms import ARMS, DEFAULT_RATIO, PRIMARY, arm_named, arms, control_comparisons, short_name
from gmts_recipe.mechanism import MechanismError, grid_analysis, value_of
from gmts_recipe.records import ResultsError, write_json
from gmts_recipe.verify.file import read_results
from gmts_recipe.stats import seed_t_interval
from gmts_recipe.sweep.summary import CLAIMED

BASE_NAME, BASE_COLOR = "base (untrained)", "0.45"
# Training curves beside the result (curves.png), then the method's internals (the second figure): (log key, panel
# title, y label, fixed y range or None).
CURVES = (
    ("reward", "training reward", "mean reward (fraction correct)", (0, 1)),
    ("completions/mean_length", "answer length in training", "mean completion length (tokens)", None),
    ("grad_norm", "gradient norm", "grad norm (before clipping)", None),
    ("entropy", "entropy of the policy", "mean token entropy (nats)", None),
)
INTERNALS = (
    ("selection/kept_fraction", "share of tokens trained on", "kept fraction of completion tokens", (0, 1)),
    ("selection/overlap", "agreement with the other ranking", "share of kept tokens both rules keep", (0, 1)),
    ("selection/zero_advantage_kept_share", "kept tokens that move nothing", "share of kept tokens with advantage 0",
     (0, 1)),
    ("selection/effective_answers", "answers the update draws on", "effective answers per batch", None),
    ("selection/top_answer_weight_share", "concentration on the top answer", "top-|A| answer's share of kept |omega|",
     (0, 1)),
    ("update/cosine_prev", "agreement of successive updates", "cosine with the previous step's gradient", (-1, 1)),
)
INTERNALS_SUFFIX = "-selection"  # curves.png -> curves-selection.png, beside it


def _known(arm: str) -> bool:
    return arm in ARMS


def color(arm: str) -> str:
    """The arm's one color (arms.ARMS), the same in every figure."""
    return arm_named(arm).color if _known(arm) else "0.3"


def arm_name(arm: str, results: dict | None = None) -> str:
    """The arm's label at the ratio of kept tokens the results file records (the config holds it only when set)."""
    if not _known(arm):
        return arm
    return arm_named(arm).label(((results or {}).get("config") or {}).get("selection_ratio", DEFAULT_RATIO))


def arms_in(results: dict) -> list[str]:
    """The trained arms of a results file, in the table's order (unknown arms last, by name)."""
    present = results.get("arms", {})
    return [a for a in arms() if a in present] + sorted(a for a in present if a not in arms())


def _series(entry: dict, key: str) -> tuple[list[float], list[float]]:
    pts = [(row["step"], row[key]) for row in entry.get("train_log", [])
           if isinstance(row.get(key), (int, float)) and "step" in row]
    return ([p[0] for p in pts], [p[1] for p in pts]) if pts else ([], [])


def title(results: dict) -> str:
    config = results.get("config", {})
    task = results.get("data", {}).get("task") or config.get("task", "?")  # the config holds only fields set
    if task == "arithmetic":
        task = f"generated arithmetic (difficulty {config.get('difficulty', '?')})"
    evals = results.get("base", {}).get("evals", [])
    held = f"{len(evals[0]['records'])} held-out tasks x {evals[0].get('k')} samples" if evals else "no evaluation yet"
    return (f"{config.get('model_name_or_path', '?')} on {task}, config '{results.get('config_name', '?')}' "
            f"({str(results.get('config_hash', '?'))[:12]}); {held}")


def _pass_at_1_panel(ax, results: dict) -> None:
    """The answer, readable alone: each arm's held-out pass@1 written on its bar, the bar's whisker the 95% paired
    interval of its gain over the base (drawn around the arm's pass@1), and the verdict under the arm's name."""
    summary = results.get("summary")
    evals = results.get("base", {}).get("evals", [])
    held = f"{len(evals[0]['records'])} tasks x {evals[0].get('k')} samples" if evals else ""
    ax.set_title(f"held-out pass@1 ({held})" if held else "held-out pass@1", fontsize=12, fontweight="bold")
    ax.set_ylabel("pass@1 (fraction of samples correct)")
    ax.set_ylim(0, 1.12)  # room for an interval that ends at 1 and the label above it
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    ax.grid(axis="y", alpha=0.3)
    if not summary:
        ax.text(0.5, 0.5, "no base evaluation yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return
    base = summary["base"]
    seeds = base["pass@1"]
    ax.bar(0, base["mean"], color=BASE_COLOR, alpha=0.6, width=0.7)
    ax.plot([0] * len(seeds), seeds, "k.")
    ax.text(0, base["mean"] + 0.02, f"{100 * base['mean']:.1f}%", ha="center", va="bottom", fontsize=12,
            fontweight="bold")
    labels = [f"base\n{len(seeds)} seeds (dots)\nnoise floor\n{100 * base['noise_floor']:.1f} pts"]
    reference = seeds[0]  # arms are evaluated with the first base seed: the paired delta is against it
    for x, arm in enumerate((a for a in arms_in(results) if a in summary["arms"]), start=1):
        a, d = summary["arms"][arm], summary["arms"][arm]["vs_base"]
        lo, hi = reference + d["low"], reference + d["high"]
        ax.bar(x, a["pass@1"], color=color(arm), alpha=0.75, width=0.7)
        ax.errorbar(x, a["pass@1"], yerr=[[max(a["pass@1"] - lo, 0)], [max(hi - a["pass@1"], 0)]], fmt="none",
                    ecolor="k", capsize=5, lw=1.5)
        ax.text(x + 0.08, max(a["pass@1"], hi) + 0.02, f"{100 * a['pass@1']:.1f}%", ha="center", va="bottom",
                fontsize=12, fontweight="bold")
        labels.append(f"{short_name(arm)}\n{100 * d['delta']:+.1f} pts\n[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]\n"
                      f"{a['verdict']}")
    ax.set_xticks(range(len(labels)), labels, fontsize=9)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel("gain over the base in points, its 95% paired CI (the whiskers) and verdict", fontsize=10)


def _curve_panel(ax, results: dict, key: str, name: str, ylabel: str, ylim) -> None:
    ax.set_title(name)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel, fontsize=9)
    drawn = 0
    for arm in arms_in(results):
        steps, values = _series(results["arms"][arm], key)
        if steps:
            ax.plot(steps, values, marker=".", ms=3, lw=1, color=color(arm), label=arm_name(arm, results))
            drawn += 1
    if ylim:  # the fixed range, padded so that a curve on its edge (GRPO's kept fraction 1) is not drawn on the frame
        pad = 0.02 * (ylim[1] - ylim[0])
        ax.set_ylim(ylim[0] - pad, ylim[1] + pad)
    else:  # every curve here is non-negative; an axis from zero keeps a small wiggle from looking like a trend
        ax.set_ylim(bottom=0)
    if not drawn:
        ax.text(0.5, 0.5, f"not logged ({key})", ha="center", va="center", transform=ax.transAxes, fontsize=8)


def _legend_below(fig, results: dict) -> None:
    """One legend for every curve panel, below the panels: a legend inside a panel hides the curves under it."""
    from matplotlib.lines import Line2D  # only when a figure is drawn

    arms = arms_in(results)
    if arms:
        handles = [Line2D([], [], color=color(a), marker=".", label=arm_name(a, results)) for a in arms]
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=10, frameon=False)


def figure(results: dict):
    """curves.png for a results dict with any subset of arms (matplotlib Figure, not yet saved): the result (held-out
    pass@1) large on the left, the training curves behind it on the right."""
    import matplotlib  # only when a figure is drawn: recipe.py and update_readme.py import this module without one

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(16, 7))
    grid = fig.add_gridspec(2, 3, width_ratios=[1.8, 1, 1], left=0.05, right=0.98, top=0.9, bottom=0.24,
                            hspace=0.45, wspace=0.3)
    _pass_at_1_panel(fig.add_subplot(grid[:, 0]), results)
    for (key, name, ylabel, ylim), cell in zip(CURVES, ((0, 1), (0, 2), (1, 1), (1, 2))):
        _curve_panel(fig.add_subplot(grid[cell]), results, key, name, ylabel, ylim)
    _legend_below(fig, results)
    fig.suptitle(title(results), fontsize=11)
    return fig


def internals_figure(results: dict):
    """The second figure: how each arm chose its tokens, step by step (kept share, agreement between the rankings,
    the tokens that move nothing, how many answers the update draws on, concentration, successive updates)."""
    import matplotlib  # only when a figure is drawn: recipe.py and update_readme.py import this module without one

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7))
    fig.subplots_adjust(left=0.06, right=0.98, top=0.9, bottom=0.16, hspace=0.4, wspace=0.3)
    for ax, (key, name, ylabel, ylim) in zip(axes.flat, INTERNALS):
        _curve_panel(ax, results, key, name, ylabel, ylim)
    _legend_below(fig, results)
    fig.suptitle(f"token selection, per training step: {title(results)}", fontsize=11)
    return fig


def internals_path(path: str | Path) -> Path:
    """Where plot_run writes the second figure: beside curves.png, as curves-selection.png."""
    path = Path(path)
    return path.with_name(f"{path.stem}{INTERNALS_SUFFIX}{path.suffix}")


def plot_run(results: dict, path: str | Path) -> Path:
    """Draw curves.png (the result and the training curves) and, beside it, curves-selection.png (the method's
    internals) for a results dict; return the first one's path."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for make, out in ((figure, path), (internals_figure, internals_path(path))):
        fig = make(results)
        save_png(fig, out)
        plt.close(fig)
    return path


def save_png(fig, path: str | Path, dpi: int = 64) -> Path:
    """Save a figure as a palette PNG (128 colours): a third of the size of matplotlib's RGBA file, the same picture
    to the eye, so that the figures committed beside every results file keep the repository small."""
    from PIL import Image  # matplotlib's own dependency, loaded with it

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=dpi, format="png")
    image = Image.open(buffer).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    image.save(path, format="PNG", optimize=True)
    return Path(path)


# ---------------------------------------------------------------------------- the sweep's headline figure
def headline_pairs() -> tuple[tuple[str, str], ...]:
    """The primary test, then the comparisons of the control arms (arms.comparisons)."""
    return (PRIMARY, *(p for p in control_comparisons() if p != PRIMARY))


def setting_scores(summary: dict) -> dict[str, dict[int, float]]:
    """pass@1 per arm and training seed at the primary test's setting (variant and learning rate) of a sweep.json:
    arm -> seed -> pass@1."""
    p = summary["primary"]
    out: dict[str, dict[int, float]] = {}
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) == (p["variant"], p["learning_rate"]):
            for arm, entry in cell["arms"].items():
                out.setdefault(arm, {})[cell["seed"]] = entry["pass@1"]
    return out


def seed_deltas(scores: dict[str, dict[int, float]], a: str, b: str) -> tuple[list[int], list[float]]:
    """Per-seed pass@1(a) - pass@1(b) over the seeds where both ran: the paired mean difference over tasks, as both
    arms of a seed are scored on the same tasks with the same number of samples."""
    seeds = sorted(set(scores.get(a, {})) & set(scores.get(b, {})))
    return seeds, [scores[a][s] - scores[b][s] for s in seeds]


def reward_by_step(summary: dict, root: Path) -> dict[str, dict[int, list[float]]]:
    """Training reward per step of every seed at the primary test's setting, read from the cells' results files (the
    arms' train_log): arm -> seed -> per-step rewards."""
    p = summary["primary"]
    out: dict[str, dict[int, list[float]]] = {}
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) != (p["variant"], p["learning_rate"]):
            continue
        results = json.loads((root / cell["path"]).read_text(encoding="utf-8"))
        for arm, entry in results["arms"].items():
            out.setdefault(arm, {})[cell["seed"]] = _series(entry, "reward")[1]
    return out


def _reward_panel(ax, rewards: dict[str, dict[int, list[float]]], arms: list[str], seeds: list[int]) -> None:
    """Mean training reward per step over `seeds`, each arm with its 95% t band over those seeds."""
    for arm in arms:
        runs = [rewards[arm][s] for s in seeds]
        steps = min(len(r) for r in runs)
        matrix = np.asarray([r[:steps] for r in runs])
        x = np.arange(1, steps + 1)
        ax.plot(x, matrix.mean(axis=0), color=color(arm), lw=1.6, label=arm_name(arm))
        band = [seed_t_interval(matrix[:, i]) for i in range(steps)]
        ax.fill_between(x, [b[0] for b in band], [b[1] for b in band], color=color(arm), alpha=0.12, lw=0)
    span = f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))
    ax.set_title(f"training reward, seeds {span}: mean, 95% t band", fontsize=11)
    ax.set_xlabel("training step")
    ax.set_ylabel("training reward (fraction of rollouts correct)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, fontsize=9, frameon=False)


def sweep_figure(summary: dict, root: Path):
    """The headline figure of a sweep: each seed's difference in held-out pass@1 for the primary test and the control
    comparisons (dots), their mean and Student's t interval over seeds, beside the gain the paper claims; and the
    training reward per step, mean over seeds with its 95% t band: the primary test's two arms over all its seeds, and
    every arm over the seeds where all of them ran."""
    import matplotlib  # only when a figure is drawn: recipe.py and update_readme.py import this module without one

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = summary["primary"]
    scores = setting_scores(summary)
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(18, 6), gridspec_kw={"width_ratios": [1.1, 1, 1]})
    fig.subplots_adjust(left=0.05, right=0.98, top=0.87, bottom=0.27, wspace=0.22)
    low, high = CLAIMED["gmts - ets"]
    ax.fill_between([-0.4, 0.4], 100 * low, 100 * high, color=color(PRIMARY[0]), alpha=0.18, lw=0,
                    label=f"the paper's claimed gain of GMTS over ETS ({100 * low:+.1f} to {100 * high:+.1f})")
    ax.axhline(0, color="k", lw=0.8)
    names = []
    for x, (a, b) in enumerate(headline_pairs()):
        seeds, deltas = seed_deltas(scores, a, b)
        if len(seeds) < 2:
            continue
        d = 100 * np.asarray(deltas)
        jitter = np.linspace(-0.18, 0.18, len(d))
        ax.plot(x + jitter, d, "o", color=color(a), alpha=0.8, ms=5, mec="none")
        t_low, t_high = seed_t_interval(deltas)
        ax.errorbar(x + 0.28, d.mean(), yerr=[[d.mean() - 100 * t_low], [100 * t_high - d.mean()]], fmt="D",
                    color="k", capsize=6, lw=2, ms=7)
        ax.text(x + 0.36, d.mean(), f"{d.mean():+.1f}\n[{100 * t_low:+.1f}, {100 * t_high:+.1f}]", va="center",
                fontsize=9)
        names.append((x, f"{short_name(a)} - {short_name(b)}\n{len(seeds)} seeds"
                         + ("\n(primary test)" if f"{a} - {b}" == p["comparison"] else "\n(control)")))
    ax.set_xticks([n[0] for n in names], [n[1] for n in names], fontsize=10)
    ax.set_xlim(-0.6, len(names) - 0.1)
    ax.set_ylabel("difference in held-out pass@1 (points)")
    ax.set_title("per seed (dots); mean and 95% t interval over seeds (black)", fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize=9, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    rewards = reward_by_step(summary, Path(root))
    pair = [a for a in p["comparison"].split(" - ")]
    pair_seeds = sorted(set.intersection(*(set(rewards.get(a, {})) for a in pair)))
    every = [a for a in arms() if a in rewards]
    common = sorted(set.intersection(*(set(rewards[a]) for a in every)))
    _reward_panel(bx, rewards, sorted(pair, key=arms().index), pair_seeds)
    _reward_panel(cx, rewards, every, common)
    fig.suptitle(f"sweep '{summary['name']}' ({summary.get('config', '?')}), lr {p['learning_rate']:g} "
                 f"({p['variant']}): held-out pass@1 and training reward; primary test: {p['decision']}", fontsize=12)
    return fig


def collapsed_in(summary: dict, seeds: list[int], pair: tuple[str, str]) -> dict[int, list[str]]:
    """Seed -> the arms of `pair` that collapsed below the base at the primary setting (the sweep's '*')."""
    p = summary["primary"]
    out: dict[int, list[str]] = {}
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) == (p["variant"], p["learning_rate"]) and cell["seed"] in seeds:
            fell = [a for a in pair if cell["arms"].get(a, {}).get("verdict") == "collapsed"]
            if fell:
                out[cell["seed"]] = fell
    return out


def tests_figure(tests: list[tuple[str, dict]], root: Path):
    """The headline figure over planned tests, the first named first: each test's per-seed difference of its primary
    comparison (dots; a seed where an arm collapsed below the base drawn as a red cross and named), the mean with
    Student's t interval over seeds, the mean without the collapsed seeds (hollow), the paper's claimed gain as a
    band; beside it the training reward of the first test's two arms. `root`: the first test's folder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 6.5), gridspec_kw={"width_ratios": [1.25, 1]})
    fig.subplots_adjust(left=0.06, right=0.98, top=0.88, bottom=0.25, wspace=0.18)
    low, high = CLAIMED["gmts - ets"]
    ax.axhspan(100 * low, 100 * high, color=color(PRIMARY[0]), alpha=0.18, lw=0,
               label=f"the paper's claimed gain of GMTS over ETS ({100 * low:+.1f} to {100 * high:+.1f})")
    ax.axhline(0, color="k", lw=0.8)
    ticks = []
    for x, (name, summary) in enumerate(tests):
        p = summary["primary"]
        a, b = p["comparison"].split(" - ")
        seeds, deltas = seed_deltas(setting_scores(summary), a, b)
        d = 100 * np.asarray(deltas)
        fell = collapsed_in(summary, seeds, (a, b))
        jitter = np.random.default_rng(0).uniform(-0.22, 0.22, len(d))
        plain = np.array([s not in fell for s in seeds])
        ax.plot(x + jitter[plain], d[plain], "o", color=color(a), alpha=0.6, ms=5, mec="none")
        for i in np.flatnonzero(~plain):
            ax.plot(x + jitter[i], d[i], "X", color="#c00000", ms=10)
            ax.annotate(f"seed {seeds[i]}: {', '.join(short_name(arm) for arm in fell[seeds[i]])} collapsed\n"
                        f"below the base ({d[i]:+.1f})", (x + jitter[i], d[i]), xytext=(12, -4),
                        textcoords="offset points", fontsize=9, color="#c00000", va="top")
        t_low, t_high = seed_t_interval(deltas)
        ax.errorbar(x + 0.32, d.mean(), yerr=[[d.mean() - 100 * t_low], [100 * t_high - d.mean()]], fmt="D",
                    color="k", capsize=7, lw=2.2, ms=8)
        text = f"mean {d.mean():+.1f}\n[{100 * t_low:+.1f}, {100 * t_high:+.1f}]"
        if fell:
            rest = d[plain].mean()
            ax.plot(x + 0.24, rest, "D", mfc="white", mec="k", mew=1.5, ms=8)
            text += f"\nwithout seed {', '.join(map(str, fell))}: {rest:+.1f}\n(hollow; moves {d.mean() - rest:.2f})"
        ax.text(x + 0.42, d.mean(), text, va="center", fontsize=10)
        ticks.append((x, f"{name} test\n{short_name(a)} - {short_name(b)}, {len(seeds)} seeds\n"
                         f"({seeds[0]}-{seeds[-1]}): {p['decision']}"))
    ax.set_xticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=10)
    ax.set_xlim(-0.5, len(ticks) - 0.05)
    ax.set_ylim(-15, 32)
    ax.set_ylabel("difference in held-out pass@1 (points)")
    ax.set_title("per seed (dots); mean and 95% t interval over seeds (black)", fontsize=11)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=10, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    name, first = tests[0]
    pair = first["primary"]["comparison"].split(" - ")
    rewards = reward_by_step(first, Path(root))
    seeds = sorted(set.intersection(*(set(rewards.get(a, {})) for a in pair)))
    _reward_panel(bx, rewards, sorted(pair, key=arms().index), seeds)
    bx.set_title(f"{name} test: training reward, mean and 95% t band over seeds", fontsize=11)
    fig.suptitle("GMTS - ETS, held-out GSM8K pass@1: the planned tests, each seed a training run", fontsize=13)
    return fig


# ---------------------------------------------------------------------------- the mechanism figure of a grid
def _signed_interval(x: float | None, low: float | None, high: float | None) -> str:
    return "undefined" if x is None else f"{x:+.2f} [{low:+.2f}, {high:+.2f}]"


def _association_panel(ax, analysis: dict, row: dict) -> None:
    """Each seed's GMTS - ETS (y, points) against one variable's mean over its steps (x), the least-squares line, and
    Pearson's r and Spearman's rho with their intervals in the title."""
    points = [(value_of(r, row["arm"], row["key"]), r["delta_points"], r["seed"]) for r in analysis["per_seed"]]
    points = [p for p in points if p[0] is not None]
    ax.axhline(0, color="k", lw=0.7)
    ax.grid(alpha=0.3)
    ax.set_xlabel(f"{row['label']}\n(mean over training steps)", fontsize=8)
    ax.set_ylabel("GMTS - ETS, held-out pass@1 (points)", fontsize=8)
    ax.tick_params(labelsize=8)
    if not points:
        ax.set_title(row["label"], fontsize=9)
        ax.text(0.5, 0.5, row["note"] or "no values", ha="center", va="center", transform=ax.transAxes, fontsize=9)
        return
    x, y = np.asarray([p[0] for p in points]), np.asarray([p[1] for p in points])
    ax.plot(x, y, "o", color=color(row["arm"]), ms=5, alpha=0.85, mec="none")
    for xi, yi, seed in points:
        ax.annotate(str(seed), (xi, yi), xytext=(3, 2), textcoords="offset points", fontsize=6, color="0.35")
    if row["slope"] is not None:
        grid = np.linspace(x.min(), x.max(), 2)
        ax.plot(grid, row["intercept"] + row["slope"] * grid, color="k", lw=1.2)
    stats = (f"r {_signed_interval(row['pearson'], row['pearson_low'], row['pearson_high'])}, n {row['n']}\n"
             f"rho {_signed_interval(row['spearman'], row['spearman_low'], row['spearman_high'])}")
    ax.set_title(f"{row['label']}\n{stats}", fontsize=8.5)


def _agreement_panel(ax, analysis: dict) -> None:
    """The share of identical completions of the two arms per step: mean over seeds, 95% t band (clipped to [0, 1])."""
    rows = analysis["agreement_by_step"]
    ax.set_title("identical rollouts, ETS vs GMTS, per step\nmean over seeds, 95% t band", fontsize=8.5)
    ax.set_xlabel("training step (rollout batch)", fontsize=8)
    ax.set_ylabel("share of identical completions", fontsize=8)
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.tick_params(labelsize=8)
    if not rows:
        ax.text(0.5, 0.5, "no rollout digests in this grid", ha="center", va="center", transform=ax.transAxes,
                fontsize=9)
        return
    steps = [r["step"] for r in rows]
    ax.plot(steps, [r["mean"] for r in rows], color="k", marker=".", ms=4, lw=1.2)
    low = [max(0.0, r["low"] if r["low"] is not None else r["mean"]) for r in rows]
    high = [min(1.0, r["high"] if r["high"] is not None else r["mean"]) for r in rows]
    ax.fill_between(steps, low, high, color="0.5", alpha=0.25, lw=0)


def mechanism_figure(analysis: dict):
    """One panel per variable of gmts_recipe.mechanism: each seed's GMTS - ETS against what the arms' updates looked
    like in that seed, with the fitted line and the correlations; the last panel the two arms' rollout agreement."""
    import matplotlib  # only when a figure is drawn: recipe.py and update_readme.py import this module without one

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = analysis["associations"]
    columns = 3
    lines = -(-(len(rows) + 1) // columns)
    fig, axes = plt.subplots(lines, columns, figsize=(15, 4.2 * lines))
    fig.subplots_adjust(left=0.06, right=0.98, top=0.9, bottom=0.07, hspace=0.75, wspace=0.28)
    flat = list(axes.flat)
    for ax, row in zip(flat, rows):
        _association_panel(ax, analysis, row)
    _agreement_panel(flat[len(rows)], analysis)
    for ax in flat[len(rows) + 1:]:
        ax.set_visible(False)
    seeds = analysis["seeds"]
    status = ("all planned seeds" if analysis["status"] == "complete"
              else f"interim: {len(seeds)} of {len(analysis['planned_seeds'])} planned seeds")
    fig.suptitle(f"grid '{analysis['grid']}', {analysis['variant']} lr {analysis['learning_rate']:g}: does GMTS - ETS "
                 f"follow the arms' updates? {len(seeds)} seeds ({status}); intervals Fisher z 95%, wide at this "
                 f"many seeds", fontsize=11)
    return fig


def mechanism_main(argv: list[str]) -> int:
    """python -m gmts_recipe.plots mechanism SWEEP_JSON: mechanism.json and mechanism.png beside the sweep.json."""
    ap = argparse.ArgumentParser(prog="python -m gmts_recipe.plots mechanism",
                                 description="Set each seed's GMTS - ETS against the arms' logged updates: write "
                                             "mechanism.json and mechanism.png beside a sweep.json.")
    ap.add_argument("sweep", metavar="SWEEP_JSON", help="a grid's sweep.json (results/<grid>/sweep.json)")
    ap.add_argument("--out", metavar="DIR", help="where to write them (default: the sweep.json's folder)")
    args = ap.parse_args(argv)
    path = Path(args.sweep)
    try:
        analysis = grid_analysis(path)
        fig = mechanism_figure(analysis)
    except (OSError, MechanismError, KeyError) as e:
        print(f"plots.py: cannot analyse {path}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else path.parent
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "mechanism.json", analysis)
    print(out / "mechanism.json")
    print(save_png(fig, out / "mechanism.png", dpi=72))
    return 0


def _read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _draw_figure(draw, what: str, out: str) -> int:
    """The command's figure: `draw()` makes it from files named by `what`; a file that cannot be read or drawn is
    one line and exit 2."""
    try:
        fig = draw()
    except (OSError, ValueError, KeyError) as e:
        print(f"plots.py: cannot draw {what}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    print(save_png(fig, out, dpi=80))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Draw curves.png (and curves-selection.png) next to a results.json (a "
                                             "sweep's cells keep none: python -m gmts_recipe.plots CELL_DIR), or "
                                             "a sweep's headline figure; `mechanism SWEEP_JSON`: the mechanism "
                                             "analysis of a grid.")
    ap.add_argument("results", nargs="?", help="path to results.json, or its folder (a run directory, a cell)")
    ap.add_argument("--sweep", metavar="SWEEP_JSON", help="draw the headline figure of this sweep.json")
    ap.add_argument("--tests", metavar="NAME=SWEEP_JSON", nargs="+",
                    help="draw the headline figure over planned tests, the first named first")
    ap.add_argument("--out", default="docs/headline.png", help="where --sweep or --tests writes its figure")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["mechanism"]:
        return mechanism_main(argv[1:])
    args = ap.parse_args(argv)
    if args.tests:
        named = [item.split("=", 1) for item in args.tests]
        return _draw_figure(lambda: tests_figure([(name, _read(path)) for name, path in named],
                                                 Path(named[0][1]).parent), " ".join(args.tests), args.out)
    if args.sweep:
        path = Path(args.sweep)
        return _draw_figure(lambda: sweep_figure(_read(path), path.parent), str(path), args.out)
    if not args.results:
        ap.error("give a results.json (or its folder: a run directory, a sweep's cell), or --sweep SWEEP_JSON")
    path = Path(args.results)
    path = path / "results.json" if path.is_dir() else path
    try:
        results = read_results(path)  # of any format, with its per-task records (a cell's are in its samples)
    except ResultsError as e:
        print(f"plots.py: cannot read {e}", file=sys.stderr)
        return 2
    print(plot_run(results, path.parent / "curves.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
