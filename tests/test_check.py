"""check.py on good, malformed and tampered results files, and the verdict rules."""

import copy
import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import check
from forge import refused, reseal, sealed
from gmts_recipe.arms import arm_named
from gmts_recipe.records import ResultsError, digest, evaluations, read_samples, write_json
from gmts_recipe.verify.file import check_samples, load, seal
from gmts_recipe.rewards import REWARD_VERSION
from gmts_recipe.samples import samples_bytes, write_samples
from gmts_recipe.stats import pass_at_1, verdict
from gmts_recipe.tables import DIGEST_NOTE, render
from results_files import rehash, seal_format_1

ROOT = Path(__file__).resolve().parent.parent


def sealed(base_scores: list[list[list[float]]], arm_scores: dict[str, list[list[float]]]) -> dict:
    """A sealed results file of format 1 without samples (records in the file) from explicit per-task sample scores:
    three base evals (seeds 0, 1, 2; each its own text lengths, as samples of different seeds have) and the arms, on
    GSM8K tasks with made-up keys (GSM8K is not at hand: the keys are not compared), held out as the whole test split
    of a pool of that many tasks (n_heldout 0), k samples each (the config's eval_samples)."""

    def evaluation(eval_seed, tasks):
        records = [{"task": i, "hash": f"{i:016x}", "scores": s, "lengths": [10 + eval_seed] * len(s)}
                   for i, s in enumerate(tasks)]
        return {"seed": eval_seed, "k": len(tasks[0]), "pass@1": pass_at_1(records), "records": records}

    n, k = len(base_scores[0]), len(base_scores[0][0])
    results = {"config_name": "unit", "config": {"model_name_or_path": "tiny", "n_heldout": 0,
                                                 **({"eval_samples": k} if k != 4 else {})},
               "data": {"task": "gsm8k", "train_pool": n, "test_pool": n,
                        "heldout": [[i, f"{i:016x}"] for i in range(n)]},
               "base": {"evals": [evaluation(s, tasks) for s, tasks in enumerate(base_scores)]},
               "arms": {arm: {"eval": evaluation(0, tasks), "learning_rate": 1e-4,
                              "token_selection": arm_named(arm).rule,
                              "train_log": [{"step": 1, "grad_norm": 0.5, "selection/overlap": 0.6}]}
                        for arm, tasks in arm_scores.items()}}
    return seal_format_1(rehash(results))


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
    assert check.main([write(tmp_path, fake_results()), "--allow-unsampled"]) == 0
    out = capsys.readouterr().out
    assert "GMTS" in out and "noise floor" in out
    assert check.main([write(tmp_path, fake_results()), "--markdown", "--allow-unsampled"]) == 0
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
    r["digest"] = digest(r)  # a tamperer who also recomputes the digest
    assert check.main([write(tmp_path, r)]) == 2
    assert "summary.arms.gmts.pass@1" in capsys.readouterr().err


def test_edited_record_fails(tmp_path, capsys):
    r = fake_results()
    r["arms"]["gmts"]["eval"]["records"][0]["scores"][0] = 1.0 - r["arms"]["gmts"]["eval"]["records"][0]["scores"][0]
    assert check.main([write(tmp_path, r)]) == 2
    r["digest"] = digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "but its records give" in capsys.readouterr().err  # the eval's own pass@1 is checked
    r["arms"]["gmts"]["eval"]["pass@1"] = pass_at_1(r["arms"]["gmts"]["eval"]["records"])
    r["digest"] = digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "recomputed from the records" in capsys.readouterr().err


def test_records_with_missing_fields_are_malformed(tmp_path, capsys):
    r = fake_results()
    del r["arms"]["ets"]["eval"]["records"][3]["scores"]
    r["digest"] = digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "malformed" in capsys.readouterr().err


def test_verdicts_need_the_same_evidence_in_both_directions():
    floor = 0.05
    assert verdict({"delta": 0.10, "low": 0.03, "high": 0.17}, floor) == ("moved", [])
    assert verdict({"delta": 0.04, "low": 0.01, "high": 0.07}, floor) == ("flat", [])  # within floor
    assert verdict({"delta": 0.10, "low": -0.01, "high": 0.2}, floor) == ("flat", [])  # CI covers 0
    assert verdict({"delta": -0.10, "low": -0.17, "high": -0.03}, floor) == ("collapsed", [])
    assert verdict({"delta": -0.10, "low": -0.17, "high": -0.03}, floor, down="regressed") == ("regressed", [])
    # a dip with only one of the two pieces of evidence is a flag, not a verdict
    assert verdict({"delta": -0.10, "low": -0.2, "high": 0.01}, floor) == ("flat", ["dip"])  # CI covers 0
    assert verdict({"delta": -0.04, "low": -0.06, "high": -0.01}, floor) == ("flat", ["dip"])  # within floor
    assert verdict({"delta": -0.02, "low": -0.05, "high": 0.01}, 0.01) == ("flat", ["dip"])  # a dip
    assert verdict({"delta": -0.01, "low": -0.05, "high": 0.03}, floor) == ("flat", [])


def test_a_collapsed_arm_never_reads_like_a_null_result_and_a_small_dip_is_not_a_collapse():
    r = fake_results(shift=-0.25)
    assert r["summary"]["arms"]["gmts"]["verdict"] == "collapsed"
    assert "collapsed" in render(r)
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
    assert "both collapsed; GMTS less" in render(r) and "moved" not in render(r)
    one = fake_results(shifts={"ets": -0.55, "gmts": 0.0}, base_p=0.6, n=120)["summary"]["comparisons"]["gmts_vs_ets"]
    assert one["verdict"] == "moved" and one["flags"] == ["ETS collapsed"]


