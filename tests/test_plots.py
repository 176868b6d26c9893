"""curves.png renders for any subset of arms, and says what it shows without the README."""

import copy

import pytest
from forge import sealed
from test_check import fake_results

from gmts_recipe import plots


def with_arms(arms: tuple[str, ...]) -> dict:
    """A sealed results dict holding exactly these trained arms (grpo borrows ETS's records, so the file is sealed as a
    forger would: verify.file.seal refuses an entry filed under another arm)."""
    r = fake_results(shift=0.3)
    r["config"].update(task="arithmetic", difficulty=0)
    r["data"]["task"] = "arithmetic"  # what the run recorded; the title reads it first
    trained = {"ets": r["arms"]["ets"], "gmts": r["arms"]["gmts"], "grpo": copy.deepcopy(r["arms"]["ets"])}
    for i, arm in enumerate(trained):
        trained[arm]["train_log"] = [{"step": s, "reward": 0.2 + 0.1 * s, "grad_norm": 0.3, "entropy": 0.5,
                                      "selection/kept_fraction": 0.2001 + 0.0004 * (s % 2) + i * 1e-5}
                                     for s in range(1, 6)]
    r["arms"] = {a: trained[a] for a in arms}
    return sealed(r)


def _texts(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts)


@pytest.mark.parametrize("arms", [("gmts",), ("ets", "gmts"), ("grpo", "ets", "gmts")])
def test_renders_with_one_two_three_arms(tmp_path, arms):
    results = with_arms(arms)
    path = plots.plot_run(results, tmp_path / "curves.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "curves-selection.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # the internals, beside it
    fig = plots.figure(results)
    title = fig._suptitle.get_text()
    assert "tiny" in title and "arithmetic" in title and "'unit'" in title  # model, task, config name
    ticks = " ".join(t.get_text() for t in fig.axes[0].get_xticklabels())
    assert "base" in ticks
    for arm in arms:
        if arm in results["summary"]["arms"]:  # an arm the statistics know: its pass@1 on its bar, gain and verdict
            a = results["summary"]["arms"][arm]
            assert f"{100 * a['pass@1']:.1f}%" in _texts(fig.axes[0])
            assert f"{plots.short_name(arm)}\n{100 * a['vs_base']['delta']:+.1f} pts" in ticks and a["verdict"] in ticks
        legend = fig.legends[0]  # one legend for the figure, outside every panel
        assert any(plots.arm_name(arm, results) == t.get_text() for t in legend.get_texts())
    assert all(ax.get_ylabel() for ax in fig.axes)  # every panel says what its y axis is


def test_legends_hide_no_data():
    """No legend sits inside a panel, where it would cover curves: each figure has one, below its panels."""
    results = with_arms(("grpo", "ets", "gmts"))
    for fig in (plots.figure(results), plots.internals_figure(results)):
        assert all(ax.get_legend() is None for ax in fig.axes)
        assert len(fig.legends) == 1
        fig.canvas.draw()
        box = fig.legends[0].get_window_extent()
        assert all(box.y1 <= ax.get_window_extent().y0 for ax in fig.axes)  # entirely below every panel


def test_the_result_panel_stands_alone():
    """curves.png's first panel is the answer: the largest panel, titled as held-out pass@1 with the held-out set's
    size; the method's internals are the second figure's."""
    results = with_arms(("ets", "gmts"))
    fig = plots.figure(results)
    first = fig.axes[0]
    assert "held-out pass@1" in first.get_title() and "tasks x" in first.get_title()
    area = [ax.get_position().width * ax.get_position().height for ax in fig.axes]
    assert area[0] == max(area) and area[0] > 2 * sorted(area)[-2]
    internals = {ax.get_title() for ax in plots.internals_figure(results).axes}
    assert "share of tokens trained on" in internals
    assert not internals & {ax.get_title() for ax in fig.axes}


def test_fractions_use_a_fixed_unit_axis():
    """A kept fraction between 0.2001 and 0.2005 must not fill the panel as if it were signal."""
    fig = plots.internals_figure(with_arms(("ets", "gmts")))
    kept = next(ax for ax in fig.axes if ax.get_title() == "share of tokens trained on")
    low, high = kept.get_ylim()
    assert low <= 0 and high >= 1 and high - low < 1.1  # the whole unit range, a margin so 1.0 is off the frame
    cosine = next(ax for ax in fig.axes if ax.get_title() == "agreement of successive updates")
    low, high = cosine.get_ylim()
    assert low <= -1 and high >= 1 and high - low < 2.2  # a cosine: its whole range
    # a constant grad norm of 0.3 is not drawn as a range
    curves = plots.figure(with_arms(("ets", "gmts")))
    assert all(ax.get_ylim()[0] <= 0 for ax in [*curves.axes[1:], *fig.axes])


def test_no_summary_yet_still_renders(tmp_path):
    results = with_arms(("ets",))
    del results["summary"], results["base"]
    assert plots.plot_run(results, tmp_path / "c.png").is_file()


def test_sweep_figure_from_the_committed_sweep(tmp_path):
    """The README's figure: per-seed differences with their mean and t interval beside the paper's claimed range,
    and the training reward per step with a band, drawn from the committed sweep.json and its cells."""
    import json
    from pathlib import Path

    sweep = Path(__file__).resolve().parent.parent / "results" / "qwen" / "sweep.json"
    summary = json.loads(sweep.read_text())
    fig = plots.sweep_figure(summary, sweep.parent)
    deltas, pair, every = fig.axes[:3]
    labels = [t.get_text() for t in deltas.get_xticklabels()]
    assert labels[0].startswith("GMTS - ETS\n19 seeds") and "primary test" in labels[0]
    assert any("claimed gain" in t.get_text() and "+1.3 to +3.4" in t.get_text()
               for t in deltas.get_legend().get_texts())
    seeds, values = plots.seed_deltas(plots.setting_scores(summary), "gmts", "ets")
    dots = [line for line in deltas.get_lines() if len(line.get_ydata()) == len(seeds)]
    assert sorted(dots[0].get_ydata()) == pytest.approx(sorted(100 * v for v in values))
    assert {t.get_text().split(",")[0] for t in pair.get_legend().get_texts()} == {plots.arm_name("ets"),
                                                                                    plots.arm_name("gmts")}
    assert len(every.get_legend().get_texts()) == 4 and every.collections  # four arms, each with its band
    assert plots.main(["--sweep", str(sweep), "--out", str(tmp_path / "h.png")]) == 0
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
