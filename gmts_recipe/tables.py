"""The result tables of a results file: the arms against the base, the compared pairs, and an eval-only file's table
(what check.py prints and update_readme.py puts in the README). Here, not in check.py, so that eval.py's command prints
its file's table without importing a script.
"""

from __future__ import annotations

import shutil
import sys
import textwrap

from gmts_recipe.arms import ARMS, DEFAULT_RATIO, arm_named, short_name
from gmts_recipe.records import ResultsError, agreement_line, task_scores
from gmts_recipe.stats import mean_interval


def counted(n: int, noun: str) -> str:
    """'1 seed', '2 seeds': a count with its noun in the number it takes (nouns that take an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _delta(d: dict | None) -> str:
    if not d:
        return "-"
    return f"{100 * d['delta']:+.1f} pts [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _verdict_text(entry: dict) -> str:
    return entry["verdict"] + "".join(f", {f}" for f in entry["flags"])


def _label(arm: str, results: dict) -> str:
    """The arm's label at the file's ratio of kept tokens (the config records it only when set)."""
    if arm not in ARMS:
        return arm
    return arm_named(arm).label(results.get("config", {}).get("selection_ratio", DEFAULT_RATIO))


NOT_RESCORED = " (not re-scored)"


def table_rows(results: dict, unsampled: tuple[str, ...] = ()) -> tuple[list[str], list[list[str]]]:
    """The arm table: the base's noise floor, then each arm against the base. `unsampled`: the evaluations (as
    samples.evaluations names them) that keep no samples, whose pass@1 the table marks as not re-scored."""
    s = results["summary"]
    mark = lambda where: NOT_RESCORED if where in unsampled else ""  # noqa: E731
    header = ["arm", "pass@1", "vs base (95% CI)", "verdict", "grad norm median / max", "overlap with other ranking",
              "lr"]
    seeds = s["base"]["pass@1"]
    base_mark = NOT_RESCORED if any(w.startswith("base eval") for w in unsampled) else ""
    rows = [["base (untrained)", f"{_pct(s['base']['mean'])} ({counted(len(seeds), 'seed')}: " + ", ".join(map(_pct, seeds))
             + ")" + base_mark, "-", f"noise floor {100 * s['base']['noise_floor']:.1f} pts", "-", "-", "-"]]
    for arm, a in s["arms"].items():
        g = a["grad_norm"]
        grad = "-" if g["median"] is None else f"{g['median']:.3g} / {g['max']:.3g}"
        if g["nonfinite"]:
            grad += f" ({g['nonfinite']} non-finite)"
        rows.append([_label(arm, results), _pct(a["pass@1"]) + mark(f"arm {arm}"), _delta(a["vs_base"]),
                     _verdict_text(a), grad,
                     _pct(a["overlap"]), "-" if a["learning_rate"] is None else f"{a['learning_rate']:g}"])
    return header, rows


def comparison_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """The comparison table: arm a minus arm b on the same tasks, for every compared pair in the file."""
    header = ["comparison", "delta (95% CI)", "verdict"]
    rows = []
    for key, c in results["summary"].get("comparisons", {}).items():
        a, b = key.split("_vs_")
        rows.append([f"{short_name(a)} vs {short_name(b)}", _delta(c), _verdict_text(c)])
    return header, rows


def _table(header: list[str], rows: list[list[str]], markdown: bool, width: int | None = None) -> list[str]:
    if markdown:
        cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731 - a pipe inside a cell would split it
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(cell(x) for x in r) + " |" for r in rows)]
    return fit_table(header, rows, width)


# ---------------------------------------------------------------------------- text that fits the terminal
MAX_WIDTH = 160  # the widest line of check.py's default output, even on a wider terminal: a table stays readable
GAP = 2  # spaces between two columns
MIN_COLUMN = 8  # a wrapped column is never narrower (unless its widest cell is)


def output_width(stream=None) -> int:
    """The width text printed to `stream` (stdout) should fit: the terminal's, at most MAX_WIDTH; MAX_WIDTH in a pipe
    or a file (no terminal to ask)."""
    stream = sys.stdout if stream is None else stream
    if not getattr(stream, "isatty", lambda: False)():
        return MAX_WIDTH
    return max(40, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns))


def _narrowed(widths: list[int], floors: list[int], room: int) -> list[int]:
    """`widths` narrowed, the widest first, until they sum to `room` or each is at its floor."""
    widths = list(widths)
    while sum(widths) > room:
        i = max(range(len(widths)), key=lambda j: widths[j] if widths[j] > floors[j] else -1)
        if widths[i] <= floors[i]:
            break
        widths[i] -= 1
    return widths


def _column_widths(natural: list[int], body: list[int], floors: list[int], room: int) -> list[int] | None:
    """Column widths summing to at most `room`, each between its floor and its natural width; None where even the
    floors do not fit. Headers wrap first (a column wider than its cells: one more header line, no row longer), then
    the widest columns."""
    widths = _narrowed(natural, [max(f, b) for f, b in zip(floors, body)], room)
    widths = _narrowed(widths, floors, room)
    return widths if sum(widths) <= room else None


def fit_table(header: list[str], rows: list[list[str]], width: int | None = None) -> list[str]:
    """A plain-text table in `width` columns (None: as wide as its cells): as it is where it fits; else its cells
    wrapped within narrower columns (a blank line between rows); else, with too many columns for that, one block per
    row, a "column: value" line for each cell."""
    table = [[str(x) for x in r] for r in [header, *rows]]
    natural = [max(len(x) for x in col) for col in zip(*table)]
    room = None if width is None else width - GAP * (len(header) - 1)
    if room is None or sum(natural) <= room:
        return [(" " * GAP).join(x.ljust(w) for x, w in zip(r, natural)).rstrip() for r in table]
    longest_word = [max((len(word) for x in col for word in x.split()), default=0) for col in zip(*table)]
    floors = [min(n, max(MIN_COLUMN, w)) for n, w in zip(natural, longest_word)]
    body = [max((len(x) for x in col), default=0) for col in zip(*table[1:])] if rows else [0] * len(header)
    widths = _column_widths(natural, body, floors, room)
    if widths is None:
        return _stacked(table[0], table[1:], width)
    wrapped = [[_wrap_cell(x, w) for x, w in zip(r, widths)] for r in table]
    apart = any(len(c) > 1 for cells in wrapped[1:] for c in cells)  # rows of several lines: a blank line between
    lines: list[str] = []
    for i, cells in enumerate(wrapped):
        if apart and i > 1:
            lines.append("")
        for k in range(max(len(c) for c in cells)):
            lines.append((" " * GAP).join((c[k] if k < len(c) else "").ljust(w) for c, w in zip(cells, widths))
                         .rstrip())
    return lines


NBSP = "\u00a0"
KEPT_WHOLE = (NOT_RESCORED.strip(),)  # marks a wrapped cell never splits (a reader searches for them whole)


def _wrap_cell(text: str, width: int) -> list[str]:
    for mark in KEPT_WHOLE:
        text = text.replace(mark, mark.replace(" ", NBSP))
    lines = textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False)
    return [line.replace(NBSP, " ") for line in lines] or [""]


def _stacked(header: list[str], rows: list[list[str]], width: int) -> list[str]:
    lines: list[str] = []
    for r in rows:
        if lines:
            lines.append("")
        lines += textwrap.wrap(f"{header[0]}: {r[0]}", width, subsequent_indent="  ")
        for name, value in zip(header[1:], r[1:]):
            lines += textwrap.wrap(f"{name}: {value}", width, initial_indent="  ", subsequent_indent="    ")
    return lines


def fit_text(text: str, width: int | None) -> str:
    """Every line longer than `width` wrapped at spaces, its continuation indented under it (a list item's under its
    text): for the prose lines around the tables (provenance, plan, deviations). Lines that fit are left alone."""
    if width is None:
        return text
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        hanging = indent + "  "  # under a list item's text, or one step in from a sentence's start
        out += textwrap.wrap(line, width, subsequent_indent=hanging, break_long_words=True,
                             break_on_hyphens=False, drop_whitespace=True) or [line]
    return "\n".join(out)


DIGEST_NOTE = ("Digest: a plain SHA-256 anyone can recompute (check.seal); it shows the file was not edited by hand "
               "without re-sealing and that every summary matches its records, not that the records came from a run.")


def seed_span(seeds: list[int]) -> str:
    """200-299 for consecutive seeds, else the list."""
    return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))


def report_table(header: list[str], rows: list[list[str]], markdown: bool, width: int | None = None) -> str:
    """A sweep report's table: markdown (pipes escaped), or plain text fitted to `width` (None: the columns padded)."""
    if markdown:
        cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731
        return "\n".join(["| " + " | ".join(cell(x) for x in header) + " |", "|" + "---|" * len(header)]
                         + ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows])
    if width is None:  # as wide as the cells (the columns padded, as before fitting existed)
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)) for r in [header, *rows])
    return "\n".join(fit_table(header, rows, width))


