"""The experiment's arms: which token-selection rules (selection.RULES) the recipe trains, how results files, tables
and figures name and colour them, which pairs are compared, which arms are controls and which comparison is the
primary test. The rules' math is selection.py's; this is the experiment's table around it.

Adding an arm is one `register_arm` call (after `selection.register_rule` for a new rule): `--arm` takes it, the
results files hold it, the summaries compare it as `compared_with` says, tables and figures name it. The recipe's
per-arm learning-rate fields (`<arm>_learning_rate`) are made from this table (`learning_rate_fields`). No torch:
check.py and sweep.py read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from selection import RULES

DEFAULT_RATIO = 0.2  # GMTSConfig.selection_ratio's default, the papers' 20%: what a label says when no ratio is known
PRIMARY = ("gmts", "ets")  # the paper's test, first among the comparisons everywhere: GMTS - ETS


@dataclass(frozen=True)
class Arm:
    """One arm of the experiment.

    Attributes:
        name: the recipe's spelling (--arm, and the key of the arm in a results file).
        rule: the selection rule it trains with (GMTSConfig.token_selection, a name of selection.RULES).
        short: the name tables and figures print ("GMTS").
        ranks_by: what the label says the rule ranks by ("|entropy x omega|"); None for a rule that keeps every token.
        color: the arm's one color in every figure (a matplotlib color).
        compared_with: the arms this one is compared with, as "this - other" (results files, sweeps, tables).
        control: a control arm: trained only when named (not by --arm all), a table column only where it ran.
    """

    name: str
    rule: str
    short: str
    ranks_by: str | None
    color: str
    compared_with: tuple[str, ...] = ()
    control: bool = False

    def label(self, ratio: float = DEFAULT_RATIO) -> str:
        """'GMTS (top-20% by |entropy x omega|)', built from the ratio of kept tokens."""
        if self.ranks_by is None:
            return f"{self.short} (all tokens)"
        return f"{self.short} (top-{100 * float(ratio):g}% by {self.ranks_by})"


ARMS: dict[str, Arm] = {}  # name -> arm, in registration order (the order of tables and figures)
_pairs: list[tuple[str, str]] = []  # the comparisons, in the order their second arm was registered


def register_arm(arm: Arm) -> Arm:
    """Add an arm of a registered rule. An arm name, or a rule, taken by another arm is refused (the same arm again is
    a no-op)."""
    if arm.rule not in RULES:
        raise ValueError(f"arm {arm.name!r}: no rule {arm.rule!r} (register it first: selection.register_rule)")
    for other in ARMS.values():
        if other == arm:
            return arm
        if arm.name == other.name or arm.rule == other.rule:
            taken = repr(arm.name) if arm.name == other.name else f"rule {arm.rule!r}"
            raise ValueError(f"arm {arm.name!r}: {taken} is taken by arm {other.name!r}")
    ARMS[arm.name] = arm
    for a in ARMS.values():  # pairs waiting for this arm, and this arm's own
        for b in a.compared_with:
            if (a is arm and b in ARMS) or (a is not arm and b == arm.name):
                _pairs.append((a.name, b))
    return arm


def unregister_arm(name: str) -> None:
    """Remove an arm and its comparisons (for tests that register one)."""
    del ARMS[name]
    _pairs[:] = [p for p in _pairs if name not in p]


def arms() -> tuple[str, ...]:
    """Every arm's name, in registration order."""
    return tuple(ARMS)


def arm_named(name: str) -> Arm:
    """The arm of that name; KeyError naming the known ones otherwise."""
    if name not in ARMS:
        raise KeyError(f"unknown arm {name!r}: use one of {', '.join(ARMS)}")
    return ARMS[name]


def short_name(arm: str) -> str:
    """The arm's short name for tables and messages ('GMTS' for 'gmts'); an arm of no entry (base), as written."""
    return ARMS[arm].short if arm in ARMS else arm


def comparisons() -> tuple[tuple[str, str], ...]:
    """(a, b) pairs, delta = a - b, from every arm's `compared_with`: the primary test first, then in the order the
    later of the two arms was registered."""
    return tuple(sorted(_pairs, key=lambda p: p != PRIMARY))


def control_arms() -> tuple[str, ...]:
    return tuple(a.name for a in ARMS.values() if a.control)


def control_comparisons() -> tuple[tuple[str, str], ...]:
    """The comparisons that involve a control arm."""
    control = set(control_arms())
    return tuple(p for p in comparisons() if control & set(p))


def learning_rate_fields() -> dict[str, str]:
    """Arm -> the recipe's field that sets its own learning rate (unset: learning_rate): the one mapping from which
    RecipeArgs' per-arm fields and their exclusion from the config hash are made."""
    return {name: f"{name}_learning_rate" for name in ARMS}


register_arm(Arm("grpo", "all", "GRPO", None, "tab:green"))
register_arm(Arm("ets", "entropy", "ETS", "entropy", "tab:blue", compared_with=("grpo",)))
register_arm(Arm("gmts", "gmts", "GMTS", "|entropy x omega|", "tab:orange", compared_with=("ets", "grpo", "ets_nz")))
register_arm(Arm("ets_nz", "entropy_nonzero_omega", "ETS-nz", "entropy, omega != 0 first", "tab:purple",
                 compared_with=("ets",), control=True))