def test_three_arms_every_comparison_recomputed_and_rendered(tmp_path, capsys):
    r = fake_results(shifts={"grpo": 0.1, "ets": 0.3, "gmts": 0.3}, n=120)
    assert set(r["summary"]["comparisons"]) == {"gmts_vs_ets", "ets_vs_grpo", "gmts_vs_grpo"}
    arms = r["summary"]["arms"]
    assert r["summary"]["comparisons"]["ets_vs_grpo"]["delta"] == pytest.approx(arms["ets"]["pass@1"]
                                                                               - arms["grpo"]["pass@1"])
    assert check.main([write(tmp_path, r), "--markdown", "--allow-unsampled"]) == 0
    out = capsys.readouterr().out
    for text in ("| GRPO (all tokens) |", "| comparison |", "| ETS vs GRPO |", "| GMTS vs GRPO |", "| GMTS vs ETS |"):
        assert text in out
    r["summary"]["comparisons"]["ets_vs_grpo"]["verdict"] = "flat"
    r["digest"] = digest(r)
    assert check.main([write(tmp_path, r)]) == 2
    assert "summary.comparisons.ets_vs_grpo" in capsys.readouterr().err


def test_records_are_paired_by_task_not_by_position():
    r = fake_results(shift=0.1)
    shuffled = copy.deepcopy(r)
    random.Random(5).shuffle(shuffled["arms"]["gmts"]["eval"]["records"])
    seal(shuffled)  # a re-ordered, re-sealed file pairs the same tasks: the same summary
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
            e["pass@1"] = pass_at_1(e["records"])
    with pytest.raises(ResultsError, match=re.escape(reason)):
        seal(r)
    r["digest"] = digest(r)  # sealed by hand with a stale summary: still refused, for the same reason
    assert check.main([write(tmp_path, r)]) == 2
    err = capsys.readouterr().err.strip()
    assert reason in err and "\n" not in err


@pytest.mark.parametrize("forge, reason", [
    (lambda r: r["base"]["evals"][1].update(seed=0), "base.evals: seeds [0, 0, 2]"),
    (lambda r: r["arms"]["gmts"].update(token_selection="entropy"), "arms.gmts.token_selection is 'entropy'"),
    (lambda r: r.update(config_hash="0" * 64), "config_hash is 0000000000000000..."),
])
def test_seal_refuses_what_check_refuses_and_leaves_the_file_as_it_was(forge, reason):
    """verify.file.seal runs the file-level checks (format, what the file says about itself) before it seals: a run
    never ends with a sealed file that check.py refuses (tests forge such files with forge.sealed)."""
    r = fake_results()
    forge(r)
    before = copy.deepcopy(r)
    with pytest.raises(ResultsError, match=re.escape(reason)):
        seal(r)
    assert r == before


def test_the_digest_claims_only_what_it_proves(capsys):
    for text in (check.__doc__, DIGEST_NOTE):
        assert "SHA-256" in text and "recompute" in text and "not" in text
    assert "not that the records came from a run" in DIGEST_NOTE


def test_write_json_keeps_each_record_on_one_line_and_the_file_valid(tmp_path, capsys):
    """The repository's results files: the same JSON, half the bytes of indent=1, one line per task record."""
    results = fake_results(seed=3, n=40)
    path = tmp_path / "results.json"
    write_json(path, results)
    text = path.read_text()
    assert json.loads(text) == results
    lines = {line.strip().rstrip(",") for line in text.splitlines()}
    evals = [e for e in results["base"]["evals"]] + [a["eval"] for a in results["arms"].values()]
    assert all(json.dumps(r) in lines for e in evals for r in e["records"])
    assert len(text) < 0.7 * len(json.dumps(results, indent=1))
    assert max(len(line) for line in text.splitlines()) <= 200  # long values are broken over lines, not one blob
    assert check.main([str(path), "--allow-unsampled"]) == 0
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


# Run in a fresh interpreter: verifies the file at sys.argv[1] and lists the deep-learning modules that got imported.
CHECK_WITHOUT_TORCH = ("import sys, check; code = check.main([sys.argv[1], '--allow-unsampled']); "
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


SWEEPS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("results/*/sweep.json"))


def _cells_of_sweeps() -> set[str]:
    """The cell files a committed sweep.json names, but the first of each: checking the sweep checks them all."""
    cells = set()
    for sweep_path in SWEEPS:
        names = [cell["path"] for cell in json.loads((ROOT / sweep_path).read_text())["cells"]]
        cells |= {str((ROOT / sweep_path).parent.joinpath(name).resolve().relative_to(ROOT)) for name in names[1:]}
    return cells


# The sweep the unit suite checks through its sweep.json: the pilot's 10 cells stand for every committed sweep (the
# confirmatory test's 100 cells, read twice more by its extension's look 0, take minutes); the slow test below checks
# every committed sweep, every sample re-scored. Each sweep's first cell is checked on its own here too.
UNIT_SWEEP = "results/coupled/sweep.json"
COMMITTED = sorted(set(str(p.relative_to(ROOT)) for pattern in ("results/*/results.json", "results/*/*/results.json")
                       for p in ROOT.glob(pattern)) - _cells_of_sweeps()) + [UNIT_SWEEP]


