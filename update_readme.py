"""Regenerate the result blocks of the documentation pages, and the headline figure, from the committed results files.

Each block sits between `<!-- BEGIN generated: COMMAND -->` and `<!-- END generated -->`; its body is COMMAND's output.
tests/test_readme.py fails when a block differs from what its command prints, so no documented number is typed by hand.

    python update_readme.py                                        # rewrite every page's blocks and the figure
    python update_readme.py --check                                # exit 1 naming each stale block, write nothing
    python update_readme.py --headline results/qwen/sweep.json     # the README's headline table
    python update_readme.py --decisions First=results/qwen/sweep.json Confirmatory=results/confirm/sweep.json
    python update_readme.py --task-intervals results/qwen/sweep.json  # how wide one cell's interval over tasks is
    python update_readme.py --provenance results/qwen/sweep.json  # when and in which process each arm ran
    python update_readme.py --versions results/quickstart-cpu/results.json  # the libraries a reference run used
    python update_readme.py --mechanism results/qwen/mechanism.json results/coupled/mechanism.json  # delta vs updates
    python update_readme.py --posthoc First=results/qwen/sweep.json Confirmatory=results/confirm/sweep.json \
        --pilot results/coupled/sweep.json                         # beyond the plan: pooled, robust, why undecided
    python update_readme.py --reading results/confirm/sweep.json  # the control and the mechanism, for the README
    python update_readme.py --reward-falls results/confirm/sweep.json  # each run whose training reward fell
    python update_readme.py --glossary results/confirm/sweep.json  # the README's words: omega, ETS-nz, the verdicts
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from gmts_recipe import posthoc
from gmts_recipe.arms import ARMS, PRIMARY, arm_named, arms, control_comparisons, short_name
from gmts_recipe.markdown import README_WIDTH, fill, fill_lines, item
from gmts_recipe.plots import seed_deltas, setting_scores
from gmts_recipe.records import json_file
from gmts_recipe.stats import seed_t_interval, signed
from gmts_recipe.sweep.deviations import arm_processes, deviations, seed_runs
from gmts_recipe.sweep.summary import CLAIMED
from gmts_recipe.user_rules import RULES_HELP, RULES_OPTION, RulesError, rules_arguments, take_rules

ROOT = Path(__file__).resolve().parent
# Every page that holds generated blocks (commands run from the repository root, whatever the page's folder).
PAGES = ("README.md", "docs/results.md", "bench/README.md", *(f"bench/docs/{name}.md" for name in (
    "speed-options", "selection-cost", "step", "side-by-side", "scaling", "offline-task", "repeat", "reward-versions",
    "math-estimate", "cell-size", "cpu-times", "extension-recipe")),
    "results/LOG.md", "docs/guides/gpu-memory.md", "docs/contribute-seeds.md")
BLOCK = re.compile(r"(<!-- BEGIN generated: (?P<cmd>.+?) -->\n)(?P<body>.*?)(<!-- END generated -->)", re.S)
FIGURE = "docs/headline.png"  # python -m gmts_recipe.plots --tests FIGURE_TESTS --out FIGURE
FIGURE_TESTS = "Confirmatory=results/confirm/sweep.json First=results/qwen/sweep.json"  # the larger test first
# each gets mechanism.json and .png
MECHANISM_SWEEPS = ("results/qwen/sweep.json", "results/coupled/sweep.json", "results/confirm/sweep.json")

BASE_NAME = "base (untrained)"
RULES_COMMANDS = ("check.py", "sweep.py", "recipe.py", "eval.py")  # the block commands that read --rules
_RULES: list[str] = []  # this run's --rules options (main), passed on to those commands


def _name(arm: str) -> str:
    """The arm's label in a markdown table (a pipe escaped)."""
    return arm_named(arm).label().replace("|", "\\|")


def headline_comparisons() -> tuple[tuple[str, str], ...]:
    """The comparisons the analysis plan names (the primary test, the control's), then each arm against plain GRPO
    (the rule without a score)."""
    plain = [a.name for a in ARMS.values() if a.ranks_by is None]
    against = tuple((a, b) for b in plain for a in arms() if a not in plain)
    return tuple(dict.fromkeys((PRIMARY, *control_comparisons(), *against)))


def run(cmd: str) -> str:
    argv = shlex.split(cmd)
    if argv[0] == "python":
        argv[0] = sys.executable
    if argv[1:2] and argv[1] in RULES_COMMANDS:
        argv += _RULES  # this run's --rules, for a command that reads them
    return subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True).stdout.rstrip("\n") + "\n"


def blocks(text: str) -> list[re.Match]:
    return list(BLOCK.finditer(text))


