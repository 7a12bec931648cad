"""``devicefit check``: the CI gate that validates every model of a project against its budgets.

Stages, one module each: :mod:`.project` (the ``devicefit.yaml`` project file, every problem
reported at once), :mod:`.gate` (simulate each model × profile, in parallel if asked),
:mod:`.baseline` (regressions against an accepted run) and :mod:`.views` (JUnit XML,
Markdown, JSON). Nothing here imports TensorFlow: the gate installs and starts light.
"""

from __future__ import annotations

from .baseline import Baseline, BaselineEntry, RegressionCheck, load_baseline
from .gate import CheckResult, Outcome, TargetStatus, run_check
from .project import DEFAULT_PROJECT_FILE, Project, ProjectError, Target, load_project

__all__ = [
    "DEFAULT_PROJECT_FILE", "Baseline", "BaselineEntry", "CheckResult", "Outcome", "Project",
    "ProjectError", "RegressionCheck", "Target", "TargetStatus", "load_baseline",
    "load_project", "run_check",
]
