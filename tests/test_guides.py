"""docs/guides/: every guide is linked from its index (which the README links), its links resolve, its lines read in a
terminal, and what the memory guide names is what recipe.py and check.py write."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDES = ROOT / "docs" / "guides"
PAGES = sorted(GUIDES.glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_index_lists_every_guide_and_the_readme_links_the_index():
    index = (GUIDES / "README.md").read_text()
    assert {p.name for p in PAGES if p.name != "README.md"} <= set(LINK.findall(index))
    assert "docs/guides/README.md" in LINK.findall((ROOT / "README.md").read_text())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve_and_lines_are_short(page):
    text = page.read_text()
    missing = [t for t in LINK.findall(text) if "://" not in t and not (page.parent / t).exists()]
    assert not missing, f"{page.name} links to missing files: {missing}"
    long = [n for n, line in enumerate(text.splitlines(), 1) if len(line) > 160]
    assert not long, f"{page.name}: lines {long} are over 160 characters"


def test_the_memory_guide_names_the_keys_recipe_writes_and_check_prints():
    guide = (GUIDES / "gpu-memory.md").read_text()
    recipe, check = (ROOT / "recipe.py").read_text(), (ROOT / "check.py").read_text()
    for key in ("base_eval", "train", "eval"):
        assert f"gpu_peak_memory_gib.{key}" in guide and f'"{key}"' in recipe + check
    assert "Peak GPU memory allocated by torch, GiB" in guide and "Peak GPU memory allocated by torch, GiB" in check


def test_the_math_guide_names_what_its_cpu_config_runs_and_sizes_its_eval_command_alike():
    """The CPU config's reward is the one its runs record (the task's newest unless the config pins one), and the
    guide's evaluation "of the same sizes" answers in as few tokens as that config does (configs/math.yaml's answers
    run many times longer on a CPU); eval.py -h's example likewise."""
    import yaml

    import eval as evaluation
    from gmts_recipe.rewards import run_reward

    config = yaml.safe_load((ROOT / "configs" / "math-cpu.yaml").read_text())
    reward = run_reward("math", config.get("reward_version"))
    text = " ".join((GUIDES / "math.md").read_text().split())
    cpu = text.split("`configs/math-cpu.yaml` runs every stage of task math", 1)[1][:200]
    assert f"the `{reward}` reward" in cpu
    assert f"the {reward} reward" in (ROOT / "configs" / "math-cpu.yaml").read_text().splitlines()[0]
    command = text.split("The same sizes for an evaluation alone: `", 1)[1].split("`", 1)[0]
    tokens = f"--eval_max_new_tokens {config['eval_max_new_tokens']}"
    assert tokens in command and f"--n_heldout {config['n_heldout']}" in command
    assert tokens in " ".join(evaluation.EPILOG.split("e.g.", 1)[1].split())
