"""The recipe's supporting modules: data, models, rewards, evaluation, statistics, plots, the training console
(progress.py), a config file's values against their fields' types (field_types.py), the generation speed code
(generation/), the results files' model (records.py, samples.py: no torch, for check.py and sweep.py) and their
tables (tables.py), the recipe's configuration (recipe_config.py: its fields, parser and checks) and what a run sets
up around it (run_setup.py: tasks, model, records), which recipe.py and eval.py's command share, and the sweep's parts
(sweep/). The trainer itself is the top-level module `gmts_trainer` (`from gmts_trainer import GMTSTrainer,
GMTSConfig`): the package imports no module above it, so `import gmts_recipe` (and its torch-free modules) does not
import torch.
"""
