"""Markdown tables for the benchmark pages: the helper every bench script builds its tables with, and the tables of the
finished studies, printed from their committed results files (each block's command on its page runs this).

    python bench/tables.py side-by-side bench/side-by-side-h200.json    # bench/docs/side-by-side.md
    python bench/tables.py selection-cost bench/results-h200.json       # bench/docs/selection-cost.md
    python bench/tables.py scaling bench/scaling-h200.json              # bench/docs/scaling.md
    python bench/tables.py cell-size bench/cell-size-confirm.json       # bench/docs/cell-size.md

The scripts that measured these studies are in git history, not in the tree (each page says how to run one again):
`git show cbc5599:bench/side_by_side.py` (and vllm_wheels.py, the wheels its vLLM path needs), selection_cost.py,
scaling.py, cell_size.py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gmts_recipe.arms import arms  # noqa: E402
from gmts_recipe.markdown import fill, fill_lines  # noqa: E402 - the documentation's wrapped prose
from gmts_recipe.records import json_file  # noqa: E402


def markdown_row(cells) -> str:
    """One markdown table row, each cell as given."""
    return "| " + " | ".join(map(str, cells)) + " |"


def markdown_table(header, rows=()) -> list[str]:
    """A markdown table's lines: the header row, the rule under it, one line per row (a row given as a string is
    that line, as written)."""
    return [markdown_row(header), "|" + "---|" * len(header),
            *(r if isinstance(r, str) else markdown_row(r) for r in rows)]


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


# ---------------------------------------------------------------------------- side by side (bench/side_by_side.py)
PATHS = {"trl": "(a) TRL's generation", "vllm": "(b) TRL + vLLM, colocate", "ours": "(c) this recipe's generation"}
REFERENCE = "ours"  # the ratios are path / ours (of the same arm)
ARM = "gmts"  # the arm of every entry in files from before entries were keyed by arm
ARM_ORDER = arms()  # the arms (gmts_recipe/arms.py), in the table's order


def entries(result: dict) -> dict[str, dict]:
    """A side-by-side file's entries keyed "path:arm", each with its path and arm. Files from before --arm keyed them
    by path alone, every one of the file-wide arm."""
    out = {}
    for key, entry in result.get("paths", {}).items():
        path, _, arm = key.partition(":")
        arm = entry.get("arm") or arm or result.get("arm", ARM)
        out[f"{path}:{arm}"] = {**entry, "path": path, "arm": arm}
    return out


def _ratio(value: float | None, reference: float | None) -> str:
    return "-" if value is None or not reference else f"{value / reference:.2f}x"


def _timed(path_entry: dict) -> int | None:
    """How many steps a path timed: its step times (files of every age have them), else the steps it was asked
    for."""
    steps = path_entry["steps"].get("step_s")
    return len(steps) if steps is not None else path_entry.get("max_steps")


def _short(path: str) -> str:
    return PATHS[path].split(" ", 1)[0]


def _check_cell(entry: dict) -> str:
    """failed (any claim), ok (every claim), else how many of the claims were verified."""
    check = entry.get("selection_check")
    if not check or check.get("ok") is None:
        return "-"
    verdicts = list(check["claims"].values())
    verified = sum(v.startswith("ok") for v in verdicts)
    if not check["ok"]:
        return "failed"
    return "ok" if verified == len(verdicts) else f"{verified} of {len(verdicts)} verified"


def _evaluation_minutes(complete: dict) -> float | None:
    """The minutes a complete run spent in its full-test evaluations (3 base, one per arm), from its summary."""
    evals = complete.get("evaluations")
    return sum(e["seconds"] for e in evals) / 60 if evals else None


def _on(value) -> str:
    return "-" if value is None else ("on" if value else "off")


def _complete_notes(paths: dict, keys: list[str], ref: str) -> list[str]:
    """Below the table: how each complete run evaluated, and for a path with steps but no complete run, what its
    training steps alone take at its median step (an estimate, said to be one: the run itself was not timed)."""
    notes = []
    for key in keys:
        entry, c = paths[key], paths[key].get("complete_run")
        if c and c.get("status") == "ok":
            o = c.get("generation_options", {})
            notes.append(f"{PATHS[entry['path']]}: evaluations decoded with grouped attention "
                         f"{_on(o.get('generation_grouped_attention'))}, decode loop "
                         f"{o.get('generation_decode_loop', '-')}, compile cache "
                         f"{'warm' if c.get('compile_cache', {}).get('warm') else 'cold'}.")
    for key in keys:
        entry, s = paths[key], paths[key]["steps"]
        ref_c = paths.get(f"{ref}:{entry['arm']}", {}).get("complete_run") or {}
        steps = sum((ref_c.get("training_steps") or {}).values())
        if entry.get("complete_run") is None and s["status"] == "ok" and s.get("median_step_s") and steps:
            notes.append(f"{PATHS[entry['path']]}: no complete run timed; an estimate, not a measurement: at its "
                         f"median step the {steps} training steps of one take {steps * s['median_step_s'] / 60:.1f} "
                         f"min before any evaluation.")
    return notes


def side_by_side(result: dict) -> str:
    """One row per path and arm, (a), (b), (c): median step, first step, setup, the steps it timed, the selection
    check, and with --complete the run's GPU minutes; each with its ratio to (c) of the same arm. A path that did not
    run says why; below, each checked entry's claims."""
    paths, ref = entries(result), result.get("reference", REFERENCE)
    keys = [f"{p}:{a}" for p in PATHS for a in (*ARM_ORDER, *sorted({e["arm"] for e in paths.values()} -
                                                                       set(ARM_ORDER))) if f"{p}:{a}" in paths]
    complete = any("complete_run" in p for p in paths.values())
    header = ["path", "arm", "median step (s)", "vs (c)", "first step (s)", "setup (s)", "steps timed",
              "rewards (mean of the steps)", "selection check"]
    if complete:
        header += ["complete run (GPU-min)", "vs (c)", "of which evaluations (min)"]
    lines = markdown_table(header)
    for key in keys:
        entry = paths[key]
        label, arm, s = PATHS[entry["path"]], entry["arm"], entry["steps"]
        ref_entry = paths.get(f"{ref}:{arm}", {})
        ref_steps = ref_entry.get("steps", {})
        if s["status"] != "ok":
            line = f"| {label} | {arm} | {s['status']}: {s.get('reason', '')} | | | | | | {_check_cell(entry)} |"
        else:
            med, first, rewards = s["median_step_s"], s["first_step_s"], s.get("rewards") or []
            line = markdown_row([label, arm, _number(med, ".2f"), _ratio(med, ref_steps.get("median_step_s")),
                        _number(first, ".1f"), f"{s['setup_s']:.1f}", _number(_timed(entry), "d"),
                        _number(sum(rewards) / len(rewards) if rewards else None, ".2f"), _check_cell(entry)])
        if complete:
            c, ref_complete = entry.get("complete_run"), ref_entry.get("complete_run", {})
            if c is None:
                line += " not run | - | - |"
            elif c["status"] != "ok":
                line += f" {c['status']}: {c.get('reason', '')} | - | - |"
            else:
                ref_min = ref_complete.get("gpu_minutes") if ref_complete.get("status") == "ok" else None
                line += (f" {c['gpu_minutes']:.2f} | {_ratio(c['gpu_minutes'], ref_min)} | "
                         f"{_number(_evaluation_minutes(c), '.2f')} |")
        lines.append(line)
    v = result.get("versions", {})
    any_ok = next((p["steps"] for p in paths.values() if p["steps"]["status"] == "ok"), {})
    arms_run = ", ".join(dict.fromkeys(paths[k]["arm"] for k in keys)) or "-"
    lines += ["", f"{v.get('gpu') or 'CPU'}; torch {v.get('torch')}, transformers {v.get('transformers')}, trl "
              f"{v.get('trl')}; arm {arms_run}, {any_ok.get('rows', '-')} rollouts x <= "
              f"{any_ok.get('max_completion_length', '-')} tokens per step; per path the median over the steps it "
              f"timed but the first (which compiles); one process per path; vLLM's share of the GPU "
              f"{result.get('vllm_gpu_memory_utilization')}."]
    for arm in dict.fromkeys(paths[k]["arm"] for k in keys):
        ref_steps = paths.get(f"{ref}:{arm}", {}).get("steps", {})
        ref_median = ref_steps.get("median_step_s") if ref_steps.get("status") == "ok" else None
        faster = [f"{_ratio(paths[k]['steps']['median_step_s'], ref_median)} as fast as {_short(paths[k]['path'])}"
                  for k in keys if paths[k]["arm"] == arm and paths[k]["path"] != ref
                  and paths[k]["steps"]["status"] == "ok" and paths[k]["steps"].get("median_step_s") and ref_median]
        if faster:
            lines.append(f"Per step, {_short(ref)} is {' and '.join(faster)}"
                         + (f" ({arm})." if len(arms_run.split(", ")) > 1 else "."))
    if complete:
        lines += _complete_notes(paths, keys, ref)
    env = {_short(p["path"]): p["env"] for p in paths.values() if p.get("env")}
    if env:
        lines.append("Set for a path's process: " + "; ".join(
            f"{k} {' '.join(f'{n}={x}' for n, x in e.items())}" for k, e in env.items()) + ".")
    for key in keys:
        check = paths[key].get("selection_check") or {}
        if check.get("ok") is not None:
            lines.append(f"Selection, {_short(paths[key]['path'])} {paths[key]['arm']}: " + "; ".join(
                f"{claim}: {verdict}" for claim, verdict in check["claims"].items()) + ".")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- what selection costs (selection_cost.py)