# ---------------------------------------------------------------------------- the headline, from sweep.json
def _span(seeds: list[int]) -> str:
    """17-35 for a run of consecutive seeds, else the list."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _points(x: float) -> str:
    return f"{100 * x:+.1f}"


def _bracket(low: float | None, high: float | None, unit: str = "") -> str:
    if low is None:
        return "-"
    return f"[{100 * low:+.1f}, {100 * high:+.1f}]" if not unit else f"[{100 * low:.1f}%, {100 * high:.1f}%]"


def _label(comparison: str) -> str:
    """'gmts - ets' as the tables name it: 'GMTS - ETS'."""
    a, b = comparison.split(" - ")
    return f"{short_name(a)} - {short_name(b)}"


def _decision_rule(primary: dict) -> str:
    return (f"reproduced if the interval lies above {signed(primary['reproduced_above_points'])}, refuted if it lies "
            f"below {signed(primary['refuted_below_points'])}")


def headline(summary: dict, root: Path) -> str:
    """One table: each arm's pass@1 at the primary test's setting (mean over training seeds, Student's t interval of
    that mean), then the planned comparisons and each arm against GRPO (mean per-seed difference, t over seeds), with
    what the analysis plan makes of each; below it the primary test in one sentence."""
    p = summary["primary"]
    scores = setting_scores(summary)
    base = next(c for c in summary["cells"] if c["variant"] == p["variant"])
    base_seeds = _base_seeds(summary, root)
    rows = [["| | pass@1 (mean over seeds) or difference (points) | 95% interval, Student's t over seeds | seeds | "
             "what the analysis plan says |", "|---|---|---|---|---|"]]
    lo, hi = seed_t_interval(base_seeds) if base_seeds else (None, None)
    rows.append([f"| {BASE_NAME} | {100 * base['base_mean']:.1f}% | {_bracket(lo, hi, '%')} | "
                 f"{len(base_seeds) or '-'} sampling seeds of one model | - |"])
    for arm in arms():
        if arm not in scores:
            continue
        seeds = sorted(scores[arm])
        values = [scores[arm][s] for s in seeds]
        lo, hi = seed_t_interval(values)  # (None, None) from one seed: "-"
        rows.append([f"| {_name(arm)} | {100 * sum(values) / len(values):.1f}% | {_bracket(lo, hi, '%')} | "
                     f"{len(seeds)} ({_span(seeds)}) | - |"])
    primary = tuple(p["comparison"].split(" - "))
    secondary = {tuple(s["comparison"].split(" - ")): s for s in summary.get("secondary", [])}
    for a, b in headline_comparisons():
        seeds, deltas = seed_deltas(scores, a, b)
        if (a, b) in secondary:  # the plan's own seeds for it
            planned = secondary[(a, b)]
            deltas = [d for s, d in zip(seeds, deltas) if s in planned["seeds_done"]]
            seeds = [s for s in seeds if s in planned["seeds_done"]]
        if len(seeds) < 2:
            continue
        lo, hi = seed_t_interval(deltas)
        if (a, b) in secondary:
            name = f"{short_name(a)} - {short_name(b)} (secondary)"
            says = ("planned: its interval, no decision" if secondary[(a, b)]["status"] == "complete" else
                    f"planned, **interim** ({len(seeds)} of {len(secondary[(a, b)]['seeds'])} seeds): its interval, "
                    f"no decision")
        elif (a, b) == primary:
            done = "" if p["decision"] != "interim" else f" ({len(p['seeds_done'])} of {len(p['seeds'])} seeds)"
            name, says = (f"**{short_name(a)} - {short_name(b)}** (primary test)",
                          f"**{p['decision']}**{done}: {_decision_rule(p)}")
        elif (a, b) in control_comparisons():
            name, says = (f"{short_name(a)} - {short_name(b)} (control)",
                          f"read descriptively: {len(seeds)} seeds cannot test a gain of {_claimed_range()}")
        else:
            name, says = f"{short_name(a)} - {short_name(b)}", "outside the plan: descriptive"
        rows.append([f"| {name} | {_points(sum(deltas) / len(deltas))} | {_bracket(lo, hi)} | "
                     f"{len(seeds)} ({_span(seeds)}) | {says} |"])
    table = "\n".join(r[0] if len(r) == 1 else "\n".join(r) for r in rows)
    test = _label(p["comparison"])
    if p["delta"] is None:  # fewer than two of its seeds have run: no interval yet
        result = (f"{len(p['seeds_done'])} of its {len(p['seeds'])} seeds done: **{p['decision']}**, no interval "
                  f"before two")
    else:
        result = (f"over {len(p['seeds_done'])} seeds is {_points(p['delta'])} points, t "
                  f"{_bracket(p['t_low'], p['t_high'])}: **{p['decision']}**"
                  + (f" ({len(p['seeds_done'])} of {len(p['seeds'])} planned seeds)"
                     if p["decision"] == "interim" else ""))
    note = (f"lr {p['learning_rate']:g}, every arm evaluated on all {base_tasks(summary)} GSM8K test problems. "
            f"Primary test: {test} {result}; the paper claims {_claimed_range()} points.")
    return f"{table}\n\n{note}\n"


def _plain_above(table: str, summary: dict) -> str:
    """The plain-GRPO row of the result table, where its mean lies above both arms of the primary test: says so, with
    the plan's secondary comparisons against it (their intervals over GRPO's own seeds, no decision)."""
    plain = next((a.name for a in ARMS.values() if a.ranks_by is None), None)
    scores = setting_scores(summary)
    mean = {arm: sum(v.values()) / len(v) for arm, v in scores.items() if v}
    compared = summary["primary"]["comparison"].split(" - ")[::-1]
    rows = {s["comparison"]: s for s in summary.get("secondary", [])}
    against = [rows.get(f"{a} - {plain}") for a in compared]
    if plain not in mean or any(a not in mean or mean[a] >= mean[plain] for a in compared) \
            or any(r is None or r["delta"] is None for r in against):
        return table
    said = ", ".join(f"{_label(r['comparison'])} {_points(r['delta'])} {_bracket(r['t_low'], r['t_high'])}"
                     for r in against)
    text = (f"above {' and '.join(short_name(a) for a in compared)}: {said} over its {len(scores[plain])} seeds "
            f"(secondary, no decision)")
    return "\n".join(line.removesuffix("| - |") + f"| {text} |" if line.startswith(f"| {_name(plain)} |") else line
                     for line in table.splitlines())


def result(summary: dict, root: Path, extension: dict) -> str:
    """The README's result table: the confirmatory test's (`headline`: every arm, each planned comparison with its
    interval and what the plan says), then one row for its sequential extension where it stands (the last planned
    look reached, its interval at that look's boundaries, the next look and the decision rule)."""
    q = extension["sequential"]
    st, looks = q["state"], q["looks"]
    lk = st["looks"][-1]
    where = f"{st['seeds_done']} of {looks[-1]}" + ("" if st["next_look"] is None else
                                                   f"; next look {st['next_look']} "
                                                   f"({st['seeds_done'] - lk['seeds']} of "
                                                   f"{st['next_look'] - lk['seeds']} new)")
    says = (f"**{st['decision'] or 'continue'}**: reproduced if (mean - {q['reproduced_above_points']:g}) / se > "
            f"{q['critical']['reproduced']:.2f}, refuted if (mean - {q['refuted_below_points']:g}) / se < "
            f"-{q['critical']['refuted']:.2f}")
    row = (f"| {_label(q['comparison'])}, continued | {_points(lk['mean'] / 100)} | "
           f"{_bracket(lk['low'] / 100, lk['high'] / 100)} at look {lk['look']} | {where} | {says} |")
    table, note = headline(summary, root).split("\n\n", 1)
    table = _plain_above(table, summary)
    # the planned secondary comparisons are intervals without a decision: docs/results.md lists them
    secondary = [line for line in table.splitlines() if "(secondary)" in line]
    table = "\n".join(line for line in table.splitlines() if line not in secondary)
    more = (f" Its {len(secondary)} secondary comparisons (intervals, no decision): "
            f"[docs/results.md](docs/results.md#the-confirmatory-test-its-result).") if secondary else ""
    first = summary["cells"][0]["path"] if summary.get("cells") else None
    ran = f" Setting: {setting(json.loads((root / first).read_text()))}; {PAPER_SETTING}." if first else ""
    # at look 0 the extension's row is the primary test's own seeds and numbers, read by another rule: one result
    rci = "a repeated confidence interval (valid at every look)"
    same = (f" The two {_label(q['comparison'])} rows are one result, its {lk['seeds']} seeds under two rules, the "
            f"second's interval {rci}." if lk["look"] == 0 else f" The continued row's interval is {rci}.")
    return fill_lines(f"{table}\n{row}\n\n{note.rstrip()}{same}{more}{ran}") + "\n"


def plan(summary: dict, root: Path) -> str:
    """A confirmatory test where it stands: one row for its primary test and one per secondary comparison, each over
    its own planned seeds that have run (sweep.json's primary and secondary entries), the same rows from the first
    seed to the last, so the README's block keeps its size; a table for a grid whose plan lists no secondary
    comparison has the primary row only."""
    p = summary["primary"]

    def cells(entry: dict) -> str:
        done, planned = entry["seeds_done"], entry["seeds"]
        value = _points(entry["delta"]) if entry["delta"] is not None else "-"
        interval = _bracket(entry["t_low"], entry["t_high"]) if entry["delta"] is not None else "- (from two seeds)"
        return f"{value} | {interval} | {len(done)} of {len(planned)} ({_span(planned)})"

    rule = _decision_rule(p)
    says = (f"**interim**: decided once all {len(p['seeds'])} have run; {rule}" if p["decision"] == "interim" else
            f"**{p['decision']}**: {rule}")
    rows = [f"| comparison (lr {p['learning_rate']:g}) | difference (points) | 95% interval, Student's t over seeds | "
            "seeds done of planned | what the plan says |", "|---|---|---|---|---|",
            f"| **{_label(p['comparison'])}** (primary test) | {cells(p)} | {says} |"]
    for entry in summary.get("secondary", []):
        status = "interim: " if entry["status"] == "interim" else ""
        rows.append(f"| {_label(entry['comparison'])} (secondary) | {cells(entry)} | {status}its interval, no "
                    f"decision |")
    return "\n".join(rows) + "\n"


# What the paper trained, beside which the setting line places the tests' runs.
PAPER_SETTING = "the paper trains Qwen2.5-Math models on MATH with answers of up to 2048 tokens"
# The offline names of gmts_recipe/models.py, said as the model they are (a GGUF file, dequantized to train).
MODEL_NAMES = {"qwen2.5-coder-1.5b-instruct": "Qwen2.5-Coder-1.5B-Instruct (dequantized from its Q4_K_M GGUF)",
               "smollm2-135m-instruct": "SmolLM2-135M-Instruct (dequantized from its GGUF)"}


def setting(results: dict) -> str:
    """What one cell of a test ran, read from its results.json: model, adapter, steps, rollouts per step, answer
    length, task and held-out tasks."""
    c, data = results["config"], results["data"]
    gpus = results.get("versions", {}).get("gpus") or 1
    rollouts = c["per_device_train_batch_size"] * c["gradient_accumulation_steps"] * gpus
    model = MODEL_NAMES.get(c["model_name_or_path"], c["model_name_or_path"])
    adapter = f"LoRA r={c['lora_r']}" if c.get("use_peft", True) and c.get("lora_r") else "full fine-tuning"
    return (f"{model}, {adapter}, {c['max_steps']} steps of {rollouts} rollouts with answers of at most "
            f"{c['max_completion_length']} tokens on {data['task'].upper()} ({len(data['train'])} training problems), "
            f"evaluated on all {len(data['heldout'])} held-out problems")


def decisions(tests: list[tuple[str, dict]], folders: list[Path] | None = None) -> str:
    """The README's first lines on the claim: each planned test's primary decision, one line each, never pooled,
    then what the tests ran (read from each test's first cell, in `folders`) beside what the paper ran.
    `tests`: (name, sweep summary), e.g. ("First", ...), ("Confirmatory", ...)."""
    lines = []
    for name, summary in tests:
        p = summary["primary"]
        done, planned = len(p["seeds_done"]), len(p["seeds"])
        if p["delta"] is None:
            result = f"{done} of {planned} seeds done, no interval before two"
        else:
            result = (f"{_points(p['delta'])} points, t {_bracket(p['t_low'], p['t_high'])} over "
                      + (f"{done} seeds" if done == planned else f"{done} of {planned} planned seeds"))
        lines.append(f"- {name} test, seeds {_span(p['seeds'])} at lr {p['learning_rate']:g}: "
                     f"{_label(p['comparison'])} {result}: **{p['decision']}**")
    verdicts = {summary["primary"]["decision"] for _, summary in tests}
    rules = {name: _decision_rule(summary["primary"]) for name, summary in tests}
    if len(set(rules.values())) == 1:
        rule = f"each {next(iter(rules.values()))}"
    else:
        rule = "; ".join(f"{name}: {text}" for name, text in rules.items())
    if len(tests) == 1:
        head = "**Decision**"
    elif len(verdicts) == 1:
        head = f"**{'Both' if len(tests) == 2 else 'All'} {verdicts.pop()}**"
    else:
        head = "**Decisions**"
    if folders:
        settings = {setting(json.loads((folder / summary["cells"][0]["path"]).read_text()))
                    for folder, (_, summary) in zip(folders, tests) if summary.get("cells")}
        if len(settings) == 1:
            both = {1: "the test", 2: "both tests"}.get(len(tests), "the tests")
            lines.append(f"- Setting of {both}: {settings.pop()}; {PAPER_SETTING}.")
        elif settings:
            lines.append("- Settings: " + "; ".join(sorted(settings)) + f"; {PAPER_SETTING}.")
    return fill_lines(f"{head} (the paper claims {_claimed_range()} points; {rule}):\n" + "\n".join(lines)) + "\n"


def glossary(summary: dict) -> str:
    """The README's words, three items: omega and the control ETS-nz; the planned test's two thresholds and why the
    upper one is the paper's smallest claimed gain; check.py's verdicts (stats.verdict)."""
    p = summary["primary"]
    low, _ = CLAIMED[p["comparison"]]
    refuted = signed(p["refuted_below_points"])
    why = ("the paper's smallest claimed gain" if abs(p["refuted_below_points"] - 100 * low) < 1e-9 else
           f"not the paper's smallest claimed gain ({_points(low)})")
    items = ["**omega**: the scalar in front of grad log-prob; here (on-policy, beta 0) the answer's advantage. "
             "**ETS-nz**: ETS with the omega = 0 tokens ranked last.",
             f"**refuted**: the interval below {refuted}, {why} (of {_claimed_range()} points), so no gain it "
             f"reports fits; **reproduced**: above {signed(p['reproduced_above_points'])}.",
             "**moved** (check.py): interval above 0 and delta past the noise floor (the base's spread over "
             "sampling seeds); **collapsed**: both below; **flat**: else."]
    return "\n".join(item(x, README_WIDTH) for x in items) + "\n"  # one line each


def _claimed_range() -> str:
    """The gains over ETS the GMTS paper reports, in points (gmts_recipe.sweep.summary.CLAIMED)."""
    low, high = CLAIMED["gmts - ets"]
    return f"{100 * low:+.1f} to {100 * high:+.1f}"


def _base_seeds(summary: dict, root: Path) -> list[float]:
    """The untrained model's pass@1 per sampling seed, read from the first cell's results file (sweep.json keeps only
    their mean; every cell shares them: gmts_recipe.sweep.summary.summarize refuses cells that disagree)."""
    cell = summary["cells"][0]
    results = json.loads((root / cell["path"]).read_text())
    return [e["pass@1"] for e in results["base"]["evals"]]


def base_tasks(summary: dict) -> int:
    return next(c["arms"][a]["vs_base"]["n"] for c in summary["cells"] for a in c["arms"])


# ---------------------------------------------------------------------------- what the results document states
def task_intervals(summary: dict, root: Path) -> str:
    """How wide one cell's paired interval over its tasks is (half the width of GMTS - ETS's 95% bootstrap interval,
    in points) over the primary test's cells: what a single run's interval can and cannot say."""
    p = summary["primary"]
    a, b = p["comparison"].split(" - ")
    halves = []
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) == (p["variant"], p["learning_rate"]) and cell["seed"] in p["seeds_done"]:
            c = json.loads((root / cell["path"]).read_text())["summary"]["comparisons"][f"{a}_vs_{b}"]
            halves.append(100 * (c["high"] - c["low"]) / 2)
    return (f"One cell's {short_name(a)} - {short_name(b)} interval over its {base_tasks(summary)} tasks is +-{min(halves):.1f} "
            f"to +-{max(halves):.1f} points (half its 95% paired bootstrap interval, {len(halves)} cells of the primary "
            f"test).\n")


