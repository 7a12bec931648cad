"""The main subgraph as the arena optimizer sees it: a DAG of operators over planned buffers.

Only what decides the arena head matters here: which planned (head) tensors each operator
reads and writes, their padded sizes, the operator's scratch bytes, and the graph's inputs
and outputs. Constants, variables and empty tensors are not in the head and are left out.

Lifetimes follow TFLite-Micro's rules (see :mod:`simulator.plan.lifetimes`): graph inputs are
live from step 0, operator ``order[k]`` runs at step ``k + 1``, a tensor lives from its
producer's step to its last reader's step (inclusive, so an operator's inputs and outputs
never share memory), graph outputs live to the last step, scratch buffers only during their
operator's step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devicefit.simulator.errors import InputError
from devicefit.simulator.plan.lifetimes import live_bytes_per_step
from devicefit.simulator.read.model import Subgraph
from devicefit.simulator.types import Buffer


@dataclass(frozen=True)
class OpGraph:
    """Operators (by file index) over planned tensors; ``sizes`` maps tensor → head bytes."""

    sizes: dict[int, int]
    op_inputs: tuple[tuple[int, ...], ...]
    op_outputs: tuple[tuple[int, ...], ...]
    #: Scratch bytes each operator requests for its own step (already padded).
    scratch: tuple[int, ...]
    graph_inputs: tuple[int, ...]
    graph_outputs: tuple[int, ...]

    @property
    def n_ops(self) -> int:
        return len(self.op_inputs)

    def producers(self) -> dict[int, int]:
        return {t: op for op, outs in enumerate(self.op_outputs) for t in outs}

    def predecessors(self) -> list[set[int]]:
        """For each operator, the operators whose outputs it reads."""
        prod = self.producers()
        return [{prod[t] for t in ins if t in prod} for ins in self.op_inputs]

    def is_topological(self, order: Sequence[int]) -> bool:
        if sorted(order) != list(range(self.n_ops)):
            return False
        pos = {op: k for k, op in enumerate(order)}
        preds = self.predecessors()
        return all(pos[p] < pos[op] for op in order for p in preds[op])

    def lifetimes(self, order: Sequence[int]) -> dict[int, tuple[int, int]]:
        """Tensor → (first, last) step when the operators run in ``order``."""
        first: dict[int, int] = {t: 0 for t in self.graph_inputs}
        last: dict[int, int] = {t: 0 for t in self.graph_inputs}
        for step, op in enumerate(order, start=1):
            for t in self.op_outputs[op]:
                first.setdefault(t, step)
            for t in (*self.op_inputs[op], *self.op_outputs[op]):
                last[t] = step
        for t in self.graph_outputs:
            first.setdefault(t, 0)
            last[t] = len(order)
        return {t: (first[t], last[t]) for t in self.sizes if t in first}

    def buffers(self, order: Sequence[int]) -> list[Buffer]:
        """The head buffers (tensors, then one scratch buffer per operator that has any)."""
        spans = self.lifetimes(order)
        out = [Buffer(t, f"t{t}", self.sizes[t], a, b) for t, (a, b) in spans.items()]
        out += [Buffer(-1, f"scratch op {op}", self.scratch[op], step, step, kind="scratch", op=op)
                for step, op in enumerate(order, start=1) if self.scratch[op]]
        return out

    def live_bytes(self, order: Sequence[int]) -> list[int]:
        """Bytes live at each step 0..n (scratch included)."""
        return live_bytes_per_step(self.buffers(order))

    def peak(self, order: Sequence[int]) -> int:
        """Most bytes live at one step: no planner can do better for this order."""
        return max(self.live_bytes(order), default=0)

    def op_floor(self) -> int:
        """A bound every order must reach: an operator's inputs, outputs and scratch are all
        live at its step, and the graph inputs are all live at step 0."""
        per_op = (sum(self.sizes[t] for t in {*ins, *outs}) + s
                  for ins, outs, s in zip(self.op_inputs, self.op_outputs, self.scratch))
        start = sum(self.sizes[t] for t in set(self.graph_inputs))
        return max([start, *per_op])


def graph_from_buffers(sg: Subgraph, buffers: Sequence[Buffer]) -> OpGraph:
    """Build the DAG of ``sg`` (the main subgraph) from the buffers TFLM plans for it in
    file order (:func:`simulator.targets.tflm.scratch.tflm_buffers`), so planned-or-not and
    scratch sizes come from one place."""
    sizes = {b.tensor: b.size for b in buffers if b.kind == "tensor" and b.subgraph == sg.index}
    scratch = [0] * len(sg.operators)
    for b in buffers:
        if b.kind == "scratch" and b.subgraph == sg.index:
            scratch[b.op] += b.size

    def planned(refs: Sequence[int]) -> tuple[int, ...]:
        return tuple(dict.fromkeys(t for t in refs if t in sizes))

    graph = OpGraph(
        sizes=sizes,
        op_inputs=tuple(planned(op.inputs) for op in sg.operators),
        op_outputs=tuple(planned(op.outputs) for op in sg.operators),
        scratch=tuple(scratch),
        graph_inputs=planned(sg.inputs),
        graph_outputs=planned(sg.outputs),
    )
    _check(graph)
    return graph


def _check(graph: OpGraph) -> None:
    """Reject graphs whose lifetimes do not follow from the operator order."""
    producers: dict[int, int] = {}
    for op, outs in enumerate(graph.op_outputs):
        for t in outs:
            if t in producers or t in graph.graph_inputs:
                raise InputError(f"tensor {t} is written by more than one operator (or is also "
                                 "a graph input); the optimizer needs each tensor written once")
            producers[t] = op
    for op, ins in enumerate(graph.op_inputs):
        for t in ins:
            if t not in producers and t not in graph.graph_inputs:
                raise InputError(f"operator {op} reads tensor {t}, which no operator writes and "
                                 "is not a graph input")
    if not graph.is_topological(range(graph.n_ops)):
        raise InputError("the operators are not in a valid execution order in the file")
