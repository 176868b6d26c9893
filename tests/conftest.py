"""Shared across test files: the committed sweep files' verification, done once per test run."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_VERIFIED: dict[tuple, tuple] = {}
_RESCORED: dict[tuple, dict] = {}  # the spot check of a committed sweep, by file and options


def spot_check(summary: dict) -> dict:
    """A sweep summary with its cells cut to the first and the last: whose samples the unit suite re-scores."""
    cells = summary.get("cells", [])
    return {**summary, "cells": cells[:1] + cells[1:][-1:]}


def pytest_configure(config) -> None:
    """The recipe keeps converted models and the field list under GMTS_CACHE (by default in the home folder): a test
    run keeps its own, so no test reads what an earlier run left there, and the home folder is left alone."""
    config.gmts_cache = os.environ["GMTS_CACHE"] = tempfile.mkdtemp(prefix="gmts-cache-")


def pytest_unconfigure(config) -> None:
    shutil.rmtree(config.gmts_cache, ignore_errors=True)


@pytest.fixture
def committed_sweeps_verified_once(monkeypatch):
    """check.py on a committed sweep.json re-verifies every cell and re-scores every stored sample (10 s and more
    each); tests/test_check.py (the plain tables) and tests/test_readme.py (the markdown blocks) both check the same
    files. Here the verification (gmts_recipe.verify.sweep's verify and sweep_samples) of a committed file runs once,
    keyed by the bytes of the sweep.json and of every cell file it names, and each test renders its own tables from a copy. check.py
    on the sequential extension verifies the test it continues (look 0) through the same two functions: one
    verification serves both sweeps' checks.

    The samples are re-scored for a spot check only, the first and the last cell of each committed sweep (the newest
    cells sit last): re-scoring every sample grows with the grid (16 s for 13 confirm cells, ~2 min at 100) and is
    what tests/test_check.py's slow test does, on every committed sweep, without this fixture."""
    from gmts_recipe.verify import sweep as verify_sweep

    verify, samples = verify_sweep.verify, verify_sweep.sweep_samples

    def key(path) -> tuple | None:
        p = Path(path).resolve()
        if ROOT not in p.parents:
            return None  # a test's own file: verified as usual
        summary = json.loads(p.read_text(encoding="utf-8"))
        names = [p.parent / cell["path"] for cell in summary.get("cells", [])]
        return (str(p), *(hashlib.sha256(f.read_bytes()).hexdigest() for f in [p, *names]))

    def verified(path, loaded, *read):
        k = key(path)
        if k is None:
            return verify(path, loaded, *read), None
        if k not in _VERIFIED:
            files: dict = {}
            summary = verify(path, files, *read)
            _VERIFIED[k] = (copy.deepcopy(summary), spot_check(summary), files)
        if loaded is not None:  # the cells' results as verified: read-only, shared
            loaded.update(_VERIFIED[k][2])
        return copy.deepcopy(_VERIFIED[k][0]), k

    def cached_verify(path, loaded=None, *read):
        return verified(path, loaded, *read)[0]

    def cached_samples(path, summary, loaded, *options):
        k = key(path)
        if k not in _VERIFIED:
            return samples(path, summary, loaded, *options)
        if (k, options) not in _RESCORED:  # the spot check, once per file and options (--allow-unsampled, ...)
            _RESCORED[k, options] = samples(Path(path), _VERIFIED[k][1], _VERIFIED[k][2], *options)
        return copy.deepcopy(_RESCORED[k, options])

    monkeypatch.setattr(verify_sweep, "verify", cached_verify)
    monkeypatch.setattr(verify_sweep, "sweep_samples", cached_samples)
