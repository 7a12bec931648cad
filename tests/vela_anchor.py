"""Vela's own command line, run as a user runs it: the anchor devicefit's Ethos-U figures
are compared with (tests/simulator/targets/ethos_u/test_ethos_u.py, tests/public_models/, benchmarks/
bench_vela.py). Nothing of devicefit's reads Vela's output here: ``csv`` and the file."""

from __future__ import annotations

import csv
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from devicefit.simulator.profiles import load_profile
from devicefit.simulator.targets.ethos_u.analysis import config_for

#: Vela's reference system "Ethos_U55_High_End_Embedded" + "Shared_Sram" (its Arm/vela.ini,
#: and Arm MLIA's ethos-u55-128 target) as a profile extending ethos-u55-128.
HIGH_END_PROFILE = """extends: ethos-u55-128
ethos_u:
  system_config: Ethos_U55_High_End_Embedded
  memory_mode: Shared_Sram
  npu_clock: 500MHz
  memories:
    sram: {clock_scale: 1.0, burst_length: 32, read_latency: 32, write_latency: 32,
           max_reads: 4, max_writes: 4}
    off_chip_flash: {clock_scale: 0.125, burst_length: 128, read_latency: 64,
                     write_latency: 0, max_reads: 2, max_writes: 0}
"""


@dataclass(frozen=True)
class VelaOutput:
    summary: dict[str, str]  # the summary CSV's row, as Vela wrote it
    compiled: Path
    #: The per-layer CSV's rows (with ``--verbose-performance``), as ``csv`` reads them.
    per_layer: list[dict[str, str]]


def vela_cli(model: Path, out: Path, *options: str) -> VelaOutput:
    """``vela [options] --output-dir out model`` with the ``vela`` console script of this
    Python's environment."""
    exe = Path(sys.executable).with_name("vela")
    subprocess.run([str(exe), *options, "--output-dir", str(out), str(model)], check=True,
                   capture_output=True, timeout=600)
    [summary] = out.glob("*_summary_*.csv")
    [compiled] = out.glob("*_vela.tflite")
    layers = [row for path in out.glob("*_per-layer.csv") for row in csv.DictReader(path.open())]
    return VelaOutput(next(csv.DictReader(summary.open())), compiled, layers)


def vela_cli_for(model: Path, profile: str | Path, work: Path, *more: str) -> VelaOutput:
    """Vela's CLI fed the ``.ini`` and options devicefit derives from ``profile``, and
    ``more`` options."""
    config = config_for(load_profile(profile))
    ini = work / "profile.ini"
    ini.write_text(config.ini_text())
    return vela_cli(model, work / "vela", *config.vela_args(ini), *more)
