"""curves.png renders for any subset of arms, and says what it shows without the README."""

import copy

import pytest
from test_check import fake_results

import check
from gmts_recipe import plots


def with_arms(arms: tuple[str, ...]) -> dict:
    """A sealed results dict holding exactly these trained arms (grpo borrows ETS's records)."""
    r = fake_results(shift=0.3)
    r["config"].update(task="arithmetic", difficulty=0)
    trained = {"ets": r["arms"]["ets"], "gmts": r["arms"]["gmts"], "grpo": copy.deepcopy(r["arms"]["ets"])}
    for i, arm in enumerate(trained):
        trained[arm]["train_log"] = [{"step": s, "reward": 0.2 + 0.1 * s, "grad_norm": 0.3, "entropy": 0.5,
                                      "selection/kept_fraction": 0.2001 + 0.0004 * (s % 2) + i * 1e-5}
                                     for s in range(1, 6)]
    r["arms"] = {a: trained[a] for a in arms}
    return check.seal(r)


@pytest.mark.parametrize("arms", [("gmts",), ("ets", "gmts"), ("grpo", "ets", "gmts")])
def test_renders_with_one_two_three_arms(tmp_path, arms):
    results = with_arms(arms)
    path = plots.plot_run(results, tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = plots.figure(results)
    title = fig._suptitle.get_text()
    assert "tiny" in title and "arithmetic" in title and "'unit'" in title  # model, task, config name
    ticks = " ".join(t.get_text() for t in fig.axes[0].get_xticklabels())
    assert "base" in ticks
    for arm in arms:
        if arm in results["summary"]["arms"]:  # an arm the statistics know: its pass@1 and verdict are drawn
            a = results["summary"]["arms"][arm]
            assert f"{arm.upper()}\n{100 * a['pass@1']:.1f}%" in ticks and a["verdict"] in ticks
        legend = fig.axes[1].get_legend()
        assert any(plots.ARM_NAMES[arm] == t.get_text() for t in legend.get_texts())
    assert all(ax.get_ylabel() for ax in fig.axes)  # every panel says what its y axis is


def test_fractions_use_a_fixed_unit_axis():
    """A kept fraction between 0.2001 and 0.2005 must not fill the panel as if it were signal."""
    fig = plots.figure(with_arms(("ets", "gmts")))
    kept = next(ax for ax in fig.axes if ax.get_title() == "share of tokens trained on")
    assert kept.get_ylim() == (0.0, 1.0)
    cosine = next(ax for ax in fig.axes if ax.get_title() == "agreement of successive updates")
    assert cosine.get_ylim() == (-1.0, 1.0)  # a cosine: its whole range
    # a constant grad norm of 0.3 is not drawn as a range
    assert all(ax.get_ylim()[0] == 0 for ax in fig.axes if ax is not cosine)


def test_no_summary_yet_still_renders(tmp_path):
    results = with_arms(("ets",))
    del results["summary"], results["base"]
    assert plots.plot_run(results, tmp_path / "c.png").is_file()
