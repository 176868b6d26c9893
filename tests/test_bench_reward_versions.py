"""bench/reward_versions.py on hand-written samples (exact counts), and the committed samples against its committed
output: every sample whose score differs between reward versions re-scores, at each version, to the score listed,
and at its recorded version to the stored score; so do all the samples of a few files scored by version 1 (the whole
of every committed file: tests/test_check.py's slow test, every committed sweep re-scored)."""

import json
import lzma
import random
from pathlib import Path

import pytest

from bench_scripts import load_bench
from gmts_recipe.rewards import REWARD_VERSION, REWARD_VERSIONS, final_answer, sample_scores
from gmts_recipe.samples import write_samples

reward_versions = load_bench("reward_versions", "bench_reward_versions")
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"
COMMITTED = json.loads((ROOT / "bench" / "reward-versions.json").read_text())


def _evaluation(folder: Path, stem: str, texts: list[str], gold: str, version: int | None) -> dict:
    """One evaluation of one task, its samples file written beside, scored by `version` (None: recorded as absent,
    which reads as version 1)."""
    scores = sample_scores(texts, gold, version or 1)
    log = [{"task": 0, "hash": "h0", "gold": gold, "samples": texts, "scores": scores}]
    path, sha = write_samples(folder, stem, log)
    ref = {"path": path.name, "sha256": sha, **({"reward": version} if version else {})}
    return {"k": len(texts), "records": [{"task": 0, "hash": "h0", "scores": scores}], "samples": ref}


def test_the_counts_on_hand_written_samples(tmp_path):
    texts = ["\\boxed{72}", "\\boxed{\\text{72}}", "\\boxed{72 squared}", "\\boxed{70 \\text{ or } 72}",
             "#### 72 thousand", "\\boxed{72}. Wait, it is 36."]
    # versions 1 to 5 score them: 11111 | 01111 | 01000 | 11000 | 11100 | 11110
    run = tmp_path / "run"
    results = {"base": {"evals": [_evaluation(run, "base", texts, "72", None)]},
               "arms": {"gmts": {"eval": _evaluation(run, "gmts", texts[:2], "72", 2)}}}
    (run / "results.json").write_text(json.dumps(results))
    (tmp_path / "notes.json").write_text("[1, 2]")  # not a results file: passed over
    math = tmp_path / "math"  # a MATH evaluation (its reward named): not GSM8K's readings, passed over
    (math / "results.json").parent.mkdir()
    (math / "results.json").write_text(json.dumps({"base": {"evals": [
        _evaluation(math, "base", ["\\boxed{7}"], "7", None) | {"samples": {"path": "x", "sha256": "0",
                                                                        "reward": "math-2"}}]}}))
    summary = reward_versions.measure(tmp_path)
    assert (summary["samples_files"], summary["samples"], summary["not_as_stored"]) == (2, 8, 0)
    assert summary["samples_by_recorded_version"] == {"1": 6, "2": 2, "3": 0, "4": 0, "5": 0}
    # base (version 1 stored 1 0 0 1 1 1): version 2 moves two up; version 3 one up, one down; version 4 one up, two
    # down; version 5 one up, three down. gmts (version 2 stored 1 1): version 1 moves one down
    assert summary["against_recorded"] == {"1": {"up": 0, "down": 1}, "2": {"up": 2, "down": 0},
                                           "3": {"up": 1, "down": 1}, "4": {"up": 1, "down": 2},
                                           "5": {"up": 1, "down": 3}}
    assert summary["between_versions"] == {"1->2": {"up": 3, "down": 0}, "2->3": {"up": 0, "down": 2},
                                           "3->4": {"up": 0, "down": 1}, "4->5": {"up": 0, "down": 1}}
    rows = [(d["file"], d["sample"], d["recorded"], d["scores"]) for d in summary["differ"]]
    base, gmts = sorted({d["file"] for d in summary["differ"]})
    assert base.startswith("run/base-") and gmts.startswith("run/gmts-")
    assert rows == [(base, 1, 1, [0.0, 1.0, 1.0, 1.0, 1.0]), (base, 2, 1, [0.0, 1.0, 0.0, 0.0, 0.0]),
                    (base, 3, 1, [1.0, 1.0, 0.0, 0.0, 0.0]), (base, 4, 1, [1.0, 1.0, 1.0, 0.0, 0.0]),
                    (base, 5, 1, [1.0, 1.0, 1.0, 1.0, 0.0]), (gmts, 1, 2, [0.0, 1.0, 1.0, 1.0, 1.0])]
    assert [summary["differ"][i]["answer"] for i in (1, 3, 4)] == ["72 squared", "72 thousand", "72 or 36"]
    assert "8 samples in 2 files (recorded version: 1: 6, 2: 2, 3: 0, 4: 0, 5: 0)" in reward_versions.text(summary)
    table = reward_versions.markdown(summary).splitlines()
    assert table[0] == "8 committed samples in 2 samples files (6 scored by version 1, 2 scored by version 2);"
    assert table[5:10] == ["| 1 | 0 up, 1 down | - |", "| 2 | 2 up, 0 down | 3 up, 0 down |",
                           "| 3 | 1 up, 1 down | 0 up, 2 down |", "| 4 | 1 up, 2 down | 0 up, 1 down |",
                           "| 5 | 1 up, 3 down | 0 up, 1 down |"]
    sections = [i for i, line in enumerate(table) if line.startswith("The ")]
    assert [table[i] for i in sections] == [
        "The 1 committed sample(s) that version 5 scores otherwise than version 4:",
        "The 1 committed sample(s) that version 4 scores otherwise than version 3:",
        "The 2 committed sample(s) that version 3 scores otherwise than version 2:",
        "The 3 committed sample(s) that version 2 scores otherwise than version 1:"]
    assert table[sections[0] + 4] == f"| {base} | 0 | `72 or 36` | 72 | 1 | 0 |"
    assert table[sections[1] + 4] == f"| {base} | 0 | `72 thousand` | 72 | 1 | 0 |"
    assert table[sections[2] + 4:sections[2] + 6] == [f"| {base} | 0 | `72 squared` | 72 | 1 | 0 |",
                                                      f"| {base} | 0 | `70 \\text{{ or }} 72` | 72 | 1 | 0 |"]


