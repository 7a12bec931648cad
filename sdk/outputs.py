"""The inputs and outputs each command hands to :func:`simulator.fileio.check_outputs`.

Every command calls ``check_outputs`` once, before its work starts, with everything it reads
and everything it will write, so a typo such as ``--html model.tflite`` or ``--html X --plot
X`` costs one line and exit 2, not the input or an hour of conversion.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from devicefit.simulator.fileio import Named, check_outputs
from devicefit.simulator.profiles import Profile

__all__ = ["check_outputs", "data_inputs", "picture_outputs", "profile_inputs"]


def picture_outputs(args: argparse.Namespace) -> list[Named]:
    """The ``--html``/``--plot`` outputs of :func:`sdk.pictures.add_picture_options`."""
    return [("--html", getattr(args, "html", None)), ("--plot", getattr(args, "plot", None))]


def data_inputs(args: argparse.Namespace, data_options: tuple[str, ...]) -> list[Named]:
    """The model, the profile's files and the data options of a converting command;
    ``random`` (generated calibration data) is no file."""
    from devicefit.simulator.profiles import load_profile

    data = [(f"{name.replace('_data', '')} data", getattr(args, name, None))
            for name in data_options]
    profile = [] if args.profile is None else profile_inputs(  # fit --export may omit it
        load_profile(args.profile, args.profiles_dir))
    return [("model", args.model), *profile, *((what, p) for what, p in data if p != "random")]


def profile_inputs(profile: Profile) -> list[Named]:
    """A profile's file and the files it extends."""
    return [("profile", Path(f)) for f in profile.files]