def provenance(summary: dict, root: Path) -> str:
    """When and in which process each arm of the primary test's cells ran (their logs), and where two arms' records
    show other code than the baseline arm's (the primary comparison's second arm, ETS): generation options one arm
    records and the other does not, fields only newer code writes, an arm merged in from another machine. The pairs a
    comparison rests on should share a process and code."""
    p = summary["primary"]
    a, b = p["comparison"].split(" - ")
    arms = list(ARMS)  # the arms table's, in its order
    lines = ["| seed | " + " | ".join(f"{short_name(x)} trained (process start)" for x in arms) + " |",
             "|---|" + "---|" * len(arms)]
    apart, together, shown = [], [], {}
    for cell in summary["cells"]:
        if (cell["variant"], cell["learning_rate"]) != (p["variant"], p["learning_rate"]) or cell["seed"] not in p["seeds"]:
            continue
        results = json.loads((root / cell["path"]).read_text())
        procs = arm_processes(root / "logs", cell["cell"])
        for note in _record_differences(results, b, [x for x in arms if x != b and x in results["arms"]]):
            shown.setdefault(note, []).append(cell["seed"])
        split = a in procs and b in procs and procs[a][1] != procs[b][1]
        if split:
            (together if procs[a][0] == procs[b][0] else apart).append(cell["seed"])
        lines.append(f"| {cell['seed']} | " + " | ".join(
            (procs[x][0] + (f" ({procs[x][1]})" if split and x in (a, b) else "")
             if x in procs else ("?" if x in results["arms"] else "-")) for x in arms) + " |")
    said = (f"{short_name(a)} and {short_name(b)} ran in processes started at different times for seeds "
            f"{', '.join(map(str, apart)) or 'none'}; in two processes started together for seeds "
            f"{', '.join(map(str, together)) or 'none'}; in one process for the others (?: the log of the process that "
            f"made a merged arm is not in the repository).")
    records = [item(f"Seed{'s' * (len(seeds) > 1)} {seed_runs(seeds)}: {note}.") for note, seeds in shown.items()]
    return ("\n".join(lines) + "\n\n" + fill(f"Times: each process's start (month-day, the GPU machine's clock) from "
                                             f"{(root / 'logs').as_posix()}/. {said}")
            + "\n\nWhat the records show against the " + short_name(b) + " arm of the same seed:\n\n"
            + ("\n".join(records) if records else "- nothing: every arm records what it does.") + "\n")


