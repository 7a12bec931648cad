"""Architecture search under device budgets (issue 34), first part: the families
(:mod:`sdk.search.families`), candidates (:mod:`sdk.search.candidate`) and the static screen
(:mod:`sdk.search.screen`) that judges every candidate before anything is trained.
TensorFlow is imported only in the screen's child process."""

from devicefit.sdk.search.candidate import ArchCandidate, candidate, grid
from devicefit.sdk.search.families import FAMILIES, Params
from devicefit.sdk.search.screen import Rejection, Screened, ScreenRun, screen

__all__ = ["FAMILIES", "ArchCandidate", "Params", "Rejection", "ScreenRun", "Screened",
           "candidate", "grid", "screen"]
