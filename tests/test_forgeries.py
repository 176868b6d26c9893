"""Forgeries tried as a forger would: a committed results file (results/quickstart-cpu, its samples files beside it)
copied, edited, re-sealed with the recipe's own digest (tests/forge.py), and given to check.py. Each is tried on the
file as committed (format 1: per-task records in results.json) and as recipe.py writes it today (format 2), where it
applies.

Refused here: arms' entries swapped (GMTS vs ETS +28.3 "moved" would read -28.3 "regressed"), and swapped with their
rule fixed; the noise floor zeroed by a base evaluation copied into another (the same samples file, the same bytes
under another name, the same texts compressed again); a config edited under its hash; reward versions mixed,
unknown, or recorded where the format records none; samples stripped from a file of a format that keeps them; a task
the recipe does not know; a plain-GRPO arm logging selective kept fractions; a training log beyond max_steps or above
the arm's learning rate; a merge entry naming an arm the file lacks; per-task records slipped into a format-2 file.

Still possible, asserted here so that closing one shows (docs/results.md lists them): a relabel of two arms done
in full (entries, rules and samples file names swapped together); base evaluations dropped with the config's
base_eval_seeds edited to match; training curves edited (read as recorded); samples stripped from a file of the first
format that kept them (nothing in such a file tells it from one written before samples: --allow-unsampled passes it,
and says its numbers were not re-scored; a sweep refuses it beside cells that keep samples).
"""

from __future__ import annotations

import copy
import json
import re
import lzma
import shutil
from pathlib import Path

import pytest

from forge import passes, refused, reseal, sealed
from gmts_recipe.records import config_hash, current_record, digest, write_results
from gmts_recipe.verify.file import load, seal
from gmts_recipe.records import evaluations
from gmts_recipe.samples import samples_bytes, write_samples
from gmts_recipe.stats import pass_at_1


ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "results" / "quickstart-cpu"


def committed_copy(tmp_path: Path, fmt: int) -> Path:
    """results/quickstart-cpu with its samples files in <tmp>/results/ (the base's in base-evals/, as committed): as
    committed (format 1), or as recipe.py writes the same run today (format 2: verify.file.seal,
    records.write_results)."""
    run = tmp_path / "results" / "quickstart-cpu"
    shutil.copytree(COMMITTED, run)
    results = json.loads((COMMITTED / "results.json").read_text())
    (tmp_path / "results" / "base-evals").mkdir()
    for ev in results["base"]["evals"]:
        source = (COMMITTED / ev["samples"]["path"]).resolve()
        shutil.copy(source, tmp_path / "results" / "base-evals" / source.name)
    if fmt == 2:
        write_results(run / "results.json", sealed(load(run / "results.json")))
        assert "records" not in json.loads((run / "results.json").read_text())["arms"]["gmts"]["eval"]
    return run / "results.json"


def samples_file(path: Path, ev: dict) -> Path:
    return (path.parent / ev["samples"]["path"]).resolve()


def swap(results: dict, a: str = "ets", b: str = "gmts") -> None:
    results["arms"][a], results["arms"][b] = results["arms"][b], results["arms"][a]


@pytest.fixture(params=[1, 2], ids=["format-1", "format-2"])
def committed(request, tmp_path) -> Path:
    return committed_copy(tmp_path, request.param)


# ---------------------------------------------------------------- refused
def test_the_committed_file_passes_in_both_formats(committed, capsys):
    out = passes(committed, capsys)
    assert re.search(r"GMTS vs ETS +\+28\.3 pts \[.*\] +moved", out)
    assert "Samples: 300 in 5 evaluation(s) re-scored" in out


def test_swapped_arms_are_refused(committed, capsys):
    """ETS's and GMTS's entries swapped whole: GMTS vs ETS would read -28.3 "regressed"; each entry names its rule."""
    forged = reseal(committed, swap)
    assert forged["summary"]["comparisons"]["gmts_vs_ets"]["verdict"] == "regressed"
    refused(committed, capsys, "arms.ets.token_selection is 'gmts': arm ets's rule is 'entropy'")


