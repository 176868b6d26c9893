"""A user's own rule, in a file outside the repository, loaded by `--rules` in every command: trained by recipe.py,
verified by check.py in a fresh process, planned by sweep.py (and passed on to its cells), read by eval.py and
update_readme.py; a bad --rules is one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import check
import eval as evaluation
import recipe
import sweep
import update_readme
from gmts_recipe import user_rules
from gmts_recipe.user_rules import load_rules, rules_arguments, take_rules
from gmts_recipe.arms import ARMS, unregister_arm
from selection import RULES, unregister_rule
from tiny import write_tiny_config

ROOT = Path(__file__).resolve().parent.parent
RULE_FILE = """
from gmts_recipe.arms import Arm, register_arm
from selection import Rule, register_rule

register_rule(Rule("abs_omega", lambda entropy, omega: omega.abs(), needs_omega=True))
register_arm(Arm("omega_only", "abs_omega", "|omega|", "|omega|", "tab:brown", compared_with=("gmts",)))
"""


@pytest.fixture
def rules_file(tmp_path_factory):
    """my_rules.py in a folder outside the repository; the rule it registers is removed again after the test."""
    path = tmp_path_factory.mktemp("lab") / "my_rules.py"
    path.write_text(RULE_FILE)
    before, arms_before, loaded = set(RULES), set(ARMS), dict(user_rules._loaded)
    yield path
    for name in set(ARMS) - arms_before:
        unregister_arm(name)
    for name in set(RULES) - before:
        unregister_rule(name)
    user_rules._loaded.clear()
    user_rules._loaded.update(loaded)


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny"))


def fresh_check(*argv) -> subprocess.CompletedProcess:
    """check.py as a command, in a new interpreter started outside the repository."""
    return subprocess.run([sys.executable, str(ROOT / "check.py"), *map(str, argv)], cwd=Path(argv[0]).parent,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a tiny training run and two check.py processes: about 15 s on 2 idle cores
def test_a_rule_from_a_file_outside_the_repository_trains_and_verifies_in_a_fresh_process(rules_file, tiny_config,
                                                                                          tmp_path):
    """recipe.py --rules FILE trains the rule's arm; check.py, a new process that never saw the rule, refuses the
    file without --rules (pointing to it) and verifies it with --rules."""
    assert "omega_only" not in RULES
    assert recipe.main(["--rules", str(rules_file), "--arm", "omega_only", "--config", str(tiny_config),
                        "--results_dir", str(tmp_path)]) == 0
    path = tmp_path / "tiny" / "results.json"
    results = json.loads(path.read_text())
    assert results["arms"]["omega_only"]["token_selection"] == "abs_omega"
    without = fresh_check(path)
    assert without.returncode == 2 and "unknown arm 'omega_only'" in without.stderr
    assert "load it with --rules FILE.py" in without.stderr and len(without.stderr.splitlines()) == 1
    verified = fresh_check(path, "--rules", rules_file)
    assert verified.returncode == 0, verified.stderr
    assert "|omega| (top-20% by |omega|)" in verified.stdout and "re-scored" in verified.stdout


def test_take_rules_loads_each_spec_once_and_leaves_the_rest_of_the_command_line(rules_file, tmp_path):
    other = tmp_path / "other_rules.py"
    other.write_text("from gmts_recipe.arms import Arm, register_arm\nfrom selection import Rule, register_rule\n"
                     "register_rule(Rule('half_entropy', lambda e, w: e / 2, needs_omega=False))\n"
                     "register_arm(Arm('half', 'half_entropy', 'Half', 'entropy / 2', 'tab:gray'))\n")
    argv = ["results.json", "--rules", str(rules_file), f"--rules={rules_file},{other}", "--markdown", "--",
            "--rules", "x.py"]
    assert take_rules(argv) == ["results.json", "--markdown", "--", "--rules", "x.py"]  # after --: another command's
    assert {"abs_omega", "half_entropy"} <= set(RULES)
    assert load_rules(str(rules_file)) is load_rules(str(rules_file))  # once: its rule is not registered twice
    assert rules_arguments(["g.yaml", "--rules", "my_rules.py"]) == ["--rules", str(Path("my_rules.py").resolve())]
    assert rules_arguments(["--rules=json", "--", "--rules", "x.py"]) == ["--rules", "json"]  # a module by its name
    assert take_rules(["--rules", "json"]) == []  # a module on the import path


def test_a_module_name_is_found_in_the_current_folder(rules_file, tmp_path, monkeypatch):
    """`python check.py --rules my_rules` from the folder that holds my_rules.py: a command's import path holds the
    command's folder, not the user's, so the current folder is tried last."""
    (tmp_path / "lab_rules_here.py").write_text(RULE_FILE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    assert "omega_only" not in ARMS
    assert take_rules(["--rules", "lab_rules_here"]) == [] and "abs_omega" in RULES
    assert sys.path[-1] == str(tmp_path)
    sys.modules.pop("lab_rules_here")


@pytest.mark.parametrize("main, name", [(check.main, "check.py"), (sweep.main, "sweep.py"),
                                        (update_readme.main, "update_readme.py"), (evaluation.main, "eval.py"),
                                        (recipe.main, "recipe.py")])
def test_every_command_refuses_a_bad_rules_file_in_one_line(main, name, tmp_path, capsys):
    broken = tmp_path / "broken_rules.py"
    broken.write_text("from selection import no_such_name\n")
    cases = [("missing_rules.py", "--rules missing_rules.py: no such file"),
             ("no_such_module_here", "--rules no_such_module_here: no such module on the import path"),
             (str(broken), f"--rules {broken}: importing it failed (ImportError: cannot import name 'no_such_name'")]
    for spec, said in cases:
        assert main(["--rules", spec, "anything"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"{name}: {said}") and len(err.splitlines()) == 1, err
    assert main(["--rules"]) == 2 and "--rules needs a module name or a .py file" in capsys.readouterr().err


def test_sweep_plans_a_users_arm_and_passes_the_rules_to_every_cell(rules_file, tiny_config, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"name: mine\nconfig: {tiny_config}\nresults_dir: {tmp_path / 'sweeps'}\n"
                    f"blocks:\n  - name: lr\n    arms: [gmts, omega_only]\n    learning_rates: [1.0e-3]\n"
                    f"    seeds: [1]\n")
    assert sweep.main([str(grid), "--commands"]) == 2  # the arm is unknown without the rules
    assert "unknown arm(s) omega_only" in capsys.readouterr().err
    assert sweep.main([str(grid), "--commands", "--rules", str(rules_file)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "recipe.py" in line]
    assert lines and all(f"--rules {rules_file}" in line for line in lines)


def test_eval_reads_a_config_that_names_a_users_arm(rules_file, tiny_config, tmp_path, monkeypatch, capsys):
    """A config file naming the user's arm (arm: omega_only) is refused by eval.py without --rules, read with it (the
    run then stops at this test's stand-in for the model load)."""
    from gmts_recipe import run_setup

    config = tmp_path / "mine.yaml"
    config.write_text(tiny_config.read_text() + "\narm: gmts,omega_only\n")
    model = str(tiny_config.parent / "model")
    assert evaluation.main([model, "--config", str(config)]) == 2
    assert "unknown arm 'omega_only'" in capsys.readouterr().err

    def stop(*args):
        raise evaluation.EvalError("stopped before loading the model")

    monkeypatch.setattr(run_setup, "load_model", stop)
    assert evaluation.main(["--rules", str(rules_file), model, "--config", str(config), "--out",
                            str(tmp_path / "e.json")]) == 2
    assert "stopped before loading the model" in capsys.readouterr().err


def test_update_readme_passes_the_rules_to_the_commands_it_runs(rules_file, monkeypatch):
    seen = []
    monkeypatch.setattr(update_readme.subprocess, "run", lambda argv, **kw: seen.append(argv) or
                        subprocess.CompletedProcess(argv, 0, stdout="", stderr=""))
    monkeypatch.setattr(update_readme, "_RULES", ["--rules", str(rules_file)])
    update_readme.run("python check.py results/quickstart-cpu/results.json --markdown")
    update_readme.run("python -m gmts_recipe.plots --tests x")
    assert seen[0][-2:] == ["--rules", str(rules_file)] and "--rules" not in seen[1]