def _record_differences(results: dict, reference: str, others: list[str]) -> list[str]:
    """What an arm's record holds that the reference arm's does not (or the other way): generation options, evaluation
    fields, a merge from another machine; each a sign that the two arms ran different code."""
    arms = results["arms"]
    notes = []
    for other in others:
        x, y = arms[reference], arms[other]
        for first, second, f, s in ((x, y, reference, other), (y, x, other, reference)):
            extra = sorted(set(first.get("generation_options", {})) - set(second.get("generation_options", {})))
            extra += sorted(f"eval.{k}" for k in set(first["eval"]) - set(second["eval"]))
            if extra:
                notes.append(f"{short_name(f)} records {', '.join(extra)}; {short_name(s)} does not")
    for m in results.get("merges", []):
        notes.append(f"{', '.join(short_name(x) for x in m.get('arms', []))} merged in from another machine")
    return notes


def interim(summary: dict, root: Path) -> str:
    """The primary test's interval as its seeds came in (in seed order, the order its cells ran but for the few arms
    run later): at how many of the interim seed counts it lay above the plan's reproduction threshold, and where it
    lay highest. A plan without a stopping rule is not moved by these; the line says what a reader of the interim
    tables could have seen."""
    p = summary["primary"]
    a, b = p["comparison"].split(" - ")
    deltas = []
    for cell in sorted(summary["cells"], key=lambda c: c["seed"]):
        if (cell["variant"], cell["learning_rate"]) == (p["variant"], p["learning_rate"]) and cell["seed"] in p["seeds"]:
            if a in cell["arms"] and b in cell["arms"]:
                deltas.append(cell["arms"][a]["pass@1"] - cell["arms"][b]["pass@1"])
    above, best = [], None
    for n in range(2, len(deltas)):
        low, high = seed_t_interval(deltas[:n])
        if low > p["reproduced_above_points"] / 100:
            above.append(n)
        if best is None or low > best[1]:
            best = (n, low, high, sum(deltas[:n]) / n)
    threshold = _points(p["reproduced_above_points"] / 100).replace("+0.0", "0")
    if not above:
        return fill(f"At no interim count of seeds (2 to {len(deltas) - 1}, in seed order) did the interval lie above "
                    f"{threshold}.") + "\n"
    n, low, high, mean = best
    return fill(f"In seed order, the interval lay above {threshold} at {len(above)} of the {len(deltas) - 2} interim "
                f"seed counts (2 to {len(deltas) - 1}): at {seed_runs(above)} seeds; highest at {n} seeds, "
                f"{_points(mean)} points, t {_bracket(low, high)}. With all {len(deltas)}: {_points(p['delta'])}, t "
                f"{_bracket(p['t_low'], p['t_high'])}.") + "\n"


