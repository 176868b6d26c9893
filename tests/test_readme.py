"""Every number in the documentation's result blocks is what the code prints from the committed results files."""

import contextlib
import importlib
import inspect
import io
import re
import shlex
import sys
from pathlib import Path

import pytest

from update_readme import PAGES, ROOT, blocks, run

TEXT = {page: (ROOT / page).read_text() for page in PAGES}
ALL_BLOCKS = [(page, m) for page in PAGES for m in blocks(TEXT[page])]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # markdown link or image target, anchors dropped


def test_result_tables_are_generated():
    """The README's result tables and the benchmark's tables are all generated blocks, wherever they moved, and every
    benchmark page is one update_readme.py rewrites."""
    bench = [page for page in PAGES if page.startswith("bench/")]
    assert len(blocks(TEXT["README.md"])) >= 2 and sum(len(blocks(TEXT[page])) for page in bench) >= 2
    assert {f"bench/docs/{p.name}" for p in (ROOT / "bench" / "docs").glob("*.md")} <= set(bench)


def test_no_generated_line_is_longer_than_the_limit():
    """Every generated line reads in a terminal and a diff: prose is wrapped, a long list goes below its table
    (gmts_recipe.markdown)."""
    from gmts_recipe.markdown import LINE_LIMIT

    long = [f"{page}: {m.group('cmd')[:60]}: {len(line)} characters" for page, m in ALL_BLOCKS
            for line in m.group("body").splitlines() if len(line) > LINE_LIMIT]
    assert not long, f"generated lines over {LINE_LIMIT} characters:\n" + "\n".join(long)


# The scripts whose blocks run in this process: each one's main, its stdout captured, from the repository's root. A
# process apiece cost an interpreter's start and its imports (bench/step.py's torch and transformers: seconds) per
# block; `python -m gmts_recipe.sweep.pace` still runs as a process, as update_readme.run runs them all.
IN_PROCESS = re.compile(r"python (check|update_readme|bench/\w+)\.py( .*)?")
_SCRIPTS: dict[str, object] = {}
_PRINTED: dict[str, str] = {}  # a command two pages quote: printed once (the same code on the same files)


def script(name: str):
    """check, update_readme or bench/<name> (bench/ holds scripts: loaded by its path, once)."""
    if name not in _SCRIPTS:
        if name.startswith("bench/"):
            from bench_scripts import load_bench

            _SCRIPTS[name] = load_bench(name[len("bench/"):], f"bench_{name[len('bench/'):]}")
        else:
            _SCRIPTS[name] = importlib.import_module(name)
    return _SCRIPTS[name]


def in_process(cmd: str, monkeypatch) -> str:
    """What update_readme.run prints for `cmd`, from the script's main in this process (check.py on a committed sweep
    shares its verification with tests/test_check.py: the fixture)."""
    if cmd not in _PRINTED:
        argv = shlex.split(cmd)
        main = script(argv[1][:-len(".py")]).main
        monkeypatch.chdir(ROOT)
        monkeypatch.setattr(sys, "argv", argv[1:])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(argv[2:]) if inspect.signature(main).parameters else main()
        assert code in (0, None), cmd
        _PRINTED[cmd] = out.getvalue().rstrip("\n") + "\n"
    return _PRINTED[cmd]


# check.py on a committed sweep reads every cell of it: the pilot's block (10 cells) runs in the unit suite, the
# blocks of the larger sweeps (the confirmatory test's 100 cells, the first test's 31) in the slow set.
SWEEP_CHECK = re.compile(r"python check\.py \S+/sweep\.json --markdown( --allow-unsampled)?")
UNIT_SWEEP_CHECK = "python check.py results/coupled/sweep.json --markdown"


# update_readme.py's readings of the confirmatory test beyond its tables (post hoc, falls, deviations) re-read its
# 100 cells too (10-20 s each): the slow set.
CONFIRM_READING = re.compile(r"python update_readme\.py --(posthoc|reward-falls|deviations) "
                             r".*results/confirm/sweep\.json.*")


def block_param(page: str, block: re.Match):
    cmd = block.group("cmd")
    slow = (SWEEP_CHECK.fullmatch(cmd) and cmd != UNIT_SWEEP_CHECK) or CONFIRM_READING.fullmatch(cmd)
    return pytest.param(page, block, id=f"{page}-{cmd}", marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("page,block", [block_param(page, block) for page, block in ALL_BLOCKS])
def test_block_matches_its_command(page, block, request, monkeypatch):
    cmd = block.group("cmd")
    if SWEEP_CHECK.fullmatch(cmd):
        request.getfixturevalue("committed_sweeps_verified_once")
    printed = in_process(cmd, monkeypatch) if IN_PROCESS.fullmatch(cmd) else run(cmd)
    assert block.group("body") == printed, f"{page}: block is stale: run python update_readme.py"


def test_readme_links_the_moved_pages():
    targets = set(LINK.findall(TEXT["README.md"]))
    assert {"bench/README.md", "results/LOG.md"} <= targets


MARKDOWN = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.md")
                  if not any(part.startswith(".") or part in ("runs", "build") for part in p.relative_to(ROOT).parts))
