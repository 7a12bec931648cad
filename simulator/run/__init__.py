"""Run: the model run for real, beside the prediction (``simulate --run``).

:mod:`.measure` is the measuring stage the driver hands the static report to;
:mod:`.runtimes` runs a model in its target's runtime (TFLite-Micro, LiteRT), always in a
child process with a timeout, and cuts out single operators for the op probe; :mod:`.zygote`
is the fork server those children start from (and the SDK's TensorFlow children too).
"""
