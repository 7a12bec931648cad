"""Plan: what the profile's target does with the model, decided before anything runs.

:mod:`.compat` answers which operators its runtime runs (generic checks, the target's op
table, the runtime asked per operator signature) and, on an accelerator, which part the
accelerator takes; :mod:`.lifetimes` finds the buffers its arena holds and when each is live;
:mod:`.planners` holds what every arena planner shares (the plan, its self-check, the
interval index) — each target's own planner lives in its package; :mod:`.training` plans
the memory a model's train signature needs (its subgraph's arena by the target's rules,
and the resource variables). The estimate
(:mod:`simulator.estimate`) costs the operators where this puts them.
"""