def test_swapped_arms_with_their_rules_fixed_are_refused(committed, capsys):
    """The same, each entry's token_selection edited to its new key: its samples file is still named for the other."""
    def forge(r):
        swap(r)
        r["arms"]["ets"]["token_selection"], r["arms"]["gmts"]["token_selection"] = "entropy", "gmts"

    reseal(committed, forge)
    refused(committed, capsys, "arms.ets.eval.samples.path is 'samples-gmts-seed0-", "arm ets's samples file is "
                                                                                    "samples-ets-seed0-")


def test_a_base_evaluation_copied_into_another_is_refused(committed, capsys):
    """The noise floor zeroed: base eval 1 replaced by base eval 0, samples reference and all."""
    forged = reseal(committed, lambda r: r["base"]["evals"].__setitem__(1, {**copy.deepcopy(r["base"]["evals"][0]),
                                                                            "seed": 1}))
    assert forged["summary"]["base"]["noise_floor"] == 0.0
    refused(committed, capsys, "base.evals[1].samples: the samples file of base.evals[0]")


def test_a_base_evaluations_samples_copied_under_another_name_are_refused(committed, capsys):
    """The same, base eval 0's samples file copied under base eval 1's name (the same bytes, the same SHA-256)."""
    results = json.loads(committed.read_text())
    zero, one = results["base"]["evals"][0], results["base"]["evals"][1]
    target = samples_file(committed, one).with_name(samples_file(committed, one).name.replace(
        one["samples"]["sha256"][:12], zero["samples"]["sha256"][:12]))
    shutil.copy(samples_file(committed, zero), target)

    def forge(r):
        ev = r["base"]["evals"][1]
        ev["samples"] = {**r["base"]["evals"][0]["samples"], "path": f"../base-evals/{target.name}"}
        ev["records"] = copy.deepcopy(r["base"]["evals"][0]["records"])
        ev["pass@1"] = r["base"]["evals"][0]["pass@1"]

    reseal(committed, forge)
    refused(committed, capsys, "base.evals[1].samples: the samples file of base.evals[0] (SHA-256")


def test_a_base_evaluations_texts_compressed_again_are_refused(committed, capsys):
    """The careful forger: base eval 0's lines in another order (other bytes, another SHA-256), named for seed 1: the
    same texts, so the same per-task scores and lengths, which samples of two seeds never share."""
    results = json.loads(committed.read_text())
    zero = results["base"]["evals"][0]
    lines = [json.loads(line) for line in lzma.decompress(samples_file(committed, zero).read_bytes()).splitlines()]
    stem = samples_file(committed, zero).name.rsplit("-", 2)[0] + "-seed1"
    target, sha = write_samples(samples_file(committed, zero).parent, stem, lines[::-1])

    def forge(r):
        ev = r["base"]["evals"][1]
        ev["samples"] = {**ev["samples"], "path": f"../base-evals/{target.name}", "sha256": sha}
        ev["records"] = [dict(rec) for rec in r["base"]["evals"][0]["records"]][::-1]
        ev["pass@1"] = pass_at_1(ev["records"])

    reseal(committed, forge)
    refused(committed, capsys, "base.evals[1].records are base.evals[0]'s", "zeroes the noise floor")


def test_an_edited_config_is_refused_by_its_hash(committed, capsys):
    reseal(committed, lambda r: r["config"].update(selection_ratio=0.5))
    refused(committed, capsys, "config_hash is", "the recorded config hashes to")