def versions(results: dict) -> str:
    """The library versions a reference run recorded, as a constraint line reads them."""
    v = results["versions"]
    return ", ".join(f"{k} {v[k]}" for k in ("python", "torch", "transformers", "trl", "peft") if v.get(k)) + "\n"


def _r(x: float | None, low: float | None, high: float | None) -> str:
    return "-" if x is None else f"{x:+.2f} [{low:+.2f}, {high:+.2f}]"


def mechanism(analyses: list[dict]) -> str:
    """One table over grids (their mechanism.json, gmts_recipe.mechanism): for each variable, across the test's seeds,
    Pearson's r and Spearman's rho of the per-seed GMTS - ETS with it (Fisher z intervals), the slope and the range
    the variable spans; below it each grid's seeds (interim while planned seeds are missing) and how many intervals
    exclude 0 among how many drawn."""
    lines = ["| grid | per seed: mean over the training steps of | seeds | Pearson r [95%] | Spearman rho [95%] | "
             "slope (points per unit) | across seeds |", "|---|---|---|---|---|---|---|"]
    notes = []
    for a in analyses:
        seeds, planned = a["seeds"], a["planned_seeds"]
        status = "interim" if a["status"] == "interim" else "complete"
        for row in a["associations"]:
            slope = "-" if row["slope"] is None else f"{row['slope']:+.3g}"
            span = "-" if row["x_min"] is None else f"{row['x_min']:.3g} to {row['x_max']:.3g}"
            n = f"{row['n']} ({_span(row['seeds'])})" if row["n"] else f"0 ({row['note']})"
            lines.append(f"| {a['grid']} ({status}) | {row['label'].replace('|', chr(92) + '|')} | {n} | "
                         f"{_r(row['pearson'], row['pearson_low'], row['pearson_high'])} | "
                         f"{_r(row['spearman'], row['spearman_low'], row['spearman_high'])} | {slope} | {span} |")
        drawn = [r for r in a["associations"] if r["pearson"] is not None]
        apart = [r["label"] for r in drawn if r["pearson_low"] > 0 or r["pearson_high"] < 0]
        count = (f"{len(seeds)} of {len(planned)} planned seeds ({_span(seeds)} of {_span(planned)}): **interim**"
                 if status == "interim" else f"all {len(planned)} planned seeds ({_span(planned)})")
        notes.append(f"{a['grid']} ({a['variant']}, lr {a['learning_rate']:g}): {count}; the Pearson interval excludes "
                     f"0 for {len(apart)} of {len(drawn)} variables" + (f" ({'; '.join(apart)})" if apart else "")
                     + ".")
    interval = analyses[0]["interval"] if analyses else ""
    return "\n".join(lines) + "\n\n" + "\n".join(item(n) for n in [*notes, f"Intervals: {interval}."]) + "\n"


