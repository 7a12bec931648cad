"""The per-layer table: one row (:class:`simulator.report.report.LayerRow`) per operator of every
subgraph, built once per report.

A row joins what the model says about an operator (its shapes, dtype, constants) with what
the report measured or estimated for it (MACs, bytes live while it runs, estimated device
time, host time of a ``--run``, device time of ``bench --op-profiling``). Every view — the
``--layers`` text, ``--csv``, the HTML table, ``devicefit diff`` — reads these rows, so they
agree. Figures the report has only for the main subgraph (MACs, live bytes, times) are None
for the operators of other subgraphs (control-flow bodies run through their caller).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from devicefit.simulator.report.report import LayerRow, Report, TimelineStep

if TYPE_CHECKING:
    from devicefit.simulator.read.model import Model, Subgraph
    from devicefit.simulator.report.benchmark import OpProfileRow

#: benchmark_model names a node ``[output tensor name]:node index`` (newer releases) or
#: ``[output tensor name]``.
_NODE_INDEX = re.compile(r":(\d+)$")


def shape_text(shapes: Sequence[Sequence[int]]) -> str:
    """``1x28x28x1, 8`` (``[]`` for a scalar)."""
    return ", ".join("x".join(map(str, s)) if s else "[]" for s in shapes)


def layer_rows(model: Model, report: Report) -> list[LayerRow]:
    """The rows of ``model`` in file order (main subgraph first), with the report's figures."""
    main = model.main.index
    compute = {c.op_index: c for c in report.compute.per_op}
    live = {s.op_index: s.live_bytes for s in report.memory.timeline} if report.memory else {}
    lat = report.latency
    estimated = {o.op_index: o.estimated_ms for o in lat.per_op} if lat else {}
    host = {o.op_index: o.ms for o in lat.host_per_op_ms or ()} if lat else {}
    device = (bench_times(model.main, report.bench.result.results.op_profile)
              if report.bench is not None else {})
    rows = []
    for sg in (model.main, *(s for s in model.subgraphs if s.index != main)):
        ours = sg.index == main
        for op in sg.operators:
            consts = [sg.tensors[t] for t in op.inputs if t >= 0 and sg.tensors[t].has_data]
            activations = [sg.tensors[t].shape for t in op.inputs
                           if t >= 0 and not sg.tensors[t].has_data]
            first = next((sg.tensors[t] for t in op.inputs if t >= 0), None)
            outputs = [sg.tensors[t] for t in op.outputs if t >= 0]
            dtype = first.dtype if first else (outputs[0].dtype if outputs else "")
            rows.append(LayerRow(
                index=op.index, subgraph=sg.index, op=op.op_name,
                input_shapes=tuple(activations), output_shapes=tuple(t.shape for t in outputs),
                dtype=dtype, params=sum(t.num_elements for t in consts),
                param_bytes=sum(t.nbytes for t in consts),
                macs=compute[op.index].macs if ours and op.index in compute else None,
                bytes_moved=compute[op.index].bytes_moved if ours and op.index in compute
                else None,
                live_bytes=live.get(op.index) if ours else None,
                estimated_ms=estimated.get(op.index) if ours else None,
                host_ms=host.get(op.index) if ours else None,
                device_ms=device.get(op.index) if ours else None))
    return rows


def bench_times(sg: Subgraph, profile: Sequence[OpProfileRow]) -> dict[int, float]:
    """Operator index → benchmark_model's average ms, for the rows that name an operator of
    ``sg``: by the node index in the name, else by the output tensor's name. Rows of a
    delegate's kernel (XNNPACK runs many operators as one node) name none and are left out."""
    by_output = {sg.tensors[op.outputs[0]].name: op.index for op in sg.operators
                 if op.outputs and op.outputs[0] >= 0}
    types = {op.index: op.op_name for op in sg.operators}
    times: dict[int, float] = {}
    for row in profile:
        if row.avg_ms is None:
            continue
        found = _NODE_INDEX.search(row.name)
        index = int(found.group(1)) if found else by_output.get(row.name)
        if index is not None and types.get(index) == row.node_type:
            times[index] = times.get(index, 0.0) + row.avg_ms
    return times


def peak(timeline: Sequence[TimelineStep]) -> TimelineStep | None:
    """The operator with the most live bytes, ties to the lowest index: the peak every view
    names (text, PNG, HTML)."""
    return min(timeline, key=lambda s: (-s.live_bytes, s.op_index), default=None)


def costliest(rows: Sequence[LayerRow], figure: str) -> LayerRow | None:
    """The row with the most of ``figure`` (``live_bytes``, ``estimated_ms``, ``macs`` …);
    ties go to the first in file order. None when no row has the figure."""
    have = [r for r in rows if getattr(r, figure) is not None]
    return max(have, key=lambda r: getattr(r, figure), default=None)


#: (column, attribute) in the CSV's order; the first six are the columns the CSV had
#: before the table had shapes, so scripts reading them keep working.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("op_index", "index"), ("op", "op"), ("macs", "macs"), ("bytes_moved", "bytes_moved"),
    ("live_bytes", "live_bytes"), ("estimated_ms", "estimated_ms"), ("host_ms", "host_ms"),
    ("device_ms", "device_ms"), ("subgraph", "subgraph"), ("inputs", "input_shapes"),
    ("outputs", "output_shapes"), ("dtype", "dtype"), ("params", "params"),
    ("param_bytes", "param_bytes"))


def cells(row: LayerRow) -> list[object]:
    """The row's values in :data:`COLUMNS` order, shapes as text, missing figures as None."""
    values: list[object] = []
    for _, attr in COLUMNS:
        value = getattr(row, attr)
        values.append(shape_text(value) if attr.endswith("_shapes") else value)
    return values
