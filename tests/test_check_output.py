"""check.py's default output on a terminal: its tables fit the width (wrapped, or one block per row where the columns
are too many), its prose lines are wrapped, the long grids show a progress bar on a terminal only, and the output ends
with the one line of what was verified. --markdown stays the README's tables."""

import io
import json
from pathlib import Path

import pytest

import check
from gmts_recipe import tables
from gmts_recipe.sweep.report import render as render_sweep
from gmts_recipe.tables import fit_table, fit_text, output_width
from gmts_recipe.verify.provenance import provenance_lines

ROOT = Path(__file__).resolve().parent.parent
SWEEPS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("results/*/sweep.json"))


def test_a_table_that_fits_is_left_as_it_was():
    header, rows = ["arm", "pass@1"], [["GMTS", "71.7%"], ["base (untrained)", "15.0%"]]
    assert fit_table(header, rows, 160) == fit_table(header, rows) == [
        "arm               pass@1", "GMTS              71.7%", "base (untrained)  15.0%"]


def test_a_wide_table_wraps_its_headers_first_then_its_widest_cells():
    header = ["arm", "overlap with the other ranking", "seeds"]
    rows = [["ets", "88.2%", ", ".join(f"{50 + i / 10:.1f}%" for i in range(30))],
            ["gmts", "93.0%", "56.2%"]]
    lines = fit_table(header, rows, 60)
    assert max(len(line) for line in lines) <= 60
    assert lines[0].split()[:2] == ["arm", "overlap"] and any(line.split()[-1:] == ["ranking"] for line in lines[:4])
    assert any("88.2%" in line.split() for line in lines)  # the header wrapped, the narrow cell whole
    assert "" in lines  # a row of several lines: rows apart
    cells = " ".join(" ".join(lines).split())
    assert all(f"{50 + i / 10:.1f}%" in cells for i in range(30))  # nothing dropped


def test_too_many_columns_for_the_width_become_one_block_per_row():
    header = [f"column {i}" for i in range(12)]
    rows = [[f"value-{r}-{i}" for i in range(12)] for r in range(2)]
    lines = fit_table(header, rows, 60)
    assert lines[:3] == ["column 0: value-0-0", "  column 1: value-0-1", "  column 2: value-0-2"]
    assert "" in lines and max(len(line) for line in lines) <= 60


def test_prose_lines_are_wrapped_under_their_indent():
    text = "short\n  ETS: " + "word " * 60 + "\n- Seed 17: " + "x " * 100
    out = fit_text(text, 80).splitlines()
    assert out[0] == "short" and max(len(line) for line in out) <= 80
    assert out[1].startswith("  ETS: word") and out[2].startswith("    word")
    assert [line for line in out if line.startswith("- ")] == [out[out.index(next(
        line for line in out if line.startswith("- Seed 17")))]]
    assert fit_text(text, None) == text


def test_the_width_is_the_terminals_at_most_160_and_160_in_a_pipe(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert output_width(io.StringIO()) == tables.MAX_WIDTH == 160
    monkeypatch.setattr(tables.shutil, "get_terminal_size", lambda fallback: type("S", (), {"columns": 100})())
    assert output_width(Terminal()) == 100
    monkeypatch.setattr(tables.shutil, "get_terminal_size", lambda fallback: type("S", (), {"columns": 300})())
    assert output_width(Terminal()) == 160


@pytest.mark.parametrize("path", SWEEPS)
def test_every_committed_sweeps_tables_fit_160_columns_and_markdown_is_unchanged(path):
    summary = json.loads((ROOT / path).read_text())
    text = render_sweep(summary, width=160)
    assert max(len(line) for line in text.splitlines()) <= 160
    assert render_sweep(summary, markdown=True, width=160) == render_sweep(summary, markdown=True)
    numbers = {x for x in render_sweep(summary).split() if x.endswith("%") or x.endswith("%,")}
    assert numbers <= set(text.split())  # every per-seed number still there, only moved to other lines


def test_check_on_a_results_file_fits_160_columns_and_ends_with_what_was_verified(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    path = "results/quickstart-cpu/results.json"
    assert check.main([path]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    assert max(len(line) for line in out[:-1]) <= 160
    assert out[-1] == f"Verified: {path}: 3 trained arms, 5 evaluations, 300 samples re-scored."
    assert check.main([path, "--markdown"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("| arm | pass@1 |") and "Verified: " not in captured.out  # the tables alone
    assert captured.err.rstrip().splitlines()[-1].startswith("Verified: ")


def test_the_verified_line_of_a_sweep_names_cells_evaluations_samples_and_the_plan():
    report = {"evaluations": 530, "samples": 2796280, "without": [], "with_samples": 530}
    assert check.verified_line("results/confirm/sweep.json", report, cells=100, plan="; plan as committed") == (
        "Verified: results/confirm/sweep.json: 100 cells, 530 evaluations, 2,796,280 samples re-scored; plan as "
        "committed.")
    report = {"evaluations": 5, "samples": 0, "without": ["base eval 0"] * 5, "with_samples": 0}
    assert check.verified_line("x.json", report, arms=0) == (
        "Verified: x.json: an evaluation only, 5 evaluations, 0 samples re-scored (5 evaluations keep none: not "
        "re-scored).")


def test_a_long_grid_shows_a_bar_on_a_terminal_and_nothing_in_a_pipe(tmp_path, monkeypatch):
    from test_sweep import GRID, fake_cell, write_grid
    from gmts_recipe.sweep.grid import load_grid
    from gmts_recipe.sweep.summary import summarize

    grid = load_grid(write_grid(tmp_path, GRID))
    for seed in (1, 2):
        fake_cell(tmp_path / "results" / "demo", f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": 0.6}, seed=seed)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stream)
        summarize(grid)
        assert ("verifying cells" in stream.getvalue()) == shown, stream.getvalue()


def test_an_evaluation_only_files_provenance_says_what_it_is_not_that_it_is_old():
    versions = {"python": "3.11.7", "torch": "2.13.0+cpu", "gpu": None, "gpus": 0}
    fresh = {"kind": "evaluation", "arms": {}, "versions": versions}
    assert provenance_lines(fresh) == [
        "Provenance: the file records no commit, host or times; the file's versions: CPU; python 3.11.7, torch "
        "2.13.0+cpu."]
    old = {"arms": {"ets": {"eval": {}}}, "versions": {**versions, "gpu": "NVIDIA H200", "gpus": 1}}
    assert provenance_lines(old) == [
        "Provenance: the arms record none; the file's versions: 1 x NVIDIA H200; python 3.11.7, torch 2.13.0+cpu."]


def test_the_checks_are_listed_once_from_the_verify_levels(capsys):
    """check.py --help and --checks print each level's CHECKS (gmts_recipe/verify/), and the README's block is that
    output, docs/results.md's block (tests/test_readme.py holds every generated block to its command)."""
    from gmts_recipe.verify import cell, file, plan, provenance, sweep

    assert check.main(["--checks"]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    for level in (file, cell, sweep, plan, provenance):
        assert level.CHECKS and all(" ".join(c.split()) in listed for c in level.CHECKS), level.__name__
    assert "<!-- BEGIN generated: python check.py --checks -->" in (Path(check.__file__).parent / "docs" / "results.md").read_text()
    with pytest.raises(SystemExit):
        check.main(["--help"])
    assert " ".join(file.CHECKS[0].split()) in " ".join(capsys.readouterr().out.split())
