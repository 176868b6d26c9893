"""The recipe's supporting modules: data, models, rewards, evaluation, statistics, plots, the training console
(progress.py), the selection math (selection.py), a config file's values against their fields' types
(field_types.py), the generation speed code (generation/), and the results files' model (records.py, samples.py: no
torch, for check.py and sweep.py). The trainer itself is the top-level module `gmts_trainer`.

`gmts_recipe.GMTSTrainer` and `gmts_recipe.GMTSConfig` are the trainer's, imported on first use, so that
`import gmts_recipe` (and its torch-free modules) does not import torch.
"""

from __future__ import annotations

__all__ = ["GMTSConfig", "GMTSTrainer"]


def __getattr__(name: str):
    if name in __all__:
        import gmts_trainer

        return getattr(gmts_trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
