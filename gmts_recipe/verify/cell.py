"""A cell verified (CHECKS): which cell a results file is (`recorded`), the cells of one grid as one experiment
(`check_together`), each evaluation held by one cell only, whole or nearly, across every sweep of a results folder
(`Evaluation`, `check_apart`, `text_prints`), and a cell merged in from another machine (`paired_base`)."""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from gmts_recipe.recipe_config import EVAL_FIELDS, LOADED_MODEL_FIELDS, SAMPLING_FIELDS
from gmts_recipe.records import (config_hash, current_evaluations, numbers_close, read_samples, recorded_reward_version,
                                 samples_path, task_scores)
from gmts_recipe.stats import no_learning_signal
from gmts_recipe.sweep.grid import Cell, SweepError


# What this level refuses (check.py --checks, docs/results.md's list of checks).
CHECKS = (
    "a file that is not its folder's cell (seed, variant settings, each arm's learning rate: `recorded`; an arm its "
    "blocks do not run there: `arms_problem`); cells of a "
    "grid that are not one experiment (`check_together`) or disagree on the base evaluation (`one_base`)",
    "an evaluation held by two cells across every sweep of the results folder (`check_apart`), by its samples file's "
    "SHA-256 or its texts, whole or 10% of them (two runs share under 0.2%); an arm holding its base's texts where it "
    "learned something and other arms of its sweep hold their own",
    "a cell merged in (sweep.py --merge) with another config hash, held-out tasks or base than the local cell or the "
    "shared cache (`paired_base`, `same_base`), or a base-evals record not named by its settings' hash "
    "(`base_record`)",
)


