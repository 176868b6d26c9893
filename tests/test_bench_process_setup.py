"""The benchmarks that build the recipe's trainer in their own process set up that process as recipe.py does: with
--deterministic_kernels true they turn PyTorch's deterministic algorithms on before any of the run's CUDA work (an
earlier bench/step.py silently measured the option off)."""

import pytest

import recipe
from bench_scripts import load_bench


class Stop(Exception):
    pass


@pytest.fixture
def setup_calls(monkeypatch):
    """The settings recipe.deterministic_kernels received, and the run stopped at the next stage (loading the data)."""
    calls = []
    monkeypatch.setattr(recipe, "deterministic_kernels", lambda train: calls.append(train.deterministic_kernels))

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(recipe, "load_tasks", stop)
    return calls


@pytest.mark.parametrize("flag", ["true", "false"])
def test_step_bench_applies_the_option_before_loading_anything(tmp_path, setup_calls, flag):
    step = load_bench("step", "bench_step")
    with pytest.raises(Stop):
        step.run(["--small", "--steps", "2", "--out", str(tmp_path), "--deterministic_kernels", flag])
    assert setup_calls == [flag == "true"]


def test_side_by_side_applies_the_option_before_loading_anything(tmp_path, setup_calls):
    sbs = load_bench("side_by_side")
    argv = sbs.recipe_argv(["--config", "configs/smoke.yaml", "--deterministic_kernels", "true"],
                           sbs.path_options("ours", 0.1), tmp_path, 2)
    with pytest.raises(Stop):
        sbs.measure_steps("ours", argv)
    assert setup_calls == [True]
