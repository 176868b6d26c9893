"""check.py on good, malformed and tampered results files, and the verdict rules."""

import copy
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import check

ROOT = Path(__file__).resolve().parent.parent


def sealed(base_scores: list[list[list[float]]], arm_scores: dict[str, list[list[float]]]) -> dict:
    """A sealed results file from explicit per-task sample scores: three base evals (seeds 0, 1, 2) and the arms."""

    def evaluation(eval_seed, tasks):
        records = [{"task": i, "hash": f"{i:016x}", "scores": s, "lengths": [10] * len(s)} for i, s in enumerate(tasks)]
        return {"seed": eval_seed, "k": len(tasks[0]), "pass@1": check.pass_at_1(records), "records": records}

    results = {"config_name": "unit", "config": {"model_name_or_path": "tiny"}, "config_hash": "0" * 64,
               "base": {"evals": [evaluation(s, tasks) for s, tasks in enumerate(base_scores)]},
               "arms": {arm: {"eval": evaluation(0, tasks), "learning_rate": 1e-4,
                              "train_log": [{"step": 1, "grad_norm": 0.5, "selection/overlap": 0.6}]}
                        for arm, tasks in arm_scores.items()}}
    return check.seal(results)


def fake_results(shift=0.0, seed=0, n=60, k=4, arms=("ets", "gmts"), base_p=0.3, shifts=None) -> dict:
    """Random scores: base evals at pass rate base_p, each arm at base_p + its shift (the same shift by default)."""
    rng = random.Random(seed)
    shifts = shifts or {arm: shift for arm in arms}

    def tasks(p):
        return [[float(rng.random() < p) for _ in range(k)] for _ in range(n)]

    return sealed([tasks(base_p) for _ in range(3)], {arm: tasks(base_p + d) for arm, d in shifts.items()})


def write(tmp_path, results, name="results.json"):
    path = tmp_path / name
    path.write_text(json.dumps(results))
    return str(path)