@dataclass(frozen=True)
class Recorded:
    """What a cell's results file says it is, beside its folder name: its config record (the training seed, the
    variant's settings and every other field) and a fingerprint of each arm's data (evaluation records and training
    log), which two runs never share."""

    cell: Cell
    config: dict
    arms: dict[str, str]
    evaluations: list[Evaluation] = field(default_factory=list)


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of one cell, as the index of a results folder's sweeps holds it (check_apart): where it is
    (sweep, cell, field), whose it is (`owner`: the cell, for an arm; for a base evaluation, which every cell of a
    base's evaluation hash shares, that hash and its seed), the owners it may share texts with (`kin`: its cell's own
    base evaluations, which an arm matches where training changed nothing, as in a tiny run) and what it holds
    (`keys`: its samples file's SHA-256, and its texts task by task, evaluation_keys; `prints`: each of its texts'
    fingerprint, text_prints, where its samples file is at hand); for an arm, whether it had no learning signal
    (`untrained`) and whether it holds its own cell's base texts (`as_base`, whole or nearly; check_apart says when it
    may); for a base evaluation, what drew its texts (`basis`, base_basis): base evaluations of one basis holding the
    same texts are one evaluation, whatever their hashes (check_apart)."""

    sweep: str
    cell: str
    where: str
    owner: tuple
    kin: frozenset
    keys: tuple[str, ...]
    untrained: bool = False  # an arm whose train log shows no learning signal (stats.no_learning_signal)
    as_base: bool = False  # an arm holding a key of its own cell's base evaluations, or NEAR_COPY_SHARE of its texts
    basis: str = ""  # a base evaluation's base_basis; "" for an arm
    prints: Any = field(default=None, compare=False, repr=False)  # text_prints; None without its samples file

    def name(self) -> str:
        return f"{self.sweep}/{self.cell} {self.where}"


TEXTS = "the same texts task by task (each task's lengths and score)"
# What decides the texts a base evaluation draws besides its seed and k, as a cell's config record holds it (the fields
# away from their defaults): the task, the model loaded, the evaluation's settings (its seed list aside: each
# evaluation has its seed) and the sampler's. Not the held-out tasks' key version, the device or the speed options,
# which move the evaluation hash (or, for the options, how a file records them) but not the texts that one seed draws.
BASIS_FIELDS = ("task", *LOADED_MODEL_FIELDS, *(f for f in EVAL_FIELDS if f != "base_eval_seeds"), *SAMPLING_FIELDS)


def base_basis(config: dict, ev: dict) -> str:
    """What drew a base evaluation's texts, as its cell records it: its sampling seed, its k and the config record's
    BASIS_FIELDS. Two base evaluations of one basis that hold the same texts are the base model evaluated twice (the
    same model writes the same texts with the same seed), not a copy; another model's, or another seed's, are not."""
    return json.dumps([ev.get("seed"), ev.get("k"), {k: config.get(k) for k in BASIS_FIELDS}], sort_keys=True)


def evaluation_keys(ev: dict) -> tuple[str, ...]:
    """What identifies an evaluation's samples, within one process: the SHA-256 of its samples file (the same bytes),
    and its texts task by task as its records hold them (each task's index, its samples' lengths in any order and
    their scores' sum: a hash of them, TEXTS), which the same texts give however their lines are ordered,
    edited around the texts or compressed again (verify.file.check_samples holds the lengths and scores to the texts).
    Records without lengths (the earliest files) give no second key: scores alone coincide on small sets."""
    keys = []
    ref = ev.get("samples")
    if isinstance(ref, dict) and isinstance(ref.get("sha256"), str):
        keys.append(f"its samples file, SHA-256 {ref['sha256'][:12]}...")
    records = ev.get("records") or []
    if records and all(isinstance(r.get("lengths"), list) for r in records):
        texts = sorted((str(r["task"]), *sorted(r["lengths"]), sum(r["scores"])) for r in records)
        keys.append(f"{TEXTS} {hash(tuple(texts)) & 0xFFFFFFFFFFFF:012x}")  # a process's own hash: one process's index
    return tuple(keys)


# Two evaluations sharing this share of their texts or more (text_prints, of the smaller) are one evaluation copied,
# not two runs: independent arms of the committed sweeps (results/confirm, coupled, confirm-extension: 264 arm
# evaluations, every pair) share at most 0.17% (9 of ~5,200 texts), base evaluations of two sampling seeds 0.4%; a copy
# with a few characters edited shares ~100%.
NEAR_COPY_SHARE = 0.10
_WHITESPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.split() splits an ASCII text on
_PRINTS: dict[str, np.ndarray] = {}  # by samples file SHA-256: its bytes decide its prints


def text_prints(ev: dict, folder: Path | None, where: str) -> np.ndarray | None:
    """Each text of an evaluation's samples file (the file in `folder`, its recorded SHA-256 checked) as a fingerprint:
    the first 8 bytes of BLAKE2b over its task's index in the test pool and its text without whitespace, so that a
    text copied with a newline or spaces added is the same text, wherever it sits among its task's samples and
    whichever version keys its task (the key's version moved between sweeps; the index did not). Sorted and distinct;
    None without a samples file (or without `folder`: keys alone compare then). A file's prints are kept for the
    process by its SHA-256: a sweep's check and the sweeps beside it read each file once."""
    ref = ev.get("samples")
    if folder is None or not isinstance(ref, dict) or not isinstance(ref.get("sha256"), str):
        return None
    sha = ref["sha256"]
    if sha not in _PRINTS:
        out = []
        for line in read_samples(samples_path(folder, ev, where), sha, where):
            task = f"{line['task']}\0".encode()
            for text in line["samples"]:
                bare = text.encode().translate(None, _WHITESPACE) if text.isascii() else "".join(text.split()).encode()
                out.append(hashlib.blake2b(task + bare, digest_size=8).digest())
        _PRINTS[sha] = np.unique(np.frombuffer(b"".join(out), dtype=np.uint64))
    return _PRINTS[sha]


def evaluations_of(sweep: str, cell: str, results: dict, memo: dict | None = None,
                   folder: Path | None = None) -> list[Evaluation]:
    """The evaluations of one cell's results file (records.current_record's form) for the index (check_apart).
    `memo`: the keys of base evaluations already seen, by owner and samples file (a sweep's cells share them);
    `folder`: the results file's, where its samples files are read for their texts (text_prints)."""
    memo = {} if memo is None else memo
    base = results.get("base") or {}
    shared = str(base.get("eval_hash") or f"{sweep} base")  # without a hash: the sweep's cells share one base
    bases = [(f"base.evals[{i}]", ev, ("base", shared, ev.get("seed"))) for i, ev in enumerate(base.get("evals", []))]
    own = ("cell", sweep, cell)
    config = results.get("config") or {}
    kin = frozenset({own, *(owner for *_, owner in bases)})
    entries = (results.get("arms") or {}).items()
    arms = [(f"arms.{arm}.eval", entry["eval"], own) for arm, entry in entries]
    untrained = {f"arms.{arm}.eval" for arm, entry in entries if no_learning_signal(entry.get("train_log") or [])}
    out = []
    for where, ev, owner in [*bases, *arms]:
        sha = (ev.get("samples") or {}).get("sha256") if isinstance(ev.get("samples"), dict) else None
        if owner[0] == "base" and sha is not None:  # the same file's records: the sweep's checks tie them to it
            if (owner, sha) not in memo:
                memo[(owner, sha)] = evaluation_keys(ev)
            keys = memo[(owner, sha)]
        else:
            keys = evaluation_keys(ev)
        prints = text_prints(ev, folder, f"{sweep}/{cell} {where}")
        as_base = owner == own and any(set(keys) & set(b.keys) or _share(prints, b.prints) >= NEAR_COPY_SHARE
                                       for b in out if b.owner != own)
        basis = base_basis(config, ev) if owner[0] == "base" else ""
        out.append(Evaluation(sweep, cell, where, owner, kin, keys, where in untrained, as_base, basis, prints))
    return out


def _share(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """The share of the fewer of two evaluations' texts (text_prints) that both hold; 0 where either has none."""
    if a is None or b is None or not len(a) or not len(b):
        return 0.0
    return len(np.intersect1d(a, b, assume_unique=True)) / min(len(a), len(b))


def check_apart(evaluations: Iterable[Evaluation]) -> None:
    """No evaluation appears twice: a samples file, by its bytes or by its texts (evaluation_keys), belongs to one
    evaluation of one cell (a base evaluation to its evaluation hash and seed, shared by the cells that evaluated that
    base) across every sweep given, and so does most of it (`near_copies`: a copy with a newline added to one text is
    another file, with other texts task by task). A GMTS evaluation copied into another cell (which keeps its own
    training log), or a cell copied under another seed into another sweep, is refused naming both; which evaluations
    may share texts: `_sharing`.

    A base evaluation is the base model's, not a cell's: base evaluations under two evaluation hashes (the held-out
    tasks keyed anew, another device, another sweep) that hold the same texts, by their samples file's bytes or task
    by task (every task's index, its samples' lengths and their scores: TEXTS), are one evaluation where their
    `basis` agrees (base_basis: the same sampling seed and k, and the same task, model and evaluation settings in
    their cells' config records), and the arms that may match either (their cells' own bases) may match both. Only
    base evaluations are joined so: an arm holding a base's texts other than its own cell's, or another cell's arm's,
    is refused; so is a base evaluation holding the texts of another seed's, or of a base evaluation recorded with
    another model or other settings (a forger filing another model's base as this one's)."""
    evaluations = list(evaluations)
    same = _one_base(evaluations)
    may = _sharing(evaluations, same)
    index: dict[str, dict[tuple, Evaluation]] = {}
    for ev in evaluations:
        for key in ev.keys:
            holders = index.setdefault(key, {})
            for other in holders.values():
                if not may(ev, other):
                    raise SweepError(f"{ev.name()} holds the evaluation of {other.name()} ({key}): an evaluation "
                                     f"belongs to one cell")
            holders.setdefault(_holder(ev, same), ev)
    near_copies(evaluations, same, may)


def _sharing(evaluations: list[Evaluation], same):
    """may(a, b): whether two evaluations may hold the same texts. One cell's arms may (rules that trained alike in a
    tiny run); so may one base (its evaluation hash and seed, or the same model evaluated again: _one_base), and base
    evaluations of one basis (a card's rounding may move a few texts). An arm may hold its own cell's base texts
    (`as_base`) where its train log shows no learning signal (stats.no_learning_signal: from one adapter init it
    samples as the base does), or where every arm of its sweep holds its own base's (a tiny sweep whose few steps moved
    no sample, though a step had a signal; a sweep of real runs, whose trained arms share almost none of their base's
    texts, has arms that do not: the base's texts filed as a trained arm are refused there), and two such arms, or two
    arms with no learning signal, each other's. Nothing else."""
    arms = [ev for ev in evaluations if ev.owner[0] != "base"]
    still = {ev.sweep for ev in arms} - {ev.sweep for ev in arms if not ev.as_base}  # no arm moved off its base

    def base_like(arm: Evaluation) -> bool:
        return arm.as_base and (arm.untrained or arm.sweep in still)

    def may(a: Evaluation, b: Evaluation) -> bool:
        if same(a.owner) == same(b.owner):
            return True
        if a.owner[0] == "base" and b.owner[0] == "base":
            return a.basis == b.basis
        if a.owner[0] == "base" or b.owner[0] == "base":
            arm, base = (b, a) if a.owner[0] == "base" else (a, b)
            return base_like(arm) and same(base.owner) in {same(owner) for owner in arm.kin}
        return (a.untrained and b.untrained) or (base_like(a) and base_like(b))

    return may


def near_copies(evaluations: list[Evaluation], same, may) -> None:
    """No two evaluations that may not share texts (`may`, _sharing) share NEAR_COPY_SHARE of them or more
    (text_prints): the keys tell exact copies only, and a copy with one character edited shares every other text.
    Every print held twice is found by one sort, so the cost grows with the texts, not with the pairs of evaluations."""
    held: dict[tuple, Evaluation] = {}
    for ev in evaluations:
        if ev.prints is not None and len(ev.prints):
            held.setdefault((_holder(ev, same), id(ev.prints)), ev)  # a base shared by a sweep's cells: once
    items = list(held.values())
    if len(items) < 2:
        return
    prints = np.concatenate([ev.prints for ev in items])
    who = np.repeat(np.arange(len(items)), [len(ev.prints) for ev in items])
    order = np.argsort(prints, kind="stable")
    prints, who = prints[order], who[order]
    _, first, count = np.unique(prints, return_index=True, return_counts=True)
    pairs: Counter = Counter()
    for start, n in zip(first[count > 1].tolist(), count[count > 1].tolist()):
        pairs.update(combinations(sorted(set(who[start:start + n].tolist())), 2))
    for (i, j), shared in sorted(pairs.items(), key=lambda pair: (-pair[0][1], pair[0][0])):  # the later one named
        ev, other = items[j], items[i]
        fewer = min(len(ev.prints), len(other.prints))
        if shared >= NEAR_COPY_SHARE * fewer and not may(ev, other):
            raise SweepError(f"{ev.name()} holds {shared} of the {fewer} texts of {other.name()} (task by task, "
                             f"whitespace aside; two runs share under {NEAR_COPY_SHARE:.0%}): an evaluation belongs "
                             f"to one cell")


def _holder(ev: Evaluation, same) -> tuple:
    """Whose an evaluation is, for the index: a base evaluation its base's (however many cells list it), an arm its
    cell's arm."""
    return (same(ev.owner),) if ev.owner[0] == "base" else (ev.owner, ev.where)


def _one_base(evaluations: list[Evaluation]):
    """The owner each owner stands for in check_apart: the owners of base evaluations of one basis that hold a key in
    common (the same model evaluated again with the same seed, under another evaluation hash) stand for the first of
    them; every other owner for itself."""
    first: dict[tuple, tuple] = {}  # owner -> the owner it stands for (a union-find's parents)
    seen: dict[tuple[str, str], tuple] = {}  # (key, basis) -> the first base owner holding it

    def find(owner: tuple) -> tuple:
        while first.get(owner, owner) != owner:
            owner = first[owner]
        return owner

    for ev in evaluations:
        if not ev.basis:
            continue
        for key in ev.keys:
            other = seen.setdefault((key, ev.basis), ev.owner)
            a, b = find(other), find(ev.owner)
            if a != b:
                first[b] = a
    return find


def recorded(cell: Cell, results: dict, sweep: str = "", memo: dict | None = None,
             folder: Path | None = None) -> Recorded:
    """The file's own account of the cell, checked against `cell` (SweepError naming the cell and the mismatch): the
    training seed in its config, each arm's learning rate, each setting of the cell's variant. A folder name says
    none of these (the learning rate is not even in the config hash that recipe.py checks on --resume). `results` as
    verify.file.load or verify.file.read_results give it (of any format, as this one holds it), so every cell pools
    alike; `folder`: the file's, where its evaluations' texts are read (evaluations_of)."""
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
    return Recorded(cell, config, fingerprints, evaluations_of(sweep, cell.name, results, memo, folder))


def arms_problem(cell: Cell, arms: Iterable[str], planned: list[str], whole: bool = False) -> str | None:
    """Why a cell's arms are not its blocks' (None: they are): an arm no block runs there would enter the pooled rows
    and the plan's comparisons unplanned; where the plan's seeds run whole (`whole`), a cell holds every planned arm."""
    arms = list(arms)
    stray = [arm for arm in arms if arm not in planned]
    if stray:
        return (f"holds arm {stray[0]}, which the plan does not run in {cell.name} (its blocks run "
                f"{', '.join(planned)} there): a cell's arms are its blocks' arms")
    if whole and set(arms) != set(planned):
        return f"ran {', '.join(arms) or 'no arm'} of {', '.join(planned)}: a seed of this plan runs whole"
    return None


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
    have), and no two cells hold the same arm data (a results file copied into another cell's folder) or the same
    evaluation (check_apart: an evaluation copied into another cell that keeps its own training log)."""
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
    check_apart(ev for c in cells for ev in c.evaluations)


def same_base(tree: dict[Cell, dict], brought: set[Cell]) -> None:
    """A cell paired with a base brought in (another evaluation hash) holds, task by task, the base evaluations every
    other cell of the tree holds (their per-task scores, as sweep.summary's rule compares them): a base evaluated
    again with the same texts (the held-out tasks keyed anew, another device) joins the sweep; another base does not,
    and is refused here rather than by the next --summarize."""
    if not brought:
        return
    scores = {cell: json.dumps([sorted(task_scores(ev, f"{cell.name} base").items()) for ev in r["base"]["evals"]])
              for cell, r in tree.items()}
    for cell in sorted(brought, key=lambda c: c.name):
        other = next((c for c in tree if scores[c] != scores[cell]), None)
        if other is not None:
            raise SweepError(f"{cell.name}: its base (evaluation hash {tree[cell]['base']['eval_hash'][:12]}, brought "
                             f"in) differs task by task from the base of {other.name} (hash "
                             f"{str(tree[other]['base'].get('eval_hash'))[:12]}): the cells of a sweep share one base "
                             f"evaluation; nothing merged")


def paired_base(new: dict, old: dict | None, key: str, caches: dict[str, dict],
                 offered: dict[str, tuple[Path, dict]] | None, root: Path, incoming: Path,
                 refuse) -> tuple[list, str, tuple[Path, dict] | None]:
    """sweep.merge's base of a cell: the incoming cell held against the local one (config, held-out tasks, eval hash)
    and paired with the shared cache of its hash, local or offered by the incoming tree; returns the base evaluations
    kept, where they come from, and the offered record brought in (None: none)."""
    if old is not None and old["config_hash"] != new["config_hash"]:
        raise refuse(f"config_hash {new['config_hash'][:12]} differs from the local cell's {old['config_hash'][:12]}")
    if old is not None and old.get("data", {}).get("heldout") != new.get("data", {}).get("heldout"):
        raise refuse("held-out tasks differ from the local cell's")
    if old is not None and old["base"]["eval_hash"] != key:
        raise refuse(f"base eval hash {key[:12]} differs from the local cell's {old['base']['eval_hash'][:12]}")
    brought = (offered or {}).get(key) if key not in caches else None
    if caches and key not in caches and brought is None:
        raise refuse(f"base eval hash {key[:12]} is not the local shared cache's "
                     f"({', '.join(k[:12] for k in sorted(caches))} in {root / 'base-evals'}), nor one "
                     f"{incoming / 'base-evals'} holds")
    cache, shared = (brought[1], "incoming shared cache") if brought is not None else (caches.get(key), "shared cache")
    if cache is not None and cache["eval_config"]["heldout"] != new.get("data", {}).get("heldout"):
        raise refuse(f"held-out tasks differ from the {'incoming' if brought else 'local'} shared cache's")
    kept, source = ((cache["evals"], shared) if cache is not None else
                    (old["base"]["evals"], "local cell") if old is not None else (new["base"]["evals"], "incoming"))
    if old is not None and old["base"]["evals"] != kept:
        raise refuse(f"the local cell's base differs from the {'incoming' if brought else 'local'} shared cache; "
                     f"merging would rewrite a local result")
    return kept, source, brought


def read_base_record(path: Path) -> dict:
    """A base-evals record (recipe.py's base-evals/<eval hash>.json) with its evaluations as records.current_record
    holds a file's: comparable with the base of a loaded cell."""
    cache = json.loads(path.read_text(encoding="utf-8"))
    return {**cache, "evals": current_evaluations(cache["evals"], path.parent.parent / "cell")}


def base_record(path: Path, local: dict | None, local_path: Path) -> dict | None:
    """An incoming base-evals record (recipe.py's base-evals/<eval hash>.json) verified as any base evaluation's
    record, with its evaluations as records.current_record holds a file's (comparable with the base of a loaded
    cell): its name and its eval_hash are the hash of the eval_config it holds, with its held-out tasks. None where
    this tree holds that hash already (`local`, at `local_path`) with the same settings; one SweepError line where it
    holds other settings under that hash (one hash, two records). Read by `read_base_record`."""
    where = f"--merge: {path}"
    try:
        cache = read_base_record(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # ResultsError is a ValueError
        raise SweepError(f"{where}: not a base-evals record ({e}); nothing merged") from None
    if local is not None:
        named = ("eval_hash", "eval_config")  # what names a record: its hash and the settings hashed
        if any(cache.get(k) != local.get(k) for k in named):
            raise SweepError(f"{where} records other evaluation settings than {local_path} under the same evaluation "
                             f"hash (one hash, two records); nothing merged")
        return None
    if not isinstance(cache.get("eval_config"), dict) or "heldout" not in cache["eval_config"]:
        raise SweepError(f"{where}: records no eval_config with its held-out tasks; nothing merged")
    if not (cache.get("eval_hash") == path.stem == config_hash(cache["eval_config"])):
        raise SweepError(f"{where}: its evaluation hash is not the hash of the eval_config it records (recipe.py "
                         f"names the record by it); nothing merged")
    return cache


def one_base(base_hashes: set[str]) -> None:
    """The cells of a sweep share one base evaluation (each cell's first base evaluation's per-task scores, as JSON):
    the arms of different cells are compared through it."""
    if len(base_hashes) > 1:
        raise SweepError("cells disagree on the base evaluation: they must share held-out tasks and base samples")