def test_a_samples_file_named_with_two_versions_is_refused(tmp_path):
    ev = _evaluation(tmp_path, "base", ["\\boxed{1}"], "1", None)
    (tmp_path / "a.json").write_text(json.dumps({"base": {"evals": [ev]}}))
    (tmp_path / "b.json").write_text(json.dumps({"base": {"evals": [{**ev, "samples": {**ev["samples"],
                                                                                        "reward": 2}}]}}))
    with pytest.raises(ValueError, match="named with reward versions 1 and 2"):
        reward_versions.samples_files(tmp_path)


def _lines(name: str, keys: set[str] | None = None) -> dict[str, dict]:
    """A committed samples file's lines by task key ("index:hash"); only those of `keys` where given (the others
    are not parsed)."""
    text = lzma.decompress((RESULTS / name).read_bytes()).decode("utf-8")
    hashes = None if keys is None else {k.split(":", 1)[1] for k in keys}
    lines = (line for line in text.splitlines() if hashes is None or any(h in line for h in hashes))
    return {f"{r['task']}:{r['hash']}": r for r in map(json.loads, lines)}


@pytest.mark.slow
def test_the_committed_output_is_this_codes_and_covers_every_committed_samples_file():
    """Every results file under results/ read (half a minute): the samples files they name are the ones counted."""
    assert COMMITTED["reward_version"] == REWARD_VERSION and COMMITTED["not_as_stored"] == 0
    files = reward_versions.samples_files(RESULTS)
    assert COMMITTED["samples_files"] == len(files)
    assert set(COMMITTED["samples_by_recorded_version"]) == {str(v) for v in REWARD_VERSIONS}
    assert all(files[d["file"]] == d["recorded"] for d in COMMITTED["differ"])


@pytest.mark.slow  # re-scores every committed sample under each reward version (10 s)
def test_every_sample_whose_score_differs_between_versions_re_scores_as_listed():
    """The committed samples where the versions disagree (bench/reward-versions.json): each version's score is the
    one listed, and the recorded version's is the score stored when the run scored it."""
    by_file: dict[str, list[dict]] = {}
    for d in COMMITTED["differ"]:
        by_file.setdefault(d["file"], []).append(d)
    assert len(COMMITTED["differ"]) > 50
    for name, rows in by_file.items():
        lines = _lines(name, {d["task"] for d in rows})
        for d in rows:
            line = lines[d["task"]]
            text = line["samples"][d["sample"]]
            again = [sample_scores([text], line["gold"], v)[0] for v in REWARD_VERSIONS]
            assert again == d["scores"] and final_answer(text) == d["answer"], (name, d)
            assert again[d["recorded"] - 1] == line["scores"][d["sample"]], (name, d)


def test_whole_files_scored_by_version_1_re_score_exactly():
    """Every sample of two committed files that version 1 scored (drawn with a fixed seed among those where the
    versions disagree somewhere), re-scored at version 1 through the one reward module: the stored score, sample by
    sample."""
    files = sorted({d["file"] for d in COMMITTED["differ"] if d["recorded"] == 1})
    chosen = random.Random(0).sample(files, 2)
    total = 0
    for name in chosen:
        for key, line in _lines(name).items():
            assert sample_scores(line["samples"], line["gold"], 1) == line["scores"], (name, key)
            total += len(line["scores"])
    assert total > 1000
