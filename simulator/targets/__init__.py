"""The built-in targets, one package each: ``tflm``, ``litert``, ``edgetpu``, ``ethos_u``.

A target's package holds everything that is its own (op rules, planner, tail or scratch
model, runner, report section and what it shows, as data the views render) and defines its
record, ``TARGET``, in its ``__init__``; :mod:`simulator.target` finds every package here
that does, and the targets installed distributions declare. Nothing else here: importing a
target's package imports no other target.
"""
