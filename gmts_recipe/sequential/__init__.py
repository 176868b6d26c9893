"""A sequential plan, the group-sequential continuation of a finished test, in one place. The caller summarizes the
continued test (sweep.summary.continued_summary) and passes it in: nothing here is called back by the summary it reads.

- stats: the statistics, pure (Design, look, decide, state, stagewise_estimate, the boundaries by simulation, design);
- design: `python -m gmts_recipe.sequential.design PLAN --out FILE`, the plan's design file written from its seed;
- continued: the test it continues (its summary held complete), the recipe the new seeds run, a new seed's cost;
- looks: where the plan stands (sequential_test), what its verdicts mean, the sensitivity comparison at a look;
- sensitivity: the old seeds against the new ones, by card, versions, commit and day (never a decision);
- failures: a failed cell, recorded by the runner and counted as the plan says;
- cards: the cards a plan's cells may run on, and the cards a cell recorded;
- report: the plan in words and tables.
Its refusals at the plan's level (history, freeze, design file, cards) are gmts_recipe.verify.plan's.
"""