# Committed results of format 1 written before evaluations kept their samples: they pass with --allow-unsampled, as
# "not re-scored", and only they.
PREDATING_SAMPLES = ("results/offline/", "results/quickstart-cpu-tuning/",
                     "results/quickstart-gpu/", "results/qwen/", "results/qwen-accelerate/",
                     "results/smoke-h200-compiled/")


@pytest.mark.parametrize("path", COMMITTED)
def test_every_committed_results_file_passes_check(path, capsys, monkeypatch, committed_sweeps_verified_once):
    """The README's numbers come from these files: each must still pass check.py under the current code (a summary
    format change re-seals them, records untouched). The pilot's cells are checked through its sweep.json (every cell
    loaded and its summaries recomputed; the samples of its first and last cell re-scored: the fixture), and every
    sweep's first cell on its own too; every sweep in full: the slow test below. Those written before evaluations kept
    samples pass with --allow-unsampled (the README's lines carry it), as not re-scored, and every file's output ends
    with the one line of what was verified."""
    monkeypatch.chdir(ROOT)
    flags = ["--allow-unsampled"] if path.startswith(PREDATING_SAMPLES) else []
    assert check.main([path, *flags]) == 0, capsys.readouterr().err
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith(f"Verified: {path}: ")
    assert ("not re-scored" in last) == path.startswith(PREDATING_SAMPLES), last