# ---------------------------------------------------------------------------- the sequential extension
def design_table(d: dict) -> str:
    """A sequential plan's design file (gmts_recipe.sweep.design) as the plan's page shows it: for each direction
    the boundary over the whole sequence under normal deltas and the plan's contamination model, and given the first
    stage under each conditional model, each with its Monte Carlo error; the value required (the largest plus the
    margin), the one adopted, its errors; never adopted, its errors under the first stage's own shape (resampled, its
    largest outlier added back in its direction and mirrored) and under other contamination models in both directions;
    then the outcomes given the seeds already observed at each true gap."""
    n, c, sim, model, o = d["looks"], d["critical"], d["simulation"], d["contamination"], d["observed"]
    never = lambda v: "never (the first look spent it)" if v is None else f"{v:.3f}"  # noqa: E731
    err = lambda e: f"{e['error']:.3f} ± {e['mc_error']:.4f} (first look {e['first_look']:.3f})"  # noqa: E731
    se = lambda v, s: "never" if v is None else f"{v:.3f} ± {s:.3f}"  # noqa: E731
    models = ("normal", "resampled", "collapse_down", "collapse_up")
    ex = d["first_look_exact"]
    lines = [f"Looks at {', '.join(map(str, n))} seeds; the first (the continued test) at its t quantile "
             f"{d['first_critical']:.3f}, its error spent at its own look; the later ones at the critical values "
             f"below. Over the whole sequence, two models: normal deltas ({sim['paths']:,} null paths) and the plan's "
             f"contamination model ({sim['contaminated_paths']:,}): a share {model['rate']:g} of seeds carries an "
             f"arm's collapse of {model['jump_sds']:g} clean SDs, down against \"reproduced\", up against "
             f"\"refuted\", a model chosen after the first {o['seeds']} seeds were seen (seed 227's collapse), not "
             f"before any data. The first look's share under each is exact ({ex['normal']:.4f} / "
             f"{ex['contaminated']:.6f}, a noncentral chi-square integral) and is each boundary's control variate. "
             f"Given the first {o['seeds']} seeds ({sim['conditional_paths']:,} paths a model): new deltas normal with "
             f"their SD, resampled from their residuals, or normal with their clean SD (without the largest outlier, "
             f"{o['largest_outlier']['rest_sd']:.2f}) with collapses of the plan's rate and size down (the first "
             f"arm's) or up (the second's). Seed {sim['seed']}; ± is the Monte Carlo standard error. Each critical "
             f"value must lie {d['margin_se']:g} standard errors above every boundary: the required value.", "",
             "| direction | boundary, whole sequence: normal / contaminated | boundary given the first "
             f"{o['seeds']} seeds: normal / resampled / collapses down / up | required | adopted |",
             "|---|---|---|---|---|"]
    for dr in ("reproduced", "refuted"):
        b, bse, cond = d["boundaries"][dr], d["boundary_se"][dr], d["conditional"][dr]
        lines.append(f"| {dr} | {se(b['normal'], bse['normal'])} / {se(b['contaminated'], bse['contaminated'])} | "
                     + " / ".join(se(cond[m]["boundary"], cond[m]["boundary_se"]) for m in models)
                     + f" | {never(d['required'][dr])} | {'never' if c[dr] is None else f'{c[dr]:.2f}'} |")
    lines += ["", "The adopted values' chance of a false decision, over the whole sequence from the first seed and, "
                  f"given the first {o['seeds']} seeds, by conditional model:", "",
              "| direction | whole: normal | whole: contaminated | whole, not adopted: resampled | given: normal | "
              "given: resampled | given: collapses down | given: collapses up |", "|---|---|---|---|---|---|---|---|"]
    for dr in ("reproduced", "refuted"):
        cond = d["conditional"][dr]
        lines.append(f"| {dr} | {err(d['errors']['normal'][dr])} | {err(d['errors']['contaminated'][dr])} | "
                     f"{err(d['errors']['resampled'][dr])} | "
                     + " | ".join(f"{cond[m]['error']:.3f} ± {cond[m]['mc_error']:.4f}" for m in models) + " |")
    lines += _design_beside(d)
    lines += ["", f"Given the {o['seeds']} seeds observed (mean {o['mean']:+.2f}, SD {o['sd']:.1f} points), new seeds "
                  f"drawn normal / resampled around each true gap ({sim['outcome_paths']:,} paths each):", "",
              "| true gap (points) | reproduced | refuted | smaller than claimed | undecided at the last look | "
              "new seeds (mean) | GPU-minutes (mean) |", "|---|---|---|---|---|---|---|"]
    rows = {}
    for row in d["outcomes"]:
        rows.setdefault(row["gap"], {})[row["resampled"]] = row
    for gap, pair in rows.items():
        cell = lambda k, f: f"{f(pair[False][k])} / {f(pair[True][k])}"  # noqa: E731
        share = lambda v: f"{v:.2f}"  # noqa: E731
        lines.append(f"| {gap:+.2f} | {cell('reproduced', share)} | {cell('refuted', share)} | "
                     f"{cell('a gain smaller than claimed', share)} | {cell('undecided', share)} | "
                     f"{cell('new_seeds', lambda v: f'{v:.0f}')} | "
                     f"{cell('gpu_minutes', lambda v: '-' if v is None else f'{v:.0f}')} |")
    lines += ["", f"GPU-minutes at {d['minutes_per_seed']:.2f} a seed: the median over the continued test's seeds of "
                  f"what their two arms' records say (training and evaluation, without start-up or model transfer)."]
    return fill_lines("\n".join(lines)) + "\n"


