"""Where ``docs/run.md`` promised the library call that runs a model in a runtime,
``devicefit.simulator.runtimes.run_model``: the runners now live in
:mod:`devicefit.simulator.run.runtimes`, and this keeps that import working."""

from __future__ import annotations

from devicefit.simulator.run.runtimes import run_model

__all__ = ["run_model"]
