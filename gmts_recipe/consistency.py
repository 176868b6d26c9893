"""What a results file says about itself, checked against itself: `check_self`, which records.load runs on every file
(after records.current_record has converted it to this format). The digest shows only that the summaries match the
records; these checks refuse a file whose parts disagree, each in one line naming the field:

- data.task is a task this recipe knows (data.TASKS): nothing is left "without a dataset to compare";
- the base evaluations are exactly the config's base_eval_seeds (the recipe's default where the config record leaves
  it out), in order, each seed once;
- an arm's entry is that arm's: the rule it recorded (token_selection) is its key's rule, its samples file is named
  for it (samples-<arm>-seed<seed>-<sha>.jsonl.xz beside results.json), every arm a `merges` entry names is in the file;
- each evaluation keeps its own samples file (no two share a path, no two base evaluations a SHA-256), and a base
  evaluation's file is named for its seed and, in a recipe run, for the base's evaluation hash;
- no two base evaluations hold the same records (every task's scores and lengths): samples drawn with different seeds
  never do, and a copied evaluation would zero the noise floor;
- the training curves, as far as they can be derived: each arm's train_log steps increase and stay within the
  config's max_steps, no logged learning rate exceeds the arm's, and a rule without a score (plain GRPO) keeps every
  token (selection/kept_fraction 1). The logged values themselves are read as recorded (check.py says so).

Standard library only (the rule registry and the recipe's defaults are read, no torch).
"""

from __future__ import annotations

import math
import os
from pathlib import PurePosixPath
from typing import Any

from gmts_recipe.records import ResultsError, evaluation_fields

CURVES_NOTE = ("Training curves (each arm's train_log): read as recorded; check.py recomputes their summaries (grad "
               "norm, overlap, kept fraction) and checks their steps, learning rates and each rule's kept fraction, "
               "but cannot re-derive the logged values.")


def check_self(results: dict) -> None:
    """Every check of this module's docstring, on a file as records.current_record holds it; ResultsError naming the
    field of the first disagreement."""
    from selection import arms

    unknown = sorted(set(results.get("arms") or {}) - set(arms()))
    if unknown:
        raise ResultsError(f"unknown arm {unknown[0]!r} (known: {', '.join(arms())})")
    _check_task(results)
    _check_base_seeds(results)
    _check_arms(results)
    _check_samples_files(results)
    _check_base_records_differ(results)
    for arm, entry in (results.get("arms") or {}).items():
        _check_train_log(results, arm, entry)


def recipe_default(name: str) -> Any:
    """A recipe field's default (recipe_config.RecipeArgs): what a config record that leaves the field out ran with."""
    import dataclasses

    from gmts_recipe.recipe_config import RecipeArgs  # imports records: read when used

    field = next(f for f in dataclasses.fields(RecipeArgs) if f.name == name)
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def _check_task(results: dict) -> None:
    from gmts_recipe.data import TASKS

    task = (results.get("data") or {}).get("task")
    if task not in TASKS:
        raise ResultsError(f"data.task is {task!r}, a task this recipe does not know (it knows "
                           f"{', '.join(TASKS)}): nothing ties the file's tasks to a dataset")


def _check_base_seeds(results: dict) -> None:
    seeds = [ev.get("seed") for ev in results["base"]["evals"]]
    planned = results["config"].get("base_eval_seeds", recipe_default("base_eval_seeds"))
    if seeds != planned:
        raise ResultsError(f"base.evals: seeds {seeds}, the config's base_eval_seeds are {planned} (each base "
                           f"evaluation is one of them, in order)")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ResultsError(f"base.evals: seed {repeated[0]} evaluated twice (config.base_eval_seeds repeats it): the "
                           f"noise floor needs different seeds")


def _check_arms(results: dict) -> None:
    """Each arm's entry is its key's: its rule, its samples file's name; `merges` names only arms of the file."""
    from selection import rule_of_arm

    arms = results.get("arms") or {}
    if results.get("kind") == "evaluation" and arms:
        raise ResultsError(f"arms: an evaluation-only file (kind: evaluation) holds trained arms: {', '.join(arms)}")
    for arm, entry in arms.items():
        rule = rule_of_arm(arm)
        if entry.get("token_selection") != rule.name:
            raise ResultsError(f"arms.{arm}.token_selection is {entry.get('token_selection')!r}: arm {arm}'s rule is "
                               f"{rule.name!r} (an arm's entry filed under another arm?)")
        ev = entry["eval"]
        if "samples" in ev:
            name = f"samples-{arm}-seed{ev['seed']}-{str(ev['samples'].get('sha256'))[:12]}.jsonl.xz"
            if ev["samples"].get("path") != name:
                raise ResultsError(f"arms.{arm}.eval.samples.path is {ev['samples'].get('path')!r}: arm {arm}'s "
                                   f"samples file is {name}, beside results.json")
    for i, merge in enumerate(results.get("merges") or []):
        strangers = [a for a in merge.get("arms", []) if a not in arms]
        if strangers:
            raise ResultsError(f"merges[{i}].arms names {strangers[0]!r}, an arm the file does not hold")