def test_mixed_unknown_or_unrecorded_reward_versions_are_refused(committed, capsys):
    from gmts_recipe.rewards import REWARD_VERSION

    reseal(committed, lambda r: r["arms"]["gmts"]["eval"]["samples"].update(reward=1))
    refused(committed, capsys, "arms.gmts.eval.samples.reward is 1, base.evals[0].samples.reward is 2: one reward "
                               "version per file")
    reseal(committed, lambda r: [ev["samples"].update(reward=REWARD_VERSION + 1) for _, ev in evaluations(r)])
    refused(committed, capsys, f"samples.reward is {REWARD_VERSION + 1}; this recipe knows reward versions 1 to")
    raw = json.loads(committed.read_text())
    for ev in [*raw["base"]["evals"], *(e["eval"] for e in raw["arms"].values())]:
        ev["samples"].pop("reward")  # unrecorded: format 1 says version 1; format 2 records it always
    raw["digest"] = digest(raw)
    committed.write_text(json.dumps(raw))
    if raw["schema"] == 2:
        refused(committed, capsys, "base.evals[0].samples.reward: missing")
    else:  # a stage of format 1 (keys over question and gold, version 1 unrecorded): re-scored by version 1, the
        passes(committed, capsys)  # same scores; nothing gained


def test_a_recorded_version_1_is_not_format_1s(tmp_path, capsys):
    path = committed_copy(tmp_path, 1)
    reseal(path, lambda r: [ev["samples"].update(reward=1) for _, ev in evaluations(r)])
    refused(path, capsys, "base.evals[0].samples.reward is 1 in a format-1 file (format 1 records versions from 2 on")


def test_samples_stripped_from_a_file_that_kept_them_are_refused_with_allow_unsampled_too(committed, capsys):
    """Every samples reference deleted and every arm's scores raised: the file records what came after samples were
    kept (format 1: its task keys' version, the pool, each arm's provenance), or is of a format that keeps them."""
    def forge(r):
        for _, ev in evaluations(r):
            ev.pop("samples")
        for entry in r["arms"].values():
            entry["eval"]["records"] = [dict(rec, scores=[1.0] * len(rec["scores"]))
                                        for rec in entry["eval"]["records"]]
            entry["eval"]["pass@1"] = 1.0

    fmt = json.loads(committed.read_text())["schema"]
    reseal(committed, forge)
    if fmt == 1:
        refused(committed, capsys, "no evaluation keeps samples, but data.task_key is recorded",
                flags=("--allow-unsampled",))
    else:
        refused(committed, capsys, "base eval 0 keeps no samples", "a format-2 file keeps every evaluation's",
                flags=("--allow-unsampled",))


def test_an_unknown_task_is_refused(committed, capsys):
    reseal(committed, lambda r: r["data"].update(task="chess"))
    refused(committed, capsys, "data.task is 'chess', a task this recipe does not know")


def test_training_logs_that_contradict_their_arm_are_refused(committed, capsys):
    original = committed.read_text()
    reseal(committed, lambda r: [row.update({"selection/kept_fraction": 0.2})
                                 for row in r["arms"]["grpo"]["train_log"]])
    refused(committed, capsys, "arms.grpo.train_log: selection/kept_fraction 0.2, but arm grpo's rule keeps every "
                               "token")
    committed.write_text(original)
    reseal(committed, lambda r: r["arms"]["ets"]["train_log"].append({**r["arms"]["ets"]["train_log"][-1], "step": 13}))
    refused(committed, capsys, "arms.ets.train_log: step 13 beyond the config's max_steps 12")
    committed.write_text(original)
    reseal(committed, lambda r: r["arms"]["gmts"]["train_log"][3].update(learning_rate=1e-3))
    refused(committed, capsys, "arms.gmts.train_log: learning rate 0.001 at step 4, above the arm's learning_rate "
                               "0.0005")


def test_a_merge_entry_naming_an_arm_the_file_lacks_is_refused(committed, capsys):
    reseal(committed, lambda r: r.update(merges=[{"arms": ["ets_nz"], "base": "incoming"}]))
    refused(committed, capsys, "merges[0].arms names 'ets_nz', an arm the file does not hold")


