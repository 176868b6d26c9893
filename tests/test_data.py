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
