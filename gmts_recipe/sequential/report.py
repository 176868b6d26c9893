"""A sequential plan in words and tables (check.py, through sweep.report.render, and update_readme.py), from the
summary's "sequential" entry (looks.sequential_test): the plan, its looks, its verdicts' meaning, its sensitivity."""

from __future__ import annotations

from gmts_recipe.arms import short_name
from gmts_recipe.markdown import fill
from gmts_recipe.sequential import sensitivity as sens
from gmts_recipe.stats import signed
from gmts_recipe.tables import fit_text, report_table, seed_span
from gmts_recipe.verify.plan import card_problem


def sequential_line(q: dict, plan: str | None = None) -> str:
    """One paragraph: the sequential plan as it states it, each look reached with its numbers, where the test stands (a
    decision, only at a planned look, or the next look with its boundaries in points and the command that runs its
    seeds), what a verdict means, and the planned sensitivity comparison."""
    parts = sequential_parts(q, plan)
    return " ".join([parts["rule"], *parts["looks"], parts["now"], parts["estimate"], parts["next"], parts["meaning"],
                     *parts["notes"], parts["sensitivity"]]).replace("  ", " ").strip()


def _span_of(values) -> str:
    low, high = min(values), max(values)
    return f"{low:.3f}" if f"{low:.3f}" == f"{high:.3f}" else f"{low:.3f}-{high:.3f}"


def meaning_line(q: dict) -> str:
    """What the plan's verdicts mean and what error they carry (looks.verdict_meaning's numbers, from the design
    file, computed, never typed): "reproduced" a gain above the lower threshold, not the paper's claimed gain; where a
    gain between the thresholds lands; the continued test's error spent at its look; the error over the whole sequence
    under the plan's models and where nearby collapse models exceed it; and each false decision's chance given the
    first stage's seeds."""
    m, n_last, n0 = q["meaning"], q["looks"][-1], len(q["continued_seeds"])
    low, high = q["reproduced_above_points"], q["refuted_below_points"]
    claimed = "" if not m.get("claimed") else f", not the paper's {m['claimed'][0]:+.1f} to {m['claimed'][1]:+.1f}"
    where = " (where the mean lies now)" if m.get("between_thresholds") else ""
    between = (f"a gain between {signed(low)} and {signed(high)}{where} gets no verdict by {n_last} seeds "
               f"(~{m['smaller_needs_seeds']} needed at SD {m['sd']:.1f})" if not m["smaller_possible"] else
               f"\"a gain smaller than claimed\" needs ~{m['smaller_needs_seeds']} seeds at SD {m['sd']:.1f}")
    text = (f"What a verdict means: \"reproduced\" = a gain above {low:g} points{claimed}; \"refuted\" = below "
            f"{signed(high)}; {between}. Error per direction from the first of the {n0} seeds (the "
            f"confirmatory test spent its {m['continued_error']:.3f} at its look; this plan came after it)")
    whole = m.get("whole_sequence")
    if whole:
        per = lambda model: " / ".join(f"{whole[d][model]:.3f}" for d in ("reproduced", "refuted"))  # noqa: E731
        text += (f": {per('normal')} (reproduced / refuted) under normal deltas, {per('contaminated')} under a "
                 f"contamination model chosen after seeing seed 227")
        near = m["nearby"]
        if near and near["over"]:
            text += (f", above {m['error_per_direction']:g} under {near['over']} of {near['models']} nearby collapse "
                     f"models ({_span_of(near['error'])}; look 0 alone spends {_span_of(near['first_look'])} there)")
    cond = m.get("conditional")
    if cond:
        text += (f"; given the first {n0} seeds ({len(cond['reproduced'])} models), a false \"reproduced\" "
                 f"{_span_of(cond['reproduced'].values())}, a false \"refuted\" {_span_of(cond['refuted'].values())}")
    return text + "."


def estimate_line(q: dict) -> str:
    """After a stop: the median-unbiased estimate and its interval (stage-wise ordering), beside the repeated
    confidence interval every look prints; "" while the test goes on."""
    e = q.get("estimate")
    if not e:
        return ""
    return (f"Estimate after the stop at {e['seeds']} seeds (median-unbiased, stage-wise ordering): "
            f"{e['median_unbiased']:+.2f} points, {100 * e['confidence']:g}% interval [{e['low']:+.2f}, "
            f"{e['high']:+.2f}] (the naive mean {e['mean']:+.2f}; the repeated confidence interval holds whatever the "
            f"stopping and is wider).")