def test_records_slipped_into_a_format_2_file_are_refused(tmp_path, capsys):
    """Format 2 stores no per-task records beside a samples file (the digest covers the file without them): records
    written in anyway, scores raised, are refused, not silently replaced by the samples'."""
    path = committed_copy(tmp_path, 2)
    raw = json.loads(path.read_text())
    raw["arms"]["ets"]["eval"]["records"] = [{"task": 0, "hash": "0", "scores": [1.0, 1.0], "lengths": [1, 1]}]
    path.write_text(json.dumps(raw))  # the digest still matches: it is over the file without records
    refused(path, capsys, "arms.ets.eval.records: a format-2 file stores no per-task records beside a samples file")


def test_edited_samples_in_a_format_2_file_are_re_scored(tmp_path, capsys):
    """Format 2's records are the samples': a score flipped there (the file renamed by its new SHA-256, re-sealed)
    moves the summary, and the reward re-scores the text."""
    path = committed_copy(tmp_path, 2)
    results = load(path)
    ev = results["arms"]["ets"]["eval"]
    lines = [json.loads(line) for line in lzma.decompress(samples_file(path, ev).read_bytes()).splitlines()]
    lines[4]["scores"][1] = 1.0 - lines[4]["scores"][1]
    target, sha = write_samples(path.parent, "samples-ets-seed0", lines)
    assert target.read_bytes() == samples_bytes(lines)
    def forge(r):
        ev = r["arms"]["ets"]["eval"]
        ev["samples"].update(path=target.name, sha256=sha)
        ev["records"][4]["scores"] = lines[4]["scores"]
        ev["pass@1"] = pass_at_1(ev["records"])

    reseal(path, forge)
    assert load(path)["arms"]["ets"]["eval"]["records"][4]["scores"] == lines[4]["scores"]
    refused(path, capsys, "arm ets: samples-ets-seed0-", f"task {lines[4]['task']}:", "sample 1:", "by the reward now")


def test_an_arms_reward_other_than_its_samples_is_refused(committed, capsys):
    """An arm that claims reward version 1 (the reading a plan pins) above samples its file scored by version 2: an arm
    trains and is scored with one reward."""
    reseal(committed, lambda r: r["arms"]["gmts"].update(reward_version=1))
    refused(committed, capsys, "arms.gmts.reward_version is 1, its samples file records reward version 2 "
                               "(arms.gmts.eval.samples.reward)")


def test_an_edited_hack_scan_is_refused(committed, capsys):
    """ETS's answer-less share (1.7% of its texts give no final answer) zeroed: the reward-hacking scan is recomputed
    from the samples (stats.hack_scan), as the scores are."""
    from gmts_recipe.stats import hack_scan

    results = load(committed)
    texts = [t for line in lzma.decompress(samples_file(committed, results["arms"]["ets"]["eval"]).read_bytes())
             .decode().splitlines() for t in json.loads(line)["samples"]]
    assert hack_scan(texts)["answerless_fraction"] == pytest.approx(1 / 60)  # as recorded, passing above
    reseal(committed, lambda r: r["arms"]["ets"]["eval"]["hack_scan"].update(answerless_fraction=0.0))
    refused(committed, capsys, "arm ets: samples-ets-seed0-", ": hack_scan.answerless_fraction is 0.0, its texts "
                                                             "give 0.01666", "(stats.hack_scan recomputed")
    reseal(committed, lambda r: r["arms"]["ets"]["eval"]["hack_scan"].update(answerless_fraction=1 / 60,
                                                                             flags=["answerless"]))
    refused(committed, capsys, "hack_scan.flags is ['answerless'], its texts give []")


