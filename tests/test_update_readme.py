"""What the results document states about how the runs were made is read from the logs and records, not typed."""

import json
from pathlib import Path

import pytest

import update_readme
from gmts_recipe.sweep.grid import load_grid
from gmts_recipe.sweep.summary import summarize

ROOT = Path(__file__).resolve().parent.parent



def logical(text: str) -> list[str]:
    """A generated block's lines as written before wrapping (gmts_recipe.markdown): a list item's indented lines and
    a paragraph's later lines joined to the line they continue."""
    out: list[str] = []
    for line in text.splitlines():
        prose = lambda x: bool(x) and not x.startswith(("- ", "|"))  # noqa: E731
        if out and line and (line.startswith("  ") or (prose(line) and prose(out[-1]))):
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out

def _log(folder, name: str, start: str, finished: list[str]) -> None:
    lines = [f"=== {start} python recipe.py --arm ..."] + [f"[recipe] {arm}: pass@1 0.500, trained 2.0 min"
                                                         for arm in finished]
    (folder / name).write_text("\n".join(lines) + "\n")


def test_arm_processes_reads_which_process_finished_each_arm(tmp_path):
    _log(tmp_path, "cell-s1-ets+gmts.log", "2026-11-30 15:08:10", ["ets"])  # cut during GMTS
    _log(tmp_path, "cell-s1-gmts.log", "2026-11-30 18:15:54", ["gmts"])
    _log(tmp_path, "cell-s10-ets+gmts.log", "2026-11-30 09:00:00", ["ets", "gmts"])  # another cell: not mixed in
    assert update_readme.arm_processes(tmp_path, "cell-s1") == {
        "ets": ("11-30 15:08", "cell-s1-ets+gmts.log"), "gmts": ("11-30 18:15", "cell-s1-gmts.log")}


def _cell(options: dict[str, dict], merges: list | None = None) -> dict:
    arms = {arm: {"generation_options": opts, "eval": {"seed": 0, "k": 4, "pass@1": 0.5, "records": []}}
            for arm, opts in options.items()}
    return {"arms": arms, **({"merges": merges} if merges else {})}


def test_record_differences_name_what_one_arm_records_and_the_other_does_not():
    same = _cell({"ets": {"use_cpu": False}, "gmts": {"use_cpu": False}})
    assert update_readme._record_differences(same, "ets", ["gmts"]) == []
    newer = _cell({"ets": {"use_cpu": False}, "gmts": {"use_cpu": False, "training_compile": False}},
                  merges=[{"arms": ["gmts"]}])
    notes = update_readme._record_differences(newer, "ets", ["gmts"])
    assert notes == ["GMTS records training_compile; ETS does not", "GMTS merged in from another machine"]


def test_provenance_table_marks_the_pairs_made_apart(tmp_path):
    """A seed whose two compared arms finished in processes started at different times is named; one whose arms
    finished in one process is not."""
    logs = tmp_path / "logs"
    logs.mkdir()
    cells = []
    for seed, split in ((17, False), (18, True)):
        name = f"paper-lr0.0001-s{seed}"
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(_cell({"ets": {}, "gmts": {}})))
        if split:
            _log(logs, f"{name}-ets+gmts.log", "2026-11-30 15:00:00", ["ets"])
            _log(logs, f"{name}-gmts.log", "2026-11-30 18:00:00", ["gmts"])
        else:
            _log(logs, f"{name}-ets+gmts.log", "2026-11-30 15:00:00", ["ets", "gmts"])
        cells.append({"cell": name, "variant": "paper", "learning_rate": 1e-4, "seed": seed,
                      "path": f"{name}/results.json", "arms": {}})
    summary = {"cells": cells, "primary": {"variant": "paper", "learning_rate": 1e-4, "comparison": "gmts - ets",
                                           "seeds": [17, 18]}}
    text = update_readme.provenance(summary, tmp_path)
    assert "different times for seeds 18;" in text.replace("\n", " ")  # the note below the table, wrapped
    assert "| 18 | - | 11-30 15:00 (paper-lr0.0001-s18-ets+gmts.log) | 11-30 18:00 (paper-lr0.0001-s18-gmts.log) | - |" in text
    assert "| 17 | - | 11-30 15:00 | 11-30 15:00 | - |" in text
    assert text.endswith("- nothing: every arm records what it does.\n")  # the records' differences, listed below


