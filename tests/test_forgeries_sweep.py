"""Forgeries of a sweep tried as a forger would: the committed pilot (results/coupled: ten cells of GMTS and ETS on
GSM8K, every evaluation's samples kept) copied, a cell's evaluation copied into another cell or a cell copied into
another sweep beside it, the cell re-sealed (the recipe's digest over the recomputed summary: tests/forge.py) and the
sweep's summary written again by the recipe's own code.

Refused here: an arm's evaluation copied into another cell, which keeps its own training log (the same samples file,
the same texts compressed again in another order, or with one newline added: a near copy), the base's texts filed as
a trained arm, a copy between two arms whose logs claim no learning signal while their losses and gradients show
training, a cell copied under another seed into a new sweep of the same results folder, and a cell of the continued
test forged from one of the confirmatory test's: an evaluation belongs to one cell across every sweep, whole or
nearly (gmts_recipe.verify.cell.check_apart).
"""

from __future__ import annotations

import copy
import json
import lzma
import os
import re
import shutil
from pathlib import Path

import pytest

import check
from forge import refused, sealed
from gmts_recipe.records import config_hash, write_json
from gmts_recipe.samples import write_samples
from gmts_recipe.stats import no_learning_signal
from gmts_recipe.sweep import summary as sweep_summary
from gmts_recipe.sweep.grid import SweepError, load_grid
from gmts_recipe.verify.sweep import verify as verify_sweep

ROOT = Path(__file__).resolve().parent.parent
PILOT = ROOT / "results" / "coupled"


