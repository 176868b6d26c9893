"""bench/memory_table.py: docs/guides/gpu-memory.md's table of measured peaks holds every committed file that recorded
one, each phase's highest peak over a run's arms, and says plainly where gradient checkpointing was on, off or not
recorded."""

import json
import re
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
    shown = set()
    for r in table.rows():  # a file's own row, or its sweep's row naming its seed
        m = re.fullmatch(r"`(.+)/`, \d+ cell\(s\) \(seeds (\d+)(?:-(\d+))?\)", r[0])
        seeds = range(int(m[2]), int(m[3] or m[2]) + 1) if m else []
        shown |= {f"{m[1]}/{r[2]}-s{s}/results.json" for s in seeds} if m else {r[0].strip("`")}
    assert set(recorded) <= shown
    page = (ROOT / "docs" / "guides" / "gpu-memory.md").read_text()
    assert "<!-- BEGIN generated: python bench/memory_table.py -->" in page  # tests/test_readme.py checks its body


def test_a_sweeps_cells_that_measured_alike_are_one_row(tmp_path, monkeypatch):
    """A sequential plan's cells each record the same peaks on the same card: one row naming the sweep and its seeds
    (160 identical rows would bury the other runs); a cell that measured otherwise keeps a row of its own."""
    table = load_bench("memory_table")
    monkeypatch.setattr(table, "ROOT", tmp_path)
    sweep = tmp_path / "results" / "ext"
    _write(sweep / "sweep.json", {})
    for seed, peak in ((300, 18.1), (301, 18.1), (302, 18.1), (303, 19.0)):
        _write(sweep / f"coupled-lr0.0001-s{seed}" / "results.json",
               {"config_name": f"coupled-lr0.0001-s{seed}", "arms": {"ets": _arm(peak, 23.2, True, "NVIDIA H100")}})
    found = table.rows(tmp_path)
    assert [r[0] for r in found] == ["`results/ext/`, 3 cell(s) (seeds 300-302)",
                                     "`results/ext/`, 1 cell(s) (seeds 303)"]
    assert found[0][2] == "coupled-lr0.0001" and found[0][7] == "18.1" and found[1][7] == "19.0"