def _design_beside(d: dict) -> list[str]:
    """design_table's lines on what the design publishes beside the plan, never adopted: the resampled model's
    boundaries, the first stage's largest outlier added back (its direction and mirrored), the contamination grid."""
    sim, o = d["simulation"], d["observed"]
    never = lambda v: "never (the first look spent it)" if v is None else f"{v:.3f}"  # noqa: E731
    err = lambda e: f"{e['error']:.3f} ± {e['mc_error']:.4f} (first look {e['first_look']:.3f})"  # noqa: E731
    big = o["largest_outlier"]
    rb = d["resampled_boundaries"]
    by_direction: dict = {}
    for r in d["outlier_sensitivity"]:
        by_direction.setdefault(r["direction"], []).append(r)
    lines = ["", f"Beside the plan, never adopted: resampling the first {o['seeds']} seeds' residuals "
                  f"({sim['resampled_paths']:,} paths) would need {never(rb['reproduced'])} / "
                  f"{never(rb['refuted'])}; its skew is one seed's (delta {big['delta']:+.1f} points; the other "
                  f"{o['seeds'] - 1}: mean {big['rest_mean']:+.2f}, SD {big['rest_sd']:.2f}). That seed's jump added "
                  f"back to the other {o['seeds'] - 1} at a rate p ({sim['sensitivity_paths']:,} paths each), in its own "
                  f"direction and mirrored (a collapse of the other arm of the same size), the adopted boundaries' error "
                  f"over the whole sequence: "
                  + "; ".join(f"false \"{dr}\": " + ", ".join(
                      f"p {100 * r['rate']:g}% {err(r)}" + (" (the first look alone spends "
                                                             f"{d['error_per_direction']:g})"
                                                             if r["spent_by_first_look"] else "") for r in rows)
                      for dr, rows in by_direction.items()) + ".", "",
              f"Other contamination models, the adopted boundaries' error over the whole sequence "
              f"({sim['sensitivity_paths']:,} paths each; * the first look alone spends {d['error_per_direction']:g}, "
              f"which no later boundary can undo):", ""]
    jumps = sorted({r["jump_sds"] for r in d["contamination_sensitivity"]})
    lines += ["| direction | collapse rate | " + " | ".join(f"{j:g} SDs" for j in jumps) + " |",
              "|---|---|" + "---|" * len(jumps)]
    grid: dict = {}
    for r in d["contamination_sensitivity"]:
        grid.setdefault((r["direction"], r["rate"]), []).append(f"{r['error']:.3f}" + ("*" if r["spent_by_first_look"]
                                                                                      else ""))
    lines += [f"| {dr} | {100 * rate:g}% | " + " | ".join(v) + " |" for (dr, rate), v in grid.items()]
    return lines


def sequential_block(summary: dict) -> str:
    """The README's lines on the sequential extension, wrapped: where it stands and the next look in points with its
    command (sequential.report.sequential_parts), what a verdict means (computed, its chance of a false "reproduced"
    given the seeds seen from the design's simulation), notes and the sensitivity comparison."""
    import textwrap

    from gmts_recipe.sequential.report import sequential_parts

    q = summary["sequential"]
    parts = sequential_parts(q, (summary.get("plan") or {}).get("file"))
    # the rule and the last look reached are the result table's row (--result): here where it stands and what it means
    items = [" ".join(p for p in (f"**Now:** {parts['now']}", parts["estimate"], parts["next"]) if p),
             *([parts["sensitivity"]] if q.get("sensitivity_comparison") else []),  # at a look: beside the verdict
             parts["meaning"],
             *parts["notes"]]  # its table: check.py
    return "\n".join(textwrap.fill(item, 118, initial_indent="- ", subsequent_indent="  ") for item in items) + "\n"


# ---------------------------------------------------------------------------- the pages
def regenerate(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + run(m.group("cmd")) + m.group(4), text)


def stale(page: str) -> list[str]:
    """The commands of a page's blocks whose body differs from what the command prints now."""
    return [m.group("cmd") for m in blocks((ROOT / page).read_text()) if m.group("body") != run(m.group("cmd"))]


def named_sweep(item: str) -> tuple[str, str]:
    """argparse type of --decisions: NAME=SWEEP_JSON -> (NAME, the file, checked as the other options check theirs)."""
    name, sep, path = item.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{item!r} is not NAME=SWEEP_JSON")
    return name, json_file(path)