QWEN_1_5B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                 num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6,
                 tie_word_embeddings=True)  # the shape the study measured at, random weights


def e2e_model(cfg: dict) -> str:
    """The end-to-end rows' `model`: random weights of a shape, never a checkpoint's name. The results file also holds
    end-to-end rows of the real model (bench/costs.py); this name tells them apart."""
    return "random-init qwen2.5-1.5b shape" if cfg == QWEN_1_5B else "random-init qwen2.5 small shape (--small)"


def selection_cost(results: dict) -> str:
    """The study's tables. A row's `note` (an annotation written after the run, e.g. from its log) is printed under
    the tables, never in a measured cell."""
    annotated = []

    def mark(r: dict) -> str:
        if not r.get("note"):
            return ""
        annotated.append(r)
        return f" (note {len(annotated)})"

    lines = [f"Device: {results['device']}; model: Qwen2.5-1.5B shape "
             f"({results['model']['num_hidden_layers']} layers, vocab {results['model']['vocab_size']}), random "
             f"weights, LoRA r=32, gradient checkpointing. Scoring + loss + backward + optimizer step: median time; "
             f"'vs none' is the median (and quartiles) of the per-round ratio where variants ran interleaved.", "",
             *markdown_table(["rows x (prompt+completion)", "selection", "time", "vs none", "peak memory", "vs none"])]
    base = {}
    for r in results["update"]:
        shape = f"{r['rows']} x ({r['prompt']}+{r['completion']})"
        if r["variant"] == "none":
            base[shape] = r
        b = base.get(shape, {})
        t = "out of memory" if r.get("median_s") is None else f"{r['median_s']:.3f} s"
        if "ratio_median" in r:
            rt = f"{r['ratio_median']:.3f} ({r['ratio_q25']:.3f}-{r['ratio_q75']:.3f})"
        else:
            rt = "-" if r.get("median_s") is None or not b.get("median_s") else f"{r['median_s'] / b['median_s']:.3f}"
        m = "-" if r.get("peak_gib") is None else f"{r['peak_gib']:.2f} GiB"
        rm = "-" if r.get("peak_gib") is None or not b.get("peak_gib") else f"{r['peak_gib'] / b['peak_gib']:.3f}"
        lines.append(markdown_row([shape, r["variant"], t, rt, m, rm]))
    profiled = [r for r in results["update"] if "gpu_busy_s" in r]
    if profiled:
        lines += ["", *markdown_table(["rows x (prompt+completion)", "selection", "GPU busy (profiler)", "vs none",
                              "CUDA kernels", "vs none"])]
        none = {(r["rows"], r["completion"]): r for r in profiled if r["variant"] == "none"}
        for r in profiled:
            b = none.get((r["rows"], r["completion"]))
            lines.append(markdown_row([f"{r['rows']} x ({r['prompt']}+{r['completion']})", r["variant"],
                              f"{1000 * r['gpu_busy_s']:.1f} ms", f"{r['gpu_busy_s'] / b['gpu_busy_s']:.3f}",
                              r["cuda_kernels"], f"{r['cuda_kernels'] / b['cuda_kernels']:.3f}"]) if b else "")
    if results.get("recorder"):
        lines += ["", "Generation-time entropy recorder, per decoding step: " + ", ".join(
            f"{r['per_decode_step_ms']:.3f} ms at {r['rows']} rows" for r in results["recorder"])]
    if results.get("accuracy"):
        acc = results["accuracy"]
        lines += ["", f"Entropy accuracy ({acc['rows']} x {acc['completion']} tokens): fused bf16 head vs float64, max "
                  f"abs error {acc['max_abs_error']:.2e} nats (mean {acc['mean_abs_error']:.2e}); kept tokens that "
                  f"change {100 * acc['kept_changed_share']:.2f}%."]
    e2e = [r for r in results.get("e2e", []) if r.get("model") == e2e_model(results["model"])]
    if e2e:
        lines += ["", f"End to end, {e2e_model(results['model'])}:", "", *markdown_table(
            ["generation option", "prompt tokens", "rows x tokens", "generation", "scoring", "update", "full step",
             "first step", "entropy source"])]
        for r in e2e:
            if "error" in r:
                lines.append(f"| {r['option']}{mark(r)} | - | - | failed: {r['error'].splitlines()[0][:70]} | | | | | |")
                continue
            prompt = "{}-{}".format(*r["prompt_tokens"]) if "prompt_tokens" in r else "128"
            first = f"{r['first_step_s']:.1f} s" if "first_step_s" in r else "-"
            profiled = " *" if "update_profile" in r else ""
            lines.append(markdown_row([f"{r['option']}{profiled}{mark(r)}", prompt, f"{r['rows']} x {r['completion']}",
                              f"{r['generation_s']:.2f} s", f"{r['scoring_s']:.2f} s", f"{r['update_s']:.2f} s",
                              f"{r['total_s']:.2f} s", first, r["entropy_source"]]))
        if any("update_profile" in r for r in e2e):
            lines.append("\n\\* the last step's update ran under the torch profiler (it is in the median).")
        shares = [f"{r['option']} {100 * r['generation_vs_forward']['kept_changed_share']:.2f}%"
                  for r in e2e if "generation_vs_forward" in r]
        if shares:
            lines.append("\nKept tokens that change when ranking by the entropy recorded while generating instead of "
                         "the training forward's: " + ", ".join(shares) + ".")
    if results.get("generation"):
        first = next((r for r in results["generation"] if "rows" in r), {"rows": 8, "new_tokens": 256})
        lines += ["", *markdown_table([f"generation alone ({first['rows']} rows x {first['new_tokens']} new tokens)", "time",
                              "per token step", "CUDA kernels per step", "GPU busy per step",
                              "wall per step under the profiler"])]
        for r in results["generation"]:
            if "error" in r:
                lines.append(f"| {r['option']} | failed: {r['error'][:80]} | | | | |")
                continue
            prof = ([f"{r['cuda_kernels_per_token_step']:.0f}", f"{r['gpu_busy_ms_per_token_step']:.1f} ms"]
                    if "cuda_kernels_per_token_step" in r else ["-", "-"])
            wall = f"{r['profiled_wall_ms_per_token_step']:.1f} ms" if "profiled_wall_ms_per_token_step" in r else "-"
            if "seconds" in r:
                lines.append(markdown_row([f"{r['option']}{mark(r)}", f"{r['seconds']:.2f} s",
                                  f"{r['ms_per_token_step']:.1f} ms", *prof, wall]))
            else:
                lines.append(f"| {r['option']} | | | {prof[0]} | {prof[1]} | {wall} |")
    lines += [f"\n(note {i}) {r['option']}: {r['note']}" for i, r in enumerate(annotated, 1)]
    lines += [f"\n{note}" for note in results.get("notes", [])]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- scale over GPUs (scaling.py)
