"""A sweep summary as tables (render: check.py prints them) and figures (plot), and the summary written with both."""

from __future__ import annotations

from pathlib import Path

from gmts_recipe.arms import arm_named, arms as rule_arms, comparisons as rule_comparisons, control_arms, short_name
from gmts_recipe.records import write_json
from gmts_recipe.sequential.report import sensitivity_table, sequential_line
from gmts_recipe.stats import signed
from gmts_recipe.sweep.grid import Grid
from gmts_recipe.sweep.summary import MAX_SEEDS, MECHANISM, POWER, continued_summary, summarize, with_plan
from gmts_recipe.tables import fit_text, report_table, seed_span
from gmts_recipe.verify.plan import record as plan_record
# the rules' arms and compared pairs, read when used (a rule registered at run time counts)


def secondary_line(s: dict) -> str:
    """One line for a secondary comparison: where it stands, its interval, never a decision."""
    seeds = s["seeds"]
    head = f"Secondary (planned, interval only): {s['comparison']} over seeds {seed_span(seeds)}:"
    if s["delta"] is None:
        return f"{head} {len(s['seeds_done'])} of {len(seeds)} seeds have run, no interval yet."
    return (f"{head} {'' if s['status'] == 'complete' else 'so far '}{len(s['seeds_done'])} of {len(seeds)} seeds, "
            f"{100 * s['delta']:+.1f} points, t {_bracket(s['t_low'], s['t_high'])}"
            f"{'' if s['status'] == 'complete' else ' (interim)'}.")


def primary_line(p: dict) -> str:
    """One paragraph: the primary test as the plan states it, where it stands, and its decision (or why none yet)."""
    seeds = p["seeds"]
    head = (f"Primary test (analysis plan fixed {p['fixed_on']}): {p['comparison']} at lr "
            f"{p['learning_rate']:g} ({p['variant']}) over seeds {seed_span(seeds)}, Student's t over the per-seed deltas, 95%; "
            f"reproduced if the interval lies above {signed(p['reproduced_above_points'])} points, refuted at "
            f"{signed(p['refuted_below_points'])} if its upper end lies below that.")
    if p["delta"] is None:
        return f"{head} {len(p['seeds_done'])} of {len(seeds)} seeds have run: no interval yet."
    now = (f"{len(p['seeds_done'])} of {len(seeds)} seeds: {100 * p['delta']:+.1f} points, t "
           f"{_bracket(p['t_low'], p['t_high'])}")
    if p["decision"] == "interim":
        return f"{head} So far {now}: interim, no decision until every planned seed has run."
    return f"{head} All {now}: **{p['decision']}**."


def write_summary(grid: Grid, grid_path: str | Path) -> Path:
    root = Path(grid.results_dir) / grid.name
    root.mkdir(parents=True, exist_ok=True)
    (root / "grid.yaml").write_text(Path(grid_path).read_text(encoding="utf-8"), encoding="utf-8")
    summary = with_plan(summarize(grid, continued=continued_summary(grid)), plan_record(grid_path))
    path = root / "sweep.json"
    write_json(path, summary)
    plot(summary, root / "sweep.png")
    return path