def parser() -> argparse.ArgumentParser:
    """Each block's option; none given: rewrite every page."""
    ap = argparse.ArgumentParser(description="Regenerate the documentation's generated blocks and headline figure.")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each stale block")
    ap.add_argument("--headline", metavar="SWEEP_JSON", type=json_file, help="print the README's headline table")
    ap.add_argument("--plan", metavar="SWEEP_JSON", type=json_file, help="print a planned test's rows: its primary "
                    "and secondary comparisons, each over its planned seeds done so far")
    ap.add_argument("--decisions", metavar="NAME=SWEEP_JSON", nargs="+", type=named_sweep,
                    help="print each planned test's primary decision, one line each (NAME: First, Confirmatory)")
    ap.add_argument("--task-intervals", metavar="SWEEP_JSON", type=json_file,
                    help="print the width of one cell's interval")
    ap.add_argument("--provenance", metavar="SWEEP_JSON", type=json_file,
                    help="print when and how each arm of the primary test ran")
    ap.add_argument("--interim", metavar="SWEEP_JSON", type=json_file,
                    help="print how a planned test's primary interval moved as its seeds came in")
    ap.add_argument("--deviations", metavar="SWEEP_JSON", type=json_file,
                    help="print where a planned test's cells departed from its plan, from the records")
    ap.add_argument("--versions", metavar="RESULTS_JSON", type=json_file,
                    help="print the library versions a run recorded")
    ap.add_argument("--mechanism", metavar="MECHANISM_JSON", nargs="+", type=json_file,
                    help="print the table of per-seed GMTS - ETS against the arms' updates, one or more grids")
    ap.add_argument("--posthoc", metavar="NAME=SWEEP_JSON", nargs="+", type=named_sweep,
                    help="print the analyses beyond the plan (gmts_recipe.posthoc) over these planned tests, the "
                         "last one's mechanism.json beside its sweep.json")
    ap.add_argument("--pilot", metavar="SWEEP_JSON", type=json_file, help="with --posthoc: a pilot pooled in too")
    ap.add_argument("--design", metavar="DESIGN_JSON", type=json_file,
                    help="print a sequential plan's boundaries and outcomes (python -m gmts_recipe.sweep.design)")
    ap.add_argument("--result", metavar=("SWEEP_JSON", "EXTENSION_SWEEP_JSON"), nargs=2, type=json_file,
                    help="print the README's result table: a planned test's arms and comparisons, then where its "
                         "sequential extension stands")
    ap.add_argument("--sequential", metavar="SWEEP_JSON", type=json_file,
                    help="print where a sequential plan stands and its caveat")
    ap.add_argument("--reading", metavar="SWEEP_JSON", type=json_file,
                    help="print what the control and the mechanism allow (its mechanism.json beside it), for the README")
    ap.add_argument("--reward-falls", metavar="SWEEP_JSON", type=json_file,
                    help="print each run of the primary test whose training reward fell, by how much, and how")
    ap.add_argument("--glossary", metavar="SWEEP_JSON", type=json_file,
                    help="print the README's glossary, its thresholds read from a planned test's sweep.json")
    ap.add_argument(RULES_OPTION, metavar="FILE", help=RULES_HELP)  # read by take_rules in main; here for --help
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # the user's own rules (--rules FILE): for the tables here and the commands of the generated blocks
        _RULES[:], argv = rules_arguments(argv), take_rules(argv)
    except RulesError as e:
        print(f"update_readme.py: {e}", file=sys.stderr)
        return 2
    args = parser().parse_args(argv)
    if args.posthoc:
        named = args.posthoc
        tests = [(name, json.loads(Path(path).read_text())) for name, path in named]
        roots = [Path(path).parent for _, path in named]
        pilot = None
        if args.pilot:
            summary = json.loads(Path(args.pilot).read_text())
            pilot = (f"seeds {_span(posthoc.primary_rows(summary)[1])}", summary)
        mechanism_path = roots[-1] / "mechanism.json"
        print(posthoc.section(tests, pilot, json.loads(mechanism_path.read_text()), roots), end="")
        return 0
    for option, show in ((args.headline, headline), (args.plan, plan), (args.task_intervals, task_intervals),
                         (args.provenance, provenance),
                         (args.deviations, lambda summary, root: fill_lines(deviations(summary, root).rstrip("\n")) + "\n"),
                         (args.interim, interim), (args.design, lambda d, _: design_table(d)),
                         (args.reading, lambda summary, root: posthoc.reading(
                             summary, json.loads((root / "mechanism.json").read_text()))),
                         (args.reward_falls, posthoc.falls_block), (args.glossary, lambda summary, _: glossary(summary)),
                         (args.sequential, lambda summary, _: sequential_block(summary))):
        if option:
            path = Path(option)
            print(show(json.loads(path.read_text()), path.parent), end="")
            return 0
    if args.result:
        main_path, ext_path = map(Path, args.result)
        print(result(json.loads(main_path.read_text()), main_path.parent, json.loads(ext_path.read_text())), end="")
        return 0
    if args.decisions:
        print(decisions([(name, json.loads(Path(path).read_text())) for name, path in args.decisions],
                        [Path(path).parent for _, path in args.decisions]), end="")
        return 0
    if args.versions:
        print(versions(json.loads(Path(args.versions).read_text())), end="")
        return 0
    if args.mechanism:
        print(mechanism([json.loads(Path(p).read_text()) for p in args.mechanism]), end="")
        return 0
    if args.check:
        old = [f"{page}: {cmd}" for page in PAGES for cmd in stale(page)]
        for line in old:
            print(f"stale block (run python update_readme.py): {line}")
        return 1 if old else 0
    for sweep in MECHANISM_SWEEPS:  # first: the pages' mechanism block quotes the files written here
        print(run(f"python -m gmts_recipe.plots mechanism {sweep}").strip().replace("\n", ", "))
    for page in PAGES:
        path = ROOT / page
        text = regenerate(path.read_text())
        path.write_text(text)
        print(f"{page}: regenerated {len(blocks(text))} blocks")
    print(run(f"python -m gmts_recipe.plots --tests {FIGURE_TESTS} --out {FIGURE}").strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
