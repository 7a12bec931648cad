"""``devicefit export``: the model devicefit checked, as the firmware component a user ships.

:func:`export_model` judges the model as ``simulate`` does (with ``target_build``: also
built and run as exported on the device's own build), refuses to write anything when the
verdict fails, and writes the folder of the profile's target's ``export`` whole (TFLM's:
:mod:`simulator.targets.tflm.export`). The files a target build ran are the files written:
a verification names the export's digest, and the digest of the files written must equal
it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import DevicefitError, UsageError
from devicefit.simulator.infra.fileio import write_folder
from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.report import Report, TargetMeasurement
from devicefit.simulator.report.views.messages import problems
from devicefit.simulator.target import TARGETS, target_for
from devicefit.simulator.types import BuildRequest, ExportedFile, MeasureOptions


class ExportRefused(DevicefitError):
    """The verdict fails: nothing is exported (exit 1)."""

    exit_code = 1


@dataclass(frozen=True)
class Exported:
    """What :func:`export_model` wrote, and the report it rests on."""

    folder: Path
    files: tuple[ExportedFile, ...]
    report: Report

    @property
    def manifest(self) -> dict[str, Any]:
        text = next(f.text for f in self.files if f.path == "manifest.json")
        data: dict[str, Any] = json.loads(text)
        return data


def export_model(model_path: str | Path, profile: Profile, out: str | Path, *,
                 name: str | None = None, margin: int = 0, tflm: str | Path | None = None,
                 target_build: str | Path | None = None, timeout_s: float = 60,
                 probe: bool = True) -> Exported:
    """Judge ``model_path`` on ``profile`` and write its export to ``out``.

    ``tflm``: the runtime checkout whose names the files use (``target_build`` is one
    too); ``target_build``: also build and run the export on that checkout for the
    profile's core and kernels. Raises :class:`ExportRefused` when the verdict fails (a
    build that does not verify the export fails it), writing nothing.
    """
    from devicefit.simulator.simulate import simulate

    target = target_for(profile)
    if target.export is None:
        able = ", ".join(t.title for t in TARGETS.values() if t.export) or "no target"
        raise UsageError(f"export writes a firmware component for {able}; profile "
                         f"'{profile.name}' runs {target.title}")
    given = target_build if target_build is not None else tflm
    checkout = None if given is None else str(given)
    run = (MeasureOptions(target_build=BuildRequest(str(target_build), name, margin),
                          timeout_s=timeout_s) if target_build is not None else None)
    report = simulate(model_path, profile, run=run, probe=probe)
    if not report.ok:
        raise ExportRefused(f"not exported: the verdict for {profile.name} is FAIL: "
                            + "; ".join(problems(report)))
    assert report.memory is not None  # a report that passes has its plan
    verified = report.measured.target_build if report.measured else None
    files = tuple(target.export(read_model(model_path), profile, report.memory, checkout,
                                name, margin, verification(verified)))
    done = Exported(Path(out), files, report)
    if verified is not None and verified.export_sha256 != done.manifest["export_sha256"]:
        raise DevicefitError("the files to write differ from the files the target build "
                             "ran (a devicefit bug): nothing written")
    write_folder(Path(out), {f.path: f.text for f in files})
    return done


def verification(t: TargetMeasurement | None) -> dict[str, Any] | None:
    """The manifest's record of the device build that ran the export, or None."""
    if t is None:
        return None
    return {
        "build": t.build, "tflm": t.tflm, "export_sha256": t.export_sha256,
        "arena_constant_starts": t.arena_constant_starts,
        "smallest_arena_bytes": t.min_arena_bytes, "example_ok": t.example_ok,
        "outputs_agree": t.outputs_agree, "outputs_within_tolerance": t.outputs_within_tolerance,
        "tolerance": t.tolerance,
        "output_diffs": [dataclasses.asdict(d) for d in t.output_diffs],
        "flash": None if t.flash is None else {
            "total_bytes": t.flash.total_bytes, "image": t.flash.image,
            "parts": {p.name: p.bytes for p in t.flash.parts}},
    }
