"""One format in the code: every format of results file that results/ and bench/logs/ hold converts on load in one
place (records.current_record), and a file written today is format 2 (no per-task records beside a samples file)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import check
from gmts_recipe.data import TASK_KEYS
from gmts_recipe.records import (FORMATS, MOVED_TO_ARMS, SCHEMA, config_hash, current_record, evaluation_fields,
                                 write_results)
from gmts_recipe.verify.file import load, seal

ROOT = Path(__file__).resolve().parent.parent

# One committed file of each stage of format 1 (what sets it apart), found by surveying results/ and bench/logs/.
COMMITTED_FORMATS = {
    "before samples, before execution options and base evaluation hashes (arithmetic)": "results/offline/results.json",
    "before samples, execution options, no base evaluation hash": "results/quickstart-cpu-tuning/q3-lr1e-3-32tokens/"
                                                                  "results.json",
    "before samples, GSM8K, merged from another machine": "results/qwen/paper-lr0.0001-s34/results.json",
    "before samples, no compile seconds (bench log)": "bench/logs/complete-run-h200-results.json",
    "before samples, rollout digests (bench log)": "bench/logs/repeat-run-h200-24bit-results.json",
    "before samples, the base only (bench log)": "bench/logs/repeat-h200-base-after-two-runs-results.json",
    "samples scored by version 1, keys over the question, gradient_checkpointing in the config":
        "results/coupled/coupled-lr0.0001-s100/results.json",
    "samples scored by version 1, keys over the question, gradient_checkpointing per arm":
        "results/confirm/coupled-lr0.0001-s212/results.json",
    "samples (files not kept beside it), keys over the question (bench log)":
        "bench/logs/repeat-options-h200-s211-results.json",
    "reward version recorded, keys over question and gold, the generated pool, provenance":
        "results/quickstart-cpu/results.json",
    "reward version recorded, GSM8K, peak GPU memory": "results/side-by-side-h100-ours/qwen/results.json",
}


def assert_current(results: dict) -> None:
    """What every loaded file holds, whatever its format: what the code reads, and nothing it has to guess."""
    config = results["config"]
    assert not set(MOVED_TO_ARMS) & set(config) and results["config_hash"] == config_hash(config)
    assert results["data"]["task_key"] in TASK_KEYS
    if results["data"]["task"] == "arithmetic":
        assert set(results["data"]["pool"]) == {"n_heldout", "task_seed", "difficulty"}
    for where, ev in evaluation_fields(results):
        assert isinstance(ev["records"], list) and ev["records"], where
        if "samples" in ev:
            assert isinstance(ev["samples"]["reward"], int), where


@pytest.mark.parametrize("stage", list(COMMITTED_FORMATS))
def test_each_committed_format_converts_in_one_place(stage):
    path = ROOT / COMMITTED_FORMATS[stage]
    raw = json.loads(path.read_text())
    assert raw["schema"] == 1
    results = load(path)
    assert_current(results)
    assert results["schema"] == 1 and results["digest"] == raw["digest"]  # the file's format and identity
    assert current_record(results, path.parent) is results  # converted once: nothing left to convert
    for arm, entry in results["arms"].items():  # a field that moved into the arms: the arm ran with the config's
        for key in set(MOVED_TO_ARMS) & set(raw["config"]):
            assert entry["generation_options"][key] == raw["arms"][arm].get("generation_options", {}).get(
                key, raw["config"][key])


def format_2_copy(tmp_path: Path) -> tuple[Path, Path]:
    """results/quickstart-cpu with its samples, and the same run written as recipe.py writes it today."""
    old = tmp_path / "results" / "quickstart-cpu" / "results.json"
    shutil.copytree(ROOT / "results" / "quickstart-cpu", old.parent)
    shutil.copytree(ROOT / "results" / "base-evals", tmp_path / "results" / "base-evals")
    new = tmp_path / "results" / "today" / "results.json"
    shutil.copytree(old.parent, new.parent)
    write_results(new, seal(load(new)))
    return old, new


def test_a_file_written_today_is_format_2_and_loads_as_the_committed_one(tmp_path, capsys):
    """No per-task records beside a samples file: load rebuilds them from it, bit for bit, so every summary number
    and every check is the committed file's; the file is a fraction of its size."""
    old, new = format_2_copy(tmp_path)
    stored = json.loads(new.read_text())
    assert stored["schema"] == SCHEMA == max(FORMATS)
    assert not any("records" in ev for _, ev in evaluation_fields(stored))
    before, after = load(old), load(new)
    assert_current(after)
    assert after["summary"] == before["summary"]
    assert [ev["records"] for _, ev in evaluation_fields(after)] == [ev["records"] for _, ev in
                                                                      evaluation_fields(before)]
    records = sum(len(json.dumps(ev["records"])) for _, ev in evaluation_fields(before))
    assert len(new.read_bytes()) < len(old.read_bytes()) - 0.8 * records  # the records are not stored twice
    outputs = []
    for path in (old, new):
        assert check.main([str(path)]) == 0
        outputs.append(re.sub(r"config \w{12}|\S+results.json", "", capsys.readouterr().out))
    assert outputs[0] == outputs[1]


def test_a_cells_figures_are_drawn_from_its_files_on_demand(tmp_path):
    """A sweep's cells carry no figures: `python -m gmts_recipe.plots CELL_DIR` draws curves.png and
    curves-selection.png from a cell of either format."""
    from gmts_recipe import plots

    for path in format_2_copy(tmp_path):
        for png in path.parent.glob("*.png"):
            png.unlink()
        assert plots.main([str(path.parent)]) == 0
        assert sorted(p.name for p in path.parent.glob("*.png")) == ["curves-selection.png", "curves.png"]


def test_a_format_2_file_needs_its_samples_to_load(tmp_path):
    _, new = format_2_copy(tmp_path)
    sample = new.parent / json.loads(new.read_text())["arms"]["ets"]["eval"]["samples"]["path"]
    sample.unlink()
    with pytest.raises(check.ResultsError, match=r"arms.ets.eval: samples file .* is missing"):
        load(new)


def test_no_module_but_the_converter_knows_what_earlier_formats_wrote():
    """The words of an earlier format's handling ('written before', 'predates', 'older files') appear in the product
    only in records.py, the converter's module (the reward modules keep versioned readings of an answer, not of a
    file; the speed options' hash keys are the trainer's)."""
    pattern = re.compile(r"written before|predat|older (file|format)|files? from before", re.IGNORECASE)
    exempt = {"gmts_recipe/records.py", "gmts_recipe/rewards.py", "gmts_recipe/rewards_v1.py",
              "gmts_recipe/speed_options.py"}
    product = [*ROOT.glob("*.py"), *ROOT.glob("gmts_recipe/**/*.py")]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in product if str(p.relative_to(ROOT)) not in exempt
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_the_defaults_a_config_record_leaves_out_are_the_recipes():
    """A config record holds only the fields away from their defaults: the checks read the others from
    records.RECORD_DEFAULTS, frozen as the committed files were written. A default changed in RecipeArgs would make
    those files read as runs of the new default: this fails first."""
    import dataclasses

    from gmts_recipe.recipe_config import RecipeArgs, field_default
    from gmts_recipe.records import RECORD_DEFAULTS, setting

    defaults = {f.name: field_default(f) for f in dataclasses.fields(RecipeArgs)}
    assert {key: defaults[key] for key in RECORD_DEFAULTS} == RECORD_DEFAULTS
    assert setting({"n_heldout": 0}, "n_heldout") == 0 and setting({}, "eval_samples") == 4