def test_hack_scan_counts_as_it_always_did():
    """hack_scan's counts (letters, upper case, repeated n-grams: bytes.translate and zip for the texts check.py
    recomputes it over) are those of a character-by-character count, on ASCII, other scripts and non-text alike."""
    import random

    from gmts_recipe.stats import hack_scan

    def counted(completions, ngram=4):
        texts = [c if isinstance(c, str) else "" for c in completions]
        letters = sum(ch.isalpha() for t in texts for ch in t)
        upper = sum(ch.isupper() for t in texts for ch in t)
        grams = [[tuple(t.split()[i:i + ngram]) for i in range(len(t.split()) - ngram + 1)] for t in texts]
        repetition = sum(1 - len(set(g)) / len(g) if g else 0.0 for g in grams) / max(len(texts), 1)
        return upper / letters if letters else 0.0, repetition

    rng = random.Random(0)
    alphabet = "aAbBzZ 0123456789 ####\\boxed{}éÉßΣσ\u2212½²ǅ\n\t"
    for _ in range(500):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))) for _ in range(rng.randint(0, 6))]
        texts += [None] * rng.randint(0, 1)
        scan = hack_scan(texts)
        assert (scan["upper_fraction"], scan["repetition"]) == counted(texts), texts


# ---------------------------------------------------------------- still possible (docs/results.md lists them)
def test_still_possible_a_full_relabel_of_two_arms(committed, capsys):
    """Entries, rules and samples file names all swapped: nothing in the file tells which rule produced which
    records (the training logs' selection metrics differ in kind, but check.py reads them as recorded)."""
    results = json.loads(committed.read_text())
    renamed = {}
    for arm, other in (("ets", "gmts"), ("gmts", "ets")):
        ref = results["arms"][arm]["eval"]["samples"]
        source = samples_file(committed, results["arms"][arm]["eval"])
        renamed[other] = source.with_name(source.name.replace(f"samples-{arm}-", f"samples-{other}-") + ".new")
        shutil.copy(source, renamed[other])
    for other, file in renamed.items():
        file.rename(file.with_suffix(""))

    def forge(r):
        swap(r)
        for arm, rule in (("ets", "entropy"), ("gmts", "gmts")):
            r["arms"][arm]["token_selection"] = rule
            ref = r["arms"][arm]["eval"]["samples"]
            ref["path"] = ref["path"].replace("samples-gmts-" if arm == "ets" else "samples-ets-", f"samples-{arm}-")

    forged = reseal(committed, forge)
    assert forged["summary"]["comparisons"]["gmts_vs_ets"]["verdict"] == "regressed"
    passes(committed, capsys)


def test_still_possible_base_evaluations_dropped_with_the_configs_seeds(committed, capsys):
    """base_eval_seeds edited to [0] (the config hash recomputed) and base eval 1 dropped: one evaluation, no noise
    floor. The base's evaluation hash would differ in a real run, but it cannot be recomputed from the file."""
    def forge(r):
        r["config"]["base_eval_seeds"] = [0]
        r["config_hash"] = config_hash(r["config"])
        del r["base"]["evals"][1]

    forged = reseal(committed, forge)
    assert forged["summary"]["base"]["noise_floor"] == 0.0
    passes(committed, capsys)


def test_still_possible_edited_training_curves(committed, capsys):
    """Training curves are read as recorded (and check.py says so): a reward curve raised passes."""
    reseal(committed, lambda r: [row.update(reward=min(1.0, row["reward"] + 0.2))
                                 for row in r["arms"]["gmts"]["train_log"]])
    assert "Training curves (each arm's train_log): read as recorded" in passes(committed, capsys)


def test_still_possible_samples_stripped_from_the_first_format_that_kept_them(tmp_path, capsys):
    """A file of the first format with samples (reward version unrecorded, keys over the question: the committed
    confirm and coupled cells) records nothing that came after samples: stripped of them, its GMTS scores raised, it
    reads as a file of before samples, which --allow-unsampled accepts (its numbers marked "not re-scored")."""
    path = tmp_path / "results.json"
    raw = json.loads((ROOT / "results" / "coupled" / "coupled-lr0.0001-s100" / "results.json").read_text())
    for _, ev in evaluations(raw):
        ev.pop("samples")
    gmts = raw["arms"]["gmts"]["eval"]
    gmts["records"] = [dict(rec, scores=[1.0] * len(rec["scores"])) for rec in gmts["records"]]
    gmts["pass@1"] = 1.0
    path.write_text(json.dumps(sealed(raw, 1)))
    refused(path, capsys, "keeps no samples")
    assert "100.0% (not re-scored)" in passes(path, capsys, "--allow-unsampled")


