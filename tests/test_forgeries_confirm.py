"""Forgeries of the confirmatory test (results/confirm) and its sequential extension (results/confirm-extension), tried
as a forger would on copies of their committed files outside git (the plan checks read no cell: tests/
test_plan_forgeries.py tries them in a clone): records of look 0 edited where only a re-score of its samples shows it;
the new seeds claiming another recipe (config, execution options) or the plan's reward above samples scored by
another; gold answers rewritten in a cell beside a GSM8K copy rewritten to agree. Each is refused by check.py in one
line; the committed extension is checked with look 0 in full (a slow test).

The extension's check reads the continued test's 100 cells (about 20 s); the forgeries refused before them take
seconds.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

import check
from forge import refused, reseal, reseal_summary, sealed
from gmts_recipe.records import config_hash, evaluations, read_samples, write_json, write_results
from gmts_recipe.verify.file import load
from gmts_recipe.samples import write_samples
from gmts_recipe.stats import pass_at_1
from gmts_recipe.sweep import summary as sweep_summary
from gmts_recipe.sweep.grid import load_grid

ROOT = Path(__file__).resolve().parent.parent
CONFIRM, EXTENSION = ROOT / "results" / "confirm", ROOT / "results" / "confirm-extension"
FIRST_NEW = "coupled-lr0.0001-s300"  # the extension's first cell: the one its check reads first


def sweeps(tmp_path: Path, confirm_cells: tuple[str, ...] = ()) -> Path:
    """<tmp>/results with the extension copied (13 MB) and the confirmatory test linked (its folder, or, where
    `confirm_cells` are to be edited, each of its entries, but those cells' results.json and its sweep.json, copied).
    The grids name their config, continued plan and design file relative to the repository: run from ROOT."""
    results = tmp_path / "results"
    results.mkdir()
    shutil.copytree(EXTENSION, results / "confirm-extension")
    if not confirm_cells:
        (results / "confirm").symlink_to(CONFIRM)
        return results
    (results / "confirm").mkdir()
    for entry in CONFIRM.iterdir():
        target = results / "confirm" / entry.name
        if entry.name in confirm_cells:
            target.mkdir()
            for file in entry.iterdir():
                if file.name == "results.json":
                    shutil.copy(file, target / file.name)
                else:
                    (target / file.name).symlink_to(file)
        elif entry.name == "sweep.json":
            shutil.copy(entry, target)
        else:
            target.symlink_to(entry)
    return results


def forge_cells(folder: Path, edit, names: list[str] | None = None) -> None:
    """Cells of a copied sweep read as recipe.py holds them (records.current_record), `edit`ed, their config hash
    recomputed, re-sealed and written in their format (format 2, as recipe.py writes them: forge.reseal), and the
    sweep's record of each cell's digest with them (`names`: those cells; every cell by default)."""
    summary = json.loads((folder / "sweep.json").read_text())
    for cell in summary["cells"]:
        if names is not None and cell["cell"] not in names:
            continue
        path = folder / cell["path"]
        reseal(path, lambda results: (edit(results), results.update(config_hash=config_hash(results["config"]))))
        cell["digest"] = json.loads(path.read_text())["digest"]
    reseal_summary(folder / "sweep.json", summary)


# ---------------------------------------------------------------- refused
@pytest.mark.slow
def test_the_committed_extension_checks_look_0_in_full(committed_sweeps_verified_once, capsys, monkeypatch):
    """check.py on the extension re-verifies the continued test as it verifies that sweep: its summary recomputed from
    its cells and their samples re-scored (here the spot check of its first and last cell: conftest.py;
    tests/test_check.py's slow test re-scores every sample), said in a line and in the last. Slow: the 100 cells of
    look 0 are read twice (minutes on 2 cores); the unit suite runs look 0 in full on a forged copy (below), refused
    at its first cell's samples."""
    monkeypatch.chdir(ROOT)
    assert check.main(["results/confirm-extension/sweep.json"]) == 0, capsys.readouterr().err
    out = " ".join(capsys.readouterr().out.split())
    assert "Look 0 in full: results/confirm/sweep.json recomputed from its 100 cells, " in out
    last = out.rsplit("Verified: ", 1)[1]
    assert last.startswith("results/confirm-extension/sweep.json: 7 cells, ") and "look 0 (confirm) 100 cells, " in last


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
def test_look_0_records_edited_where_only_their_samples_show_it_are_refused(tmp_path, capsys, monkeypatch):
    """Seed 200 of the continued test: wherever both arms' sample failed, both scored right in the records (its samples
    files untouched), the cell and the test's summary written again by the recipe's code. Each task's GMTS - ETS is
    unchanged, so look 0's deltas, the design's first stage and the extension's summary are; both arms' pass@1 rise
    (what look 0 reads beside the deltas: the old seeds of the sensitivity comparison; the continued test's table).
    The extension's check used to read these cells without re-scoring them; look 0 is now checked in full."""
    monkeypatch.chdir(ROOT)
    cell = "coupled-lr0.0001-s200"
    results = sweeps(tmp_path, (cell,))
    path = results / "confirm" / cell / "results.json"
    raw = json.loads(path.read_text())
    assert raw["schema"] == 1  # records in results.json, beside the samples files
    ets, gmts = raw["arms"]["ets"]["eval"], raw["arms"]["gmts"]["eval"]
    before = {arm: raw["summary"]["arms"][arm]["pass@1"] for arm in ("ets", "gmts")}
    of_task = {r["task"]: r for r in ets["records"]}
    for g in gmts["records"]:
        e = of_task[g["task"]]
        for j, (x, y) in enumerate(zip(g["scores"], e["scores"])):
            if x == y == 0.0:
                g["scores"][j] = e["scores"][j] = 1.0
    for ev in (ets, gmts):
        ev["pass@1"] = pass_at_1(ev["records"])
    write_results(path, sealed(raw, 1))
    grid = load_grid(results / "confirm" / "grid.yaml")
    grid.results_dir = str(results)
    rise = {arm: raw["summary"]["arms"][arm]["pass@1"] - before[arm] for arm in before}
    assert rise["ets"] == pytest.approx(rise["gmts"]) and rise["ets"] > 0.1  # the forged result
    # one summary of the forged test's 100 cells (20 s) for the forger's write and check.py's read: the same code on
    # the same bytes (summaries_kept, which check.py enters for a sweep, keeps it by their SHA-256)
    with sweep_summary.summaries_kept():
        write_json(results / "confirm" / "sweep.json", sweep_summary.with_plan(
            sweep_summary.summarize(grid), json.loads((CONFIRM / "sweep.json").read_text()).get("plan")))
        refused(results / "confirm-extension" / "sweep.json", capsys, f"{path}: arm ets: samples-ets-seed0-",
                "scored 1.0 in the results file, 0.0 in the samples file")


def another_config(results: dict) -> None:
    results["config"].update(lora_r=64, eval_temperature=0.6, max_steps=80)


def fused_projections(results: dict) -> None:
    for entry in results["arms"].values():
        entry["generation_options"]["generation_fused_projections"] = True


def no_checkpointing(results: dict) -> None:
    for entry in results["arms"].values():
        entry["generation_options"]["gradient_checkpointing"] = False


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
@pytest.mark.parametrize("edit, said", [
    (another_config, "config.eval_temperature is 0.6, the continued test's unset (the recipe's default) (a sequential "
                     "plan's seeds run the continued test's recipe: only config.seed differs)"),
    (fused_projections, "arms.ets.generation_options.generation_fused_projections is True, the continued test's False "
                        "(only gradient_checkpointing may differ, shown to move no number)"),
], ids=["config", "execution-options"])
def test_new_seeds_of_another_recipe_are_refused(tmp_path, capsys, monkeypatch, edit, said):
    """Every new seed's cell claims another recipe than the continued test's (LoRA r 64, evaluation temperature 0.6,
    80 steps, the config hash recomputed; or the fused projections on), re-sealed, the sweep's record of their digests
    too: the cells agreed with each other and with the plan's variant, and nothing held them to the test they
    continue. Each new seed runs the continued test's last seed's recipe, but for its seed and the options shown to
    move no number (tests/test_extension_recipe.py holds sweep.py's command for a new cell to the same)."""
    monkeypatch.chdir(ROOT)
    folder = sweeps(tmp_path) / "confirm-extension"
    forge_cells(folder, edit)
    refused(folder / "sweep.json", capsys, f"{folder / FIRST_NEW / 'results.json'}: {said}")


def test_options_shown_to_move_no_number_may_differ():
    """The rule itself (sequential.looks.recipe_problem) on the committed cells: the extension's first cell runs
    seed 299's recipe; gradient checkpointing (SHOWN_NOT_TO_MOVE) may differ, a counter noise scheme or a reward
    reading other than the one the plan pins may not, nor may the plan pin another than the continued test's."""
    from gmts_recipe.sequential.looks import SHOWN_NOT_TO_MOVE, recipe_of, recipe_problem

    assert SHOWN_NOT_TO_MOVE == {"gradient_checkpointing"}
    variant = load_grid(EXTENSION / "grid.yaml").variants["coupled"]
    assert variant["reward_version"] == 1 and variant["counter_noise_version"] == 1  # the plan pins both
    old = recipe_of(load(CONFIRM / "coupled-lr0.0001-s299" / "results.json"))
    new_results = load(EXTENSION / FIRST_NEW / "results.json")
    assert recipe_problem(recipe_of(new_results), old, variant) is None
    edited = copy.deepcopy(new_results)
    no_checkpointing(edited)
    assert recipe_problem(recipe_of(edited), old, variant) is None
    edited["arms"]["gmts"]["generation_options"]["counter_noise_version"] = 2
    assert recipe_problem(recipe_of(edited), old, variant) == (
        "arms.gmts.generation_options.counter_noise_version is 2, the continued test's counter noise version is 1 "
        "(pinned: one reading)")
    edited = copy.deepcopy(new_results)
    for _, ev in evaluations(edited):
        ev["samples"]["reward"] = 4
    assert recipe_problem(recipe_of(edited), old, variant) == (
        "base.evals[0].samples.reward is 4, the continued test's reward version is 1 (pinned: one reading)")
    assert recipe_problem(recipe_of(new_results), old, {**variant, "reward_version": 4}) == (
        "the plan's variant pins reward_version 4, the continued test ran reward version 1")


def rescored(folder: Path, results: dict, version: int, gold_of=None, key_of=None) -> None:
    """Every evaluation of a cell's results (records.current_record's form, from `folder`) re-scored by reward
    `version`, against each task's gold answer or the one `gold_of` (a samples line) gives, each task keyed anew where
    `key_of` (task, gold answer) says how; its samples written again as recipe.py names them (the base's in
    ../base-evals/), the records with them: what a forger writes."""
    from gmts_recipe.rewards import sample_scores

    for where, ev in evaluations(results):
        source = folder / ev["samples"]["path"]
        lines = read_samples(source, ev["samples"]["sha256"], where)
        now = {}
        for line in lines:
            old = (line["task"], line["hash"])
            line["gold"] = gold_of(line) if gold_of else line["gold"]
            line["hash"] = key_of(line["task"], line["gold"]) if key_of else line["hash"]
            line["scores"] = sample_scores(line["samples"], line["gold"], version)
            now[old] = line
        stem = source.name.rsplit("-", 1)[0]  # <eval hash>-seed<seed> or samples-<arm>-seed<seed>
        target, sha = write_samples(source.parent, stem, lines)
        ev["samples"] = {**ev["samples"], "sha256": sha, "reward": version,
                         "path": str(Path(ev["samples"]["path"]).with_name(target.name))}
        for record in ev["records"]:
            line = now[(record["task"], record["hash"])]
            record["hash"], record["scores"] = line["hash"], line["scores"]
        ev["pass@1"] = pass_at_1(ev["records"])


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
def test_an_arm_claiming_the_plans_reward_above_samples_scored_by_another_is_refused(tmp_path, capsys, monkeypatch):
    """The extension's first cell re-scored by reward version 4 (every evaluation: one version per file), its arms
    still claiming version 1, the plan's: the variant's check reads an arm's claim. Refused as a file (an arm trains
    and is scored with one reward) and in the sweep; with the arms' claim made 4 too, the file is consistent and the
    sweep refuses its reading (every evaluation's is the continued test's, the plan's pinned one)."""
    monkeypatch.chdir(ROOT)
    folder = sweeps(tmp_path) / "confirm-extension"
    path = folder / FIRST_NEW / "results.json"
    committed = load(path)
    forge_cells(folder, lambda r: rescored(path.parent, r, 4), [FIRST_NEW])
    assert json.loads(path.read_text())["arms"]["ets"]["reward_version"] == 1
    refused(path, capsys, f"{path}: arms.ets.reward_version is 1, its samples file records reward version 4 "
                          f"(arms.ets.eval.samples.reward)")
    refused(folder / "sweep.json", capsys, f"{path}: arms.ets.reward_version is 1, its samples file records reward "
                                           f"version 4")
    forge_cells(folder, lambda r: [entry.update(reward_version=4) for entry in r["arms"].values()], [FIRST_NEW])
    assert check.main([str(path)]) == 0  # alone, a file scored by version 4 throughout
    capsys.readouterr()
    assert load(path)["summary"]["arms"]["gmts"]["pass@1"] != committed["summary"]["arms"]["gmts"]["pass@1"]
    refused(folder / "sweep.json", capsys, f"{path}: base.evals[0].samples.reward is 4, the continued test's reward "
                                           f"version is 1 (pinned: one reading)")


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
def test_gold_answers_rewritten_beside_a_gsm8k_copy_that_agrees_are_refused(tmp_path, capsys):
    """Seed 305 of the extension (GMTS - ETS -8.8 points, "regressed"): where ETS did better on a task, its gold answer
    rewritten to one of GMTS's wrong answers in every evaluation's samples file, the scores re-scored, every key
    (question and gold answer) and the recorded test pool's hash made anew, the cell re-sealed; and a GSM8K folder
    written from the questions of the base's samples with those gold answers. The cell passes alone (keys and gold
    answers not compared without the dataset) and passed against that folder: GMTS - ETS reads about +20 points,
    "moved". The GSM8K test split is pinned by its hash (data.GSM8K_TEST_SHA256): the folder is refused in one line
    naming it; read unpinned, as a made-up copy may be, the forged verdict stands, and the output says the copy is not
    the original release's."""
    from gmts_recipe.data import GSM8K_TEST_SHA256, TASK_KEY, pool_sha256, question_key
    from gmts_recipe.rewards import final_answer, gold_answer

    name = "coupled-lr0.0001-s305"
    cell = tmp_path / "results" / "confirm-extension" / name
    shutil.copytree(EXTENSION / name, cell)
    (cell.parent / "base-evals").mkdir()
    for ev in json.loads((cell / "results.json").read_text())["base"]["evals"]:
        shutil.copy(EXTENSION / name / ev["samples"]["path"], cell.parent / "base-evals")
    results = copy.deepcopy(load(cell / "results.json"))  # format 2: the records rebuilt from the samples files
    assert results["summary"]["comparisons"]["gmts_vs_ets"]["verdict"] == "regressed"
    assert results["data"]["task_key"] == TASK_KEY and results["data"]["test_pool_sha256"] == GSM8K_TEST_SHA256
    lines = {arm: read_samples(cell / results["arms"][arm]["eval"]["samples"]["path"], None, arm)
             for arm in ("ets", "gmts")}
    ets = {line["task"]: line for line in lines["ets"]}
    new = {}
    for line in lines["gmts"]:
        if sum(ets[line["task"]]["scores"]) > sum(line["scores"]):
            wrong = [final_answer(t, 1) for t, s in zip(line["samples"], line["scores"]) if s == 0.0]
            if wrong and wrong[0] is not None:
                new[line["task"]] = gold_answer(f"#### {wrong[0]}")
    questions = {line["task"]: line["question"]
                 for line in read_samples(cell / results["base"]["evals"][0]["samples"]["path"], None, "base")}
    golds = {line["task"]: new.get(line["task"], line["gold"]) for line in lines["ets"]}
    pool = [{"question": questions[i], "answer": f"#### {golds[i]}"} for i in range(len(golds))]
    rescored(cell, results, 1, lambda line: golds[line["task"]],
             lambda task, gold: question_key(questions[task], gold, TASK_KEY))
    results["data"]["heldout"] = [[i, question_key(questions[i], golds[i], TASK_KEY)] for i, _ in
                                  results["data"]["heldout"]]
    results["data"]["test_pool_sha256"] = pool_sha256(pool)
    write_results(cell / "results.json", sealed(results))
    gsm8k = tmp_path / "gsm8k"
    gsm8k.mkdir()
    for split in ("train", "test"):
        (gsm8k / f"{split}.jsonl").write_text("".join(json.dumps(task) + "\n" for task in pool))
    path = cell / "results.json"
    forged = load(path)["summary"]["comparisons"]["gmts_vs_ets"]
    assert forged["verdict"] == "moved" and forged["delta"] > 0.15  # the forged result
    assert check.main([str(path)]) == 0  # without a dataset: not compared, and said so
    assert "not compared with a dataset: GSM8K is not at hand" in " ".join(capsys.readouterr().out.split())
    refused(path, capsys, f"GSM8K at {gsm8k}: its test split (1,319 problems) hashes to ",
            f"not to the original release's {GSM8K_TEST_SHA256} (1,319 problems; test.jsonl SHA-256 ",
            flags=("--gsm8k_path", str(gsm8k)))
    assert check.main([str(path), "--gsm8k_path", str(gsm8k), "--gsm8k_unpinned"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"are the dataset's (GSM8K at {gsm8k}, not the original release's test split" in out
