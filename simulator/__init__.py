"""devicefit simulator: read a .tflite, plan its memory, run it, judge it against a profile.

Never imports TensorFlow or ``sdk``.
"""