def test_task_intervals_range_over_the_primary_cells(tmp_path):
    cells = []
    for seed, half in ((1, 0.015), (2, 0.019), (3, 0.05)):  # seed 3 is outside the primary test
        name = f"c{seed}"
        (tmp_path / name).mkdir()
        comparison = {"delta": 0.0, "low": -half, "high": half, "n": 10}
        (tmp_path / name / "results.json").write_text(json.dumps({"summary": {"comparisons": {"gmts_vs_ets": comparison}}}))
        cells.append({"cell": name, "variant": "paper", "learning_rate": 1e-4, "seed": seed,
                      "path": f"{name}/results.json", "arms": {"ets": {"vs_base": {"n": 10}}}})
    summary = {"cells": cells, "primary": {"variant": "paper", "learning_rate": 1e-4, "comparison": "gmts - ets",
                                           "seeds": [1, 2], "seeds_done": [1, 2]}}
    assert update_readme.task_intervals(summary, tmp_path).startswith(
        "One cell's GMTS - ETS interval over its 10 tasks is +-1.5 to +-1.9 points")


def test_versions_line():
    line = update_readme.versions({"versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "transformers": "5.17.0",
                                                "trl": "1.16.0", "peft": "0.21.0", "gpu": None}})
    assert line == "python 3.11.7, torch 2.13.0+cpu, transformers 5.17.0, trl 1.16.0, peft 0.21.0\n"


def test_check_mode_names_a_stale_block(tmp_path, monkeypatch, capsys):
    page = tmp_path / "page.md"
    page.write_text("<!-- BEGIN generated: python -c print(2) -->\n1\n<!-- END generated -->\n")
    monkeypatch.setattr(update_readme, "ROOT", tmp_path)
    monkeypatch.setattr(update_readme, "PAGES", ("page.md",))
    assert update_readme.main(["--check"]) == 1
    assert "page.md: python -c print(2)" in capsys.readouterr().out
    assert page.read_text().count("\n1\n") == 1  # nothing written
    page.write_text("<!-- BEGIN generated: python -c print(2) -->\n2\n<!-- END generated -->\n")
    assert update_readme.main(["--check"]) == 0


@pytest.mark.parametrize("option", ["--headline", "--task-intervals", "--provenance"])
def test_generators_run_on_the_committed_sweep(option, capsys):
    assert update_readme.main([option, "results/qwen/sweep.json"]) == 0
    assert capsys.readouterr().out.strip()


