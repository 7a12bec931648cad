"""Read: the ``.tflite`` file in, as devicefit's typed IR (the first stage of every command).

:mod:`.reader` decodes the flatbuffer, bounds-checked, into :mod:`.model`'s frozen ``Model``,
which every later stage reads; :mod:`.shapes` resolves its dynamic dimensions as the runtime
will. :mod:`.writer` is the same file format the other way (bytes in, bytes out, no
TensorFlow), for the optimizer, the op probe's cut-out operators and ``convert``.
"""