def untrained_lines(results: dict) -> list[str]:
    """A line for the arms whose training had nothing to learn from (stats.no_learning_signal), arms with the same
    reason on one line: their "flat" is explained beside the table, in recipe.py's output and in check.py's."""
    from gmts_recipe.stats import no_learning_signal

    why: dict[str, list[str]] = {}
    for arm, entry in results.get("arms", {}).items():
        reason = no_learning_signal(entry.get("train_log") or [])
        if reason is not None:
            why.setdefault(reason, []).append(short_name(arm))
    return [f"Not trained ({', '.join(names)}): {reason}." for reason, names in why.items()]


def evaluation_rows(results: dict) -> tuple[list[str], list[list[str]]]:
    """An eval-only file (eval.py: one model's evaluations, no trained arms): its pass@1 over every seed with a
    bootstrap interval over tasks (each task's mean over all its seeds' samples), and each seed's pass@1."""
    s = results["summary"]["base"]
    evals = results["base"]["evals"]
    per_seed = [task_scores(ev, f"evaluation {i}") for i, ev in enumerate(evals)]
    order = list(per_seed[0])
    interval = mean_interval([sum(scores[t] for scores in per_seed) / len(per_seed) for t in order])
    shown = "-" if interval["low"] is None else f"[{_pct(interval['low'])}, {_pct(interval['high'])}]"
    model = results.get("model", {})
    name = model.get("name", "?") + (f" (adapter on {model['base']})" if model.get("adapter") else "")
    header = ["model", "pass@1", "95% CI (tasks)", "per seed", "spread over seeds"]
    return header, [[name, _pct(s["mean"]), shown, ", ".join(f"{ev['seed']}: {_pct(p)}" for ev, p in
                                                              zip(evals, s["pass@1"])),
                     f"{100 * s['noise_floor']:.1f} pts"]]