TARGET = re.compile(r"\]\(([^)\s]*)\)")  # a markdown link's or image's target, anchor included
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings (lower case, punctuation but - and _ dropped, spaces as -, a repeat
    numbered -1, -2, ...), outside code blocks."""
    seen: dict[str, int] = {}
    for line in FENCE.sub("", text).splitlines():
        heading = re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            seen[slug + (f"-{seen[slug]}" if slug in seen else "")] = 0
            seen[slug] = seen.get(slug, 0) + 1
    return set(seen)


def test_anchors_are_githubs():
    text = "# One real step, broken down (bench/step.py)\n## TRL's generation, TRL + vLLM\n## Twice\n## Twice\n"
    assert anchors(text) >= {"one-real-step-broken-down-benchsteppy", "trls-generation-trl--vllm", "twice", "twice-1"}
    assert anchors("```bash\n# a comment\n```\n") == set()


@pytest.mark.parametrize("page", MARKDOWN)
def test_relative_links_resolve(page):
    """Every relative link of every markdown page points at a file that exists, and an anchor at a heading of the
    page it names (links in code are not links)."""
    text = (ROOT / page).read_text()
    base = (ROOT / page).parent
    missing = []
    for target in TARGET.findall(CODE.sub("", FENCE.sub("", text))):
        path, _, anchor = target.partition("#")
        if "://" in path or path.startswith("mailto:") or not target:
            continue
        file = (base / path) if path else ROOT / page
        if not file.exists():
            missing.append(target)
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            missing.append(target)
    assert not missing, f"{page} links to missing files or anchors: {missing}"


def test_quick_start_comes_first():
    """A newcomer meets the headline result and the Quick start before any benchmark detail."""
    sections = [line[3:].strip() for line in TEXT["README.md"].splitlines() if line.startswith("## ")]
    assert sections[0].startswith("Result") and sections[1] == "Quick start"


def test_ci_runs_the_quick_start_test_command():
    """The CI proves the README's test command, not a variant of it."""
    quick = TEXT["README.md"].split("## Quick start", 1)[1].split("\n## ", 1)[0]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python -m pytest -q" in quick and "python -m pytest -q" in ci


def test_readme_is_short_and_leads_with_the_headline():
    """A newcomer's first screen holds what the repository is, the result table (the confirmatory test's arms and
    decision, and where its sequential extension stands), the words they use (generated from sweep.json) and the Quick
    start's commands; the first test's table follows the Quick start; the rest of the measurements live in docs/results.md and bench/. (The line budget
    counts generated prose wrapped to a terminal's width.)"""
    text = TEXT["README.md"]
    lines = text.splitlines()
    assert len(lines) < 250, f"README.md has {len(lines)} lines: move detail to docs/results.md or bench/"
    first = "\n".join(lines[:70])
    for block in ("--result results/confirm/sweep.json results/confirm-extension/sweep.json",
                  "--sequential results/confirm-extension/sweep.json", "--glossary results/confirm/sweep.json"):
        assert f"<!-- BEGIN generated: python update_readme.py {block} -->" in first
    # the result table is the confirmatory test's (its arms, its verdict, its extension); the first test's comes below
    assert "--headline results/qwen/sweep.json" not in first and "--decisions" not in text
    assert "python recipe.py --arm all --config configs/quickstart.yaml" in first
    headline = text.index("<!-- BEGIN generated: python update_readme.py --headline results/qwen/sweep.json -->")
    assert headline < text.index("## Use GMTSTrainer in your own TRL script")
    assert "docs/headline.png" in text and (ROOT / "docs" / "headline.png").is_file()


def test_no_post_hoc_number_on_the_first_screen():
    """The pooled estimate beyond the plans reads like a decision beside them: it lives in docs/results.md's post-hoc
    section, with the same pool without the collapsed seed and the robust centres beside it."""
    first = "\n".join(TEXT["README.md"].splitlines()[:70])
    assert "--posthoc" not in first and "tests pooled" not in first.lower()


