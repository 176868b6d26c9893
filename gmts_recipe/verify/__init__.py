"""The verification, one module per level, each the only home of its level's refusals: file.py (a results file: its
format, what it says about itself, its held-out tasks and its samples re-scored), provenance.py (where each run ran,
printed as recorded). check.py is the command over them."""