def heldout_set_name(data: dict | None) -> str | None:
    """The held-out set's name where a task has several (MATH: MATH-500, or Minerva OCW apart), from a run's data
    record; None for a task with one (GSM8K, the generated task)."""
    from gmts_recipe.math_data import HELDOUT_SETS

    return HELDOUT_SETS.get((data or {}).get("heldout_set"))


def _heldout(results: dict) -> str:
    """'held-out tasks', naming the set where a task has several (MATH: MATH-500, or Minerva OCW apart)."""
    named = heldout_set_name(results.get("data"))
    return f"held-out tasks ({named})" if named else "held-out tasks"


def render_evaluation(results: dict, markdown: bool = False, width: int | None = None) -> str:
    """The table of an eval-only file; one that also holds trained arms is not what eval.py writes, and is refused."""
    if results.get("arms"):
        raise ResultsError(f"an evaluation-only file (kind: evaluation) holds trained arms: {', '.join(results['arms'])}")
    ev = results["base"]["evals"][0]
    lines = _table(*evaluation_rows(results), markdown, width)
    about = (f"{results.get('config_name', '?')}: {len(ev['records'])} {_heldout(results)} x "
             f"{counted(ev.get('k'), 'sample')} per seed, config {results.get('config_hash', '?')[:12]}; an evaluation only, no trained arms.")
    lines += ["", about, DIGEST_NOTE]
    return "\n".join(lines)


def render(results: dict, markdown: bool = False, unsampled: tuple[str, ...] = (), width: int | None = None) -> str:
    """The tables of a results file; `width`: the plain-text tables and lines fitted to it (None: as wide as they
    are; check.py passes the terminal's, output_width)."""
    if results.get("kind") == "evaluation":  # eval.py's file: one model, no arms
        return fit_text(render_evaluation(results, markdown, width), None if markdown else width)
    lines = _table(*table_rows(results, unsampled), markdown, width)
    header, rows = comparison_rows(results)
    if rows:
        lines += ["", *_table(header, rows, markdown, width)]
    n = results["summary"]["base"]
    tasks = len(results["base"]["evals"][0]["records"])
    k = results["base"]["evals"][0].get("k")
    lines.append("")
    lines.append(f"{results.get('config_name', '?')}: {tasks} {_heldout(results)} x {counted(k, 'sample')}, "
                 f"model {results.get('config', {}).get('model_name_or_path', '?')}, "
                 f"config {results.get('config_hash', '?')[:12]}, eval seed {n['seed']}.")
    agreement = agreement_line(results)
    if agreement:
        lines.append(agreement)
    lines += untrained_lines(results)
    lines.append(DIGEST_NOTE)
    if markdown:  # the documentation's prose lines wrapped (gmts_recipe.markdown); a table row stays one line
        from gmts_recipe.markdown import fill_lines

        return fill_lines("\n".join(lines))
    return fit_text("\n".join(lines), width)
