"""check.py given a path that is not a results file: where runs write theirs, and a folder is looked into; a sweep is
checked from any current directory."""

import json
from pathlib import Path

import pytest

import check
from test_check import fake_results

ROOT = Path(__file__).resolve().parent.parent


def test_a_missing_file_names_where_runs_are_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert check.main(["results.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "results.json: no such file; a run writes runs/<config name>/results.json" in err
    assert "runs/quickstart/results.json" in err and "found" not in err
    (tmp_path / "runs" / "quickstart").mkdir(parents=True)
    (tmp_path / "runs" / "quickstart" / "results.json").write_text(json.dumps(fake_results(shift=0.1)))
    assert check.main(["results.json"]) == 2
    assert "; found: runs/quickstart/results.json" in capsys.readouterr().err


def test_a_folder_is_looked_into(tmp_path, capsys):
    run = tmp_path / "quickstart"
    run.mkdir()
    (run / "results.json").write_text(json.dumps(fake_results(shift=0.1)))
    assert check.main([str(run), "--allow-unsampled"]) == 0
    assert "GMTS" in capsys.readouterr().out
    assert check.main([str(tmp_path)]) == 2  # a folder with neither file
    assert "without results.json or sweep.json" in capsys.readouterr().err


@pytest.mark.slow
def test_a_sweep_is_checked_from_any_directory(tmp_path, monkeypatch, capsys):
    """The extension's sweep names its config, the test it continues and its design file relative to the repository:
    check.py finds them from the sweep's folder, whatever the current directory (about a minute: the continued test's
    100 cells are read)."""
    monkeypatch.chdir(tmp_path)
    assert check.main([str(ROOT / "results/confirm-extension/sweep.json")]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "Look 0: configs/sweeps/confirm.yaml and results/confirm as committed" in out
