"""devicefit: know before flashing whether an ML model fits its device.

One import root for the two packages: :mod:`devicefit.simulator` (reads, plans, runs and
judges a ``.tflite``; never imports TensorFlow) and :mod:`devicefit.sdk` (convert, check,
bench, fit and the ``devicefit`` command). In a source checkout they are the top-level
folders ``simulator/`` and ``sdk/``, reached from here through the symbolic links
``devicefit/simulator`` and ``devicefit/sdk``, so a type checker, an IDE or an import-graph
tool resolves every ``devicefit.…`` import as Python does; the wheel puts the folders
themselves inside this one (see ``pyproject.toml``).
"""

#: The one place the version is written: pyproject.toml reads it from here (hatch), and
#: ``devicefit --version`` answers it without importing the package's metadata (which costs
#: more than Python's own start).
__version__ = "0.1.0"
