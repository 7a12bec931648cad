"""Learning on the device (issue 49): a trainable ``.tflite`` for LiteRT and its adaptation.

From a Keras model, :mod:`.build` (in a TensorFlow child) writes a ``.tflite`` whose
signatures ``train`` (x, y → loss), ``infer``, ``save`` and ``restore`` run in LiteRT with
builtin operators only — what a phone runs without the Flex delegate. What is trained is the
user's choice (:mod:`.spec`: biases, the last K layers, or a sparse update ranked on the
user's data); the frozen rest is stored as int8 weights. :mod:`.adapt` then runs the ``train``
signature in LiteRT (a child without TensorFlow, :mod:`.litert`) on the user's data, measures
the memory LiteRT takes to run it, the time per step, and the held-out accuracy before and
after through ``infer``.
"""
