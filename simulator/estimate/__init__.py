"""Estimate: the work each operator does and the time the device takes, with no device.

:mod:`.compute` counts MACs and bytes moved from the shapes; :mod:`.latency` turns them into
device time, with its error band, from the core registry (:mod:`.cores`) and the kernel
libraries' tables (:mod:`.kernels`), whose numbers are the data in ``latency_data/``;
:mod:`.calibration` fits a profile's cost terms to what the user's board measured
(``devicefit calibrate``).
"""
