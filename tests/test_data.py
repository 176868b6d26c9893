"""Data: the generated task held out at the problem level, the data report, and the offline GSM8K error."""

import pytest

from gmts_recipe import data
from gmts_recipe.data import DataError, arithmetic_problem, arithmetic_task, choose_split, decontaminate, split_tasks


def offline_pools(difficulty=1, n_train=512, n_heldout=120, seed=17):
    """The pools recipe.load_tasks builds for the generated task (4x each, the test pool from the next seed)."""
    return {"train": arithmetic_task(4 * n_train, seed, difficulty), "test": arithmetic_task(4 * n_heldout, seed + 1,
                                                                                            difficulty)}


def test_no_held_out_calculation_appears_among_the_train_prompts():
    train, heldout, report = split_tasks("arithmetic", offline_pools(), 512, 120, seed=17)
    held = [arithmetic_problem(t) for t in heldout]
    assert len(heldout) == 120 and len(set(held)) == 120  # 120 distinct calculations, not 55 sums under other names
    assert not {arithmetic_problem(t) for t in train} & set(held)
    assert len(train) == report["train_kept"] == 512 - report["decontamination_dropped"]
    problem = report["decontamination"]["problem"]
    assert problem["heldout_distinct"] == 120 and problem["shared"] == 0 and problem["train_pool_excluded"] > 0
    assert "work lines" in problem["compared"]
    assert report["decontamination"]["ngram"]["n"] == 13 and report["decontamination"]["ngram"]["fields"]
    assert split_tasks("arithmetic", offline_pools(), 512, 120, seed=17) == (train, heldout, report)  # seeded


def test_the_report_keeps_recipe_keys_and_the_indices_and_hashes():
    pools = offline_pools()
    train, heldout, report = split_tasks("arithmetic", pools, 512, 120, seed=17)
    for key in ("task", "train_pool", "test_pool", "train_chosen", "decontamination_dropped", "train_kept", "train",
                "heldout"):
        assert key in report
    assert report["task_key"] == "question+gold" and report["test_pool_sha256"] == data.pool_sha256(pools["test"])
    assert report["heldout"] == [[t["index"], data.task_key(t)] for t in heldout]
    assert report["train"] == [[t["index"], data.task_key(t)] for t in train]
    # the key covers the gold answer: the same question with another gold is another task; the old key did not
    task = heldout[0]
    other = dict(task, answer=task["answer"].rsplit("####", 1)[0] + "#### 999")
    assert data.task_key(other) != data.task_key(task)
    assert data.task_key(other, "question") == data.task_key(task, "question") == data.task_hash(task["question"])


def test_gsm8k_split_is_the_one_recipe_made_before():
    """GSM8K runs keep their tasks: choose_split then the 13-gram check, and a report that says no problem check."""
    pool = [{"question": f"Question number {i} about {i % 7} trains and some more words here.", "answer": "#### 1"}
            for i in range(300)]
    train, heldout, report = split_tasks("gsm8k", {"train": pool, "test": pool[::-1]}, 100, 20, seed=3)
    old_train, old_heldout = choose_split(pool, pool[::-1], 100, 20, 3)
    old_train, dropped = decontaminate(old_train, old_heldout)
    assert (train, heldout, report["decontamination_dropped"]) == (old_train, old_heldout, dropped)
    assert report["decontamination"]["problem"] is None


def test_too_few_distinct_problems_is_refused_with_the_fix():
    with pytest.raises(DataError, match="72 distinct problems.*--n_heldout"):  # difficulty 0: 8 x 9 sums in all
        split_tasks("arithmetic", offline_pools(difficulty=0, n_heldout=120), 512, 120, seed=17)
    with pytest.raises(DataError, match="--n_train"):
        split_tasks("arithmetic", offline_pools(difficulty=0, n_heldout=60), 512, 60, seed=17)


def test_gsm8k_without_a_hub_names_the_offline_flag(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="--gsm8k_path DIR") as info:
        data.load_gsm8k(None)
    assert "\n" not in str(info.value)


def test_the_pinned_gsm8k_test_split_is_the_original_releases():
    """data.GSM8K_TEST_SHA256 pins GSM8K's test split by the hash of its (question, answer) pairs as load_gsm8k reads
    them (pool_sha256: the same for the release's JSONL and the Hub's rows), GSM8K_TEST_FILE_SHA256 by its file's bytes.
    The committed runs that record their test pool's hash recorded this one; where a copy of the release lies beside
    the repository (../shared/data/gsm8k), both hashes are its, and check.py's pin names it as the release."""
    import hashlib
    import json
    from pathlib import Path

    from gmts_recipe.verify.file import pinned_gsm8k

    root = Path(__file__).resolve().parent.parent
    texts = [p.read_text() for p in root.glob("results/*/*/results.json")]
    recorded = {json.loads(text)["data"]["test_pool_sha256"] for text in texts if '"test_pool_sha256"' in text
                and json.loads(text)["data"]["task"] == "gsm8k"}
    assert recorded == {data.GSM8K_TEST_SHA256}
    release = root.parent / "shared" / "data" / "gsm8k"
    if not (release / "test.jsonl").is_file():
        pytest.skip(f"no copy of GSM8K's release at {release}")
    assert hashlib.sha256((release / "test.jsonl").read_bytes()).hexdigest() == data.GSM8K_TEST_FILE_SHA256
    test = data.load_gsm8k(str(release))["test"]
    assert len(test) == data.GSM8K_TEST_SIZE and data.pool_sha256(test) == data.GSM8K_TEST_SHA256
    assert pinned_gsm8k(test, release) == f"GSM8K at {release}, the original release's test split by its hash"
