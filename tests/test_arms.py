"""The experiment's arms table (gmts_recipe/arms.py): properties that hold however many arms are registered (each test
runs with the table as shipped and with a fifth arm added), the paper's arms and the order committed results were
written in, and the recipe fields made from it."""

from __future__ import annotations

import dataclasses

import pytest

from gmts_recipe import arms as table
from gmts_recipe.arms import (ARMS, PRIMARY, Arm, arm_named, arms, comparisons, control_arms, control_comparisons,
                              learning_rate_fields, register_arm, short_name, unregister_arm)
from selection import RULES, Rule, register_rule, unregister_rule


@pytest.fixture(params=[False, True], ids=["table", "table-with-a-fifth-arm"])
def fifth(request):
    """The table as shipped, and with a fifth rule and its arm (compared with GMTS and ETS) registered."""
    if not request.param:
        yield None
        return
    register_rule(Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True))
    register_arm(Arm("omega_only", "abs_omega", "|omega|", "|omega|", "tab:brown", compared_with=("gmts", "ets")))
    try:
        yield "omega_only"
    finally:
        unregister_arm("omega_only")
        unregister_rule("abs_omega")


def test_each_arm_trains_a_registered_rule_of_its_own(fifth):
    assert arms() == tuple(ARMS) and all(name == a.name for name, a in ARMS.items())
    rules = [a.rule for a in ARMS.values()]
    assert all(r in RULES for r in rules) and len(set(rules)) == len(rules)
    assert (fifth in arms()) == (fifth is not None)
    with pytest.raises(KeyError, match="unknown arm 'etz': use one of " + ", ".join(arms())):
        arm_named("etz")


def test_names_colours_and_labels_tell_the_arms_apart(fifth):
    for field in ("short", "color"):
        values = [getattr(a, field) for a in ARMS.values()]
        assert len(set(values)) == len(values), f"two arms share a {field}"
    assert len({a.label() for a in ARMS.values()}) == len(ARMS)
    for a in ARMS.values():
        assert short_name(a.name) == a.short and a.label().startswith(a.short + " (")
        assert (a.ranks_by is None) == (RULES[a.rule].score is None)  # a label says what a scored rule ranks by
    assert short_name("base") == "base"  # not an arm: as written


def test_the_comparisons_pair_registered_arms_primary_first(fifth):
    pairs = comparisons()
    assert pairs[0] == PRIMARY and len(set(pairs)) == len(pairs)
    for a, b in pairs:
        assert a != b and a in ARMS and b in ARMS and b in ARMS[a].compared_with
    declared = {(a.name, b) for a in ARMS.values() for b in a.compared_with if b in ARMS}
    assert set(pairs) == declared
    assert set(control_comparisons()) == {p for p in pairs if set(p) & set(control_arms())}
    assert all(ARMS[a].control for a in control_arms())


def test_the_order_committed_results_and_sweeps_were_written_in_stays_first(fifth):
    """A new arm's comparisons come after the paper's (the order of a results file's summary and a sweep's table)."""
    assert comparisons()[:5] == (("gmts", "ets"), ("ets", "grpo"), ("gmts", "grpo"), ("gmts", "ets_nz"),
                                 ("ets_nz", "ets"))
    assert arms()[:4] == ("grpo", "ets", "gmts", "ets_nz") and "ets_nz" in control_arms()
    if fifth:
        assert comparisons()[5:] == (("omega_only", "gmts"), ("omega_only", "ets"))


def test_labels_are_built_from_the_ratio_of_kept_tokens():
    assert arm_named("gmts").label() == "GMTS (top-20% by |entropy x omega|)"
    assert arm_named("ets").label(0.125) == "ETS (top-12.5% by entropy)"
    assert arm_named("grpo").label(0.5) == "GRPO (all tokens)"


def test_an_arm_needs_its_rule_and_a_name_and_rule_of_its_own():
    with pytest.raises(ValueError, match="no rule 'nope'"):
        register_arm(Arm("x", "nope", "X", "x", "k"))
    register_rule(Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True))
    try:
        with pytest.raises(ValueError, match="arm 'gmts': 'gmts' is taken by arm 'gmts'"):
            register_arm(Arm("gmts", "abs_omega", "X", "x", "k"))
    finally:
        unregister_rule("abs_omega")
    with pytest.raises(ValueError, match="rule 'entropy' is taken by arm 'ets'"):
        register_arm(Arm("ets2", "entropy", "ETS2", "entropy", "k"))
    assert register_arm(ARMS["gmts"]) is ARMS["gmts"]  # the same arm again: nothing changes
    assert len(table._pairs) == len(set(table._pairs))


def test_every_arm_has_one_learning_rate_field_left_out_of_the_hash():
    """The per-arm learning rates are one mapping (arms.learning_rate_fields): RecipeArgs has each field and the config
    hash leaves each out, with no list kept by hand."""
    from gmts_recipe.recipe_config import NOT_HASHED, RecipeArgs

    fields = {f.name: f for f in dataclasses.fields(RecipeArgs)}
    assert set(learning_rate_fields()) == set(arms())
    for arm, name in learning_rate_fields().items():
        assert name in fields and fields[name].default is None and name in NOT_HASHED
        assert "lr (unset: learning_rate)" in fields[name].metadata["help"]
    assert {n for n in fields if n.endswith("_learning_rate")} == set(learning_rate_fields().values())
