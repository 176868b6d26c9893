"""check.py on good, malformed and tampered results files, and the verdict rules."""

import json
import random

import pytest

import check


def fake_results(shift=0.0, seed=0, n=60, k=4) -> dict:
    rng = random.Random(seed)

    def evaluation(eval_seed, p):
        return {"seed": eval_seed, "k": k, "pass@1": None, "records": [
            {"task": i, "hash": f"{i:016x}", "scores": [float(rng.random() < p) for _ in range(k)], "lengths": [10] * k}
            for i in range(n)]}

    base = [evaluation(s, 0.3) for s in (0, 1, 2)]
    results = {"config_name": "unit", "config": {"model_name_or_path": "tiny"}, "config_hash": "0" * 64,
               "base": {"evals": base},
               "arms": {arm: {"eval": evaluation(0, 0.3 + shift), "learning_rate": 1e-4,
                              "train_log": [{"step": 1, "grad_norm": 0.5, "selection/overlap": 0.6}]}
                        for arm in ("ets", "gmts")}}
    for e in [*base, results["arms"]["ets"]["eval"], results["arms"]["gmts"]["eval"]]:
        e["pass@1"] = check.pass_at_1(e["records"])
    return check.seal(results)


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
    assert "recomputed from the records" in capsys.readouterr().err


def test_records_with_missing_fields_are_malformed(tmp_path, capsys):
    r = fake_results()
    del r["arms"]["ets"]["eval"]["records"][3]["scores"]
    r["digest"] = check.digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "malformed" in capsys.readouterr().err


def test_verdicts():
    assert check.verdict({"delta": 0.10, "low": 0.03, "high": 0.17}, floor=0.05) == ("moved", [])
    assert check.verdict({"delta": 0.04, "low": 0.01, "high": 0.07}, floor=0.05) == ("flat", [])  # within floor
    assert check.verdict({"delta": 0.10, "low": -0.01, "high": 0.2}, floor=0.05) == ("flat", [])  # CI covers 0
    assert check.verdict({"delta": -0.10, "low": -0.17, "high": -0.03}, floor=0.05) == ("collapsed", ["regressed"])
    assert check.verdict({"delta": -0.10, "low": -0.17, "high": -0.03}, 0.05, collapse_check=False) == \
        ("flat", ["regressed"])
    assert check.verdict({"delta": -0.03, "low": -0.05, "high": -0.01}, floor=0.05) == ("flat", [])


def test_a_collapsed_arm_never_reads_like_a_null_result():
    r = fake_results(shift=-0.25)
    assert r["summary"]["arms"]["gmts"]["verdict"] == "collapsed"
    assert "collapsed" in check.render(r)
    assert fake_results(shift=0.4)["summary"]["arms"]["ets"]["verdict"] == "moved"
