"""Types the sdk's modules share."""

from __future__ import annotations

from collections.abc import Callable

#: Told ``(stage, done, total)`` as a long step advances: the CLI's progress bar, or the
#: conversion child's events to its parent.
Progress = Callable[[str, int, int], None]
