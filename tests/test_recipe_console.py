"""What a run prints: a line as each arm starts, one short line per step, the full metrics in the arm's log file,
and no known warning a user cannot act on."""

import json
import re
import warnings

import recipe
from gmts_recipe import recipe_config, run_setup  # recipe_config: where check_hub asks hub_reachable
from test_recipe import run, tiny_config  # noqa: F401 - the tiny model's config (a module fixture)

STEP_LINE = re.compile(r"^\[recipe\] (\w+) step (\d+)/(\d+): reward \d\.\d\d, kept (?:\d\.\d{3}|-), \d+\.\d s", re.M)


def test_one_line_per_step_and_the_metrics_in_the_log_file(tiny_config, tmp_path, capsys):  # noqa: F811
    assert run("--arm", "ets,gmts", "--config", tiny_config, "--results_dir", tmp_path) == 0
    captured = capsys.readouterr()
    out = captured.out
    log_file = tmp_path / "tiny" / "arm-ets" / "train_log.jsonl"
    assert f"[recipe] training ets (1 of 2): 2 steps; every step's metrics: {log_file}" in out
    assert re.search(r"^\[recipe\] training gmts \(2 of 2\): 2 steps, ~\d+ min with its evaluation", out, re.M)
    steps = STEP_LINE.findall(out)
    assert [(arm, step) for arm, step, _ in steps] == [("ets", "1"), ("ets", "2"), ("gmts", "1"), ("gmts", "2")]
    # transformers' printer (the whole metrics dict every step) and its progress bar are gone from the console
    assert "'loss'" not in out + captured.err and "selection/overlap" not in out + captured.err
    rows = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    assert all("selection/overlap" in r for r in rows if "loss" in r)  # the full metrics: in the file


def test_known_warnings_are_ignored_and_no_other(recwarn):
    """transformers >= 5.2x warns that PreTrainedModel.is_gradient_checkpointing is deprecated each time TRL reads it
    (every generation step): that exact warning is ignored; another FutureWarning of the same module still shows."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        recipe.quiet_known_warnings()
        for message in ("`is_gradient_checkpointing` is deprecated and will be removed in v6. Use "
                        "`is_activation_checkpointing` instead.", "`something_else` is deprecated"):
            warnings.warn_explicit(message, FutureWarning, "modeling_utils.py", 3312,
                                   module="transformers.modeling_utils")
    assert [str(w.message) for w in seen] == ["`something_else` is deprecated"]


def test_the_known_tokenizer_log_line_is_dropped_and_no_other(caplog):
    """transformers 5.x logs once that it ignores clean_up_tokenization_spaces for a BPE tokenizer: that line is
    dropped, another line of the same logger still shows."""
    import logging

    recipe.quiet_known_warnings()
    recipe.quiet_known_warnings()  # twice: one filter
    logger = logging.getLogger("transformers.tokenization_utils_tokenizers")
    assert logger.filters.count(run_setup.drop_known_log_lines) == 1
    with caplog.at_level(logging.WARNING, logger=logger.name):
        logger.warning("Ignoring clean_up_tokenization_spaces=True for BPE tokenizer Qwen2Tokenizer. The ...")
        logger.warning("Something else about the tokenizer")
    assert [r.getMessage() for r in caplog.records] == ["Something else about the tokenizer"]


def test_default_config_without_the_hub_is_one_line_naming_the_config_for_this_machine(monkeypatch, capsys):
    """`python recipe.py --arm gmts` (configs/paper.yaml: GSM8K and Qwen from the hub) on a CPU machine that cannot
    reach the hub: one line at once, no retries, naming the Quick start's config with the same arm."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(recipe_config, "hub_reachable", lambda timeout=3.0: False)
    assert recipe.main(["--arm", "gmts"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # not even the CPU note: the refusal is the whole answer
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "configs/paper.yaml needs the Hugging Face Hub (GSM8K, Qwen/Qwen2.5-1.5B-Instruct)" in lines[0]
    assert "python recipe.py --arm gmts --config configs/quickstart.yaml" in lines[0]


def test_offline_configs_never_ask_for_the_hub(monkeypatch):
    def unreachable(timeout=3.0):
        raise AssertionError("an offline config asked whether the hub is reachable")

    monkeypatch.setattr(recipe_config, "hub_reachable", unreachable)
    recipe.parse(["--config", "configs/quickstart.yaml"], hub=True)
    recipe.parse(["--config", "configs/qwen.yaml", "--gsm8k_path", "somewhere"], hub=True)


def test_hub_reachable_asks_the_endpoint(monkeypatch):
    import socket

    from huggingface_hub import constants

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    for key in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{port}")
    assert recipe.hub_reachable(timeout=2.0)
    listener.close()
    assert not recipe.hub_reachable(timeout=2.0)  # nothing listens there now
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the user chose the local cache: not refused here
    assert recipe.hub_reachable(timeout=2.0)
