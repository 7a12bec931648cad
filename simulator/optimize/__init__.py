"""Arena optimizer for TFLite-Micro: operator reordering and an offline memory plan.

The stock TFLM interpreter runs operators in file order and packs the arena with a greedy
planner. :func:`optimize_model_bytes` rewrites a ``.tflite`` so that the same interpreter
needs a smaller arena head: a better (still valid) operator order, and tensor offsets
written as TFLM's ``OfflineMemoryAllocation`` metadata. Stages: :mod:`.graph` (the DAG),
:mod:`.reorder` (order search), :mod:`.packing` (offsets), :mod:`.driver` (rewrite + verify).
"""

from devicefit.simulator.optimize.driver import OptimizeReport, optimize_model_bytes

__all__ = ["OptimizeReport", "optimize_model_bytes"]