def plot(summary: dict, out: Path) -> None:
    """pass@1 against learning rate per arm (each seed a point, the seed mean a line, the base a band), and each
    pooled comparison with its two-level interval."""
    import matplotlib  # only where a figure is drawn: check.py renders a sweep without it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    cells = summary["cells"]
    variants = sorted({c["variant"] for c in cells})
    if not cells:
        return
    fig, axes = plt.subplots(len(variants), 2, figsize=(12, 4 * len(variants)), squeeze=False)
    for row, variant in zip(axes, variants):
        ax, bx = row
        mine = [c for c in cells if c["variant"] == variant]
        base, floor = mine[0]["base_mean"], mine[0]["noise_floor"]
        ax.axhspan(base - floor / 2, base + floor / 2, color="0.7", label=f"base {100 * base:.1f}% (noise floor)")
        ax.axhline(base, color="0.5", lw=0.8)
        for arm in rule_arms():
            pts = sorted((c["learning_rate"], c["arms"][arm]["pass@1"]) for c in mine if arm in c["arms"])
            if not pts:
                continue
            ax.scatter(*zip(*pts), color=arm_named(arm).color, s=14, alpha=0.6)
            lrs = sorted({lr for lr, _ in pts})
            means = [sum(v for x, v in pts if x == lr) / sum(1 for x, _ in pts if x == lr) for lr in lrs]
            ax.plot(lrs, means, color=arm_named(arm).color, marker="o", label=f"{arm} (seed mean)")
        ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("pass@1 (held-out)")
        ax.set_ylim(0, 1)
        ax.set_title(f"{summary['name']} / {variant}: pass@1 per seed")
        ax.legend(fontsize=8)
        for i, comparison in enumerate(f"{a} - {b}" for a, b in rule_comparisons()):
            rows = [p for p in summary["pooled"] if p["variant"] == variant and p["comparison"] == comparison
                    and p["learning_rate"] is not None]
            if not rows:
                continue
            x = [p["learning_rate"] * (1 + 0.04 * (i - 1)) for p in rows]
            y = [100 * p["delta"] for p in rows]
            err = [[100 * (p["delta"] - p["low"]) for p in rows], [100 * (p["high"] - p["delta"]) for p in rows]]
            line = bx.errorbar(x, y, yerr=err, fmt="o", capsize=3,
                               label=f"{comparison} ({', '.join(str(len(p['seeds'])) for p in rows)} seeds)")
            t_rows = [(xi, p) for xi, p in zip(x, rows) if p.get("t_low") is not None]
            if t_rows:  # Student's t over the seeds: the honest width with few of them (thin, same colour)
                bx.errorbar([xi for xi, _ in t_rows], [100 * p["delta"] for _, p in t_rows],
                            yerr=[[100 * (p["delta"] - p["t_low"]) for _, p in t_rows],
                                  [100 * (p["t_high"] - p["delta"]) for _, p in t_rows]],
                            fmt="none", lw=0.8, alpha=0.5, color=line[0].get_color())
        bx.axhline(0, color="k", lw=0.8)
        bx.set_xscale("log")
        grid_lrs = sorted({c["learning_rate"] for c in mine})
        for axis in (ax, bx):  # the grid's learning rates as ticks: log-scale minor labels overlap at 2e-5..4e-5
            axis.set_xticks(grid_lrs, [f"{lr:g}" for lr in grid_lrs], rotation=30, fontsize=8)
            axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        bx.set_xlabel("learning rate")
        bx.set_ylabel("difference in pass@1 (points)")
        bx.set_title("pooled over seeds, 95% CI: bootstrap seeds then tasks (caps), t over seeds (thin)",
                     fontsize=9)
        if bx.get_legend_handles_labels()[0]:  # a variant with one arm has no comparison to label
            bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)
    plt.close(fig)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


# Seeds a pooled interval needs before its seed level means anything (at least 3 per arm).
MIN_SEEDS = 3
# Below this many seeds the bootstrap's seed level, which can only redraw the seeds it has, understates their spread
# (with 3 seeds it gave [+0.2, +3.7] where t over the same deltas gave [-1.8, +5.9]): the t interval is the one to read.
FEW_SEEDS = 5


def seeds_label(n: int) -> str:
    """What a pooled interval over n seeds covers: with one seed only tasks; with two the seed level of the bootstrap
    can only redraw those two, so the interval spans their values and is no estimate of seed-to-seed variance; with
    fewer than FEW_SEEDS the bootstrap is too narrow and the t interval is the honest one."""
    if n == 1:
        return "1 (interval over tasks only)"
    if n < MIN_SEEDS:
        return f"{n} (too few for the seed level: the interval spans these seeds)"
    if n < FEW_SEEDS:
        return f"{n} (few: the bootstrap understates the seed spread; read t)"
    return str(n)