def next_look_line(q: dict, plan: str | None = None) -> str:
    """The next look's boundaries in points (at the spread so far: the mean a decision needs there) and the command
    that runs its seeds; "" once the test has decided or passed its last look."""
    st = q["state"]
    if st["decision"] is not None or st["next_look"] is None:
        return ""
    n, sd = st["next_look"], q["meaning"]["sd"]
    i = q["looks"].index(n)
    se = sd / n ** 0.5
    need = [s for s in q["seeds"] if s not in q["seeds_done"]][:st["seeds_to_next_look"]]
    cmd = f"python sweep.py {plan or 'configs/sweeps/<name>.yaml'} --gpus 0 --warm_workers -- --gsm8k_path DIR"
    return (f"At look {i + 1}, with the spread so far (SD {sd:.1f} points, se {se:.2f} at {n} seeds): reproduced if "
            f"the mean exceeds {q['reproduced_above_points'] + q['critical']['reproduced'] * se:+.2f} points, "
            f"refuted if it lies below {q['refuted_below_points'] - q['critical']['refuted'] * se:+.2f}. Next: "
            f"`{cmd}` (resumes; seeds {seed_span(need)} reach it).")


def sequential_parts(q: dict, plan: str | None = None) -> dict:
    """sequential_line's sentences: the rule, each look reached, where the test stands (`now`), the next look in points
    with its command (`next`), what a verdict means (`meaning`), `notes` (seeds waiting for an earlier one, failed arms
    scored as the plan says, cells on a card the plan does not name) and the planned `sensitivity` comparison."""
    looks, st = q["looks"], q["state"]
    rule = (f"Sequential extension (plan fixed {q['fixed_on']}): {q['comparison']} at lr {q['learning_rate']:g} "
            f"({q['variant']}), the {len(q['continued_seeds'])} seeds of {q['continues']} then new seeds "
            f"{seed_span(q['seeds'])} in that order; looks at {', '.join(map(str, looks))} seeds; reproduced if (mean - "
            f"{q['reproduced_above_points']:g}) / se > {q['critical']['reproduced']:.2f}, refuted if (mean - "
            f"{q['refuted_below_points']:g}) / se < -{q['critical']['refuted']:.2f}.")
    reached = [(("Look 0 (the continued test)" if lk["look"] == 0 else f"Look {lk['look']} of {len(looks)}")
                + f" at {lk['seeds']} seeds: {lk['mean']:+.1f} points, repeated confidence interval [{lk['low']:+.1f}, "
                  f"{lk['high']:+.1f}] (mean - {lk['reproduced_critical']:.2f} se, mean + {lk['refuted_critical']:.2f} "
                  f"se): {lk['decision']}.") for lk in st["looks"]]
    if st["decision"] is not None:
        now = f"**{st['decision']}** at {st['looks'][-1]['seeds']} seeds."
    else:
        last = st["looks"][-1]["seeds"] if st["looks"] else 0
        now = (f"Look {looks.index(st['next_look']) + 1} of {len(looks)} at {st['next_look']} seeds: "
               f"{st['seeds_done'] - last} of its {st['next_look'] - last} new seeds have run "
               f"({st['seeds_to_next_look']} to go): continue.")
    notes = []
    if q["seeds_waiting"]:
        notes.append(f"Seeds run out of order, waiting for an earlier one: {', '.join(map(str, q['seeds_waiting']))}.")
    if q.get("retrying"):
        notes.append(f"Machine faults waiting for their retry: seed {', '.join(map(str, q['retrying']))}.")
    if q.get("scored_as_base"):
        notes.append("Arms that failed on their own, scored as the base model (the plan's failures): "
                     + ", ".join(f"seed {s} {a}" for s, a in q["scored_as_base"].items()) + ".")
    off = {s: c for s, c in q["cell_cards"].items() if card_problem(q["cards"], {s: c})}  # as check.py reads them
    if off:
        notes.append("Cells on a card the plan does not name: " + "; ".join(f"seed {s} {', '.join(c)}"
                                                                          for s, c in off.items()) + ".")
    return {"rule": rule, "looks": reached, "now": now, "estimate": estimate_line(q), "next": next_look_line(q, plan),
            "meaning": meaning_line(q), "notes": notes, "sensitivity": sensitivity_line(q)}


