"""What check.py holds a file or a sweep to, one refusal set each: one module per level, each the only home of its
level's refusals. file.py (a results file: its format, what it says about itself, its held-out tasks and its samples
re-scored), cell.py (which cell a file is, the cells of a grid as one experiment, each evaluation held by one cell),
sweep.py (a sweep.json: its summary recomputed from every cell's file), plan.py (a sweep's plan held against git),
provenance.py (where each run ran, printed as recorded). check.py is the command over them."""
