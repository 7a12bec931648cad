"""devicefit SDK: convert models for a device profile, simulate, gate in CI, bench on phones.

The public API, for use from Python::

    from devicefit.sdk import MeasureOptions, load_profile, simulate
    report = simulate("model.tflite", "stm32l4r5-cortex-m4", run=MeasureOptions())

    from devicefit.sdk.convert import convert      # Keras/SavedModel → .tflite (needs TensorFlow)
    from devicefit.sdk.check import run_check      # the CI gate over a devicefit.yaml project
    from devicefit.sdk.bench import bench          # benchmark_model on a phone over adb
    bench("model.tflite", "android-arm64-cpu", benchmark_binary="benchmark_model")
    from devicefit.sdk.fit import fit              # compression search (needs TensorFlow)

A profile is given as a name, a ``.yaml`` path or a :class:`Profile` everywhere.

The commands' packages keep their own names (``sdk.convert`` is the package), so only what
has no package of its name is re-exported here, imported on first use: ``import sdk`` never
pulls in TensorFlow.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing would double `devicefit --version`
if TYPE_CHECKING:
    from typing import Any

    # For type checkers: the names below, as they are imported on first use.
    from devicefit.simulator.errors import DevicefitError as DevicefitError
    from devicefit.simulator.profile_types import Profile as Profile
    from devicefit.simulator.profiles import load_profile as load_profile
    from devicefit.simulator.types import MeasureOptions as MeasureOptions

#: Every name, imported on first use: importing ``devicefit.sdk`` (as the ``devicefit``
#: command does) costs nothing of its own.
_LAZY = {
    "DevicefitError": ("devicefit.simulator.errors", "DevicefitError"),
    "Profile": ("devicefit.simulator.profile_types", "Profile"),
    "load_profile": ("devicefit.simulator.profiles", "load_profile"),
    "MeasureOptions": ("devicefit.simulator.types", "MeasureOptions"),
    "simulate": ("devicefit.simulator.simulate", "simulate"),
    "Report": ("devicefit.simulator.report.report", "Report"),
    "optimize_model_bytes": ("devicefit.simulator.optimize", "optimize_model_bytes"),
    "plan_batch": ("devicefit.sdk.train", "plan_batch"),
}

__all__ = [*_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sdk' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
