"""A sequential plan, the group-sequential continuation of a finished test: stats (the statistics, pure; the design
file is written from them by gmts_recipe.sweep.design, the command the plan names), looks (look 0, the test it
continues, which the caller summarizes first; where the plan stands; what its verdicts mean), sensitivity (old seeds
against new, never a decision), failures (a failed cell as the plan counts it), cards (the cards its cells may run on)
and report (the plan in words and tables). Its refusals at the plan's level (history, freeze, design file, cards) are
gmts_recipe.verify.plan's."""
