"""A sequential plan's cells start only on a card the plan names, by the exact name the card reports (the name each
cell records): sweep.py asks a Python started as the cells are and refuses another card in one line, before any cell
process starts (the base evaluations' neither), where check.py would refuse such a seed only once it ran."""

import subprocess
from pathlib import Path

import pytest
import torch

import sweep
from gmts_recipe.sequential import cards
from gmts_recipe.sequential.cards import card_allowed
from test_sweep import sequential_trees


def test_a_card_is_named_by_its_exact_name_or_the_type_it_stands_for():
    assert card_allowed("NVIDIA H100 80GB HBM3", ["H100"]) and card_allowed("NVIDIA H200", ["H100", "H200"])
    assert card_allowed("CPU", ["CPU"]) and not card_allowed("CPU", ["H100", "H200"])
    for other in ("NVIDIA GH200 480GB", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB", "unknown"):
        assert not card_allowed(other, ["H100", "H200"]), other


def test_a_sequential_plans_cells_start_only_on_a_card_it_names(tmp_path, monkeypatch, capsys):
    path, root = sequential_trees(tmp_path), tmp_path / "results" / "more"
    asked = cards.card_name(None)  # a Python started as a cell is: this machine's card, by the name cells record
    assert asked == ("CPU" if not torch.cuda.is_available() else torch.cuda.get_device_name(0))
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("a cell process started"))
    monkeypatch.setattr(cards, "card_name", lambda gpu: "NVIDIA A100-SXM4-80GB")
    assert sweep.main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert err == ("sweep.py: this machine is 'NVIDIA A100-SXM4-80GB', not a card the sequential plan names "
                   "(H100, H200): its cells run on those only\n")
    assert not (root / "logs").exists()  # nothing ran, the base evaluations neither
    monkeypatch.setattr(cards, "card_name", lambda gpu: "NVIDIA GH200 480GB")  # no H200 by a substring
    assert sweep.main([str(path)]) == 2 and "'NVIDIA GH200 480GB', not a card" in capsys.readouterr().err
    calls = []
    monkeypatch.setattr(cards, "card_name", lambda gpu: "NVIDIA H200")
    monkeypatch.setattr(subprocess, "call", lambda command, **k: calls.append(command) or 0)
    monkeypatch.setattr(sweep, "write_summary", lambda grid, path: Path("sweep.json"))
    assert sweep.main([str(path)]) == 0 and len(calls) == 5  # the base evaluations, then the four cells
