"""Training-memory estimate of a Keras model: a liveness simulation of one training step.

Persistent memory (parameters, optimizer slots, gradient accumulators) lives for the whole
run. On top of it, one step allocates and frees, in order:

1. forward: each layer's output; tensors the backward pass reads (see ``rules``) stay alive,
   the others are freed once their last consumer ran;
2. backward, layers in reverse: the gradient of each layer's inputs and its parameters;
   a saved tensor is freed once the last gradient that reads it ran;
3. update: all parameter gradients plus the optimizer's per-variable temporaries.

The peak over those events is the step's memory. Activation sizes scale with the batch,
the rest does not, so the peak can move from the update (small batches) to the start of the
backward pass (large batches). The simulation runs in bytes for each batch size asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from devicefit.sdk.train.graph import Graph, Op, trace_model
from devicefit.sdk.train.optimizers import get_optimizer
from devicefit.sdk.train.rules import Rule, im2col_bytes, rule_for
from devicefit.simulator.errors import UsageError

PARAM_BYTES = 4  # variables stay float32, also under mixed_float16
ACTIVATION_BYTES = {"float32": 4, "mixed_float16": 2}


@dataclass(frozen=True)
class LayerMemory:
    """Per-layer figures; ``saved_bytes_per_sample`` is what this layer keeps for backward."""

    name: str
    kind: str
    trainable_params: int
    non_trainable_params: int
    parameter_bytes: int
    gradient_bytes: int
    optimizer_slot_bytes: int
    output_elements_per_sample: int
    saved_bytes_per_sample: int


@dataclass(frozen=True)
class TrainingMemory:
    """One training step's memory at one batch size. ``peak_bytes`` is the estimate."""

    batch_size: int
    optimizer: str
    dtype: str
    parameter_bytes: int
    optimizer_slot_bytes: int
    accumulator_bytes: int
    gradient_bytes: int  # parameter gradients alive at the peak
    activation_bytes: int  # forward tensors kept for the backward, alive at the peak
    #: The most forward tensors kept for the backward at once (as the backward starts);
    #: none are left at a peak in the optimizer update, where small batches peak.
    kept_activation_bytes: int
    workspace_bytes: int  # activation gradients and op temporaries alive at the peak
    input_bytes: int  # the batch itself (inputs and labels)
    peak_bytes: int
    peak_at: str  # where in the step the peak happens

    @property
    def persistent_bytes(self) -> int:
        return self.parameter_bytes + self.optimizer_slot_bytes + self.accumulator_bytes

    @property
    def step_bytes(self) -> int:
        """What one step adds on top of the persistent state (what a measurement sees)."""
        return self.peak_bytes - self.persistent_bytes


@dataclass(frozen=True)
class _Snapshot:
    saved: int
    workspace: int
    grads: int
    where: str

    @property
    def total(self) -> int:
        return self.saved + self.workspace + self.grads