def _bracket(low: float, high: float) -> str:
    return f"[{100 * low:+.1f}, {100 * high:+.1f}]"


def _interval(p: dict) -> str:
    return f"{100 * p['delta']:+.1f} {_bracket(p['low'], p['high'])}"


# In markdown (the documentation's tables), a cell lists its seeds only up to this many; longer lists go below the
# table, wrapped, so that no table row outgrows a page (gmts_recipe.markdown.LINE_LIMIT).
INLINE_SEEDS = 5


def render(summary: dict, markdown: bool = False, width: int | None = None) -> str:
    """The sweep's tables: pass@1 per (variant, learning rate) and arm with every seed, then each pooled comparison
    with its two-level interval and the comparison it is (shared learning rate, or each arm at its own best). In
    markdown, a cell of more than INLINE_SEEDS seeds gives their count and its seeds follow the table, and the prose
    is wrapped. `width`: the plain-text tables and lines fitted to it (tables.fit_table, fit_text; None: as wide as
    they are)."""
    from gmts_recipe.markdown import fill, item

    cells = summary["cells"]
    columns = [a for a in rule_arms() if a not in control_arms() or any(a in c["arms"] for c in cells)]
    rows1, below1 = [], []
    for variant, lr in sorted({(c["variant"], c["learning_rate"]) for c in cells}):
        mine = sorted((c for c in cells if (c["variant"], c["learning_rate"]) == (variant, lr)), key=lambda c: c["seed"])
        row = [variant, f"{lr:g}"]
        for arm in columns:
            runs = [(c["seed"], c["arms"][arm]) for c in mine if arm in c["arms"]]
            if not runs:
                row.append("-")
                continue
            mean = sum(r["pass@1"] for _, r in runs) / len(runs)
            seeds = ", ".join(f"{_pct(r['pass@1'])}" + ("*" if r["verdict"] == "collapsed" else "") for _, r in runs)
            if markdown and len(runs) > INLINE_SEEDS:
                row.append(f"{_pct(mean)} ({len(runs)} seeds, below)")
                below1.append(item(f"{short_name(arm)}, {variant} lr {lr:g}, seeds "
                                   f"{seed_span([s for s, _ in runs])}: {seeds}"))
            else:
                row.append(f"{_pct(mean)} ({seeds})")
        rows1.append(row)
    head1 = ["variant", "lr", *(arm_named(a).label() for a in columns)]
    rows2, below2, notes2 = [], [], {}
    for p in summary["pooled"]:
        lr = f"{p['learning_rate']:g}" if p["learning_rate"] is not None else \
            ", ".join(f"{a} {v:g}" for a, v in p["learning_rates"].items())
        seeds = seeds_label(len(p["seeds"]))
        if markdown and ": " in seeds:  # "3 (few: why)": the why once below the table, the cell short
            short, why = seeds[:-1].split(" (", 1)[1].split(": ", 1)
            notes2[short] = why
            seeds = f"{len(p['seeds'])} ({short})"
        t = "-" if p.get("t_low") is None else _bracket(p["t_low"], p["t_high"]) + " pts"
        need = p.get("seeds_for_power") or {}
        power = " / ".join(f"{f'>{MAX_SEEDS}' if n is None else n} at {e}" for e, n in need.items()) or "-"
        sd = p.get("per_seed_sd")
        sd = "-" if sd is None else f"{100 * sd['sd']:.1f} [{100 * sd['low']:.1f}, {100 * sd['high']:.1f}]"
        per_seed = ", ".join(f"{100 * d:+.1f}" for d in p.get("per_seed", []))
        if markdown and len(p.get("per_seed", [])) > INLINE_SEEDS:
            below2.append(item(f"{p['comparison']}, {p['variant']} lr {lr}, seeds {seed_span(p['seeds'])}: "
                               f"{per_seed}"))
            per_seed = "below"
        rows2.append([p["variant"], p["comparison"], p["comparison_kind"], lr, seeds,
                      _interval(p) + " pts", t, per_seed, sd, power])
    head2 = ["variant", "comparison", "which comparison", "lr", "seeds", "pooled delta (95%, seeds then tasks)",
             "t over seeds (95%)", "per seed", "per-seed SD (95% CI, pts)",
             f"seeds for {POWER:.0%} power at the paper's gains"]
    rows3, head3 = _mechanism_rows(cells)
    base = cells[0] if cells else None
    note = (f"{summary['name']}: {len(cells)} cells; base pass@1 {_pct(base['base_mean'])} (noise floor "
            f"{100 * base['noise_floor']:.1f} pts); per arm: mean over seeds (each seed); * = collapsed below the "
            f"base. Best stable lr (training logs only: the highest late training reward among the learning rates "
            f"where no seed's training reward fell; never test scores): "
            + ", ".join(f"{r['variant']}/{r['arm']} {r['learning_rate']:g}" for r in summary["best_stable"])
            + ". " + collapse_counts(cells, columns)) if base else f"{summary['name']}: no finished cells yet."
    mechanism = "Per training step, median over the steps:\n\n" + report_table(head3, rows3, markdown, width)
    primary = [primary_line(summary["primary"])] if "primary" in summary else []
    primary += [secondary_line(s) for s in summary.get("secondary", [])]
    primary += [sequential_line(summary["sequential"], (summary.get("plan") or {}).get("file"))] \
        if "sequential" in summary else []
    sens = sensitivity_table(summary["sequential"], markdown, width) if "sequential" in summary else ""
    table1, table2 = report_table(head1, rows1, markdown, width), report_table(head2, rows2, markdown, width)
    if markdown:
        table1 += "\n\nEach seed's pass@1:\n\n" + "\n".join(below1) if below1 else ""
        table2 += ("\n\n" + fill("Seeds: " + "; ".join(f"{k}: {v}" for k, v in notes2.items()) + ".")) \
            if notes2 else ""
        table2 += "\n\nEach seed's delta (points):\n\n" + "\n".join(below2) if below2 else ""
    # a table without rows is left out (a sweep whose cells have not run yet prints its plan and its note only)
    parts = [*([sens] if sens else []), *([table1] if rows1 else []), *([table2] if rows2 else [])]
    if not markdown:
        return fit_text("\n\n".join([*primary, *parts, note, *([mechanism] if rows3 else [])]), width)
    return "\n\n".join([*(fill(x) for x in primary), *parts, fill(note), *([mechanism] if rows3 else [])])


