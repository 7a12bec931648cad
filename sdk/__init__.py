"""devicefit SDK: convert models for a device profile, simulate, gate in CI, bench on phones.

The public API is imported lazily so that ``import sdk`` never pulls in TensorFlow.
"""

from simulator.errors import DevicefitError
from simulator.profiles import Profile, load_profile

__all__ = ["DevicefitError", "Profile", "load_profile"]