def _check_samples_files(results: dict) -> None:
    """Each evaluation its own samples file (by path; base evaluations by SHA-256 too); a base evaluation's named for
    its seed (and the base's evaluation hash, in a recipe run)."""
    seen: dict[str, str] = {}
    eval_hash = str(results["base"].get("eval_hash") or "")
    for where, ev in evaluation_fields(results):
        ref = ev.get("samples")
        if not isinstance(ref, dict):
            continue
        path, sha = os.path.normpath(str(ref.get("path"))), str(ref.get("sha256"))
        # the same bytes under two names: never for base evaluations (samples of different seeds); two arms, or an
        # arm and the base's first evaluation (the same seed), write the same texts where training changed nothing
        for key in (f"path {path}", *([f"SHA-256 {sha[:12]}..."] if where.startswith("base.") else [])):
            if key in seen:
                raise ResultsError(f"{where}.samples: the samples file of {seen[key]} ({key}): each evaluation keeps "
                                   f"its own")
            seen[key] = where
        name = PurePosixPath(str(ref.get("path"))).name
        if where.startswith("base."):
            ending = f"-seed{ev.get('seed')}-{sha[:12]}.jsonl.xz"
            start = eval_hash[:16] + "-" if results.get("kind") != "evaluation" and eval_hash else ""
            if not (name.endswith(ending) and name.startswith(start)):
                raise ResultsError(f"{where}.samples.path is {ref.get('path')!r}: a base evaluation's samples file is "
                                   f"named {start or '<name>-'}seed{ev.get('seed')}-<sha>.jsonl.xz")


def _check_base_records_differ(results: dict) -> None:
    evals = results["base"]["evals"]
    seen: dict[tuple, int] = {}
    for i, ev in enumerate(evals):
        records = ev["records"]
        if not records or any(r.get("lengths") is None for r in records):
            continue  # scores alone can coincide on a small set; lengths of sampled texts do not
        key = tuple(sorted((str(r["task"]), str(r["hash"]), tuple(r["scores"]), tuple(r["lengths"])) for r in records))
        if key in seen:
            raise ResultsError(f"base.evals[{i}].records are base.evals[{seen[key]}]'s, every task's scores and "
                               f"lengths: evaluations with different seeds never agree so (a copied evaluation "
                               f"zeroes the noise floor)")
        seen[key] = i


def _check_train_log(results: dict, arm: str, entry: dict) -> None:
    """What the training curves let one derive: steps increasing and within max_steps, no learning rate above the
    arm's, every token kept by a rule without a score."""
    from selection import rule_of_arm

    log = entry.get("train_log") or []
    steps = [row.get("step") for row in log]
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in steps) or steps != sorted(set(steps)):
        raise ResultsError(f"arms.{arm}.train_log: steps {steps[:6]}{'...' if len(steps) > 6 else ''} do not increase "
                           f"one row per step")
    max_steps = results["config"].get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0 and steps and steps[-1] > max_steps:
        raise ResultsError(f"arms.{arm}.train_log: step {steps[-1]} beyond the config's max_steps {max_steps}")
    lr = entry.get("learning_rate")
    for row in log:
        logged = row.get("learning_rate")
        if isinstance(lr, (int, float)) and isinstance(logged, (int, float)) and logged > lr * (1 + 1e-6):
            raise ResultsError(f"arms.{arm}.train_log: learning rate {logged:g} at step {row['step']}, above the "
                               f"arm's learning_rate {lr:g}")
    if rule_of_arm(arm).score is None:
        kept = [row["selection/kept_fraction"] for row in log if isinstance(row.get("selection/kept_fraction"), float)]
        if any(not math.isclose(k, 1.0) for k in kept):
            raise ResultsError(f"arms.{arm}.train_log: selection/kept_fraction {min(kept):g}, but arm {arm}'s rule "
                               f"keeps every token (an entry of a selecting arm filed under {arm}?)")