# ---------------------------------------------------------------- the evaluations tied to their data and config
def rewrite_evaluations(path: Path, edit_lines, edit_records=None) -> dict:
    """The forger's rewrite of every evaluation: each samples file's lines edited (`edit_lines(where, lines)` returns
    the new lines), written again under the name recipe.py gives it (its new SHA-256), the records made the lines'
    (`edit_records(where, ev)` for any other field), the file re-sealed (reseal). Returns what was written."""
    raw = json.loads(path.read_text())
    rewritten = {}
    for where, ev in evaluations(current_record(raw, path.parent)):
        file = samples_file(path, ev)
        lines = edit_lines(where, [json.loads(x) for x in lzma.decompress(file.read_bytes()).splitlines()])
        target, sha = write_samples(file.parent, file.name.rsplit("-", 1)[0], lines)
        prefix = ev["samples"]["path"].rsplit("/", 1)[0] + "/" if "/" in ev["samples"]["path"] else ""
        rewritten[where] = (prefix + target.name, sha, lines)

    def forge(r):
        for where, ev in evaluations(r):
            name, sha, lines = rewritten[where]
            ev["samples"].update(path=name, sha256=sha)
            ev["records"] = [{"task": x["task"], "hash": x["hash"], "scores": x["scores"],
                              "lengths": [len(t) for t in x["samples"]]} for x in lines]
            ev["pass@1"] = pass_at_1(ev["records"])
            if edit_records is not None:
                edit_records(where, ev)

    return reseal(path, forge)


def gmts_lost(path: Path) -> set:
    """The held-out tasks on which the GMTS arm scored below ETS (the forger's choice of tasks to drop)."""
    results = load(path)
    ets = {r["task"]: sum(r["scores"]) for r in results["arms"]["ets"]["eval"]["records"]}
    return {r["task"] for r in results["arms"]["gmts"]["eval"]["records"] if sum(r["scores"]) < ets[r["task"]]}


def test_tasks_dropped_from_the_heldout_set_and_every_evaluation_are_refused(committed, capsys):
    """The tasks GMTS lost dropped from data.heldout and from every evaluation (records and samples files alike):
    GMTS vs ETS +28.3 would read higher on fewer tasks than the config's 30. The held-out tasks are recomputed from
    the dataset (the generated pool, rebuilt), task_seed and n_heldout; the config's n_heldout edited to match draws
    other tasks."""
    lost = gmts_lost(committed)
    assert lost
    original = committed.read_text()

    def drop(r):
        r["data"]["heldout"] = [t for t in r["data"]["heldout"] if t[0] not in lost]

    rewrite_evaluations(committed, lambda where, lines: [x for x in lines if x["task"] not in lost])
    reseal(committed, drop)
    forged = load(committed)
    assert forged["summary"]["comparisons"]["gmts_vs_ets"]["delta"] > 0.2833 + 0.01  # the forged result
    n = 30 - len(lost)
    refused(committed, capsys, f"data.heldout lists {n} tasks, the seeded split (task_seed 17, n_heldout 30, a test "
                               f"pool of 120) chooses 30: task {min(lost)} missing")
    reseal(committed, lambda r: (r["config"].update(n_heldout=n), r["data"]["pool"].update(n_heldout=n),
                                 r["data"].update(test_pool=4 * n), r.update(config_hash=config_hash(r["config"]))))
    refused(committed, capsys, f"data.heldout lists {n} tasks, the seeded split (task_seed 17, n_heldout {n}, a test "
                               f"pool of {4 * n}) chooses {n}: task ")
    committed.write_text(original)
    passes(committed, capsys)


