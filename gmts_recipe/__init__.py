"""The recipe's supporting modules. Two top-level modules sit beside the package: selection.py (the selection math,
which the package imports: arms.py and config.py read its rules) and gmts_trainer.py (GMTSTrainer, the method alone,
built from config.py, value_checks.py and grad_hooks.py). fast_trainer.py, which subclasses
GMTSTrainer, is the one module of the package that imports gmts_trainer; none imports the commands (recipe.py,
check.py, sweep.py, update_readme.py) or eval.py. This file imports nothing.

- The method: config.py (GMTSConfig and the refusals of the method), value_checks.py (nan, inf and out-of-range
  values refused before anything computes with them; the fields' help as docstrings), grad_hooks.py (transformers'
  input-grad hooks kept to one).
- The speed options, around the method: speed_options.py (their fields; no torch), fast_config.py (FastGMTSConfig),
  fast_trainer.py (FastGMTSTrainer, which recipe.py builds), generation/ (decoding speed and the counter noise's
  keys), training_speed.py, determinism.py.
- The experiment: arms.py (the arms table), recipe_config.py (the recipe's fields, parser and checks; no torch),
  field_types.py (a config file's values against their fields' types),
  recipe_help.py (recipe.py --help: the fields grouped, with the active config's values), config_reference.py
  (docs/config.md from the fields), run_setup.py (tasks, model, records), code_digest.py (which commit's code a run
  ran, from the files themselves), data.py, models.py,
  answer_text.py (what both rewards read first: the one box scanner), rewards.py (every GSM8K reward version),
  rewards_math.py and math_data.py (MATH), user_rules.py (--rules: a user's own rules in a fresh process),
  progress.py (the training console), gpu_memory.py, worker.py (a warm process for a sweep's cells).
- The results: records.py and samples.py (a results file and its samples), tables.py, stats.py, plots.py,
  mechanism.py, posthoc.py, markdown.py (the documentation's wrapped prose), sweep/ (the grid, its runners, merge,
  summary, report), sequential/ (a sequential plan: its statistics, design, looks, failures, cards, sensitivity
  comparison and report), verify/ (the verification, one module per level: a file, a cell, a sweep, its plan held
  against git, the provenance). check.py verifies with these and arms.py without importing torch.
"""