PARTS = ("generation", "forward", "backward")  # the rest of the step is "other"


def _minutes(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def scaling(m: dict) -> str:
    """Per way of using the GPUs, its median step and throughput; whole cell processes; the step's parts at 64 and 32
    rows."""
    lines = markdown_table(["how the arms use the GPUs", "median step (s)", "first step (s)", "steps/s per GPU",
                   "arm incl. full-test eval (min)", "GPU-min per arm", "runs"],
                  [[w["label"], f"{w['total_s']:.2f}", f"{statistics.median(r['first_step_s'] for r in w['runs']):.0f}",
                    f"{w['steps_per_s_per_gpu']:.3f}", _minutes(w["arm_wall_minutes"]),
                    _minutes(w["gpu_minutes_per_arm"]), len(w["runs"])] for w in m["ways"].values()])
    lines += ["", f"{m['model']}, {m['config']}, {m['rows']} rollouts per step on H200s. One arm on 2 GPUs: "
              f"{m['data_parallel_speedup']:.2f}x the steps per second of one GPU. Two arms on one GPU: "
              f"{m['sharing_throughput']:.2f}x one arm's throughput (these three before grouped-query decoding). "
              f"With it, one arm per GPU: {m['grouped_speedup']:.2f}x the steps per second of before; one arm on 2 "
              f"GPUs: {m['data_parallel_grouped_speedup']:.2f}x one GPU's. With every lever, four cells at once under "
              f"CUDA MPS: {m['mps_four_throughput']:.2f}x the arms per GPU-hour of one cell alone; as Ray tasks: "
              f"{m['ray_four_throughput']:.2f}x; two cells at once under CUDA MPS: {m['mps_two_throughput']:.2f}x "
              f"(arms' training and evaluation minutes, the process start not counted)."]
    p = m["cell_processes"]
    lines += ["", *markdown_table(["whole cell processes", "processes", "min per process", "GPU-min per cell",
                          "cells per GPU-hour vs one alone", "the group, first mark to last (min)",
                          "the same from the group's time"],
                         [[w["label"], len(w["processes"]), ", ".join(f"{r['minutes']:.1f}" for r in w["processes"]),
                           f"{w['gpu_minutes_per_cell']:.2f}", f"{w['cells_per_gpu_hour_vs_alone']:.2f}x",
                           _minutes(w.get("group_minutes")),
                           "-" if "group_minutes" not in w else f"{w['cells_per_gpu_hour_vs_alone_of_group']:.2f}x"]
                          for w in p["ways"].values()])]
    lines += ["", f"A cell process: model loading, both arms (ETS, GMTS) and their full-test evaluations, base "
              f"evaluations read from the cache; its minutes by the sweep's log, the Ray timing file (start to end of "
              f"the arms' process) or, for the two at once, the driver's marks (a mark before both started to each "
              f"one's end). Against {p['reference_cell']} alone on a warm compile cache "
              f"({p['reference_minutes']:.1f} min), as every shared group ran. The group's time (the driver's marks) "
              f"adds what lies between the processes: Ray's start and a base-evaluation process for the Ray sweep. "
              f"In a warm worker a cell is a job of the worker's process, its model already loaded and compiled (each "
              f"worker's first cell left out), timed by the sweep's timing file: two H200s of one host, one warm "
              f"worker each, ran {m['warm_two_gpus_throughput']:.2f}x the cells per hour of one H200's warm worker "
              f"(median cell {p['ways']['warm_two']['cell_minutes']:.2f} min against "
              f"{p['ways']['warm_one']['cell_minutes']:.2f})."]
    b = m["breakdown"]
    lines += ["", *markdown_table(["part of the median step (s)", *(f"{c} ({b[c]['source']})" for c in b)],
                         [[part, *(f"{b[c][part]:.2f}" for c in b)] for part in (*PARTS, "other", "total_s")])]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- what a sweep cell takes (cell_size.py)
MB = 1e6


def cell_size(report: dict) -> str:
    rows = report["measured"]
    lines = markdown_table(["cell", "arms", "committed: results.json / samples / figures (MB)", "today (MB)"])
    for r in rows:
        c, t = r["committed"], r["today"]
        lines.append(f"| {r['cell']} | {', '.join(r['arms'])} | {c['results.json'] / MB:.2f} / {c['samples'] / MB:.2f} / "
                     f"{c['figures'] / MB:.2f} = {sum(c.values()) / MB:.2f} | {t['results.json'] / MB:.2f} / "
                     f"{t['samples'] / MB:.2f} = {sum(t.values()) / MB:.2f} |")
    before = [sum(r["committed"].values()) / MB for r in rows]
    after = [sum(r["today"].values()) / MB for r in rows]
    lines += ["", fill(f"{len(rows)} of the {report['cells']} cells of {report['folder']} (every {report['every']}th): "
                       f"{sum(before) / len(rows):.2f} MB a cell as committed (largest {max(before):.2f}), "
                       f"{sum(after) / len(rows):.2f} MB as written today (largest {max(after):.2f}); the shared base "
                       f"evaluations, once per sweep: {report['base_evals_bytes'] / MB:.2f} MB.")]
    return "\n".join(lines)


STUDIES = {"side-by-side": side_by_side, "selection-cost": selection_cost, "scaling": scaling, "cell-size": cell_size}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=list(STUDIES), help="whose table")
    ap.add_argument("results", type=json_file, help="its committed results file")
    args = ap.parse_args(argv)
    print(fill_lines(STUDIES[args.study](json.loads(Path(args.results).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