class TrainingMemoryModel:
    """A traced model, ready to estimate its training memory at any batch size."""

    def __init__(self, model: Any, *, optimizer: str = "adam", dtype: str = "float32"):
        if dtype not in ACTIVATION_BYTES:
            raise UsageError(f"unknown dtype '{dtype}'; choose one of "
                             f"{', '.join(ACTIVATION_BYTES)}")
        self.optimizer = get_optimizer(optimizer)
        self.dtype = dtype
        self.graph: Graph = trace_model(model)
        self.rules: list[Rule] = [rule_for(op.layer, op.kind) for op in self.graph.ops]
        self._prepare()

    # -- static analysis (batch independent) ------------------------------------------
    def _prepare(self) -> None:
        g = self.graph
        root = list(range(len(g.buffers)))  # alias ops (reshape) share their input's buffer
        for op, rule in zip(g.ops, self.rules, strict=True):
            if rule.alias and len(op.inputs) == 1:
                for o in op.outputs:
                    root[o] = root[op.inputs[0]]
        self.root = root
        needs_grad = [False] * len(g.buffers)
        has_backward = []
        for op in g.ops:
            runs = op.trainable_params > 0 or any(needs_grad[root[i]] for i in op.inputs)
            has_backward.append(runs)
            for o in op.outputs:
                needs_grad[o] = needs_grad[o] or runs
        self.needs_grad = needs_grad
        self.has_backward = has_backward
        # Forward consumers per buffer, and the earliest op (= last in the backward order)
        # whose gradient reads it.
        self.consumers = [0] * len(g.buffers)
        self.last_reader: dict[int, int] = {}
        for k, (op, rule) in enumerate(zip(g.ops, self.rules, strict=True)):
            if rule.alias:
                continue
            for i in op.inputs:
                self.consumers[root[i]] += 1
            if not has_backward[k]:
                continue
            read = (op.inputs if rule.saves_inputs else []) + \
                (op.outputs if rule.saves_output else [])
            for b in read:
                self.last_reader[root[b]] = min(self.last_reader.get(root[b], k), k)
        self.outputs = {root[o] for o in g.model_outputs}
        self.trainable = sum(op.trainable_params for op in g.ops)
        self.non_trainable = sum(op.non_trainable_params for op in g.ops)
        self.largest_variable = max((math.prod(s) for op in g.ops for s in op.trainable_shapes),
                                    default=0)

    def layers(self) -> list[LayerMemory]:
        a = ACTIVATION_BYTES[self.dtype]
        rows = []
        for k, (op, rule) in enumerate(zip(self.graph.ops, self.rules, strict=True)):
            out = sum(self.graph.buffers[o].elements for o in op.outputs)
            saved = 0
            if self.has_backward[k]:
                # Attribute a shared saved tensor to its producer, private ones to the layer.
                saved = int(rule.extra_saved * out) + sum(
                    self.graph.buffers[o].elements for o in op.outputs
                    if self.root[o] == o and self.root[o] in self.last_reader)
            rows.append(LayerMemory(
                name=op.name, kind=op.kind, trainable_params=op.trainable_params,
                non_trainable_params=op.non_trainable_params,
                parameter_bytes=(op.trainable_params + op.non_trainable_params) * PARAM_BYTES,
                gradient_bytes=op.trainable_params * PARAM_BYTES,
                optimizer_slot_bytes=op.trainable_params * PARAM_BYTES * self.optimizer.slots,
                output_elements_per_sample=out, saved_bytes_per_sample=saved * a))
        return rows

    # -- the simulation ----------------------------------------------------------------
    def estimate(self, batch_size: int, *, accumulation_steps: int = 1) -> TrainingMemory:
        if batch_size < 1:
            raise UsageError(f"batch size must be at least 1, got {batch_size}")
        g, root, a = self.graph, self.root, ACTIVATION_BYTES[self.dtype]

        def size(b: int) -> int:
            return g.buffers[b].elements * batch_size * a

        def fixed_private(op: Op) -> int:
            # Under mixed precision each layer casts its kernel to float16 in the forward
            # and the gradient reads that copy.
            return op.trainable_params * 2 if self.dtype == "mixed_float16" else 0

        inputs = sum(size(b) for b in range(len(g.buffers)) if g.buffers[b].is_model_input)
        labels = sum(g.buffers[o].elements * batch_size * 4 for o in g.model_outputs)
        snaps: list[_Snapshot] = []
        live: dict[int, int] = {}  # buffer root -> bytes, forward tensors alive
        private: dict[int, int] = {}  # op index -> private saved bytes
        remaining = list(self.consumers)

        def saved_now() -> int:
            return sum(live.values()) + sum(private.values())

        for k, (op, rule) in enumerate(zip(g.ops, self.rules, strict=True)):
            if rule.alias:
                continue
            out = sum(size(o) for o in op.outputs)
            snaps.append(_Snapshot(saved_now(), out + int(rule.forward_temp * out), 0,
                                   f"forward {op.name}"))
            for o in op.outputs:
                live[root[o]] = size(o)
            if self.has_backward[k]:
                private[k] = int(rule.extra_saved * out) + fixed_private(op)
            for i in op.inputs:
                r = root[i]
                remaining[r] -= 1
                if remaining[r] == 0 and r not in self.last_reader and r not in self.outputs:
                    live.pop(r, None)
        # The loss reads the outputs and leaves the gradient of each output.
        out_grads = {r: live.get(r, 0) for r in self.outputs}
        snaps.append(_Snapshot(saved_now(), 2 * sum(out_grads.values()), 0, "loss"))
        for r in [r for r in live if r not in self.last_reader]:
            live.pop(r)  # outputs that no gradient reads
        grads = dict(out_grads)
        param_grads = 0
        for k in range(len(g.ops) - 1, -1, -1):
            op, rule = g.ops[k], self.rules[k]
            if rule.alias or not self.has_backward[k]:
                continue
            if rule.inplace_grad and op.inputs and root[op.inputs[0]] not in grads:
                # The first input's gradient takes over the output gradient's buffer.
                grads[root[op.inputs[0]]] = sum(grads.pop(root[o], 0) for o in op.outputs)
            for i in op.inputs:
                # TF's gradient functions return the input gradient even where nobody needs
                # it (a model input, e.g. the first convolution's); that one is freed at once.
                grads.setdefault(root[i], size(i))
            param_grads += op.trainable_params * PARAM_BYTES
            out = sum(size(o) for o in op.outputs)
            temp = int(rule.backward_temp * out)
            if rule.im2col:
                temp += im2col_bytes(op.layer, out // a // batch_size, batch_size, a)
            snaps.append(_Snapshot(saved_now(), sum(grads.values()) + temp, param_grads,
                                   f"backward {op.name}"))
            for o in op.outputs:
                grads.pop(root[o], None)
            for i in op.inputs:
                if not self.needs_grad[root[i]]:
                    grads.pop(root[i], None)
            private.pop(k, None)
            for r in [r for r, last in self.last_reader.items() if last == k]:
                live.pop(r, None)
        if live or private:  # every kept tensor must have been freed by its last reader
            raise AssertionError(f"liveness simulation left tensors alive: {live} {private}")
        update_ws = self.optimizer.update_temps * self.largest_variable * PARAM_BYTES
        snaps.append(_Snapshot(0, update_ws, param_grads, "optimizer update"))
        peak = max(snaps, key=lambda s: s.total)
        params = (self.trainable + self.non_trainable) * PARAM_BYTES
        slots = self.trainable * PARAM_BYTES * self.optimizer.slots
        accum = self.trainable * PARAM_BYTES if accumulation_steps > 1 else 0
        return TrainingMemory(
            batch_size=batch_size, optimizer=self.optimizer.name, dtype=self.dtype,
            parameter_bytes=params, optimizer_slot_bytes=slots, accumulator_bytes=accum,
            gradient_bytes=peak.grads, activation_bytes=peak.saved,
            kept_activation_bytes=max(s.saved for s in snaps),
            workspace_bytes=peak.workspace, input_bytes=inputs + labels,
            peak_bytes=params + slots + accum + peak.total + inputs + labels,
            peak_at=peak.where)
