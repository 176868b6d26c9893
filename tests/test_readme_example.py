"""The README's GMTSTrainer example runs as written, on a tiny model: it cannot rot."""

from pathlib import Path

from tiny import save_tiny_model

README = Path(__file__).resolve().parent.parent / "README.md"
# What the test changes in the example, each a string the example must still contain: the model (a tiny local one),
# the sizes (two steps of short answers) and the device (the example is written for a GPU; the test runs on a CPU).
SUBSTITUTIONS = {'"Qwen/Qwen2.5-1.5B-Instruct"': None, "max_completion_length=256": "max_completion_length=8",
                 "max_steps=40": "max_steps=2", 'report_to="none",': 'report_to="none", use_cpu=True, bf16=False,'}


def example() -> str:
    """The python block of the README's section on using GMTSTrainer in one's own script."""
    section = README.read_text().split("## Use GMTSTrainer in your own TRL script", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_example_trains(tmp_path, monkeypatch):
    code = example()
    model = save_tiny_model(tmp_path / "tiny")
    for old, new in SUBSTITUTIONS.items():
        assert old in code, f"the README example no longer contains {old!r}: update this test with it"
        code = code.replace(old, repr(model) if new is None else new)
    monkeypatch.chdir(tmp_path)  # output_dir lands here
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - the README's own example
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2
    assert trainer.args.token_selection == "gmts"
    logged = {k for row in trainer.state.log_history for k in row}
    assert {"selection/kept_fraction", "selection/overlap", "reward"} <= logged
