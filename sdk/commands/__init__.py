"""One module per ``devicefit`` subcommand; each exposes ``register(subparsers)``.

:data:`COMMANDS` names them with the line ``devicefit --help`` shows for each, so that the
help, a mistyped command and ``--version`` import none of the modules (some import numpy,
rich, optuna or the report's views at their top): only the module of the command that runs
is imported (:func:`devicefit.sdk.cli.build_parser`). Adding a command is its module and
its line here.
"""

#: Command name (its module: the name with ``_`` for ``-``) -> its line in ``--help``.
COMMANDS = {
    "adapt": "train part of a model on the device's LiteRT with the user's data: "
             "accuracy before/after, train memory measured",
    "bench": "run TFLite's benchmark_model on an Android phone over adb",
    "calibrate": "fit a profile's latency model to what your board measured",
    "check": "CI gate: every model of a project against its device budgets",
    "convert": "convert a Keras/SavedModel model to .tflite for a device profile",
    "diff": "compare two models on a profile, or one model on two profiles",
    "export": "write the checked model as a TFLM firmware component (C++)",
    "fit": "find the most accurate compressed model that fits a device profile",
    "link-check": "check that a linked firmware holds the model and arena devicefit verified",
    "optimize": "rewrite a .tflite so TFLite-Micro needs a smaller tensor arena",
    "plan-batch": "largest training batch that fits memory, and gradient accumulation",
    "profiles": "list, show and validate device profiles",
    "search": "find the architecture that fits a profile: screen a family's grid, train the "
              "candidates that fit, write the best",
    "simulate": "predict a .tflite's flash, arena and compute on a device profile",
}
