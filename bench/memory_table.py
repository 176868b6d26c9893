"""The measured GPU memory of every committed run and benchmark that recorded it, one row each, for
docs/guides/gpu-memory.md's generated table:

    python bench/memory_table.py            # the markdown table (the page's block runs this)

Sources, read as committed (nothing here is typed by hand):
- results/**/results.json: recipe.py's per-phase peaks (`gmts_recipe.gpu_memory.peak_memory`): the base evaluations,
  each arm's training and its evaluation, with the arms' recorded execution options (gradient checkpointing among
  them) and the card their provenance names;
- bench/side-by-side-*.json (the side-by-side study's): the training steps' peak per path
  (`steps.gpu_memory_gib`), with the command line the paths shared (`recipe_argv`) and the card (`versions`).
Every peak is torch.cuda.max_memory_allocated in GiB: what torch's allocator handed out, less than nvidia-smi shows.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
from tables import markdown_table  # noqa: E402 - bench/tables.py, beside this script

KEY = "gpu_peak_memory_gib"
# The options that move a phase's peak, as a row names them when on (absent: off or not recorded); gradient
# checkpointing has its own column.
SHOWN = {"generation_decode_loop": "compiled step", "generation_fused_projections": "fused", "use_vllm": "vLLM",
         "training_compile": "training compile"}


def _gib(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _options(options: dict) -> str:
    on = [SHOWN[k] for k, v in options.items() if k in SHOWN and v not in (False, None, "transformers")]
    return ", ".join(on) or "-"


def _card(gpus, gpu) -> str:
    return gpu.removeprefix("NVIDIA ") if gpus in (1, None) else f"{gpus} x {gpu.removeprefix('NVIDIA ')}"


def _checkpointing(values: set) -> str:
    return {frozenset({True}): "on", frozenset({False}): "off"}.get(frozenset(values), "not recorded")


def results_row(path: Path, results: dict) -> list[str]:
    """One run's row: the highest peak of each phase over its arms (the card must hold the largest)."""
    arms = results.get("arms", {})
    peaks = {phase: max((a.get(KEY, {}).get(phase) for a in arms.values() if phase in a.get(KEY, {})), default=None)
             for phase in ("train", "eval")}
    options = [a.get("generation_options", {}) for a in arms.values()]
    cards = {_card(a["provenance"].get("gpus"), a["provenance"]["gpu"]) for a in arms.values()
             if isinstance(a.get("provenance"), dict) and a["provenance"].get("gpu")}
    return [f"`{path.relative_to(ROOT).as_posix()}`", ", ".join(sorted(cards)) or "-",
            results.get("config_name", "?"), _checkpointing({o.get("gradient_checkpointing") for o in options}),
            _options({**results.get("config", {}), **(options[0] if options else {})}), "recipe.py",
            _gib(results.get("base", {}).get(KEY, {}).get("base_eval")), _gib(peaks["train"]), _gib(peaks["eval"])]


def bench_rows(path: Path, bench: dict) -> list[list[str]]:
    """A side-by-side benchmark's rows: each path's training steps (no evaluation in them)."""
    argv = bench.get("recipe_argv", [])
    config = argv[argv.index("--config") + 1] if "--config" in argv else "?"
    checkpointing = (argv[argv.index("--gradient_checkpointing") + 1] == "true" if "--gradient_checkpointing" in argv
                     else None)
    card = bench.get("versions", {})
    rows = []
    for name, p in bench.get("paths", {}).items():
        peak = p.get("steps", {}).get("gpu_memory_gib", {}).get("torch_peak_allocated")
        if peak is None:
            continue
        rows.append([f"`{path.relative_to(ROOT).as_posix()}` {name}", _card(card.get("gpus"), card.get("gpu", "?")),
                     Path(config).stem, _checkpointing({checkpointing}), _options(p.get("options", {})),
                     f"steps of {p['steps'].get('rows', '?')} rows", "-", _gib(peak), "-"])
    return rows


def rows(root: Path = ROOT) -> list[list[str]]:
    out, cells = [], {}
    for path in sorted(root.glob("results/**/results.json")):
        text = path.read_text(encoding="utf-8")
        if KEY not in text:  # most runs ran before the peaks were recorded: skip them without parsing
            continue
        row = results_row(path, json.loads(text))
        seed = re.fullmatch(r"(.+)-s(\d+)", row[2])
        if (path.parent.parent / "sweep.json").is_file() and seed:  # a sweep's cell: one row per alike measurement
            cells.setdefault((path.parent.parent, seed.group(1), *row[3:], row[1]), []).append(int(seed.group(2)))
        else:
            out.append(row)
    for (folder, config, *rest, card), seeds in cells.items():
        span = (f"{min(seeds)}-{max(seeds)}" if max(seeds) - min(seeds) + 1 == len(seeds) > 1
                else ", ".join(map(str, seeds)))
        out.append([f"`{folder.relative_to(root).as_posix()}/`, {len(seeds)} cell(s) (seeds {span})", card, config,
                    *rest])
    for path in sorted(root.glob("bench/*.json")):
        bench = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(bench, dict) and isinstance(bench.get("paths"), dict):
            out += bench_rows(path, bench)
    return out


HEADER = ["file", "card", "config", "gradient checkpointing", "options on", "what ran", "base evaluation",
          "training", "evaluation"]
# "what ran": recipe.py's complete run, or the side-by-side study's training steps (their rows each)


def table(found: list[list[str]]) -> str:
    cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731 - a pipe inside a cell would split it
    return "\n".join(markdown_table(HEADER, [[cell(x) for x in r] for r in found]))


def main(argv: list[str] | None = None) -> int:
    found = rows()
    print(table(found))
    print(f"\nPeak GiB per phase (torch.cuda.max_memory_allocated; a run: the highest over its arms); {len(found)} "
          f"measurement(s) in committed files.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