def test_valid_file_prints_the_table_and_exits_0(tmp_path, capsys):
    assert check.main([write(tmp_path, fake_results())]) == 0
    out = capsys.readouterr().out
    assert "GMTS" in out and "noise floor" in out
    assert check.main([write(tmp_path, fake_results()), "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("| arm | pass@1 |")


@pytest.mark.parametrize("content,reason", [
    (None, "no such file"),
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a results file"),
    ('{"schema": 1}', "digest mismatch"),
])
def test_missing_or_malformed_file_exits_2_with_one_line(tmp_path, capsys, content, reason):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    assert check.main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert reason in err and "\n" not in err


def test_edited_summary_number_fails(tmp_path, capsys):
    r = fake_results()
    r["summary"]["arms"]["gmts"]["pass@1"] += 0.1
    assert check.main([write(tmp_path, r)]) == 2
    assert "digest mismatch" in capsys.readouterr().err
    r["digest"] = check.digest(r)  # a tamperer who also recomputes the digest
    assert check.main([write(tmp_path, r)]) == 2
    assert "summary.arms.gmts.pass@1" in capsys.readouterr().err


def test_edited_record_fails(tmp_path, capsys):
    r = fake_results()
    r["arms"]["gmts"]["eval"]["records"][0]["scores"][0] = 1.0 - r["arms"]["gmts"]["eval"]["records"][0]["scores"][0]
    assert check.main([write(tmp_path, r)]) == 2
    r["digest"] = check.digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "but its records give" in capsys.readouterr().err  # the eval's own pass@1 is checked
    r["arms"]["gmts"]["eval"]["pass@1"] = check.pass_at_1(r["arms"]["gmts"]["eval"]["records"])
    r["digest"] = check.digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "recomputed from the records" in capsys.readouterr().err


def test_records_with_missing_fields_are_malformed(tmp_path, capsys):
    r = fake_results()
    del r["arms"]["ets"]["eval"]["records"][3]["scores"]
    r["digest"] = check.digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "malformed" in capsys.readouterr().err


def test_verdicts_need_the_same_evidence_in_both_directions():
    floor = 0.05
    assert check.verdict({"delta": 0.10, "low": 0.03, "high": 0.17}, floor) == ("moved", [])
    assert check.verdict({"delta": 0.04, "low": 0.01, "high": 0.07}, floor) == ("flat", [])  # within floor
    assert check.verdict({"delta": 0.10, "low": -0.01, "high": 0.2}, floor) == ("flat", [])  # CI covers 0
    assert check.verdict({"delta": -0.10, "low": -0.17, "high": -0.03}, floor) == ("collapsed", [])
    assert check.verdict({"delta": -0.10, "low": -0.17, "high": -0.03}, floor, down="regressed") == ("regressed", [])
    # a dip with only one of the two pieces of evidence is a flag, not a verdict
    assert check.verdict({"delta": -0.10, "low": -0.2, "high": 0.01}, floor) == ("flat", ["dip"])  # CI covers 0
    assert check.verdict({"delta": -0.04, "low": -0.06, "high": -0.01}, floor) == ("flat", ["dip"])  # within floor
    assert check.verdict({"delta": -0.02, "low": -0.05, "high": 0.01}, 0.01) == ("flat", ["dip"])  # issue 9.11's dip
    assert check.verdict({"delta": -0.01, "low": -0.05, "high": 0.03}, floor) == ("flat", [])


def test_a_collapsed_arm_never_reads_like_a_null_result_and_a_small_dip_is_not_a_collapse():
    r = fake_results(shift=-0.25)
    assert r["summary"]["arms"]["gmts"]["verdict"] == "collapsed"
    assert "collapsed" in check.render(r)
    assert fake_results(shift=0.4)["summary"]["arms"]["ets"]["verdict"] == "moved"
    half = [[1.0, 1.0, 0.0, 0.0]] * 60  # noise floor 0: three identical base evals
    dip = [[0.0] * 4] * 2 + [[1.0] * 4] + half[3:]  # two tasks lost, one gained: -0.8 points, interval covers 0
    ets = sealed([half] * 3, {"ets": dip})["summary"]["arms"]["ets"]
    assert ets["vs_base"]["delta"] < 0 < ets["vs_base"]["high"]
    assert (ets["verdict"], ets["flags"]) == ("flat", ["dip"])  # not collapsed


def test_when_both_arms_collapse_the_comparison_says_which_collapsed_less():
    r = fake_results(shifts={"ets": -0.55, "gmts": -0.3}, base_p=0.6, n=120)
    arms, gmts_vs_ets = r["summary"]["arms"], r["summary"]["comparisons"]["gmts_vs_ets"]
    assert arms["ets"]["verdict"] == arms["gmts"]["verdict"] == "collapsed"
    assert gmts_vs_ets["low"] > 0 and gmts_vs_ets["verdict"] == "both collapsed; GMTS less"
    assert "both collapsed; GMTS less" in check.render(r) and "moved" not in check.render(r)
    one = fake_results(shifts={"ets": -0.55, "gmts": 0.0}, base_p=0.6, n=120)["summary"]["comparisons"]["gmts_vs_ets"]
    assert one["verdict"] == "moved" and one["flags"] == ["ETS collapsed"]


def test_three_arms_every_comparison_recomputed_and_rendered(tmp_path, capsys):
    r = fake_results(shifts={"grpo": 0.1, "ets": 0.3, "gmts": 0.3}, n=120)
    assert set(r["summary"]["comparisons"]) == {"gmts_vs_ets", "ets_vs_grpo", "gmts_vs_grpo"}
    arms = r["summary"]["arms"]
    assert r["summary"]["comparisons"]["ets_vs_grpo"]["delta"] == pytest.approx(arms["ets"]["pass@1"]
                                                                               - arms["grpo"]["pass@1"])
    assert check.main([write(tmp_path, r), "--markdown"]) == 0
    out = capsys.readouterr().out
    for text in ("| GRPO (all tokens) |", "| comparison |", "| ETS vs GRPO |", "| GMTS vs GRPO |", "| GMTS vs ETS |"):
        assert text in out
    r["summary"]["comparisons"]["ets_vs_grpo"]["verdict"] = "flat"
    r["digest"] = check.digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "summary.comparisons.ets_vs_grpo" in capsys.readouterr().err


def test_records_are_paired_by_task_not_by_position():
    r = fake_results(shift=0.1)
    shuffled = copy.deepcopy(r)
    random.Random(5).shuffle(shuffled["arms"]["gmts"]["eval"]["records"])
    check.seal(shuffled)  # a re-ordered, re-sealed file pairs the same tasks: the same summary
    assert shuffled["summary"] == r["summary"]


@pytest.mark.parametrize("forge,reason", [
    (lambda r: r["arms"]["gmts"]["eval"]["records"].__setitem__(1, r["arms"]["gmts"]["eval"]["records"][0]),
     "appears twice"),
    (lambda r: r["arms"]["gmts"]["eval"]["records"].pop(), "1 missing, 0 extra"),
    (lambda r: r["arms"]["gmts"]["eval"]["records"][0].update(hash="f" * 16), "1 missing, 1 extra"),
    (lambda r: r["base"]["evals"][2]["records"].pop(), "base eval 2: tasks differ"),
    (lambda r: r["arms"]["ets"]["eval"]["records"][0]["scores"].__setitem__(0, 2.0), "outside [0, 1]"),
    (lambda r: r["arms"]["ets"]["eval"]["records"][0]["scores"].__setitem__(0, float("nan")), "outside [0, 1]"),
    (lambda r: r["arms"]["ets"]["eval"]["records"][0]["scores"].append(1.0), "has 5 samples, k is 4"),
    (lambda r: r["arms"]["ets"]["eval"].update(seed=1), "evaluated with seed 1"),
    (lambda r: r["base"]["evals"][1].update({"pass@1": 0.9}), "base eval 1: pass@1 is 0.9"),
    (lambda r: r["arms"].update(foo=r["arms"]["ets"]), "unknown arm 'foo'"),
    (lambda r: r["base"]["evals"][2].update(compile_seconds=-1.0), "base eval 2: compile_seconds is -1.0"),
    (lambda r: r["arms"]["ets"]["eval"].update(compile_seconds="2"), "arm ets: compile_seconds is '2'"),
    (lambda r: r["arms"]["gmts"].update(train_compile_seconds=float("nan")), "arm gmts: train_compile_seconds is nan"),
])
def test_a_forged_then_resealed_file_is_refused(tmp_path, capsys, forge, reason):
    r = fake_results()
    forge(r)
    if "pass@1" not in reason:  # a careful forger keeps each evaluation's pass@1 consistent with its records
        for e in [*r["base"]["evals"], *(entry["eval"] for entry in r["arms"].values())]:
            e["pass@1"] = check.pass_at_1(e["records"])
    with pytest.raises(check.ResultsError, match=re.escape(reason)):
        check.seal(r)
    r["digest"] = check.digest(r)  # sealed by hand with a stale summary: still refused, for the same reason
    assert check.main([write(tmp_path, r)]) == 2
    err = capsys.readouterr().err.strip()
    assert reason in err and "\n" not in err


def test_the_digest_claims_only_what_it_proves(capsys):
    for text in (check.__doc__, check.DIGEST_NOTE):
        assert "SHA-256" in text and "recompute" in text and "not" in text
    assert "not that the records came from a run" in check.DIGEST_NOTE


def test_write_json_keeps_each_record_on_one_line_and_the_file_valid(tmp_path, capsys):
    """The repository's results files: the same JSON, half the bytes of indent=1, one line per task record."""
    results = fake_results(seed=3, n=40)
    path = tmp_path / "results.json"
    check.write_json(path, results)
    text = path.read_text()
    assert json.loads(text) == results
    lines = {line.strip().rstrip(",") for line in text.splitlines()}
    evals = [e for e in results["base"]["evals"]] + [a["eval"] for a in results["arms"].values()]
    assert all(json.dumps(r) in lines for e in evals for r in e["records"])
    assert len(text) < 0.7 * len(json.dumps(results, indent=1))
    assert max(len(line) for line in text.splitlines()) <= 200  # long values are broken over lines, not one blob
    assert check.main([str(path)]) == 0
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


# Run in a fresh interpreter: verifies the file at sys.argv[1] and lists the deep-learning modules that got imported.
CHECK_WITHOUT_TORCH = ("import sys, check; code = check.main([sys.argv[1]]); "
                       "print(sorted({'torch', 'transformers'} & set(sys.modules))); sys.exit(code)")


def check_in_a_fresh_process(path: str) -> list[str]:
    """check.py on `path` in a new interpreter; the modules of torch/transformers it imported (none expected)."""
    proc = subprocess.run([sys.executable, "-c", CHECK_WITHOUT_TORCH, path], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1].replace("'", '"'))


def test_check_imports_neither_torch_nor_transformers(tmp_path):
    """A reader verifying a results file needs JSON and statistics, not the training stack (importing it took
    longer than the verification); `import check` alone pulls in neither either."""
    assert check_in_a_fresh_process(write(tmp_path, fake_results())) == []
    proc = subprocess.run([sys.executable, "-c", "import check, sys; assert 'torch' not in sys.modules and "
                           "'transformers' not in sys.modules"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


COMMITTED = sorted(str(p.relative_to(ROOT)) for pattern in ("results/*/results.json", "results/*/*/results.json",
                                                           "results/*/sweep.json") for p in ROOT.glob(pattern))


@pytest.mark.parametrize("path", COMMITTED)
def test_every_committed_results_file_passes_check(path, capsys, monkeypatch):
    """The README's numbers come from these files: each must still pass check.py under the current code (a summary
    format change re-seals them, records untouched)."""
    monkeypatch.chdir(ROOT)
    assert check.main([path]) == 0, capsys.readouterr().err


def test_rollout_agreement_per_step_and_its_line():
    from gmts_recipe.records import agreement_line, rollout_agreement

    ets = {"0": ["a", "b", "c", "d"], "1": ["a", "x", "c", "d"], "2": ["p", "q", "r", "s"]}
    gmts = {"0": ["a", "b", "c", "d"], "1": ["a", "b", "c", "e"], "2": ["t", "u", "v", "w"], "3": ["z"] * 4}
    assert rollout_agreement(ets, gmts) == [(0, 1.0), (1, 0.5), (2, 0.0)]
    line = agreement_line({"arms": {"ets": {"rollout_digests": ets}, "gmts": {"rollout_digests": gmts}}})
    assert line == "Identical rollouts, ets vs gmts, per step: 0: 100%, 1: 50%, 2: 0%"
    assert agreement_line({"arms": {"ets": {}, "gmts": {"rollout_digests": gmts}}}) is None
