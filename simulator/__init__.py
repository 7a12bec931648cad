"""devicefit simulator: read a .tflite, plan its memory, run it, judge it against a profile.

Six folders are the stages, in the order :mod:`.simulate` (the driver) runs them; each one's
docstring says what it holds and why, and importing it imports none of its modules:

- ``read/``: the model file into devicefit's IR, its dynamic shapes resolved (and written back);
- ``plan/``: what the target does with it: which operators it runs, its arena plan;
- ``estimate/``: work and device time with no device (the latency model, its data, calibration);
- ``run/``: the model run for real, in child processes (``--run``);
- ``judge/``: the budgets judged once, the static half's promises checked;
- ``report/``: the one typed report, what is computed from reports, its views.

Beside them: the device profile (``profiles.py`` reads YAML into ``profile_types.py``'s
``Profile``), the door to the targets (``target.py``) and the targets (``targets/``, one
package each), what every layer names (``types.py``, ``errors.py``), the drivers of two other
commands built on the stages (``optimize/``; ``firmware/``, link-check) and what all of them
lean on (``infra/``). ``runtimes.py`` keeps an import path the docs promised.

Never imports TensorFlow or ``sdk``.
"""
