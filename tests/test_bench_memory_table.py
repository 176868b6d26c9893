"""bench/memory_table.py: docs/guides/gpu-memory.md's table of measured peaks holds every committed file that recorded
one, each phase's highest peak over a run's arms, and says plainly where gradient checkpointing was on, off or not
recorded."""

import json
import subprocess
from pathlib import Path

from bench_scripts import load_bench

ROOT = Path(__file__).resolve().parent.parent


def _write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _arm(train: float, evaluation: float, checkpointing: bool | None, gpu: str = "NVIDIA L40S") -> dict:
    options = {"generation_decode_loop": "compiled_step", "use_cpu": False}
    if checkpointing is not None:
        options["gradient_checkpointing"] = checkpointing
    return {"gpu_peak_memory_gib": {"train": train, "eval": evaluation}, "generation_options": options,
            "provenance": {"gpu": gpu, "gpus": 1}}


def test_a_run_row_takes_each_phases_highest_peak_over_its_arms(tmp_path, monkeypatch):
    table = load_bench("memory_table")
    monkeypatch.setattr(table, "ROOT", tmp_path)
    path = _write(tmp_path / "results" / "a" / "results.json", {
        "config_name": "qwen-coupled", "config": {"sampling_noise": "counter"},
        "base": {"gpu_peak_memory_gib": {"base_eval": 24.09}},
        "arms": {"ets": _arm(19.61, 25.3, True), "gmts": _arm(19.7, 25.2, True)}})
    row = table.results_row(path, json.loads(path.read_text()))
    assert row == ["`results/a/results.json`", "L40S", "qwen-coupled", "on", "compiled step", "recipe.py", "24.1",
                   "19.7", "25.3"]
    mixed = {"arms": {"ets": _arm(1, 1, True), "gmts": _arm(1, 1, False)}}
    assert table.results_row(path, mixed)[3] == "not recorded"  # the arms disagree: no single answer
    assert table.results_row(path, {"arms": {"ets": _arm(1, 1, None)}})[3] == "not recorded"


def test_only_files_with_peaks_are_rows_and_bench_paths_count_their_training_steps(tmp_path, monkeypatch):
    table = load_bench("memory_table")
    monkeypatch.setattr(table, "ROOT", tmp_path)
    _write(tmp_path / "results" / "old" / "results.json", {"config_name": "old", "arms": {"ets": {}}})  # no peaks
    _write(tmp_path / "results" / "new" / "results.json", {"config_name": "new", "arms": {"ets": _arm(40, 20, False)}})
    _write(tmp_path / "bench" / "side.json", {
        "recipe_argv": ["--config", "configs/qwen.yaml", "--gradient_checkpointing", "false"],
        "versions": {"gpu": "NVIDIA H200", "gpus": 1},
        "paths": {"ours": {"options": {"generation_fused_projections": True},
                           "steps": {"rows": 64, "gpu_memory_gib": {"torch_peak_allocated": 41.43}}},
                  "broken": {"steps": {"status": "failed"}}}})
    _write(tmp_path / "bench" / "other.json", {"update": [{"peak_gib": 4.2}]})  # no side-by-side paths: not a row
    found = table.rows(tmp_path)
    assert [r[0] for r in found] == ["`results/new/results.json`", "`bench/side.json` ours"]
    assert found[1][1:] == ["H200", "qwen", "off", "fused", "steps of 64 rows", "-", "41.4", "-"]


def test_the_table_holds_every_committed_results_file_that_recorded_a_peak():
    table = load_bench("memory_table")
    listed = subprocess.run(["git", "ls-files", "results/**results.json"], cwd=ROOT, capture_output=True, text=True)
    recorded = [p for p in listed.stdout.split() if table.KEY in (ROOT / p).read_text(encoding="utf-8")]
    assert recorded, "no committed run recorded its peaks: the table would be empty"
    shown = {r[0].strip("`") for r in table.rows()}
    assert set(recorded) <= shown
    page = (ROOT / "docs" / "guides" / "gpu-memory.md").read_text()
    assert "<!-- BEGIN generated: python bench/memory_table.py -->" in page  # tests/test_readme.py checks its body
