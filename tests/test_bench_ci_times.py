"""bench/ci_times.py on hand-written `.ci/run` logs: phases, suite counts and the summary sentence, exactly."""

import pytest

from bench_scripts import load_bench

ci_times = load_bench("ci_times", "bench_ci_times")

LOG = """== commit 1a2b3c4, 2026-12-02 03:10 UTC, 2 cores
== install (after 10s)
== unit tests: python -m pytest -q (after 100s)
........................................................................ [ 50%]
{unit}
== unit tests took 490 s (goal <= 600 s)
== slow tests (-m slow: the end-to-end runs) (after 610s)
7 passed, 900 deselected, 14 warnings in 120.50s (0:02:00)
== smoke run (every stage, offline model, CPU) (after 740s)
[recipe] smoke: done
== done (after 1000s)
"""
PASSING = "900 passed, 7 deselected, 15 warnings in 480.00s (0:08:00)"
FAILING = "2 failed, 898 passed, 7 deselected, 15 warnings in 540.00s (0:09:00)"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_log_gives_its_header_each_phase_and_each_suite(tmp_path):
    run = ci_times.read_log(write(tmp_path, "a.log", LOG.format(unit=PASSING)))
    assert (run["commit"], run["date"], run["cores"], run["total_s"]) == ("1a2b3c4", "2026-12-02 03:10 UTC", 2, 1000)
    assert run["phases"] == {"install": 90, "unit tests": 510, "slow tests": 130, "smoke run": 260}
    assert run["suites"] == {"unit": {"passed": 900, "failed": 0, "errors": 0, "seconds": 480.0},
                             "slow": {"passed": 7, "failed": 0, "errors": 0, "seconds": 120.5}}


def test_a_log_without_the_header_takes_date_and_commit_from_its_name(tmp_path):
    text = "\n".join(LOG.format(unit=PASSING).splitlines()[1:])
    run = ci_times.read_log(write(tmp_path, "ci-run-2026-12-01-bed9889.log", text))
    assert (run["commit"], run["date"], run["cores"]) == ("bed9889", "2026-12-01", None)


def test_the_table_and_the_summary_sentence_say_the_span_the_count_and_the_failures(tmp_path, capsys):
    a = write(tmp_path, "a.log", LOG.format(unit=PASSING))
    b = write(tmp_path, "b.log", LOG.format(unit=FAILING))
    assert ci_times.main(["--summary", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.replace("\n", " ") == (  # wrapped as the documentation's prose (gmts_recipe.markdown)
        "`python -m pytest -q` (the unit suite; the slow end-to-end tests are left to `-m slow`): 8.0-9.0 min for "
        "898-900 tests on 2 cores over 2 `.ci/run`s on clean clones (2026-12-02), failing in 1 of them (1a2b3c4: 2 "
        "tests). ")
    assert max(len(line) for line in out.splitlines()) <= 118
    assert ci_times.main(["--markdown", str(a), str(b)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert rows == ["| a.log | 1a2b3c4 | 2026-12-02 03:10 UTC | 2 | 1.5 | 900 passed in 8.0 min | 7 passed in 2.0 min "
                    "| 4.3 | 16.7 |",
                    "| b.log | 1a2b3c4 | 2026-12-02 03:10 UTC | 2 | 1.5 | 898 passed, 2 failed in 9.0 min | 7 passed in "
                    "2.0 min | 4.3 | 16.7 |"]


def test_a_run_stopped_by_failing_unit_tests_is_a_run_that_failed_there(tmp_path, capsys):
    """.ci/run's set -e: the log ends with the unit suite's failures; the slow suite and the smoke run never ran."""
    stopped = LOG.format(unit="1 failed, 899 passed, 7 deselected in 470.00s (0:07:50)").split("== slow tests")[0]
    path = write(tmp_path, "ci-run-2026-12-02-72b76b3.log", stopped.replace("1a2b3c4", "72b76b3"))
    run = ci_times.read_log(path)
    assert (run["stopped_at"], run["total_s"], run["phases"]) == ("unit", None, {"install": 90})
    assert ci_times.main(["--markdown", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[2] == (
        "| ci-run-2026-12-02-72b76b3.log | 72b76b3 | 2026-12-02 03:10 UTC | 2 | 1.5 | 899 passed, 1 failed in 7.8 min "
        "| not run (the unit tests failed) | not run | stopped: unit tests failing |")
    passing = write(tmp_path, "a.log", LOG.format(unit=PASSING))
    assert ci_times.main(["--summary", str(passing), str(path)]) == 0
    assert "over 2 `.ci/run`s on clean clones (2026-12-02), failing in 1 of them (72b76b3: 1 test)." in (
        capsys.readouterr().out)  # the last given failed: no "passing" claim
    assert ci_times.main(["--summary", str(path), str(passing)]) == 0
    assert "failing in 1 of them (72b76b3: 1 test), the last (1a2b3c4) passing." in capsys.readouterr().out.replace(
        "\n", " ")


@pytest.mark.parametrize("text, reason", [
    (LOG.format(unit=PASSING).replace("== done (after 1000s)\n", ""), "no '== done' line"),
    (LOG.format(unit="FAILED tests/test_x.py::test_y"), "no pytest summary for the unit tests"),
])
def test_an_unfinished_log_is_refused_in_one_line(tmp_path, capsys, text, reason):
    path = write(tmp_path, "c.log", text)
    assert ci_times.main(["--summary", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ci_times.py: {path}: {reason}") and len(err.splitlines()) == 1


def test_a_folder_reads_every_ci_run_log_in_it_oldest_first(tmp_path, capsys):
    """Names of one day sort by commit: the folder's runs come in the order of their dates and times, a log without
    the header (its name's date alone) first in its day; other files in the folder are left alone."""
    late = LOG.format(unit=PASSING).replace("1a2b3c4, 2026-12-02 03:10", "0aaaaaa, 2026-12-02 09:00")
    early = LOG.format(unit=FAILING).replace("1a2b3c4, 2026-12-02 03:10", "fffffff, 2026-12-02 01:00")
    write(tmp_path, "ci-run-2026-12-02-0aaaaaa.log", late)
    write(tmp_path, "ci-run-2026-12-02-fffffff.log", early)
    write(tmp_path, "ci-run-2026-12-02-bbbbbbb.log", "\n".join(LOG.format(unit=PASSING).splitlines()[1:]))
    write(tmp_path, "other.log", "not a ci log")
    assert ci_times.main(["--markdown", str(tmp_path)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split(" | ")[1] for row in rows] == ["bbbbbbb", "fffffff", "0aaaaaa"]
    assert ci_times.main(["--summary", str(tmp_path)]) == 0
    assert ", the last (0aaaaaa) passing." in capsys.readouterr().out.replace("\n", " ")


def test_a_folder_without_ci_logs_is_refused_in_one_line(tmp_path, capsys):
    assert ci_times.main(["--summary", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"ci_times.py: {tmp_path}: no ci-run-*.log in this folder\n"


def test_the_unit_suites_own_time_is_a_line_of_its_own_not_a_phase():
    """.ci/run prints the unit suite's time beside its goal, passing or failing: a line the table reads as neither a
    phase nor a pytest summary (the phases and counts above are read from a log that holds it)."""
    from pathlib import Path

    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text()
    assert 'echo "== unit tests took $((SECONDS - unit_start)) s (goal <= 600 s)"' in ci
    line = "== unit tests took 490 s (goal <= 600 s)"
    assert line in LOG and ci_times.PHASE.match(line) is None and ci_times.PYTEST_END.match(line) is None