def sensitivity_line(q: dict) -> str:
    """The plan's sensitivity comparison in a few sentences (sensitivity), said to be none of the
    decision: at a look, its alarms (or none) against the thresholds fixed in advance, after an alarm the
    card-stratified estimates and that the verdict rests on card homogeneity, and its power; between looks only
    when it comes (it is read at looks only, as the verdict); "" past the last look without one."""
    c = q.get("sensitivity_comparison")
    if c is None:
        n = q["state"].get("next_look")
        return f"Sensitivity comparison (planned, never a decision): at the next look ({n} seeds)." if n else ""
    by = ["card", "library versions", *(k for k in q["sensitivity"] if k != "card")]
    head = (f"Sensitivity comparison at {c['seeds']} seeds (planned, never a decision): old seeds "
            f"against the {c['new_seeds']} new by {', '.join(by[:-1])} and {by[-1]}.")
    if not c["alarms"]:
        alarms = f"No alarm ({'; '.join(sens.ALARMS)})."
    else:
        strata = ", ".join(f"{s['card']} {s['mean']:+.1f}"
                           + ("" if s["low"] is None else f" [{s['low']:+.1f}, {s['high']:+.1f}]")
                           + f" ({s['seeds']} seed{'s' * (s['seeds'] != 1)})" for s in c["stratified"])
        alarms = (f"Alarm: {'; '.join(a['what'] for a in c['alarms'])}. {sens.HOMOGENEITY} Card-stratified, "
                  f"{q['comparison']} per card (points, Student's t 95%): {strata}.")
    p = c["power"]
    power = ("" if p["power"] is None else
             f"Its power is low: a {p['shift']:g}-point card shift is found with probability {p['power']:.2f} (Welch, "
             f"{p['alpha']:g} two-sided, SD {p['sd']:.1f}, all {p['new_seeds']} new seeds on one card against the "
             f"{p['old_seeds']} old), so no alarm is no evidence that cards agree.")
    return " ".join(x for x in (head, alarms, power) if x)


def sensitivity_table(q: dict, markdown: bool = False, width: int | None = None) -> str:
    """The sensitivity comparison's groups as a table: the old seeds, then the new ones by card, library versions and
    the plan's other keys, each with its GMTS - ETS mean and SD, Welch's difference against the old seeds, the
    Hodges-Lehmann shift, the SD ratio, each arm's pass@1 and collapses; below it the failed attempts by card and
    arm; "" between looks."""
    c = q.get("sensitivity_comparison")
    if c is None:
        return ""
    arms = q["comparison"].split(" - ")[::-1]  # ETS / GMTS: the order of the comparison's name reversed
    both = lambda d: " / ".join(str(d[a]) for a in arms)  # noqa: E731
    rng = lambda x, lo, hi: f"{x:+.2f} [{lo:+.2f}, {hi:+.2f}]" if lo is not None else f"{x:+.2f}"  # noqa: E731
    rows = []
    for g in [c["old"], *c["groups"]]:
        old = g["by"] == "old"
        w, h = g.get("welch"), g.get("hodges_lehmann")
        rows.append(["old" if old else f"new by {g['by']}",
                     f"{g['group']} ({g['card'] or 'several cards'}; {g['versions']})" if old else g["group"],
                     str(g["seeds"]), f"{g['mean']:+.2f}" + ("" if g["sd"] is None else f" ({g['sd']:.2f})"),
                     "-" if w is None else rng(w["difference"], w["low"], w["high"]),
                     "-" if h is None else rng(h["shift"], h["low"], h["high"]),
                     "-" if g.get("sd_ratio") is None else f"{g['sd_ratio']:.2f}",
                     " / ".join(f"{g['pass@1'][a]:.1f}%" for a in arms), both(g["collapses"])])
    names = " / ".join(short_name(a) for a in arms)
    head = ["seeds", "group", "n", f"{q['comparison']}: mean (SD), pts", "new - old: Welch 95%",
            "Hodges-Lehmann 95%", "SD ratio", f"pass@1 {names}", f"collapsed {names}"]
    failed = "; ".join(f"{f['card']} " + ", ".join(f"{short_name(a)} {f[a]}" for a in arms) for f in c["failures"])
    note = (f"Collapsed: the arm's verdict against the base, or its own failure scored as the base. Failed attempts "
            f"of the new seeds (failure.json), by card: {failed or 'none'}.")
    return report_table(head, rows, markdown, width) + "\n\n" + (fill(note) if markdown else fit_text(note, width))
