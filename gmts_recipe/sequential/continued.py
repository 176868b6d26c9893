"""The test a sequential plan continues, its first look: that test as summarized (`continued_test`: complete, or
refused), the recipe every new seed runs (`continued_recipe`: its last planned seed's, read alone before any other
cell; `recipe_of`, `recipe_problem`) and what a new seed costs (`seed_minutes`). The caller summarizes the continued
test (sweep.summary.continued_summary) and passes it in: nothing here summarizes a grid."""

from __future__ import annotations

import statistics
from pathlib import Path

from gmts_recipe.records import evaluation_fields, load, numbers_close, recorded_reward_version
from gmts_recipe.speed_options import recorded_noise_version
from gmts_recipe.sweep.grid import Grid, SweepError, load_grid


# What a sequential plan's cells may run otherwise than the continued test's, beside their seed: how an arm executes,
# where the repository showed the numbers do not move (gradient checkpointing: the same gradients bit for bit,
# tests/test_trainer.py; results/LOG.md and bench/README.md "Runs that repeat"). tests/test_extension_recipe.py holds
# the extension's first cell, as sweep.py starts it, to seed 299's record with the same allowance.
SHOWN_NOT_TO_MOVE = frozenset({"gradient_checkpointing"})


def recipe_of(results: dict) -> dict:
    """What a cell ran beside its seed, as its file records it (records.current_record's form): its config record
    without the seed, each arm's execution options (generation_options, but SHOWN_NOT_TO_MOVE and the counter noise's
    key scheme, read apart), each arm's counter noise version (speed_options.recorded_noise_version), and the reward
    reading of every evaluation (its samples file's version) and every arm (the version it trained with)."""
    arms = results.get("arms") or {}
    rewards = {f"{where}.samples.reward": ev["samples"].get("reward", 1)
               for where, ev in evaluation_fields(results) if isinstance(ev.get("samples"), dict)}
    rewards.update({f"arms.{arm}.reward_version": recorded_reward_version(entry) for arm, entry in arms.items()})
    options = {arm: dict(entry.get("generation_options") or {}) for arm, entry in arms.items()}
    return {"config": {k: v for k, v in (results.get("config") or {}).items() if k != "seed"},
            "options": {arm: {k: v for k, v in o.items() if k not in SHOWN_NOT_TO_MOVE | {"counter_noise_version"}}
                        for arm, o in options.items()},
            "noise": {arm: recorded_noise_version(o) for arm, o in options.items()},
            "rewards": rewards}


def recipe_problem(new: dict, old: dict, variant: dict) -> str | None:
    """Why a sequential plan's cell (`new`, recipe_of) did not run the continued test's recipe (`old`: recipe_of its
    last planned seed's cell), None where it did: the same config record but for the seed, the same execution options
    for each arm but those SHOWN_NOT_TO_MOVE, the same counter noise scheme and one reward reading, the continued
    test's, for every evaluation and arm, which is also the one the plan's variant pins where it pins one
    (reward_version, counter_noise_version: a new seed scored by another reading, or drawing other noise, measures
    another delta). Each problem one clause naming the field."""
    def said(values: dict, k: str) -> str:
        return repr(values[k]) if k in values else "unset (the recipe's default)"

    config = [k for k in sorted(set(new["config"]) | set(old["config"]))
              if k not in new["config"] or k not in old["config"]
              or not numbers_close(new["config"][k], old["config"][k])]
    if config:
        k = config[0]
        return (f"config.{k} is {said(new['config'], k)}, the continued test's {said(old['config'], k)} (a sequential "
                f"plan's seeds run the continued test's recipe: only config.seed differs)")
    reference = next(iter(old["options"].values()), {})
    for arm, options in new["options"].items():
        theirs = old["options"].get(arm, reference)
        differ = sorted(k for k in set(options) | set(theirs) if k not in options or k not in theirs
                        or options[k] != theirs[k])
        if differ:
            k = differ[0]
            return (f"arms.{arm}.generation_options.{k} is {said(options, k)}, the continued test's {said(theirs, k)} "
                    f"(only {', '.join(sorted(SHOWN_NOT_TO_MOVE))} may differ, shown to move no number)")
    pins = (("counter_noise_version", "noise", "counter noise version"),
            ("reward_version", "rewards", "reward version"))
    for key, field_, words in pins:
        readings = set(old[field_].values())
        if len(readings) != 1:
            return f"the continued test's last seed records {len(readings)} {words}s ({sorted(map(str, readings))})"
        pinned = next(iter(readings))
        if key in variant and str(variant[key]) != str(pinned):
            return f"the plan's variant pins {key} {variant[key]!r}, the continued test ran {words} {pinned!r}"
        for where, value in new[field_].items():
            if str(value) != str(pinned):
                name = f"arms.{where}.generation_options.counter_noise_version" if field_ == "noise" else where
                return f"{name} is {value!r}, the continued test's {words} is {pinned!r} (pinned: one reading)"
    return None


def continued_test(summary: dict, grid: Grid) -> dict:
    """The primary test a sequential plan continues, from that test's summary as the caller computed it from its own
    cells under this grid's results_dir (sweep.summary.continued_summary, its cells' facts under "facts": the
    sensitivity comparison's old seeds): it must be complete, since its seeds are the first look."""
    primary = summary.get("primary")
    if primary is None or len(primary["seeds_done"]) != len(primary["seeds"]):
        raise _unfinished(grid, summary["name"])
    return {**primary, "facts": summary["facts"]}


def _unfinished(grid: Grid, name: str) -> SweepError:
    return SweepError(f"{grid.sequential['continues']}: its primary test is not complete under {grid.results_dir}/"
                      f"{name}; a sequential plan continues a finished test")


def continued_recipe(grid: Grid) -> dict:
    """recipe_of the cell of the continued test's last planned seed (its primary test's variant and learning rate),
    as that test's own check verifies the file (`load`): what every new seed of a sequential plan runs. Read alone,
    before the continued test's other cells, so that a cell of another recipe is refused first."""
    continued = load_grid(grid.path(grid.sequential["continues"]))
    spec = continued.primary or {}
    last = next((c for c in continued.cells() if spec and (c.variant, c.learning_rate, c.seed) ==
                 (spec["variant"], spec["learning_rate"], spec["seeds"][-1])), None)
    path = None if last is None else Path(grid.results_dir) / continued.name / last.name / "results.json"
    if path is None or not path.is_file():
        raise _unfinished(grid, continued.name)
    return recipe_of(load(path))


def seed_minutes(grid: Grid) -> float | None:
    """The median over the continued test's seeds of the GPU-minutes its cells' files record for the two compared arms
    (training and evaluation of each, without process start-up or the shared base evaluations): what a new seed of a
    sequential plan costs."""
    continued = load_grid(grid.path(grid.sequential["continues"]))
    arms = grid.sequential["comparison"].split(" - ")
    per_seed = []
    for cell in continued.cells():
        path = Path(grid.results_dir) / continued.name / cell.name / "results.json"
        if cell.seed in continued.primary["seeds"] and path.is_file():
            entries = load(path)["arms"]
            minutes = [entries.get(a, {}).get("gpu_minutes") for a in arms]
            if all(isinstance(m, (int, float)) for m in minutes):
                per_seed.append(sum(minutes))
    return statistics.median(per_seed) if per_seed else None