def test_an_arm_cut_to_its_best_samples_is_refused(committed, capsys):
    """The GMTS arm keeps its better sample of each task's two (k 1 instead of the config's eval_samples 2): its
    pass@1 rises while the table still says the config's count. Every evaluation draws eval_samples per task; the
    config edited to match, the base evaluations' k differs."""
    def best(where, lines):
        if where != "arm gmts":
            return lines
        out = []
        for x in lines:
            j = max(range(len(x["scores"])), key=lambda i: x["scores"][i])
            out.append({**x, "samples": [x["samples"][j]], "scores": [x["scores"][j]]})
        return out

    def k_of(where, ev):
        if where == "arm gmts":
            ev["k"] = 1

    forged = rewrite_evaluations(committed, best, k_of)
    assert forged["summary"]["arms"]["gmts"]["pass@1"] > 0.7  # the forged result (0.683 as run)
    refused(committed, capsys, "arms.gmts.eval.k is 1, the config's eval_samples is 2 (every evaluation draws "
                               "eval_samples samples per task)")
    reseal(committed, lambda r: (r["config"].update(eval_samples=1), r.update(config_hash=config_hash(r["config"]))))
    refused(committed, capsys, "base.evals[0].k is 2, the config's eval_samples is 1")


def test_a_reward_version_of_another_task_is_refused(committed, capsys, tmp_path):
    """A file of the generated task (as a GSM8K file) re-scored with MATH's reading, and a MATH file with a numbered
    version: each task has its own reward versions."""
    from gmts_recipe.rewards_math import REWARD_NAMES

    original = committed.read_text()
    reseal(committed, lambda r: [ev["samples"].update(reward=REWARD_NAMES[0]) for _, ev in evaluations(r)])
    refused(committed, capsys, f"base.evals[0].samples.reward is {REWARD_NAMES[0]!r}, a MATH reward; data.task is "
                               f"'arithmetic', whose rewards are versions 1 to")
    committed.write_text(original)
    reseal(committed, lambda r: (r["data"].update(task="math", heldout_set="math500"), r["config"].update(task="math"),
                                 r.update(config_hash=config_hash(r["config"]))))
    refused(committed, capsys, "base.evals[0].samples.reward is 2, a GSM8K reward; data.task is 'math', whose "
                               f"rewards are named ({', '.join(REWARD_NAMES)})")
    gsm8k = tmp_path / "gsm8k-copy" / "results.json"  # a GSM8K file (the refusal comes before its samples are read)
    gsm8k.parent.mkdir()
    shutil.copy(ROOT / "results" / "side-by-side-h100-ours" / "qwen" / "results.json", gsm8k)
    reseal(gsm8k, lambda r: [ev["samples"].update(reward=REWARD_NAMES[0]) for _, ev in evaluations(r)])
    refused(gsm8k, capsys, f"samples.reward is {REWARD_NAMES[0]!r}, a MATH reward; data.task is 'gsm8k'")