def link_or_copy(source: Path, target: Path) -> None:
    """The committed samples files are read, never written: linked where the file system allows (60 MB otherwise)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy(source, target)


def pilot_copy(results: Path, name: str = "coupled", seeds: dict[int, int] | None = None) -> Path:
    """results/coupled copied into `results`/`name` (its grid, summary and cells; samples files linked); `seeds`:
    only these cells, each under a new seed (old -> new: the config's seed and hash edited, the cell re-sealed), the
    grid's seeds and name to match, and the summary written by the recipe's code (sweep.report's summarize)."""
    folder = results / name
    for source in PILOT.rglob("*"):
        if source.is_file() and source.suffix in (".xz", ".json", ".yaml") and "logs" not in source.parts:
            rel = source.relative_to(PILOT)
            cell = rel.parts[0]
            if seeds is not None and cell.startswith("coupled-lr") and int(cell.rsplit("-s", 1)[1]) not in seeds:
                continue
            if seeds is not None and cell.startswith("coupled-lr"):
                rel = Path(cell.replace(cell.rsplit("-s", 1)[1], str(seeds[int(cell.rsplit("-s", 1)[1])])),
                           *rel.parts[1:])
            if source.suffix == ".xz":
                link_or_copy(source, folder / rel)
            else:
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, folder / rel)
    if seeds is not None:
        for old, new in seeds.items():
            path = folder / f"coupled-lr0.0001-s{new}" / "results.json"
            raw = json.loads(path.read_text())
            raw["config"]["seed"] = new
            raw["config_hash"] = config_hash(raw["config"])
            write_json(path, sealed(raw, 1))
        text = (folder / "grid.yaml").read_text().replace("name: coupled", f"name: {name}")
        text = text.replace("seeds: [100, 101, 102, 103, 104, 105, 106, 107, 108, 109]",
                            f"seeds: {sorted(seeds.values())}")
        (folder / "grid.yaml").write_text(text)
        write_summary(folder / "sweep.json")
    return folder / "sweep.json"


def write_summary(path: Path) -> None:
    """sweep.json written again from the grid and its cells, keeping the plan it records (sweep.report does the same
    with the plan's record): the forger's last step."""
    grid = load_grid(path.parent / "grid.yaml")
    grid.results_dir = str(path.parent.parent)
    plan = json.loads(path.read_text()).get("plan") if path.is_file() else None
    continued = sweep_summary.continued_summary(grid)
    write_json(path, sweep_summary.with_plan(sweep_summary.summarize(grid, continued=continued), plan))


def gmts_minus_ets(summary: dict) -> dict[str, float]:
    return {c["cell"]: c["arms"]["gmts"]["pass@1"] - c["arms"]["ets"]["pass@1"] for c in summary["cells"]}


_COPY_VERIFIED: list[bool] = []  # every copy is the committed files' bytes: the first one verified stands for them


@pytest.fixture
def pilot(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(ROOT)  # the grid names its config by a path in the repository
    path = pilot_copy(tmp_path / "results")
    if not _COPY_VERIFIED:
        verify_sweep(path)  # the copy as committed: every evaluation its own cell's
        _COPY_VERIFIED.append(True)
    return path


def with_a_newline(lines: list[dict]) -> list[dict]:
    """A samples file's lines with one newline added to the end of its first text: the texts score as before; the
    file's bytes and that text's length (so its texts task by task, evaluation_keys) are another evaluation's."""
    lines = copy.deepcopy(lines)
    lines[0]["samples"][0] += "\n"
    return lines


def copy_evaluation(pilot: Path, monkeypatch, reorder: bool = False, newline: bool = False) -> tuple[str, str]:
    """The best cell's GMTS evaluation (its samples file, its lines in reverse order compressed again, or its lines
    with one newline added: another SHA-256) copied into the worst cell, which keeps its own ETS arm and training log;
    the cell re-sealed and the summary written again (with the checks before this one: the recipe's summarize refuses
    it now; with the newline, only the check of near copies left out)."""
    deltas = gmts_minus_ets(json.loads(pilot.read_text()))
    best, worst = max(deltas, key=deltas.get), min(deltas, key=deltas.get)
    source = json.loads((pilot.parent / best / "results.json").read_text())["arms"]["gmts"]["eval"]
    file = pilot.parent / best / source["samples"]["path"]
    ev = copy.deepcopy(source)
    if reorder or newline:
        lines = [json.loads(x) for x in lzma.decompress(file.read_bytes()).splitlines()]
        lines = with_a_newline(lines) if newline else lines[::-1]
        target, sha = write_samples(pilot.parent / worst, "samples-gmts-seed0", lines)
        ev["samples"] = {**ev["samples"], "path": target.name, "sha256": sha}
        if newline:
            first = next(r for r in ev["records"] if r["task"] == lines[0]["task"])
            first["lengths"][0] += 1
        else:
            ev["records"] = ev["records"][::-1]
    else:
        link_or_copy(file, pilot.parent / worst / file.name)
    path = pilot.parent / worst / "results.json"
    raw = json.loads(path.read_text())
    raw["arms"]["gmts"]["eval"] = ev
    write_json(path, sealed(raw, 1))
    with monkeypatch.context() as unchecked:  # the summary as a forger writes it, the new check left out
        if newline:
            unchecked.setattr("gmts_recipe.verify.cell.near_copies", lambda *checked: None)
        else:
            unchecked.setattr("gmts_recipe.verify.cell.check_apart", lambda evaluations: None)
        write_summary(pilot)
    return best, worst


@pytest.mark.parametrize("reorder", [False, True], ids=["same-file", "compressed-again"])
def test_an_evaluation_copied_into_another_cell_is_refused(pilot, capsys, monkeypatch, reorder):
    """GMTS's evaluation of the pilot's best seed copied into its worst seed's cell: the worst seed's GMTS - ETS
    becomes positive, the pooled delta rises. The same samples file, or the same texts in another file, belongs to one
    cell."""
    before = json.loads(pilot.read_text())
    best, worst = copy_evaluation(pilot, monkeypatch, reorder)
    after = json.loads(pilot.read_text())
    assert gmts_minus_ets(after)[worst] > gmts_minus_ets(before)[worst]
    assert after["pooled"][0]["delta"] > before["pooled"][0]["delta"]  # the forged result
    what = "the same texts task by task" if reorder else "its samples file, SHA-256"
    err = refused(pilot, capsys, " arms.gmts.eval holds the evaluation of coupled/", f" arms.gmts.eval ({what}",
                  "an evaluation belongs to one cell")
    assert f"coupled/{worst} " in err and f"coupled/{best} " in err
    with pytest.raises(SweepError, match="an evaluation belongs to one cell"):  # sweep.py --summarize refuses it too
        write_summary(pilot)


def test_an_evaluation_copied_with_a_newline_added_is_refused(pilot, capsys, monkeypatch):
    """The best seed's GMTS texts copied into the worst seed's cell with one newline added to one text: no key is
    shared (the file's bytes and that text's length differ), and the pooled delta rises under every other check; the
    texts are the best seed's all the same, task by task with whitespace aside (two runs share under 0.2% of theirs),
    and the copy is refused in one line naming both cells."""
    before = json.loads(pilot.read_text())
    best, worst = copy_evaluation(pilot, monkeypatch, newline=True)  # the summary written: the keys let it pass
    after = json.loads(pilot.read_text())
    assert gmts_minus_ets(after)[worst] > gmts_minus_ets(before)[worst]
    assert after["pooled"][0]["delta"] > before["pooled"][0]["delta"]
    err = refused(pilot, capsys, f"coupled/{worst} arms.gmts.eval holds ", f" texts of coupled/{best} arms.gmts.eval",
                  "whitespace aside", "an evaluation belongs to one cell")
    shared, of = re.search(r"holds (\d+) of the (\d+) texts", err).groups()
    assert shared == of and int(of) > 5000  # every text, each task's 4 samples of 1,319 tasks (a few alike)


def test_the_base_texts_filed_as_a_trained_arm_are_refused(pilot, capsys, monkeypatch):
    """The base's first evaluation (its lines without their questions, as an arm's file keeps them) filed as the
    worst seed's GMTS evaluation, whose train log shows learning: in a sweep whose other arms moved off their base,
    only an arm that had nothing to learn from writes its base's texts, so the cell is refused in one line."""
    deltas = gmts_minus_ets(json.loads(pilot.read_text()))
    worst = min(deltas, key=deltas.get)
    cell = pilot.parent / worst
    raw = json.loads((cell / "results.json").read_text())
    base = raw["base"]["evals"][0]
    assert no_learning_signal(raw["arms"]["gmts"]["train_log"]) is None  # it trained
    lines = [{k: v for k, v in json.loads(x).items() if k != "question"}
             for x in lzma.decompress((cell / base["samples"]["path"]).read_bytes()).splitlines()]
    target, sha = write_samples(cell, "samples-gmts-seed0", lines)
    raw["arms"]["gmts"]["eval"] = {**copy.deepcopy(base), "samples": {**base["samples"], "path": target.name,
                                                                       "sha256": sha}}
    write_json(cell / "results.json", sealed(raw, 1))
    with monkeypatch.context() as unchecked:  # the summary as a forger writes it, the new check left out
        unchecked.setattr("gmts_recipe.verify.cell.check_apart", lambda evaluations: None)
        write_summary(pilot)
    refused(pilot, capsys, f"coupled/{worst} arms.gmts.eval holds the evaluation of coupled/", " base.evals[0] (",
            "an evaluation belongs to one cell")


def test_a_copy_between_arms_that_claim_no_learning_signal_is_refused(pilot, capsys, monkeypatch):
    """The best seed's GMTS samples file copied into the worst seed's cell, and both GMTS train logs edited to claim
    that every problem's rollouts scored alike at every step (frac_reward_zero_std 1), their rewards, losses and grad
    norms left as they were: the logs show training, so the two arms are not two untrained arms sampling alike, and
    the copy is refused in one line."""
    best, worst = copy_evaluation(pilot, monkeypatch)
    for name in (best, worst):
        path = pilot.parent / name / "results.json"
        raw = json.loads(path.read_text())
        for row in raw["arms"]["gmts"]["train_log"]:
            if "reward" in row:
                row["frac_reward_zero_std"] = 1.0
        assert no_learning_signal(raw["arms"]["gmts"]["train_log"]) is None  # its grad norms and losses say it trained
        write_json(path, sealed(raw, 1))
    with monkeypatch.context() as unchecked:
        unchecked.setattr("gmts_recipe.verify.cell.check_apart", lambda evaluations: None)
        write_summary(pilot)
    refused(pilot, capsys, f"coupled/{worst} arms.gmts.eval holds the evaluation of coupled/{best} arms.gmts.eval "
                           "(its samples file, SHA-256", "an evaluation belongs to one cell")


def test_a_cell_copied_into_another_sweep_under_another_seed_is_refused(tmp_path, capsys, monkeypatch):
    """Two pilot cells copied as seeds 300 and 301 of a new sweep beside it (the config's seed and hash edited, the
    cells re-sealed, the new grid naming those seeds, its summary written by the recipe): alone the new sweep is
    consistent; beside the sweep it was copied from, each evaluation belongs to one cell."""
    monkeypatch.chdir(ROOT)
    results = tmp_path / "results"
    copied = pilot_copy(results, "more-seeds", seeds={105: 300, 108: 301})
    verify_sweep(copied)  # no sweep beside it: nothing to compare
    pilot_copy(results)
    refused(copied, capsys, "more-seeds/coupled-lr0.0001-s300 arms.", "holds the evaluation of "
                                                                     "coupled/coupled-lr0.0001-s105 arms.",
            "an evaluation belongs to one cell")
    refused(results / "coupled" / "sweep.json", capsys, "holds the evaluation of more-seeds/coupled-lr0.0001-s30")


def committed_copy(results: Path, name: str) -> Path:
    """results/<name> copied into `results` as it is committed (grid, summary, cells, base-evals, logs; samples files
    linked): its sweep.json."""
    for source in (ROOT / "results" / name).rglob("*"):
        if source.is_file() and source.suffix != ".png":
            target = results / name / source.relative_to(ROOT / "results" / name)
            if source.suffix == ".xz":
                link_or_copy(source, target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source, target)
    return results / name / "sweep.json"


@pytest.mark.slow  # reads a committed sweep of 100 cells: beside the pilot's checks in the unit suite
def test_an_extension_cell_forged_from_a_confirmatory_cell_is_refused(tmp_path, capsys, monkeypatch):
    """The continued test's next seed (307) forged from the confirmatory test's seed 232, as a forger of its looks
    would: a cell of the extension (its config, base, provenance: the exact H100 name, the code digest) under seed 307,
    each arm's texts seed 232's with one newline added (samples files written again, records rebuilt from them) and
    its training log seed 232's; re-sealed, the summary written by the recipe's code. Every check but the one of near
    copies lets it through (the summary is written with only that one left out); check.py, reading the confirmatory
    sweep beside it, refuses it in one line naming both cells."""
    from gmts_recipe.records import records_from_samples, write_results
    from gmts_recipe.verify.file import read_results
    from gmts_recipe.stats import pass_at_1

    monkeypatch.chdir(ROOT)
    results = tmp_path / "results"
    committed_copy(results, "confirm")
    extension = committed_copy(results, "confirm-extension")
    continued, once = sweep_summary.continued_summary, {}  # the confirmatory test's 100 cells summarized once
    monkeypatch.setattr(sweep_summary, "continued_summary", lambda grid: once[grid.results_dir] if grid.results_dir in
                        once else once.setdefault(grid.results_dir, continued(grid)))
    old = results / "confirm" / "coupled-lr0.0001-s232"
    template = results / "confirm-extension" / "coupled-lr0.0001-s300"
    cell = results / "confirm-extension" / "coupled-lr0.0001-s307"
    cell.mkdir()
    source, raw = read_results(old / "results.json"), read_results(template / "results.json")
    raw["config"]["seed"] = 307
    raw["config_hash"] = config_hash(raw["config"])
    keys = dict(raw["data"]["heldout"])  # each task's key of the extension's version (question and gold answer)
    for arm, entry in raw["arms"].items():
        ev = source["arms"][arm]["eval"]
        lines = with_a_newline([{**line, "hash": keys[line["task"]]} for line in map(
            json.loads, lzma.decompress((old / ev["samples"]["path"]).read_bytes()).splitlines())])
        target, sha = write_samples(cell, f"samples-{arm}-seed0", lines)
        entry["eval"] = {**entry["eval"], "samples": {**entry["eval"]["samples"], "path": target.name, "sha256": sha}}
        entry["eval"]["records"] = records_from_samples(entry["eval"], cell, arm)
        entry["eval"]["pass@1"] = pass_at_1(entry["eval"]["records"])
        entry["train_log"] = source["arms"][arm]["train_log"]
    write_results(cell / "results.json", sealed(raw))
    with monkeypatch.context() as unchecked:  # the summary as a forger writes it, the check of near copies left out
        unchecked.setattr("gmts_recipe.verify.cell.near_copies", lambda *checked: None)
        write_summary(extension)
    assert 307 in json.loads(extension.read_text())["sequential"]["seeds_done"]  # counted towards look 1
    err = refused(extension, capsys, "confirm-extension/coupled-lr0.0001-s307 arms.", " texts of "
                  "confirm/coupled-lr0.0001-s232 arms.", "whitespace aside", "an evaluation belongs to one cell")
    shared, of = re.search(r"holds (\d+) of the (\d+) texts", err).groups()
    assert shared == of


# A train log with no learning signal (stats.no_learning_signal): every rollout group scored alike, no loss, no
# gradient; and one that claims it (every group alike) while its losses and grad norms say the arm trained.
NO_SIGNAL = [{"step": i, "reward": 0.0, "frac_reward_zero_std": 1.0, "loss": 0.0, "grad_norm": 0.0} for i in (1, 2)]
CLAIMED = [{"step": i, "reward": r, "frac_reward_zero_std": 1.0, "loss": 0.01 * i, "grad_norm": 0.4}
           for i, r in ((1, 0.25), (2, 0.5))]


def test_which_evaluations_may_share_texts():
    """check_apart's rule: a base evaluation belongs to its evaluation hash and seed (every cell of that base shares
    it), and is one with a base evaluation of another hash holding its texts where both were drawn by the same model
    with the same seed and settings (the base evaluated again: the held-out tasks keyed anew, another sweep); an arm
    may match another arm of its cell, and, where its train log shows no learning signal (as in a tiny run), its own
    cell's base and another such arm; never a trained arm's base, an evaluation of another cell, nor a base evaluation
    other than its own cell's."""
    from gmts_recipe.verify.cell import check_apart, evaluations_of

    def cell(sweep, name, base_keys, arm_keys, eval_hash="h", model="m", base_seed=0, untrained=""):
        """`untrained`: the arms (by name, space-separated) whose train log is NO_SIGNAL."""
        ev = lambda key, seed=0: {"seed": seed, "k": 4, "records": [], "samples": {"sha256": key * 64}}  # noqa: E731
        return evaluations_of(sweep, name, {"config": {"model_name_or_path": model},
                                            "base": {"eval_hash": eval_hash, "evals": [ev(k, base_seed)
                                                                                       for k in base_keys]},
                                            "arms": {arm: {"eval": ev(k), "train_log": NO_SIGNAL if arm in
                                                           untrained.split() else []}
                                                     for arm, k in arm_keys.items()}})

    check_apart([*cell("a", "c1", "b", {"ets": "x", "gmts": "x"}),
                 *cell("b", "c2", "b", {"ets": "b", "gmts": "y"}, untrained="ets")])
    with pytest.raises(SweepError, match="a/c2 arms.gmts.eval holds the evaluation of a/c1 arms.ets.eval"):
        check_apart([*cell("a", "c1", "b", {"ets": "x"}), *cell("a", "c2", "b", {"ets": "z", "gmts": "x"})])
    # the base evaluated again under another hash (the same model, seed and k): one evaluation, and an arm that wrote
    # its own base's texts (untrained, a tiny run) matches it through its own base, in either order
    check_apart([*cell("a", "c1", "b", {}), *cell("b", "c2", "b", {}, eval_hash="other")])
    check_apart([*cell("a", "c1", "b", {"ets": "b"}, untrained="ets"),
                 *cell("b", "c2", "b", {"ets": "b"}, eval_hash="other", untrained="ets")])
    check_apart([*cell("b", "c2", "b", {"ets": "b"}, eval_hash="other", untrained="ets"), *cell("a", "c1", "b", {})])
    # ... but another model's base, or another seed's, filed with those texts is not the base evaluated again
    with pytest.raises(SweepError, match=r"b/c2 base.evals\[0\] holds the evaluation of a/c1 base.evals\[0\]"):
        check_apart([*cell("a", "c1", "b", {}), *cell("b", "c2", "b", {}, eval_hash="other", model="another")])
    with pytest.raises(SweepError, match=r"b/c2 base.evals\[0\] holds the evaluation of a/c1 base.evals\[0\]"):
        check_apart([*cell("a", "c1", "b", {}), *cell("b", "c2", "b", {}, eval_hash="other", base_seed=1)])
    # an arm copied across stays refused where the bases are one
    with pytest.raises(SweepError, match="b/c2 arms.ets.eval holds the evaluation of a/c1 arms.ets.eval"):
        check_apart([*cell("a", "c1", "b", {"ets": "x"}), *cell("b", "c2", "b", {"ets": "x"}, eval_hash="other")])
    with pytest.raises(SweepError, match="b/c2 arms.ets.eval holds the evaluation of a/c1 base.evals"):
        check_apart([*cell("a", "c1", "b", {}), *cell("b", "c2", "q", {"ets": "b"}, eval_hash="other",
                                                      untrained="ets")])
    # two cells whose arms both wrote their shared base's texts (training changed nothing): nothing copied
    check_apart([*cell("a", "c1", "b", {"ets": "b"}, untrained="ets"),
                 *cell("a", "c2", "b", {"ets": "b", "gmts": "b"}, untrained="ets gmts")])
    with pytest.raises(SweepError, match=r"a/c2 arms.ets.eval holds the evaluation of a/c1 base.evals\[0\]"):
        check_apart([*cell("a", "c1", "b", {"ets": "b"}, untrained="ets"),
                     *cell("a", "c2", "q", {"ets": "b"}, eval_hash="other", untrained="ets")])
    # the base's texts filed as a trained arm, in a sweep where another arm moved off its base
    with pytest.raises(SweepError, match=r"a/c1 arms.gmts.eval holds the evaluation of a/c1 base.evals\[0\]"):
        check_apart(cell("a", "c1", "b", {"ets": "x", "gmts": "b"}))
    with pytest.raises(SweepError, match=r"a/c2 arms.gmts.eval holds the evaluation of a/c1 base.evals\[0\]"):
        check_apart([*cell("a", "c1", "b", {"ets": "b", "gmts": "x"}, untrained="ets"),
                     *cell("a", "c2", "b", {"gmts": "b"})])
    # ... but a tiny sweep whose every arm wrote its base's texts, one of them after a step with a learning signal,
    # copied nothing: its few steps moved no sample
    check_apart([*cell("a", "c1", "b", {"ets": "b", "gmts": "b"}, untrained="ets"), *cell("a", "c2", "b", {"ets": "b"}),
                 *cell("z", "c1", "b", {"ets": "x"})])

    def texts(sweep, name, base_texts, arm_files, eval_hash="h", log=NO_SIGNAL):
        """A base file holds the questions, an arm's not: the same texts in other bytes (as recipe.py writes them)."""
        ev = lambda sha, lengths: {"seed": 0, "samples": {"sha256": sha * 64},  # noqa: E731
                                   "records": [{"task": 0, "lengths": lengths, "scores": [0.0, 1.0]}]}
        return evaluations_of(sweep, name, {"base": {"eval_hash": eval_hash, "evals": [ev("b", base_texts)]},
                                            "arms": {arm: {"eval": ev(sha, lengths), "train_log": log}
                                                     for arm, (sha, lengths) in arm_files.items()}})

    # a tiny run: each cell's arm wrote its base's texts, its file the same bytes in both cells
    check_apart([*texts("a", "c1", [3, 5], {"ets": ("x", [3, 5])}), *texts("a", "c2", [3, 5], {"ets": ("x", [3, 5])})])
    # the same file in both cells, their arms trained: a copy
    with pytest.raises(SweepError, match="a/c2 arms.ets.eval holds the evaluation of a/c1 arms.ets.eval"):
        check_apart([*texts("a", "c1", [3, 5], {"ets": ("x", [4, 5])}, log=[]),
                     *texts("a", "c2", [3, 5], {"ets": ("x", [4, 5])}, log=[])])

    def logged(sweep, name, arm_keys, log):
        ev = lambda key: {"seed": 0, "records": [], "samples": {"sha256": key * 64}}  # noqa: E731
        return evaluations_of(sweep, name, {"base": {"eval_hash": "h", "evals": [ev("b")]},
                                            "arms": {arm: {"eval": ev(k), "train_log": log}
                                                     for arm, k in arm_keys.items()}})

    # two arms that had nothing to learn from (no loss, no gradient) sample alike from one adapter init: not a copy
    check_apart([*logged("a", "c1", {"ets": "x"}, NO_SIGNAL), *logged("a", "c2", {"ets": "x"}, NO_SIGNAL)])
    with pytest.raises(SweepError, match="a/c2 arms.ets.eval holds the evaluation of a/c1 arms.ets.eval"):
        check_apart([*logged("a", "c1", {"ets": "x"}, NO_SIGNAL[:1] + CLAIMED[1:]),
                     *logged("a", "c2", {"ets": "x"}, NO_SIGNAL)])
    # ... not two whose logs claim it (every group alike) while their losses and grad norms show training
    with pytest.raises(SweepError, match="a/c2 arms.ets.eval holds the evaluation of a/c1 arms.ets.eval"):
        check_apart([*logged("a", "c1", {"ets": "x"}, CLAIMED), *logged("a", "c2", {"ets": "x"}, CLAIMED)])


def test_a_math_runs_heldout_tasks_are_its_seeded_split():
    """MATH's held-out tasks recomputed without its files at hand, from the held-out set's size, task_seed and
    n_heldout (0: all of them), as math_data.split chooses them; one dropped is refused."""
    from gmts_recipe import math_data
    from gmts_recipe.verify.file import check_heldout, seeded_heldout
    from gmts_recipe.records import ResultsError

    chosen = math_data.heldout_indices(500, 100, 17)
    results = {"config": {"task": "math", "n_heldout": 100}, "base": {"evals": []},
               "data": {"task": "math", "test_pool": 500, "task_key": "question+gold",
                        "heldout": [[i, f"{i:016x}"] for i in chosen]}}
    assert seeded_heldout(results, None) == chosen and check_heldout(results) == 100
    assert seeded_heldout({**results, "config": {"task": "math", "n_heldout": 0}}, None) == list(range(500))
    results["data"]["heldout"] = results["data"]["heldout"][1:]
    with pytest.raises(ResultsError, match=f"data.heldout lists 99 tasks, the seeded split .* chooses 100: task "
                                           f"{chosen[0]} missing"):
        check_heldout(results)


def test_an_arm_its_plan_does_not_run_in_a_cell_is_refused(pilot, capsys):
    """An ETS-nz arm slipped into the pilot's cell of seed 105 (its ETS entry under ETS-nz's rule and samples name: an
    arm may hold its own cell's texts, as two rules that change nothing do), the summary written by the recipe from a
    plan that lists ETS-nz, the committed plan (ETS and GMTS) put back: the pilot gains GMTS - ETS-nz and ETS-nz - ETS
    rows no block ran. A cell's arms are its block's."""
    from gmts_recipe.arms import arm_named
    from selection import RULES

    cell = pilot.parent / "coupled-lr0.0001-s105"
    raw = json.loads((cell / "results.json").read_text())
    entry = copy.deepcopy(raw["arms"]["ets"])
    source = cell / entry["eval"]["samples"]["path"]
    entry["token_selection"] = RULES[arm_named("ets_nz").rule].name
    entry["eval"]["samples"]["path"] = source.name.replace("samples-ets-", "samples-ets_nz-")
    link_or_copy(source, cell / entry["eval"]["samples"]["path"])
    raw["arms"]["ets_nz"] = entry
    write_json(cell / "results.json", sealed(raw, 1))
    grid = pilot.parent / "grid.yaml"
    committed = grid.read_text()
    grid.write_text(committed.replace("arms: [ets, gmts]", "arms: [ets, gmts, ets_nz]"))
    write_summary(pilot)
    grid.write_text(committed)
    comparisons = {row["comparison"] for row in json.loads(pilot.read_text())["pooled"]}
    assert {"gmts - ets_nz", "ets_nz - ets"} <= comparisons  # the forged rows
    refused(pilot, capsys, "coupled-lr0.0001-s105/results.json: holds arm ets_nz, which the plan does not run in "
                           "coupled-lr0.0001-s105 (its blocks run ets, gmts there)")


def test_allow_unsampled_is_refused_for_a_planned_sweep(tmp_path, capsys, monkeypatch):
    """A planned test (test_sweep's four-seed primary GMTS - ETS) of cells that keep no samples, their scores made up
    (GMTS +40 points in every seed): "reproduced", and nothing to re-score. Without --allow-unsampled it is refused for
    its missing samples; with it, for being planned: a plan's decision stands on re-scored samples (only the planned
    sweeps made before evaluations kept them take the flag, pinned by their summary's digest)."""
    from gmts_recipe.verify.plan import UNSAMPLED_PLANS
    from gmts_recipe.sweep.report import write_summary as report_summary
    from test_sweep import CONTINUED, fake_cell

    monkeypatch.chdir(ROOT)
    grid_path = tmp_path / "first.yaml"
    grid_path.write_text(CONTINUED.replace("RESULTS", str(tmp_path / "results")))
    for seed in (1, 2, 3, 4):
        fake_cell(tmp_path / "results" / "first", f"paper-lr0.0001-s{seed}", {"ets": 0.3, "gmts": 0.7}, seed=seed)
    path = report_summary(load_grid(grid_path), grid_path)
    assert verify_sweep(path)["primary"]["decision"] == "reproduced"  # the forged result
    refused(path, capsys, "base eval 0 keeps no samples, so its scores cannot be re-scored")
    assert check.main([str(path), "--allow-unsampled"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{path}: --allow-unsampled on a planned sweep (primary): its decision would read " \
                                "scores nobody re-scored" in err, err
    assert set(UNSAMPLED_PLANS) == {"qwen"}  # the committed one (tests/test_check.py checks it with the flag)
    assert json.loads((ROOT / "results/qwen/sweep.json").read_text())["digest"] == UNSAMPLED_PLANS["qwen"]