def test_a_missing_or_broken_file_is_argparses_error_not_a_traceback(tmp_path, capsys):
    broken = tmp_path / "sweep.json"
    broken.write_text('{"cells": [')
    with pytest.raises(SystemExit) as exit_:
        update_readme.main(["--plan", str(tmp_path / "nope.json")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.endswith(f"error: argument --plan: {tmp_path / 'nope.json'}: no such file\n")
    with pytest.raises(SystemExit):
        update_readme.main(["--mechanism", "results/qwen/mechanism.json", str(broken)])
    assert f"error: argument --mechanism: {broken}: not valid JSON (" in capsys.readouterr().err


def _association(label: str, n: int, r: float | None, low: float | None, high: float | None, note=None) -> dict:
    return {"label": label, "n": n, "seeds": list(range(1, n + 1)), "pearson": r, "pearson_low": low,
            "pearson_high": high, "spearman": r, "spearman_low": low, "spearman_high": high,
            "slope": None if r is None else 12.345, "x_min": None if r is None else 0.25,
            "x_max": None if r is None else 0.375, "note": note}


def test_mechanism_table_says_interim_and_counts_the_intervals_that_exclude_zero():
    analyses = [
        {"grid": "full", "variant": "paper", "learning_rate": 1e-4, "seeds": [1, 2, 3, 4, 5], "planned_seeds":
         [1, 2, 3, 4, 5], "status": "complete", "interval": "Fisher z",
         "associations": [_association("ETS: a |b|", 5, 0.9, 0.1, 0.99), _association("GMTS: c", 5, -0.2, -0.9, 0.8)]},
        {"grid": "pilot", "variant": "coupled", "learning_rate": 1e-4, "seeds": [7, 8], "planned_seeds": [7, 8, 9],
         "status": "interim", "interval": "Fisher z",
         "associations": [_association("d", 0, None, None, None, "not logged for these seeds")]},
    ]
    text = "\n".join(logical(update_readme.mechanism(analyses)))
    assert ("| full (complete) | ETS: a \\|b\\| | 5 (1-5) | +0.90 [+0.10, +0.99] | +0.90 [+0.10, +0.99] | +12.3 | "
            "0.25 to 0.375 |") in text
    assert "| pilot (interim) | d | 0 (not logged for these seeds) | - | - | - | - |" in text
    assert "full (paper, lr 0.0001): all 5 planned seeds (1-5); the Pearson interval excludes 0 for 1 of 2 variables " \
           "(ETS: a |b|)." in text
    assert "pilot (coupled, lr 0.0001): 2 of 3 planned seeds (7, 8 of 7-9): **interim**; the Pearson interval " \
           "excludes 0 for 0 of 0 variables." in text


def test_mechanism_option_reads_the_committed_files(capsys):
    grids = ("qwen", "coupled", "confirm")
    assert update_readme.main(["--mechanism", *(f"results/{grid}/mechanism.json" for grid in grids)]) == 0
    out = capsys.readouterr().out
    for grid in grids:  # each row says its file's status (the pilot was interim, then complete)
        status = json.loads((update_readme.ROOT / "results" / grid / "mechanism.json").read_text())["status"]
        assert f"| {grid} ({status}) |" in out


def test_headline_labels_the_plans_secondary_comparisons_and_says_interim(tmp_path):
    from test_sweep import GRID, PRIMARY, fake_cell, write_grid

    root = tmp_path / "results" / "demo"
    for seed, gmts, grpo in ((1, 0.6, 0.55), (2, 0.65, 0.5)):
        fake_cell(root, f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": gmts, "grpo": grpo}, seed=seed)
    text = (GRID.replace("seeds: [1, 2]", "seeds: [1, 2, 3]") + PRIMARY.replace("SEEDS", "[1, 2, 3]")
            + "secondary:\n  - {comparison: gmts - grpo, seeds: [1, 2]}\n  - {comparison: ets - grpo, seeds: [1, 2, 3]}\n")
    grid = load_grid(write_grid(tmp_path, text))
    table = update_readme.headline(summarize(grid), root).splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table if line.startswith("| ")}
    assert "planned: its interval, no decision" in rows["GMTS - GRPO (secondary)"]
    assert "planned, **interim** (2 of 3 seeds)" in rows["ETS - GRPO (secondary)"]
    assert "**interim** (2 of 3 seeds): reproduced if" in rows["**GMTS - ETS** (primary test)"]
    assert not any("outside the plan" in line for line in table)
    assert "over 2 seeds" in table[-1] and "**interim** (2 of 3 planned seeds)" in table[-1]


def test_headline_of_a_test_with_one_seed_done_gives_no_interval_and_says_interim(tmp_path):
    from test_sweep import GRID, PRIMARY, fake_cell, write_grid

    root = tmp_path / "results" / "demo"
    fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.6}, seed=1)
    grid = load_grid(write_grid(tmp_path, GRID + PRIMARY.replace("SEEDS", "[1, 2]")))
    table = update_readme.headline(summarize(grid), root).splitlines()
    gmts = next(line for line in table if line.startswith("| GMTS (top-20%"))
    assert gmts.endswith("% | - | 1 (1) | - |")  # a mean from one seed, no interval
    assert not any("primary test" in line for line in table)  # no comparison row from one seed
    assert table[-1].endswith("Primary test: GMTS - ETS 1 of its 2 seeds done: **interim**, no interval before two; "
                              "the paper claims +1.3 to +3.4 points.")


