"""docs/config.md is what the dataclasses recipe.py parses give, grouped by the class that declares each field."""

from dataclasses import dataclass, field

from gmts_recipe import config_reference
from gmts_recipe.config_reference import REFERENCE, own_fields, reference


@dataclass
class LibraryConfig:  # stands for GRPOConfig: a library's fields are not listed
    learning_rate: float = field(default=1e-6, metadata={"help": "the library's own"})


LibraryConfig.__module__ = "trl.trainer.fake_config"


@dataclass
class SpeedOptions:
    """Options that change speed, never results."""

    fast_decode: bool = field(default=False, metadata={"help": "decode | fast"})


@dataclass
class SelectionConfig(LibraryConfig, SpeedOptions):
    """The library's config plus the selection fields."""

    scope: str = field(default="batch", metadata={"help": "where the threshold\n is taken",
                                                  "choices": ["batch", "group"]})
    seeds: list[int] = field(default_factory=lambda: [0, 1], metadata={"help": "sampling seeds"})
    learning_rate: float = field(default=1e-5, metadata={"help": "a library field whose default we change"})
    cache: frozenset = field(default=frozenset(), init=False)  # not a command-line field


def test_fields_are_grouped_by_the_class_that_declares_them_and_library_fields_are_left_out():
    groups = own_fields(SelectionConfig)
    assert {cls.__name__: [f.name for f in fs] for cls, fs in groups.items()} == {
        "SpeedOptions": ["fast_decode"], "SelectionConfig": ["learning_rate", "scope", "seeds"]}
    text = reference([SelectionConfig])
    assert "## SpeedOptions (tests/test_config_reference.py)\n\nOptions that change speed, never results." in text
    assert "| `fast_decode` | `bool` | `False` |  | decode \\| fast |" in text
    assert "| `scope` | `str` | `'batch'` | `batch`, `group` | where the threshold is taken |" in text
    assert "| `seeds` | `list[int]` | `[0, 1]` |  | sampling seeds |" in text
    assert "| `learning_rate` | `float` | `1e-05` |  | a library field whose default we change |" in text
    assert "The fields of `LibraryConfig` are the libraries' own" in " ".join(text.split())  # the intro wraps
    assert "cache" not in text


def test_the_committed_reference_is_current_and_recipe_help_points_to_it(capsys):
    from gmts_recipe import recipe_config

    assert REFERENCE.read_text() == config_reference.recipe_reference(), \
        "docs/config.md is stale: run python -m gmts_recipe.config_reference"
    text = REFERENCE.read_text()
    for name in ("arm", "eval_samples", "token_selection", "selection_ratio", "selection_scope"):
        assert f"| `{name}` |" in text
    assert "| `learning_rate` |" not in text and "| `lora_r` |" not in text  # TRL's and transformers' own
    recipe_config.print_help()
    first = capsys.readouterr().out.splitlines()[:6]
    assert any("docs/config.md" in line for line in first), first