def test_a_task_relabelled_to_one_without_its_dataset_is_refused(committed, capsys, tmp_path):
    """The generated task relabelled GSM8K, whose dataset is not at hand without --gsm8k_path (the gold answers would
    go uncompared): the data report is the config's run; the config relabelled too, the held-out tasks are not the
    ones GSM8K's seeded split chooses, and with a GSM8K copy at hand it is not GSM8K's (its hash is pinned) nor, read
    unpinned, the run's pool."""
    original = committed.read_text()
    reseal(committed, lambda r: r["data"].update(task="gsm8k"))
    refused(committed, capsys, "data.task is 'gsm8k', the config's task is 'arithmetic'")
    committed.write_text(original)

    def relabel(r):
        r["data"]["task"] = "gsm8k"
        r["config"].pop("task")  # the default task: GSM8K
        r["config_hash"] = config_hash(r["config"])

    reseal(committed, relabel)
    refused(committed, capsys, "data.heldout lists 30 tasks, the seeded split (task_seed 17, n_heldout 30, a test "
                               "pool of 120) chooses 30: task ")
    gsm8k = tmp_path / "gsm8k"  # a GSM8K copy at hand (its layout; 50 tasks)
    gsm8k.mkdir()
    for split in ("train", "test"):
        (gsm8k / f"{split}.jsonl").write_text("".join(json.dumps({"question": f"q{i}", "answer": "#### 7"}) + "\n"
                                                      for i in range(50)))
    refused(committed, capsys, f"GSM8K at {gsm8k}: its test split (50 problems) hashes to ",
            "not to the original release's", flags=("--gsm8k_path", str(gsm8k)))
    refused(committed, capsys, "data.test_pool is 120, the test pool at hand holds 50 tasks",
            flags=("--gsm8k_path", str(gsm8k), "--gsm8k_unpinned"))


# ---------------------------------------------------------------- still possible: what only a rerun on a GPU catches
def test_still_possible_base_seeds_0_and_1_swapped(committed, capsys):
    """Base evaluations 0 and 1 swapped, each keeping its seed's label (samples files renamed to match): the arms are
    paired with the other seed's samples. Nothing in a file tells which seed drew which texts; a rerun of the base
    evaluation (bench/repeat.py against the committed cell) does."""
    results = json.loads(committed.read_text())
    zero, one = (current_record(results, committed.parent)["base"]["evals"][i] for i in (0, 1))
    renamed = {}
    for ev, seed in ((zero, 1), (one, 0)):  # each file under the other seed's name
        source = samples_file(committed, ev)
        target = source.with_name(source.name.replace(f"-seed{ev['seed']}-", f"-seed{seed}-"))
        shutil.copy(source, target)
        renamed[seed] = (f"../base-evals/{target.name}", ev)

    def forge(r):
        for i in (0, 1):
            path, ev = renamed[i]
            r["base"]["evals"][i] = {**copy.deepcopy(ev), "seed": i, "samples": {**ev["samples"], "path": path}}

    before = load(committed)["summary"]["arms"]["gmts"]["vs_base"]["delta"]
    forged = reseal(committed, forge)
    assert forged["summary"]["arms"]["gmts"]["vs_base"]["delta"] != before
    passes(committed, capsys)


@pytest.mark.parametrize("field, value", [("model_name_or_path", "qwen2.5-coder-1.5b-instruct"),
                                          ("eval_temperature", 1.0)])
def test_still_possible_the_model_or_the_evaluation_temperature_relabelled(committed, capsys, field, value):
    """The config says another model or another evaluation temperature (its hash recomputed): the base's evaluation
    hash would differ, but it cannot be recomputed from the file. A rerun with the recorded config does."""
    reseal(committed, lambda r: (r["config"].update({field: value}), r.update(config_hash=config_hash(r["config"]))))
    passes(committed, capsys)


def test_still_possible_a_card_relabelled(committed, capsys):
    """Each arm's provenance names another GPU: provenance is printed as recorded, not verified. A rerun on the named
    card repeats the committed numbers only where it ran there (bench/docs/repeat.md)."""
    reseal(committed, lambda r: [entry["provenance"].update(gpu="NVIDIA H200", gpus=1)
                                 for entry in r["arms"].values()])
    assert "1 x NVIDIA H200" in passes(committed, capsys)


def test_still_possible_the_rollout_history_rewritten(committed, capsys):
    """Each arm's rollout digests (a digest of every completion of every training step) rewritten: read as recorded,
    as the training curves are (test_still_possible_edited_training_curves). A rerun compares both step by step
    (bench/repeat.py)."""
    reseal(committed, lambda r: [entry["rollout_digests"].update({step: ["0" * 16] * len(digests)
                                                                  for step, digests in entry["rollout_digests"].items()})
                                 for entry in r["arms"].values()])
    passes(committed, capsys)
