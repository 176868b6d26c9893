"""Forgeries as a forger makes them, for the test files that try them: a results file or a sweep.json edited, sealed
again with the recipe's own digest (computed here, as anyone can: records.digest), and given to check.py, which must
refuse it in one line. The seal is written by hand (`sealed`, the tests' one forging seal), not by verify.file.seal,
which refuses what check.py would refuse: a forgery is sealed whatever the recipe's writers would refuse to write."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import check
from gmts_recipe.records import SCHEMA, current_record, digest, evaluations, summarize, write_json, write_results
from gmts_recipe.stats import pass_at_1


def sealed(results: dict, schema: int = SCHEMA) -> dict:
    """`results` sealed as a file of format `schema`: every summary number recomputed, then the digest over the file
    as that format stores it (what verify.file.seal adds, for format 2; format 1 keeps its per-task records)."""
    summary = summarize(results)
    results["schema"], results["summary"] = schema, summary
    results["digest"] = digest(results)
    return results


def reseal(path: Path, edit) -> dict:
    """The forger's re-seal of a results file: read as it is stored (a format-2 file in the form verify.file.load gives
    it, the per-task records rebuilt from its samples), `edit`ed, each evaluation's pass@1 made its records' (a careful
    forger keeps them consistent), sealed and written back in the file's own format. Returns what was written."""
    path = Path(path)
    raw = json.loads(path.read_text())
    schema = raw.get("schema", 1)
    results = raw if schema == 1 else copy.deepcopy(current_record(raw, path.parent))
    edit(results)
    for _, ev in evaluations(results):
        if isinstance(ev.get("records"), list):
            ev["pass@1"] = pass_at_1(ev["records"])
    write_results(path, sealed(results, schema))
    return results


def reseal_summary(path: Path, summary: dict) -> None:
    """A sweep.json re-sealed as `summary` holds it (its numbers as they are): its digest computed anew."""
    summary = {k: v for k, v in summary.items() if k != "digest"}
    summary["digest"] = digest(summary)
    write_json(path, summary)


def refused(path: Path, capsys, *parts: str, flags: tuple[str, ...] = ()) -> str:
    """check.py refuses `path` (exit 2) in one line that says every one of `parts`; returns that line."""
    assert check.main([str(path), *flags]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(p in err for p in parts), err
    return err


def passes(path: Path, capsys, *flags: str) -> str:
    """check.py accepts `path` (exit 0); returns what it printed."""
    assert check.main([str(path), *flags]) == 0, capsys.readouterr().err
    return capsys.readouterr().out
