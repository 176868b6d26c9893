"""The benchmark that builds the recipe's trainer in its own process (bench/step.py) sets up that process as recipe.py
does: with --deterministic_kernels true it turns PyTorch's deterministic algorithms on before any of the run's CUDA
work (an earlier bench/step.py silently measured the option off)."""

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