def _mechanism_rows(cells: list[dict]) -> tuple[list[list[str]], list[str]]:
    """Each cell's arms' per-step medians of how concentrated the update was (summary.MECHANISM), and the header."""
    rows = []
    for c in sorted(cells, key=lambda c: (c["variant"], c["learning_rate"], c["seed"])):
        for arm in rule_arms():
            if arm in c["arms"] and "mechanism" in c["arms"][arm]:
                m = c["arms"][arm]["mechanism"]
                rows.append([c["variant"], f"{c['learning_rate']:g}", str(c["seed"]), arm,
                             *("-" if m[k] is None else f"{m[k]:.3g}" for k in MECHANISM)])
    head = ["variant", "lr", "seed", "arm", "effective answers (of the batch)", "top answer's share of kept |omega|",
            "kept tokens in zero-advantage answers", "cosine with the previous update", "grad norm"]
    return rows, head


def collapse_counts(cells: list[dict], arms: list[str]) -> str:
    """Per arm, the runs that collapsed below the base (the '*' of the table) with their cells' seeds: one such run
    moves a mean over seeds far, so the reader sees how many there are."""
    parts = []
    for arm in arms:
        runs = [c for c in cells if c["arms"].get(arm, {}).get("verdict") == "collapsed"]
        total = sum(arm in c["arms"] for c in cells)
        parts.append(f"{arm} {len(runs)} of {total}"
                     + (f" (seed {', '.join(str(c['seed']) for c in runs)})" if runs else ""))
    return "Collapsed below the base: " + "; ".join(parts) + "."
