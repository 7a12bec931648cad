"""A dummy NPU target written as a package of its own, with the metadata of an installed
distribution that names it in the ``devicefit.targets`` entry-point group: what a third
party ships. tests/simulator/test_targets.py runs the whole pipeline on it,
tests/simulator/run/test_measure.py its measuring hooks."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devicefit.simulator.target import ENTRY_POINTS, TARGETS

#: The dummy NPU's package, file by file: its record, planner, op table and report section.
DUMMY_PACKAGE = {
    "__init__.py": """
        \"\"\"A dummy NPU: a target of one's own, as one package.\"\"\"
        from devicefit.simulator.infra.schema import number
        from devicefit.simulator.target import (
            OpTable,
            Planner,
            SectionMaker,
            Target,
            lazy,
            lazy_class,
        )

        TARGET = Target(
            name="dummy", title="Dummy NPU", device_kinds=("dummy-board",),
            kernels=("dummy-nn",), delegates=(), planner=lazy(Planner, "dummy_npu.planner:plan"),
            check_ops=lazy(OpTable, "dummy_npu.ops:check"), runner={runner!r},
            host_runtime=None, quant_schemes=("int8",), int16_io=False,
            sparse_weights="the dummy NPU reads every weight", offline_plan=False,
            section=lazy(SectionMaker, "dummy_npu.section:section"),
            section_type=lazy_class("dummy_npu.section:DummySection"),
            profile_keys={{"npu": {{"macs_per_cycle": number()}}}},
            settings=lambda values: dict(values["npu"]))
        """,
    "planner.py": """
        from devicefit.simulator.targets.litert.planner import plan_litert


        def plan(model, profile, order=None):
            # The NPU works in its host's LiteRT arena.
            return plan_litert(model, profile, order)
        """,
    "ops.py": """
        from devicefit.simulator.types import UnsupportedOp

        OPS = frozenset({{"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "AVERAGE_POOL_2D",
                         "RESHAPE", "SOFTMAX"}})


        def check(model, profile):
            return [UnsupportedOp(op.index, op.op_name, "not in the dummy NPU's op table",
                                  sg.index)
                    for sg in model.subgraphs for op in sg.operators if op.op_name not in OPS]
        """,
    "section.py": """
        import dataclasses

        from devicefit.simulator.report.display import SectionDisplay
        from dummy_npu.ops import OPS


        @dataclasses.dataclass(frozen=True)
        class DummySection:
            npu_ops: int
            other_ops: int
            macs_per_cycle: float

            def to_dict(self):
                return dataclasses.asdict(self)

            def text_lines(self):
                return [f"Dummy NPU: {{self.npu_ops}} ops on the NPU, "
                        f"{{self.other_ops}} it cannot run",
                        f"  {{self.macs_per_cycle:g}} MACs per cycle"]

            def display(self):
                lines = self.text_lines()
                return SectionDisplay("dummy-npu", "Dummy NPU", tuple(l.strip() for l in lines))

            def summary_lines(self):
                return self.text_lines()[:1]

            def supported_line(self):
                return f"every operator runs on the dummy NPU ({{self.npu_ops}})"

            def latency_report(self, profile, split):
                return None


        def section(model, profile):
            names = [op.op_name for sg in model.subgraphs for op in sg.operators]
            npu = sum(name in OPS for name in names)
            return DummySection(npu, len(names) - npu,
                                profile.target_settings["macs_per_cycle"])
        """,
}

CLOCK_HZ = 100e6
CYCLES_PER_MAC = 2.0
DUMMY_PROFILE = f"""\
name: dummy-board
description: a board with the dummy NPU
device: {{class: dummy-board, clock: 100MHz, ram: 8MiB}}
runtime: {{name: dummy, kernels: dummy-nn}}
budgets: {{flash: 1MiB, arena: 1MiB, latency: 1s}}
cost_model:
  cycles_per_mac: {{default: {CYCLES_PER_MAC}}}
npu:
  macs_per_cycle: 64
"""


def distribution(site: Path, name: str, entry_points: str) -> None:
    """``site/<name>-1.0.dist-info``: what pip leaves for an installed distribution, as
    much of it as :mod:`importlib.metadata` reads."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\n{entry_points}\n")


def write_dummy(site: Path, runner: str | None) -> None:
    package = site / "dummy_npu"
    package.mkdir(parents=True)
    for name, text in DUMMY_PACKAGE.items():
        (package / name).write_text(textwrap.dedent(text).lstrip().format(runner=runner))
    distribution(site, "dummy_npu", "dummy = dummy_npu:TARGET")


@contextmanager
def installed(site: Path) -> Iterator[None]:
    """``site`` on the path, as an installed distribution's folder is, for the block."""
    sys.path.insert(0, str(site))
    try:
        TARGETS.reload()
        yield
    finally:
        sys.path.remove(str(site))
        for module in [m for m in sys.modules if m.split(".")[0] == "dummy_npu"]:
            del sys.modules[module]
        TARGETS.reload()
