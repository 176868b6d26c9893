"""The supporting modules of the GMTS recipe; its entry points are the top-level scripts (recipe.py, check.py,
sweep.py)."""
