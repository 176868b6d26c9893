"""The cards a sequential plan's cells may run on (its `cards:`), by the exact name a card reports: the card a worker's
cells run on, asked before any cell starts (sweep.py refuses another in one line), recorded in each failure, and
held against the plan by check.py (verify.plan.card_problem) and in each failure record (failures.check); and the
cards a cell's file records (`recorded_cards`)."""

from __future__ import annotations

import os
import subprocess
import sys

from gmts_recipe.sweep import SweepError

CARDS = {"NVIDIA H100 80GB HBM3": "H100", "NVIDIA H200": "H200"}  # the name torch reports: the card a plan names


def card_allowed(name: str, allowed: list[str]) -> bool:
    """Whether a card, by the exact name torch reports, is one a plan's `cards` name: that name itself, or the card
    type CARDS maps it to. No substring: an "NVIDIA GH200 480GB" is no H200, an A100 beside an H100 no H100."""
    return name in allowed or CARDS.get(name) in allowed


def card_name(gpu: str | None) -> str:
    """The card a worker's cells run on, by the name they record (torch.cuda.get_device_name; "CPU" without CUDA),
    asked of a Python started as they are (CUDA_VISIBLE_DEVICES: the worker's id, whatever the ids of this process)."""
    env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": gpu} if gpu is not None else {})}
    probe = "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU')"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "unknown"


def refuse_cards(allowed: list[str], gpus: list[str]) -> None:
    """A sequential plan's cells start only on a card the plan names: one SweepError line naming the first other card
    of the workers (`gpus`: the --gpus ids, none for this machine's one device), before any cell loads a model."""
    for gpu in dict.fromkeys(gpus or [None]):
        name = card_name(gpu)
        if not card_allowed(name, allowed):
            raise SweepError(f"{'this machine' if gpu is None else f'GPU {gpu}'} is {name!r}, not a card the "
                             f"sequential plan names ({', '.join(allowed)}): its cells run on those only")


def recorded_cards(results: dict) -> list[str]:
    """The GPU (or "CPU") each arm of a cell's file recorded it ran on, each name once: a plan that allows several
    cards records every cell's."""
    names = []
    for entry in results.get("arms", {}).values():
        p = entry.get("provenance") if isinstance(entry.get("provenance"), dict) else results.get("versions") or {}
        name = str(p.get("gpu") or (results.get("versions") or {}).get("gpu") or "CPU")
        if name not in names:
            names.append(name)
    return names
