"""curves.png: one figure that a reader understands without the README.

    python -m gmts_recipe.plots results/quickstart-cpu/results.json    # redraw curves.png next to a results file

Panel 1 is the answer (held-out pass@1 of the base model and of every trained arm, with the 95% paired interval of
each arm's gain over the base and its verdict); the other panels are the training curves behind it. Fractions are
drawn on a fixed [0, 1] axis so that a constant such as the kept fraction (0.2000-0.2010) cannot look like signal.
Arms that are missing are left out; the figure never needs all of them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ARM_ORDER = ("grpo", "ets", "gmts", "ets_nz")
ARM_NAMES = {"base": "base (untrained)", "grpo": "GRPO (all tokens)", "ets": "ETS (top-20% by entropy)",
             "gmts": "GMTS (top-20% by |entropy x omega|)", "ets_nz": "ETS-nz (top-20% by entropy, omega != 0 first)"}
COLORS = {"base": "0.45", "grpo": "tab:green", "ets": "tab:blue", "gmts": "tab:orange", "ets_nz": "tab:purple"}
# Training curves: (log key, panel title, y label, fixed y range or None).
CURVES = (
    ("reward", "training reward", "mean reward (fraction correct)", (0, 1)),
    ("completions/mean_length", "answer length in training", "mean completion length (tokens)", None),
    ("grad_norm", "gradient norm", "grad norm (before clipping)", None),
    ("entropy", "entropy of the policy", "mean token entropy (nats)", None),
    ("selection/kept_fraction", "share of tokens trained on", "kept fraction of completion tokens", (0, 1)),
    ("selection/overlap", "agreement with the other ranking", "share of kept tokens both rules keep", (0, 1)),
    ("selection/effective_answers", "answers the update draws on", "effective answers per batch", None),
    ("selection/top_answer_weight_share", "concentration on the top answer", "top-|A| answer's share of kept |omega|",
     (0, 1)),
    ("update/cosine_prev", "agreement of successive updates", "cosine with the previous step's gradient", (-1, 1)),
)


def arms_in(results: dict) -> list[str]:
    """The trained arms of a results file, in the table's order (unknown arms last, by name)."""
    present = results.get("arms", {})
    return [a for a in ARM_ORDER if a in present] + sorted(a for a in present if a not in ARM_ORDER)


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
    summary = results.get("summary")
    ax.set_title("held-out pass@1 (the result)")
    ax.set_ylabel("pass@1 (fraction of samples correct)")
    ax.set_ylim(0, 1.05)  # room for an interval that ends at 1
    ax.set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    if not summary:
        ax.text(0.5, 0.5, "no base evaluation yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        return
    base = summary["base"]
    seeds = base["pass@1"]
    ax.bar(0, base["mean"], color=COLORS["base"], alpha=0.6)
    ax.plot([0] * len(seeds), seeds, "k.")
    labels = [f"base\n{100 * base['mean']:.1f}%\n{len(seeds)} seeds (dots)\nnoise floor {100 * base['noise_floor']:.1f} pts"]
    reference = seeds[0]  # arms are evaluated with the first base seed: the paired delta is against it
    for x, arm in enumerate((a for a in arms_in(results) if a in summary["arms"]), start=1):
        a, d = summary["arms"][arm], summary["arms"][arm]["vs_base"]
        lo, hi = reference + d["low"], reference + d["high"]
        ax.bar(x, a["pass@1"], color=COLORS.get(arm, "tab:purple"), alpha=0.6)
        ax.errorbar(x, a["pass@1"], yerr=[[max(a["pass@1"] - lo, 0)], [max(hi - a["pass@1"], 0)]], fmt="none",
                    ecolor="k", capsize=4)
        labels.append(f"{arm.upper()}\n{100 * a['pass@1']:.1f}%\n{100 * d['delta']:+.1f} pts\n[{100 * d['low']:+.1f}, "
                      f"{100 * d['high']:+.1f}]\n{a['verdict']}")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_xlabel("bars: 95% paired CI of the gain over base, in points", fontsize=8)


def _curve_panel(ax, results: dict, key: str, name: str, ylabel: str, ylim) -> None:
    ax.set_title(name)
    ax.set_xlabel("training step")
    ax.set_ylabel(ylabel)
    drawn = 0
    for arm in arms_in(results):
        steps, values = _series(results["arms"][arm], key)
        if steps:
            ax.plot(steps, values, marker=".", color=COLORS.get(arm), label=ARM_NAMES.get(arm, arm))
            drawn += 1
    if ylim:
        ax.set_ylim(*ylim)
    else:  # every curve here is non-negative; an axis from zero keeps a small wiggle from looking like a trend
        ax.set_ylim(bottom=0)
    if drawn:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, f"not logged ({key})", ha="center", va="center", transform=ax.transAxes, fontsize=8)


def figure(results: dict):
    """The figure for a results dict with any subset of arms (matplotlib Figure, not yet saved)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 5, figsize=(22, 8.5), gridspec_kw={"width_ratios": [1.4, 1, 1, 1, 1]})
    _pass_at_1_panel(axes.flat[0], results)
    for ax, (key, name, ylabel, ylim) in zip(axes.flat[1:], CURVES):
        _curve_panel(ax, results, key, name, ylabel, ylim)
    fig.suptitle(title(results), fontsize=12)
    fig.tight_layout()
    return fig


def plot_run(results: dict, path: str | Path) -> Path:
    """Draw curves.png for a results dict and return its path."""
    import matplotlib.pyplot as plt

    fig = figure(results)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Redraw curves.png next to a results.json.")
    ap.add_argument("results", help="path to results.json")
    args = ap.parse_args(argv)
    path = Path(args.results)
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        print(f"plots.py: cannot read {path}: {e}", file=sys.stderr)
        return 2
    print(plot_run(results, path.parent / "curves.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