def test_plan_rows_keep_their_number_from_the_first_seed_and_give_intervals_from_two(tmp_path):
    from test_sweep import GRID, PRIMARY, fake_cell, write_grid

    root = tmp_path / "results" / "demo"
    text = (GRID.replace("seeds: [1, 2]", "seeds: [1, 2, 3]") + PRIMARY.replace("SEEDS", "[1, 2, 3]")
            + "secondary:\n  - {comparison: gmts - grpo, seeds: [1, 2]}\n")
    grid = load_grid(write_grid(tmp_path, text))
    fake_cell(root, "paper-lr0.0001-s1", {"ets": 0.5, "gmts": 0.6, "grpo": 0.55}, seed=1)
    one = update_readme.plan(summarize(grid), root).splitlines()
    assert len(one) == 4 and one[2].startswith("| **GMTS - ETS** (primary test) | - | - (from two seeds) | 1 of 3 (1-3) "
                                               "| **interim**: decided once all 3 have run; reproduced if")
    assert one[3] == "| GMTS - GRPO (secondary) | - | - (from two seeds) | 1 of 2 (1, 2) | interim: its interval, no decision |"
    fake_cell(root, "paper-lr0.0001-s2", {"ets": 0.5, "gmts": 0.65, "grpo": 0.5}, seed=2)
    summary = summarize(grid)
    two = update_readme.plan(summary, root).splitlines()
    assert len(two) == 4
    p = summary["primary"]
    assert two[2].startswith(f"| **GMTS - ETS** (primary test) | {100 * p['delta']:+.1f} | "
                             f"[{100 * p['t_low']:+.1f}, {100 * p['t_high']:+.1f}] | 2 of 3 (1-3) | **interim**")
    assert two[3].endswith("| 2 of 2 (1, 2) | its interval, no decision |")  # complete: no longer interim
    fake_cell(root, "paper-lr0.0001-s3", {"ets": 0.5, "gmts": 0.62, "grpo": 0.5}, seed=3)
    summary = summarize(grid)
    three = update_readme.plan(summary, root).splitlines()
    decision = summary["primary"]["decision"]
    assert len(three) == 4 and decision in ("reproduced", "refuted", "undecided")
    assert f"| 3 of 3 (1-3) | **{decision}**: reproduced if the interval lies above" in three[2]
    assert "interim" not in "\n".join(three)  # every planned seed has run: the block says the decision only


def test_decisions_give_each_planned_test_one_line_and_pool_nothing(tmp_path):
    from test_sweep import GRID, PRIMARY, fake_cell, write_grid

    root = tmp_path / "results" / "demo"
    for seed, gmts in ((1, 0.60), (2, 0.58)):
        fake_cell(root, f"paper-lr0.0001-s{seed}", {"ets": 0.5, "gmts": gmts}, seed=seed)
    done = summarize(load_grid(write_grid(tmp_path, GRID + PRIMARY.replace("SEEDS", "[1, 2]"))))
    three = GRID.replace("seeds: [1, 2]", "seeds: [1, 2, 3]") + PRIMARY.replace("SEEDS", "[1, 2, 3]")
    grid = write_grid(tmp_path, three)
    running = summarize(load_grid(grid))  # the same cells, a third seed planned and not run
    p = done["primary"]
    text = logical(update_readme.decisions([("First", done), ("Confirmatory", running)]))
    assert text[0].startswith("**Decisions** (the paper claims +1.3 to +3.4 points; each reproduced if the interval")
    assert text[1] == (f"- First test, seeds 1, 2 at lr 0.0001: GMTS - ETS {100 * p['delta']:+.1f} points, t "
                       f"[{100 * p['t_low']:+.1f}, {100 * p['t_high']:+.1f}] over 2 seeds: **{p['decision']}**")
    assert text[2].startswith("- Confirmatory test, seeds 1-3")
    assert text[2].endswith("over 2 of 3 planned seeds: **interim**")
    same = logical(update_readme.decisions([("First", done), ("Second", done)]))
    assert same[0].startswith(f"**Both {p['decision']}** (the paper claims") and len(same) == 3


