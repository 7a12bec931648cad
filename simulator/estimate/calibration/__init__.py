"""Calibrating a profile's latency model on what the user's board measured.

:mod:`.logs` reads what boards print (TFLM's MicroProfiler, a table of whole-model
latencies; ``benchmark_model``'s op profiling is parsed in ``sdk/bench`` and handed over as
:class:`.logs.BoardLog`), :mod:`.match` checks a log against its model, :mod:`.fit` fits the
profile's cost terms with today's kernel tables as the prior and writes the calibrated
profile. No TensorFlow here.
"""
