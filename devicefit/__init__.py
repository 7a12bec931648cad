"""devicefit: know before flashing whether an ML model fits its device.

The installed distribution ships the two packages under this one root:
:mod:`devicefit.simulator` (reads, plans, runs and judges a ``.tflite``; never imports
TensorFlow) and :mod:`devicefit.sdk` (convert, check, bench, fit and the ``devicefit``
command). In a source checkout they are the top-level folders ``simulator/`` and ``sdk/``
beside this one; the wheel puts them inside it (see ``pyproject.toml``).
"""

from __future__ import annotations

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
if not os.path.isdir(os.path.join(_HERE, "simulator")):
    # A checkout (or an editable install of one): the packages live beside this folder.
    __path__.append(os.path.dirname(_HERE))
