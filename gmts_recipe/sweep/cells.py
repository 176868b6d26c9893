"""Which cell a results file is: what the file records (seed, variant settings, learning rates) against the cell
its folder names, and the cells of one grid checked as one experiment."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from gmts_recipe.records import numbers_close, recorded_reward_version
from gmts_recipe.sweep.grid import Cell, SweepError


@dataclass(frozen=True)
class Recorded:
    """What a cell's results file says it is, beside its folder name: its config record (the training seed, the
    variant's settings and every other field) and a fingerprint of each arm's data (evaluation records and training
    log), which two runs never share."""

    cell: Cell
    config: dict
    arms: dict[str, str]


def recorded(cell: Cell, results: dict) -> Recorded:
    """The file's own account of the cell, checked against `cell` (SweepError naming the cell and the mismatch): the
    training seed in its config, each arm's learning rate, each setting of the cell's variant. A folder name says
    none of these (the learning rate is not even in the config hash that recipe.py checks on --resume). `results` as
    records.load or records.read_results give it (of any format, as this one holds it), so every cell pools alike."""
    config = results.get("config") or {}
    where = f"{cell.name}: results.json"
    if config.get("seed") != cell.seed:
        raise SweepError(f"{where} records training seed {config.get('seed')!r}, the cell's is {cell.seed}")
    arms = results.get("arms", {})
    options = {arm: (entry.get("generation_options") or {}) for arm, entry in arms.items()}
    for key, value in cell.overrides:
        if key == "reward_version" and key not in config:  # each arm records the reward it trained with
            for arm, entry in arms.items():
                if str(recorded_reward_version(entry)) != str(value):
                    raise SweepError(f"{where}: arm {arm} trained with reward version "
                                     f"{recorded_reward_version(entry)!r}, variant {cell.variant} sets {value!r}")
            continue
        if key in config:
            if not _same_setting(config[key], value):
                raise SweepError(f"{where} records {key} = {config[key]!r}, variant {cell.variant} sets {value!r}")
            continue
        # a speed lever is left out of the config record (it changes rounding only): each arm records it instead
        if not arms:
            continue  # no arm has run yet: nothing records the lever, nothing contradicts the variant
        if any(key not in o for o in options.values()):
            raise SweepError(f"{where} records no {key} (variant {cell.variant} sets {value!r})")
        for arm, o in options.items():
            if not _same_setting(o[key], value):
                raise SweepError(f"{where}: arm {arm} ran with {key} = {o[key]!r}, variant {cell.variant} sets "
                                 f"{value!r}")
    for arm, entry in arms.items():
        lr = entry.get("learning_rate")
        if not isinstance(lr, (int, float)) or not math.isclose(lr, cell.learning_rate, rel_tol=1e-9):
            raise SweepError(f"{where}: arm {arm} trained at learning rate {lr!r}, the cell's is "
                             f"{cell.learning_rate:g}")
    fingerprints = {arm: hashlib.sha256(json.dumps([entry["eval"]["records"], entry.get("train_log", [])],
                                                   sort_keys=True).encode()).hexdigest()
                    for arm, entry in results.get("arms", {}).items()}
    return Recorded(cell, config, fingerprints)


class _Absent:
    def __repr__(self) -> str:
        return "nothing"


_ABSENT = _Absent()


def _same_setting(recorded_value: Any, given: Any) -> bool:
    """A variant's value as recipe.py records it: the grid's YAML value, or its text as the command line parsed it
    (Cell.recipe_args passes strings as they are: '1e-4' in YAML is a string that the recipe reads as a number)."""
    if numbers_close(recorded_value, json.loads(json.dumps(given))):
        return True
    if isinstance(given, str):
        try:
            return numbers_close(recorded_value,
                                 json.loads(given.lower() if given.lower() in ("true", "false") else given))
        except ValueError:
            return str(recorded_value) == given
    return False


def check_together(cells: list[Recorded], where: str = "") -> None:
    """The cells of one grid as one experiment: their configs agree on every field but the training seed and the
    variants' settings (a cell whose variant leaves a setting alone has the value the others that leave it alone
    have), and no two cells hold the same arm data (a results file copied into another cell's folder)."""
    keys = {key for c in cells for key in c.config} | {key for c in cells for key, _ in c.cell.overrides}
    shared: dict[str, tuple[Recorded, Any]] = {}
    for c in cells:
        own = {key for key, _ in c.cell.overrides}
        for key in sorted(keys - own - {"seed"}):
            value = c.config.get(key, _ABSENT)
            first, first_value = shared.setdefault(key, (c, value))
            if not numbers_close(first_value, value):
                raise SweepError(f"{where}{c.cell.name}: results.json records {key} = {value!r} where "
                                 f"{first.cell.name} records {first_value!r} (cells differ only in the training "
                                 f"seed and their variant's settings)")
    seen: dict[str, tuple[Cell, str]] = {}
    for c in cells:
        for arm, fingerprint in c.arms.items():
            other = seen.setdefault(fingerprint, (c.cell, arm))
            if other[0] != c.cell:
                raise SweepError(f"{where}{c.cell.name}: arm {arm} holds the same evaluation records and training "
                                 f"log as arm {other[1]} of {other[0].name} (a copied results file)")