def test_decisions_option_refuses_an_item_without_a_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        update_readme.main(["--decisions", "results/qwen/sweep.json"])
    assert exit_.value.code == 2 and "is not NAME=SWEEP_JSON" in capsys.readouterr().err
    assert update_readme.main(["--decisions", "First=results/qwen/sweep.json"]) == 0
    one = logical(capsys.readouterr().out)
    assert len(one) == 3 and one[0].startswith("**Decision** (the paper claims") and one[1].startswith("- First test")
    # then what the test ran, read from its first cell, beside what the paper ran
    assert one[2].startswith("- Setting of the test: Qwen2.5-Coder-1.5B-Instruct (dequantized from its Q4_K_M GGUF), LoRA")
    assert "40 steps of 64 rollouts" in one[2] and one[2].endswith(update_readme.PAPER_SETTING + ".")


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
def test_deviations_and_interim_path_read_the_confirmatory_records():
    """What the confirmatory test's records say about its own run (docs/results.md shows both blocks): the options that
    changed between cells, the seeds whose compared arms ran in separate processes, the cell the timing log lacks; and
    the interval's path as its seeds came in, which ends at the primary test's own numbers."""
    import json

    from gmts_recipe.sweep.deviations import deviations

    path = ROOT / "results" / "confirm" / "sweep.json"
    summary = json.loads(path.read_text())
    text = deviations(summary, path.parent)
    assert "for seeds 201-212, 298-299" in text and "for seeds 213-297" in text
    assert "Seed 212: the ETS-nz arm ran with other execution options than its ETS arm" in text
    assert "separate processes (the cells' logs) for seeds 206, 209, 239, 289, 290" in text
    assert "Not in the timing log (logs/timing.jsonl): seed 200" in text
    path_line = update_readme.interim(summary, path.parent)
    assert path_line.endswith("With all 100: +0.9, t [-0.1, +1.9].\n") and "at 36-38, 43-70, 74, 76 seeds" in path_line


def test_the_result_table_is_the_confirmatory_tests_with_its_extension_row(capsys):
    """The README's result table: the confirmatory test's arms over its 100 seeds, GMTS - ETS with its interval and
    verdict, and one row for the sequential extension where it stands (its last look, the next one, its rule)."""
    assert update_readme.main(["--result", "results/confirm/sweep.json", "results/confirm-extension/sweep.json"]) == 0
    out = capsys.readouterr().out
    table = out.split("\n\n")[0].splitlines()
    rows = {row.split(" | ")[0].lstrip("| "): row for row in table[2:]}
    assert "repeated confidence interval" in " ".join(out.split())
    assert rows["ETS (top-20% by entropy)"].split(" | ")[3] == "100 (200-299)"
    assert "**undecided**" in rows["**GMTS - ETS** (primary test)"]
    continued = table[-1]
    assert continued.startswith("| GMTS - ETS, continued") and "| +0.9 | [-0.1, +1.9] at look 0 |" in continued
    done = len(json.loads((ROOT / "results/confirm-extension/sweep.json").read_text())["sequential"]["seeds_done"])
    assert f"| {100 + done} of 260; next look 140 ({done} of 40 new) | **continue**: reproduced if (mean - 0) / se > " \
           f"2.87" in continued