def test_quick_start_pins_the_reference_versions():
    """The Quick start installs with the constraints file the reference run's library versions are pinned in, lets
    OpenMP's idle threads sleep (bench/README.md: spinning ones take the cores of a shared machine), and says which
    versions the reference used (generated)."""
    quick = TEXT["README.md"].split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = quick.split("```bash", 1)[1].split("```", 1)[0]
    assert "-c requirements-ci.txt" in commands and "OMP_WAIT_POLICY=PASSIVE" in commands
    assert "python update_readme.py --versions results/quickstart-cpu/results.json" in quick
    pins = dict(line.split("==") for line in (ROOT / "requirements-ci.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    import json

    used = json.loads((ROOT / "results/quickstart-cpu/results.json").read_text())["versions"]
    for lib in ("transformers", "trl", "peft"):
        assert pins[lib] == used[lib], f"requirements-ci.txt pins {lib} {pins[lib]}, the reference used {used[lib]}"


def test_headline_agrees_with_the_sweep_summary():
    """Every comparison the headline computes from the cells' pass@1 equals sweep.json's own pooled row (per-seed
    deltas and Student's t), and the primary test's: one computation, whichever table a reader looks at."""
    import json

    from gmts_recipe.plots import seed_deltas, setting_scores
    from gmts_recipe.stats import seed_t_interval

    summary = json.loads((ROOT / "results/qwen/sweep.json").read_text())
    p = summary["primary"]
    scores = setting_scores(summary)
    pooled = {r["comparison"]: r for r in summary["pooled"]
              if (r["variant"], r["learning_rate"]) == (p["variant"], p["learning_rate"])}
    assert pooled
    for comparison, row in pooled.items():
        seeds, deltas = seed_deltas(scores, *comparison.split(" - "))
        assert seeds == row["seeds"] and deltas == pytest.approx(row["per_seed"], abs=1e-12)
        assert seed_t_interval(deltas) == pytest.approx((row["t_low"], row["t_high"]), abs=1e-12)
    seeds, deltas = seed_deltas(scores, *p["comparison"].split(" - "))
    assert seeds == p["seeds_done"] and seed_t_interval(deltas) == pytest.approx((p["t_low"], p["t_high"]))


def test_results_document_holds_the_moved_grid_and_plan():
    """The full grid, the mechanism table and the analysis plan moved to docs/results.md, generated as before."""
    commands = [m.group("cmd") for m in blocks(TEXT["docs/results.md"])]
    assert "python check.py results/qwen/sweep.json --markdown --allow-unsampled" in commands
    assert "python update_readme.py --provenance results/qwen/sweep.json" in commands
    assert "python update_readme.py --task-intervals results/qwen/sweep.json" in commands
    assert "docs/results.md" in set(LINK.findall(TEXT["README.md"]))


LONG = 160  # characters: a raw line longer than this is hard to read in a terminal or a diff


@pytest.mark.parametrize("page", MARKDOWN)
def test_no_line_outside_generated_blocks_is_longer_than_160_characters(page):
    """The raw pages read cleanly: prose wraps and hand-written tables stay short; only a generated block (whose rows
    the code writes) may hold a longer line."""
    text = (ROOT / page).read_text()
    if "<!-- generated by `" in text[:400]:  # a whole page the code writes (docs/config.md): its table rows are long
        return
    spans = [(m.start(), m.end()) for m in blocks(text)]
    long, start = [], 0
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) > LONG and not any(a <= start < b for a, b in spans):
            long.append(number)
        start += len(line) + 1
    assert not long, f"{page}: lines {long} are over {LONG} characters: wrap them"


def test_the_quick_start_on_a_gpu_quotes_the_two_runs_as_committed():
    """The prose beside the GPU run's table quotes the CPU run's numbers (in the README's generated table): they are
    the committed files', so a rerun of either changes the test, not a stale sentence."""
    from gmts_recipe.verify.file import load

    section = TEXT["docs/results.md"].split("### The Quick start on a GPU", 1)[1].split("\n## ", 1)[0]
    prose = " ".join(section.split("<!-- END generated -->", 1)[1].split())
    cpu, gpu = (load(ROOT / "results" / name / "results.json")["summary"] for name in ("quickstart-cpu",
                                                                                       "quickstart-gpu"))
    was = cpu["comparisons"]["gmts_vs_ets"]
    assert f"CPU run read {100 * was['delta']:+.1f} points, `{was['verdict']}`" in prose
    assert (f"({100 * gpu['arms']['gmts']['pass@1']:.1f}% against the CPU run's "
            f"{100 * cpu['arms']['gmts']['pass@1']:.1f}%)") in prose