@pytest.mark.slow
@pytest.mark.parametrize("path", SWEEPS)
def test_every_committed_sweep_re_scores_every_sample(path, capsys, monkeypatch):
    """check.py on each committed sweep as a reader runs it (the README's lines carry --allow-unsampled for a sweep
    whose cells predate stored samples): every cell re-verified, every stored sample re-scored, the output ending with
    the one line of what was verified, which says "not re-scored" for those sweeps alone."""
    monkeypatch.chdir(ROOT)
    flags = ["--allow-unsampled"] if path.startswith(PREDATING_SAMPLES) else []
    assert check.main([path, *flags]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    last = out.rstrip().splitlines()[-1]
    assert "re-scored" in out and last.startswith(f"Verified: {path}: ")
    assert ("not re-scored" in last) == path.startswith(PREDATING_SAMPLES), last


def test_rollout_agreement_per_step_and_its_line():
    from gmts_recipe.records import agreement_line, rollout_agreement

    ets = {"0": ["a", "b", "c", "d"], "1": ["a", "x", "c", "d"], "2": ["p", "q", "r", "s"]}
    gmts = {"0": ["a", "b", "c", "d"], "1": ["a", "b", "c", "e"], "2": ["t", "u", "v", "w"], "3": ["z"] * 4}
    assert rollout_agreement(ets, gmts) == [(0, 1.0), (1, 0.5), (2, 0.0)]
    line = agreement_line({"arms": {"ets": {"rollout_digests": ets}, "gmts": {"rollout_digests": gmts}}})
    assert line == ("Identical rollouts, ets vs gmts (the share of a step's completions the two arms sampled alike; "
                    "shared noise, parting weights), per step: 0: 100%, 1: 50%, 2: 0%")
    assert agreement_line({"arms": {"ets": {}, "gmts": {"rollout_digests": gmts}}}) is None


# ---------------------------------------------------------------- samples: what was scored, re-scored
def text_scoring(score: float, gold: str = "7") -> str:
    """A completion the recipe's reward scores `score` against `gold` (its final answer is the gold, or not)."""
    return f"Adding the two amounts gives the total, so the answer is \\boxed{{{gold if score else int(gold) + 1}}}."


def with_samples(results: dict, folder: Path, base_folder: Path | None = None, pool: list[dict] | None = None,
                 questions: bool = True, reward: int | None = REWARD_VERSION) -> dict:
    """The file as format 1 wrote it with samples (records in results.json, as the committed files with samples hold
    them): each evaluation's texts in a samples file (texts scoring as the records say), named as recipe.py names it
    with its SHA-256 in the evaluation; the base's in `base_folder` (the shared ../base-evals/) if given. `pool`: the
    test pool whose tasks the records' keys are (else the keys are made up, so the lines keep no question);
    `questions=False`: lines without their question. `reward`: the version recorded, as files whose keys cover
    question and gold answer record it (data.task_key is set so where absent); None: unrecorded (version 1), as
    files with keys over the question alone. An arm's texts open with its sweep's and cell's folders and its name, a base
    evaluation's with its seed (two runs write other texts: a sweep's check refuses two evaluations that share most of
    theirs, verify.cell.check_apart)."""
    import eval as evaluation

    if reward is not None:
        results["data"].setdefault("task_key", "question+gold")
    for where, ev in evaluations(results):
        tasks = ([pool[r["task"]] for r in ev["records"]] if pool is not None else
                 [{"question": f"q{r['task']}", "answer": "#### 7"} for r in ev["records"]])
        own = (f"In {folder.parent.name}/{folder.name}, {where[4:]}: " if where.startswith("arm ") else
               f"With seed {ev['seed']}: ")
        texts = [[own + text_scoring(s, t["answer"].rsplit("#### ", 1)[1]) for s in r["scores"]]
                 for r, t in zip(ev["records"], tasks)]
        for r, outs in zip(ev["records"], texts):
            r["lengths"] = [len(t) for t in outs]
        log = evaluation.sample_log(texts, tasks, ev["records"])
        if pool is None or not questions:
            log = [{key: value for key, value in line.items() if key != "question"} for line in log]
        base = where.startswith("base") and base_folder is not None
        stem = (f"{results['base'].get('eval_hash', 'base')[:16]}-seed{ev['seed']}" if where.startswith("base") else
                f"samples-{where[4:]}-seed{ev['seed']}")
        path, sha = write_samples(base_folder if base else folder, stem, log)
        ev["samples"] = {"path": (f"../{base_folder.name}/" if base else "") + path.name, "sha256": sha,
                         **({"reward": reward} if reward is not None else {})}
    return seal_format_1(results)


def run_dir(tmp_path: Path, results: dict | None = None) -> Path:
    """<tmp>/run/results.json with samples, the base's in <tmp>/base-evals/ (recipe.py's layout)."""
    folder = tmp_path / "run"
    folder.mkdir(exist_ok=True)
    results = with_samples(results or fake_results(), folder, tmp_path / "base-evals")
    (folder / "results.json").write_text(json.dumps(results))
    return folder / "results.json"


def samples_of(path: Path, where: str) -> tuple[Path, list[dict], dict]:
    results = json.loads(path.read_text())
    ev = dict(evaluations(results))[where]
    file = path.parent / ev["samples"]["path"]
    return file, read_samples(file, None, where), results


def rewrite_samples(path: Path, where: str, edit, record_sha: bool = True) -> None:
    """Edit an evaluation's samples file; with record_sha the forger also names it by its new SHA-256 (as recipe.py
    names it), records that, and re-seals."""
    file, log, _ = samples_of(path, where)
    edit(log)
    data = samples_bytes(log)
    if not record_sha:
        file.write_bytes(data)
        return
    sha = hashlib.sha256(data).hexdigest()
    renamed = file.with_name(f"{file.name.rsplit('-', 1)[0]}-{sha[:12]}.jsonl.xz")
    file.unlink()
    renamed.write_bytes(data)

    def record(r):
        ref = dict(evaluations(r))[where]["samples"]
        ref.update(sha256=sha, path=ref["path"].rsplit("/", 1)[0] + "/" + renamed.name if "/" in ref["path"]
                   else renamed.name)

    reseal(path, record)


def unwrapped(out: str) -> str:
    """check.py's output with its wrapped lines joined again (every run of whitespace one space): for a sentence that
    the terminal's width (160 in a pipe) may have wrapped."""
    return " ".join(out.split())


def test_a_file_with_samples_is_re_scored_and_says_so(tmp_path, capsys):
    path = run_dir(tmp_path)
    assert sorted(p.name.split("-")[0] for p in (tmp_path / "base-evals").iterdir()) == ["base"] * 3
    assert check.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "Samples: 1,200 in 5 evaluation(s) re-scored with the recipe's reward, every score as recorded." in out
    assert check.main([str(path), "--markdown"]) == 0  # the README's tables stay tables: the line goes to stderr
    out, err = capsys.readouterr()
    assert "Samples:" not in out and err.startswith("Samples: 1,200")


def test_flipped_scores_resealed_are_refused(tmp_path, capsys):
    """The attack a digest cannot stop: flip sample scores in one evaluation's records, keep its pass@1 consistent
    and re-seal with seal. The samples file still holds the texts and their scores: refused, in one line naming
    the file, the evaluation, the task and the sample."""
    path = run_dir(tmp_path)
    rng = random.Random(20)
    flips = sorted(rng.sample([(t, j) for t in range(60) for j in range(4)], 13))

    def flip(r):
        for t, j in flips:
            scores = r["arms"]["gmts"]["eval"]["records"][t]["scores"]
            scores[j] = 1.0 - scores[j]

    reseal(path, flip)
    assert load(path)["digest"] == digest(json.loads(path.read_text()))  # the digest and summaries pass
    t, j = flips[0]
    refused(path, capsys, str(path), "arm gmts", f"task {t}:{t:016x} sample {j}:", "(13 sample score(s) differ")


def test_flipped_scores_in_the_samples_file_too_are_re_scored(tmp_path, capsys):
    """A forger who flips the samples file's scores as well and records its new SHA-256: the reward scores the
    stored texts otherwise."""
    path = run_dir(tmp_path)

    def flip(log):
        log[5]["scores"][1] = 1.0 - log[5]["scores"][1]

    rewrite_samples(path, "arm ets", flip)
    reseal(path, lambda r: r["arms"]["ets"]["eval"]["records"][5]["scores"].__setitem__(
        1, 1.0 - r["arms"]["ets"]["eval"]["records"][5]["scores"][1]))
    err = refused(path, capsys, "arm ets", "task 5:0000000000000005 sample 1:", "by the reward now")
    _, log, _ = samples_of(path, "arm ets")
    assert f"in the samples file, {1.0 - log[5]['scores'][1]!r} by the reward now" in err


@pytest.mark.parametrize("edit,message", [
    (lambda log: log.pop(), "1 task(s) of the evaluation have no samples, e.g. 59:"),
    (lambda log: log.append(log[0]), "task 0:0000000000000000 is logged twice"),
    (lambda log: log[3].update(hash="f" * 16), "task 3:ffffffffffffffff is not among the evaluation's records"),
    (lambda log: log[2]["samples"].pop(), "task 2:0000000000000002 needs a gold answer and 4 sample texts"),
    (lambda log: log[2]["scores"].append(1.0), "task 2:0000000000000002 needs a gold answer and 4 sample texts"),
    (lambda log: log[4].pop("gold"), "task 4:0000000000000004 needs a gold answer"),
    (lambda log: log[4]["samples"].__setitem__(0, "x"), "task 4:0000000000000004: the texts' lengths [1,"),
])
def test_samples_that_do_not_match_the_records_are_refused(tmp_path, capsys, edit, message):
    path = run_dir(tmp_path)
    rewrite_samples(path, "base eval 1", edit)
    refused(path, capsys, str(path), "base eval 1:", message)


def test_a_changed_or_missing_samples_file_is_refused(tmp_path, capsys):
    path = run_dir(tmp_path)
    rewrite_samples(path, "arm gmts", lambda log: log.reverse(), record_sha=False)  # same records, other bytes
    refused(path, capsys, "arm gmts: samples file", "the results file records", "changed after the run")
    file, *_ = samples_of(path, "base eval 2")
    file.unlink()
    path = run_dir(tmp_path)  # the same run written again: the base's samples are back
    file.unlink()
    refused(path, capsys, "base eval 2: samples file", "is missing")
    reseal(path, lambda r: r["base"]["evals"][2]["samples"].update(path=str(file.resolve())))
    refused(path, capsys, "base eval 2: samples path", "must be relative")
    sha = hashlib.sha256(b"not xz").hexdigest()
    file = file.with_name(f"base-seed2-{sha[:12]}.jsonl.xz")
    file.write_bytes(b"not xz")
    reseal(path, lambda r: r["base"]["evals"][2]["samples"].update(path=f"../base-evals/{file.name}", sha256=sha))
    refused(path, capsys, "base eval 2: samples file", "is not xz-compressed JSON lines")


def test_a_file_without_any_samples_passes_and_says_it_was_not_re_scored(tmp_path, capsys):
    """A format-1 file none of whose evaluations keeps samples (written before they did) verifies with
    --allow-unsampled, and says in its samples line, its table and its last line what was not re-scored; a file where
    only some keep them is refused, flag or not."""
    path = write(tmp_path, fake_results())
    assert check.main([path]) == 2
    assert "base eval 0 keeps no samples, so its scores cannot be re-scored" in capsys.readouterr().err
    assert check.main([path, "--allow-unsampled"]) == 0
    out = capsys.readouterr().out
    assert "Scores not re-scored: none of the 5 evaluations keeps a samples file (a format-1 file); the digest, the "\
           "recomputed summaries and the held-out tasks are all that was checked." in unwrapped(out)
    assert out.count("(not re-scored)") == 3  # the table marks every number that was not: base, ETS, GMTS
    assert out.rstrip().splitlines()[-1] == (f"Verified: {path}: 2 trained arms, 5 evaluations, 0 samples re-scored "
                                             f"(5 evaluations keep none: not re-scored).")
    path = run_dir(tmp_path)  # arms with samples over a base that keeps none: a file keeps them all or none
    reseal(path, lambda r: [ev.pop("samples") for ev in r["base"]["evals"]])
    for flags in ([], ["--allow-unsampled"]):
        refused_with = check.main([str(path), *flags]), capsys.readouterr().err
        assert refused_with[0] == 2 and "base.evals[0].samples: missing, where arms.ets.eval keeps one" in \
            refused_with[1]


def test_samples_files_are_deterministic_and_named_by_their_hash(tmp_path):
    import lzma

    log = [{"task": i, "hash": f"{i:016x}", "gold": "7", "samples": ["\u00e9t\u00e9 \\boxed{7}", ""], "scores": [1.0, 0.0]}
           for i in range(30)]
    first, sha = write_samples(tmp_path / "a", "samples-ets-seed0", log)
    again, sha2 = write_samples(tmp_path / "b", "samples-ets-seed0", [dict(r) for r in log])
    assert sha == sha2 == hashlib.sha256(first.read_bytes()).hexdigest() and first.name == again.name
    assert first.name == f"samples-ets-seed0-{sha[:12]}.jsonl.xz" and first.read_bytes() == again.read_bytes()
    assert read_samples(first, sha, "x") == log  # round trip, unicode kept
    assert lzma.decompress(first.read_bytes()).decode().count("\n") == 30  # one JSON line per task
    assert [p.name for p in (tmp_path / "a").iterdir()] == [first.name]  # no temporary file left


def test_show_prints_every_stored_sample_of_a_task_with_its_score(tmp_path, capsys):
    path = run_dir(tmp_path)
    results = json.loads(path.read_text())
    assert check.main([str(path), "--show", "7"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "task 7 (question hash 0000000000000007), gold answer 7"
    assert out.count("\n=== ") == 5 and "=== arm gmts (eval seed 0): " in out
    for where, ev in evaluations(results):
        scores = ev["records"][7]["scores"]
        block = out.split(f"=== {where} ")[1].split("\n=== ")[0]
        assert block.startswith(f"(eval seed {ev['seed']}): {sum(scores):g} of 4 right")
        assert [line.rsplit(",", 1)[0] for line in block.splitlines() if line.startswith("--- sample")] == [
            f"--- sample {j}: score {s:g}, final answer {'7' if s else '8'!r}" for j, s in enumerate(scores)]
        assert all(text_scoring(s) in block for s in scores)
    assert check.main([str(path), "--show", "key:000000000000001"]) == 2  # a hash prefix that names 16 tasks
    assert "matches 16 tasks in base eval 0" in capsys.readouterr().err
    assert check.main([str(path), "--show", "000000000000003b"]) == 0  # by hash: task 59
    assert capsys.readouterr().out.startswith("task 59 ")
    assert check.main([str(path), "--show", "99"]) == 2
    assert capsys.readouterr().err.strip() == ("check.py: --show 99: no task has index 99 here (a number is a task's "
                                                     "index in its split: e.g. 0, 1, 2, 3, 4; the start of its hash: "
                                                     "key:PREFIX)")
    assert check.main([write(tmp_path, fake_results()), "--show", "7", "--allow-unsampled"]) == 2
    assert "this file keeps no samples" in capsys.readouterr().err


def arithmetic_run(tmp_path: Path, questions: bool = True) -> Path:
    """<tmp>/run/results.json of a run on the generated task (8 held-out tasks of its pool, the records' keys the
    pool's), its samples as format 1 wrote them; `questions=False`: no line keeps its question (as an arm's lines)."""
    from gmts_recipe.data import arithmetic_task, arithmetic_test_pool, split_tasks, task_key

    pool = [dict(t, index=i) for i, t in enumerate(arithmetic_test_pool(8, 17, 0))]
    results = fake_results(n=8, k=2)
    results["config"].update(task="arithmetic", n_train=16, n_heldout=8, task_seed=17, difficulty=0)
    rehash(results)
    _, _, report = split_tasks("arithmetic", {"train": arithmetic_task(64, 17, 0), "test": pool}, 16, 8, 17)
    results["data"] = {**report, "pool": {"n_heldout": 8, "task_seed": 17, "difficulty": 0}}
    for _, ev in evaluations(results):
        for r in ev["records"]:
            r["task"] = report["heldout"][r["task"]][0]  # the seeded split's tasks, in index order
            r["hash"] = task_key(pool[r["task"]])
    folder = tmp_path / "run"
    folder.mkdir(parents=True, exist_ok=True)
    results = with_samples(results, folder, tmp_path / "base-evals", pool=pool, questions=questions)
    (folder / "results.json").write_text(json.dumps(results))
    return folder / "results.json"


def test_show_prints_the_tasks_question_from_its_line_or_from_the_dataset(tmp_path, capsys):
    """--show's second line is the question: a samples line's own, tied to the record by its key (an edited one is
    refused), or where no line keeps it the dataset's task at that index (here rebuilt from its seed)."""
    from gmts_recipe.data import arithmetic_test_pool

    question = arithmetic_test_pool(8, 17, 0)[22]["question"]  # the 4th of the seeded split's tasks
    path = arithmetic_run(tmp_path)
    assert check.main([str(path), "--show", "22"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == f"question: {question}"
    results = json.loads(path.read_text())
    sample_file = path.parent / results["arms"]["gmts"]["eval"]["samples"]["path"]
    lines = read_samples(sample_file, None, "x")
    lines[3]["question"] = lines[3]["question"].replace("marbles", "apples", 1) + " "
    edited, sha = write_samples(path.parent, "samples-gmts-seed0", lines)
    reseal(path, lambda r: r["arms"]["gmts"]["eval"]["samples"].update(path=edited.name, sha256=sha))
    assert check.main([str(path)]) == 2
    assert re.search(r"arm gmts: samples-gmts-seed0-\w+.jsonl.xz: task 22:\w+: the question in the samples file is not "
                     r"the one its key covers", capsys.readouterr().err)
    older = arithmetic_run(tmp_path / "older", questions=False)
    assert check.main([str(older), "--show", "22"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == (f"question (the generated task, rebuilt from its seed): "
                                                        f"{question}")


def test_re_scoring_is_the_recipes_own_scoring(tmp_path):
    """check.py re-scores with eval.sample_scores, the function eval.score_samples scores with: a reward that scored
    otherwise at evaluation time is refused (here: one that gives 1.0 to every sample)."""
    import eval as evaluation

    tasks = [{"question": f"q{i}", "answer": f"work\n#### {i}", "index": i} for i in range(6)]
    samples = [[f"so \\boxed{{{i}}}", f"so \\boxed{{{i + 1}}}"] for i in range(6)]
    records = evaluation.score_samples(samples, tasks)
    assert [r["scores"] for r in records] == [[1.0, 0.0]] * 6
    log = evaluation.sample_log(samples, tasks, records)
    assert [line["gold"] for line in log] == [str(i) for i in range(6)]
    ev = {"k": 2, "records": records}
    path, sha = write_samples(tmp_path, "s", log)
    ev["samples"] = {"path": path.name, "sha256": sha, "reward": 1}
    assert check_samples(path, ev, "arm ets") == 12
    lenient = [dict(line, scores=[1.0, 1.0]) for line in log]
    for r in records:
        r["scores"] = [1.0, 1.0]
    path, sha = write_samples(tmp_path, "s", lenient)
    ev["samples"] = {"path": path.name, "sha256": sha, "reward": 1}
    with pytest.raises(check.ResultsError, match=r"task 0:\w+ sample 1: scored 1.0 in the results file, 1.0 in the "
                                                 r"samples file, 0.0 by the reward now \(6 sample score\(s\) differ "
                                                 r"in this evaluation, re-scored by reward version 1:"):
        check_samples(path, ev, "arm ets")


def test_each_samples_file_is_re_scored_by_the_reward_version_it_records(tmp_path):
    """An evaluation scored by version 1 (format 1 left it unrecorded: records.current_record reads it as 1) re-scores
    with version 1 (rewards.sample_scores at version 1), whose reading of '\\text{7}' (0) and '7\\%' differs from today's: it verifies as
    scored; the same scores claimed by today's version, or by a version this recipe lacks, are refused."""
    import eval as evaluation
    from gmts_recipe.data import task_key

    tasks = [{"question": "q0", "answer": "#### 7", "index": 0}]
    samples = [["so \\boxed{\\text{7}}", "so \\boxed{7 km}", "so \\boxed{7}"]]
    old = [{"task": 0, "hash": task_key(tasks[0]), "scores": [0.0, 0.0, 1.0], "lengths": [len(t) for t in samples[0]]}]
    log = evaluation.sample_log(samples, tasks, old)
    path, sha = write_samples(tmp_path, "s", log)
    ev = {"k": 3, "records": old, "samples": {"path": path.name, "sha256": sha, "reward": 1}}
    assert check_samples(path, ev, "arm ets") == 3
    ev["samples"]["reward"] = REWARD_VERSION
    with pytest.raises(ResultsError, match=rf"sample 0: scored 0.0 in the results file, 0.0 in the samples "
                                                 rf"file, 1.0 by the reward now \(2 sample score\(s\) differ in this "
                                                 rf"evaluation, re-scored by reward version {REWARD_VERSION}:"):
        check_samples(path, ev, "arm ets")
    for version in (0, REWARD_VERSION + 1, "2", True):
        ev["samples"]["reward"] = version
        with pytest.raises(check.ResultsError, match=rf"arm ets: samples scored by reward version {version!r}, "
                                                     rf"which this recipe does not know"):
            check_samples(path, ev, "arm ets")


def test_a_file_from_before_gradient_checkpointing_moved_reads_as_recipe_writes_it_today():
    """`current_record`: the config record loses gradient_checkpointing, every arm that does not record it gets the
    config's value (it ran with it), the hash is the new record's; a file with nothing to move is returned as is."""
    from gmts_recipe.records import config_hash, current_record

    old = fake_results(arms=("ets", "gmts"))
    old["config"] = {"model_name_or_path": "tiny", "gradient_checkpointing": True}
    old["arms"]["gmts"]["generation_options"] = {"generation_compile": True, "gradient_checkpointing": False}
    now = current_record(old)
    assert now["config"] == {"model_name_or_path": "tiny"}
    assert now["config_hash"] == config_hash({"model_name_or_path": "tiny"})
    assert now["arms"]["ets"]["generation_options"] == {"gradient_checkpointing": True}
    assert now["arms"]["gmts"]["generation_options"] == {"generation_compile": True, "gradient_checkpointing": False}
    assert old["config"]["gradient_checkpointing"] is True and "generation_options" not in old["arms"]["ets"]  # a copy
    assert current_record(now) == now and current_record(now) is now  # nothing left to move
    assert now["config_hash"][:12] in check.render(now)  # check.py names a file by today's hash


# ---------------------------------------------------------------- forgeries a re-seal used to pass
# A made-up GSM8K copy is not the original release's test split, whose hash check.py pins: read with this flag.
UNPINNED = ("--gsm8k_unpinned",)


def gsm8k_run(tmp_path: Path, key: str) -> Path:
    """A run with samples on a made-up GSM8K copy in <tmp>/gsm8k (the run's gsm8k_path: 60 tasks, every gold answer
    7; check.py reads it with --gsm8k_unpinned), its task keys of version `key` ("question": files written before the
    key covered the gold answer)."""
    from gmts_recipe import data

    pool = [{"question": f"q{i}", "answer": "work\n#### 7"} for i in range(60)]
    folder = tmp_path / "gsm8k"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in pool))
    keys = [data.task_hash(t["question"]) if key == "question" else data.task_key(t, key) for t in pool]
    results = fake_results()
    for _, ev in evaluations(results):
        for r in ev["records"]:
            r["hash"] = keys[r["task"]]
    results["config"]["gsm8k_path"] = str(folder)
    results["data"] = {"task": "gsm8k", "train_pool": 60, "test_pool": 60,
                       "heldout": [[i, k] for i, k in enumerate(keys)]}
    if key != "question":
        results["data"].update(task_key=key, test_pool_sha256=data.pool_sha256(pool))
    folder = tmp_path / "run"
    folder.mkdir()
    results = with_samples(rehash(results), folder, tmp_path / "base-evals",
                           reward=None if key == "question" else REWARD_VERSION)
    (folder / "results.json").write_text(json.dumps(results))
    return folder / "results.json"


def rewrite_gold(path: Path, where: str, gold: str) -> None:
    """The forgery: every task's gold answer in one evaluation's samples file rewritten, not one completion touched;
    the scores re-scored against it (samples file and records), the SHA-256 recorded, the file re-sealed."""
    from gmts_recipe.rewards import sample_scores

    rescored = {}

    def edit(log):
        for line in log:
            line["gold"] = gold
            line["scores"] = rescored[line["task"]] = sample_scores(line["samples"], gold)

    rewrite_samples(path, where, edit)
    reseal(path, lambda r: [rec.update(scores=rescored[rec["task"]])
                            for rec in dict(evaluations(r))[where]["records"]])


@pytest.mark.parametrize("key", ["question", "question+gold"])
def test_rewritten_gold_answers_are_refused_against_the_dataset(tmp_path, capsys, key):
    """Rewriting the gold answers (here 7 -> 8, so that every wrong text scores and every right one fails) moved a
    result while every score re-scored as recorded. The dataset's gold answers are compared: refused, for files with
    either key (the older, question-only key too)."""
    path = gsm8k_run(tmp_path, key)
    refused(path, capsys, "GSM8K at ", "its test split (60 problems) hashes to ")  # made up: not GSM8K's test split
    assert check.main([str(path), *UNPINNED]) == 0
    out = unwrapped(capsys.readouterr().out)
    assert "are the dataset's (GSM8K at " in out and "not the original release's test split" in out
    before = load(path)["summary"]["arms"]["gmts"]["pass@1"]
    rewrite_gold(path, "arm gmts", "8")
    assert load(path)["summary"]["arms"]["gmts"]["pass@1"] == pytest.approx(1 - before)  # the forged result
    refused(path, capsys, str(path), "arm gmts:", "gold answer '8' in the samples file, '7' in the dataset",
            flags=UNPINNED)


def test_a_gold_answer_rewritten_with_its_key_is_refused(tmp_path, capsys):
    """The forger who also rewrites each task's key (question and gold answer) everywhere, data.heldout included:
    the keys are no longer the dataset's."""
    from gmts_recipe import data

    path = gsm8k_run(tmp_path, "question+gold")
    rewrite_gold(path, "arm gmts", "8")
    new = {i: data.task_key({"question": f"q{i}", "answer": "#### 8"}) for i in range(60)}

    def rekey(r):
        r["data"]["heldout"] = [[i, new[i]] for i, _ in r["data"]["heldout"]]
        for _, ev in evaluations(r):
            for rec in ev["records"]:
                rec["hash"] = new[rec["task"]]

    reseal(path, rekey)
    for where, _ in evaluations(json.loads(path.read_text())):
        rewrite_samples(path, where, lambda log: [line.update(hash=new[line["task"]]) for line in log])
    refused(path, capsys, f"held-out task 0:{new[0]}: the dataset's task 0 has another question and gold answer",
            flags=UNPINNED)
    (tmp_path / "gsm8k" / "test.jsonl").unlink()  # without the dataset: one arm's gold answers are not the base's
    refused(path, capsys, "arm gmts: samples-gmts-seed0-", "gold answer '8', base eval 0's samples file has '7'")
    for where in ("base eval 0", "base eval 1", "base eval 2", "arm ets"):
        rewrite_gold(path, where, "8")  # every evaluation's: it passes, and says what was not compared
    assert check.main([str(path)]) == 0
    assert "keys and gold answers not compared with a dataset: GSM8K is not at hand" in \
        unwrapped(capsys.readouterr().out)


@pytest.mark.parametrize("key", ["question", "question+gold"])
def test_gold_answers_rewritten_in_one_arm_are_refused_without_the_dataset(tmp_path, capsys, key):
    """Gold answers rewritten in one arm's samples file only (its lines keep no question, so no key ties them), the
    scores re-scored, the dataset not at hand (the committed GSM8K cells' case without --gsm8k_path): every evaluation
    of a file scores a task against the gold answer of the base's first evaluation, whose lines keep the question."""
    path = gsm8k_run(tmp_path, key)
    (tmp_path / "gsm8k" / "test.jsonl").unlink()
    before = load(path)["summary"]["arms"]["gmts"]["pass@1"]
    rewrite_gold(path, "arm gmts", "8")
    assert load(path)["summary"]["arms"]["gmts"]["pass@1"] == pytest.approx(1 - before)  # the forged result
    refused(path, capsys, str(path), "arm gmts: samples-gmts-seed0-", ": gold answer '8', base eval 0's samples file "
                                     "has '7' (every evaluation scores a task against one gold answer)")


def test_an_evaluation_whose_samples_reference_was_deleted_is_refused(tmp_path, capsys):
    """Delete an evaluation's samples reference, raise its scores, re-seal: refused, --allow-unsampled or not (a file
    keeps every evaluation's samples or, in format 1, none); with every reference deleted, refused too, for the file
    records what came after samples were kept (its task keys' version)."""
    path = run_dir(tmp_path)

    def forge(r):
        ev = r["arms"]["gmts"]["eval"]
        ev.pop("samples")
        for rec in ev["records"]:
            rec["scores"] = [1.0] * len(rec["scores"])

    reseal(path, forge)
    for flags in ([], ["--allow-unsampled"]):
        assert check.main([str(path), *flags]) == 2
        assert "arms.gmts.eval.samples: missing, where base.evals[0] keeps one" in capsys.readouterr().err
    reseal(path, lambda r: [ev.pop("samples", None) for _, ev in evaluations(r)])
    assert check.main([str(path), "--allow-unsampled"]) == 2
    assert "base.evals[0].samples: no evaluation keeps samples, but data.task_key is recorded" in \
        capsys.readouterr().err


def test_tasks_dropped_from_every_evaluation_are_refused(tmp_path, capsys):
    """20 of the 60 held-out tasks removed from every evaluation (records and samples files alike) while the data
    report still lists 60: every evaluation must hold exactly the run's held-out tasks."""
    path = run_dir(tmp_path)
    drop = set(random.Random(3).sample(range(60), 20))
    reseal(path, lambda r: [ev.update(records=[x for x in ev["records"] if x["task"] not in drop])
                            for _, ev in evaluations(r)])
    for where, _ in evaluations(json.loads(path.read_text())):
        rewrite_samples(path, where, lambda log: log.__setitem__(slice(None),
                                                                 [x for x in log if x["task"] not in drop]))
    assert load(path)  # digest and summaries pass
    refused(path, capsys, str(path), "base eval 0: holds 40 of the run's 60 held-out tasks (data.heldout) and 0 "
                                     "other(s), e.g. missing")


def test_check_says_what_a_seal_and_a_re_score_prove_and_what_they_do_not():
    doc = " ".join(check.__doc__.split())
    assert "must now write texts whose answers earn the scores" not in doc
    for claim in ("held-out tasks", "gold answer", "--allow-unsampled", "new completions", "another seed"):
        assert claim in doc, claim
