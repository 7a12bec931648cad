"""The memory a model's ``train`` signature needs on the device, planned before it runs.

A trainable ``.tflite`` (``train``/``infer``/``save``/``restore`` signatures, its weights
and optimizer state as resource variables) runs a training step in one subgraph. What the
runtime allocates for it is that subgraph's arena, planned by the target's rules (LiteRT:
:func:`simulator.targets.litert.planner.plan_subgraph`, which places the tensors like
``ArenaPlanner`` with the kernels' temporaries), plus one buffer per resource variable,
sized from the shapes the variable's ``READ_VARIABLE`` and ``ASSIGN_VARIABLE`` operators
carry (LiteRT allocates a variable when it is first assigned, apart from any arena).

The parts say where the bytes go: a variable the forward pass reads (an ancestor of the
signature's outputs, the loss) is a trainable weight; one the signature assigns but the
forward pass does not read is optimizer state. The arena is split at its fullest step: the
signature's inputs (the batch), tensors of the forward pass still live (saved
activations), the other tensors (gradients and the updated values), the copies
``READ_VARIABLE`` makes of the variables, the kernels' temporaries, and the gaps the
placement leaves there.

What it leaves out, and why the figure is an estimate: the kernels' own data (OpData), the
temporaries of kernels other than those :func:`kernel_temporaries
<simulator.targets.litert.planner.kernel_temporaries>` knows, the subgraph that initialises
the variables (constants and handles only), the interpreter's own structures and the model
file itself (the flash budget's).
"""

from __future__ import annotations

from devicefit.simulator.errors import InputError
from devicefit.simulator.plan.lifetimes import live_bytes_per_step
from devicefit.simulator.read.model import Model, Operator, Subgraph
from devicefit.simulator.target import TARGETS, Target
from devicefit.simulator.types import Basis, MemoryPlan, TrainingPlan

__all__ = ["TrainingPlan", "cannot_train", "plan_training"]

#: The signature a trainable model runs a training step in (LiteRT's on-device training).
TRAIN = "train"


def cannot_train(target: Target) -> str | None:
    """Why ``target`` cannot run a train signature; None when it can."""
    if target.signature_planner is not None:
        return None
    return f"{target.title} has no training: the train signature cannot run on this target"


def plan_training(model: Model, signature: str = TRAIN, target: Target | None = None
                  ) -> TrainingPlan:
    """What ``target``'s runtime (LiteRT by default) allocates to run ``signature`` once.

    Raises :class:`InputError` when the model has no such signature or the target cannot
    run one (:func:`cannot_train`)."""
    target = target if target is not None else TARGETS["litert"]
    if target.signature_planner is None:
        raise InputError(cannot_train(target) or "")
    sig = model.signature(signature)
    if sig is None:
        have = ", ".join(f"'{s.key}'" for s in model.signatures) or "none"
        raise InputError(f"{model.path}: the model has no '{signature}' signature "
                         f"(its signatures: {have})")
    sg = model.subgraphs[sig.subgraph]
    arena = target.signature_planner(model, sig.subgraph)
    sizes = _variable_sizes(model)
    handles = _handles(sg)
    forward = _forward_ops(sg, [t for _, t in sig.outputs])
    read = {handles[op.inputs[0]] for op in forward
            if op.op_name == "READ_VARIABLE" and op.inputs[0] in handles}
    assigned = {handles[op.inputs[0]] for op in sg.operators
                if op.op_name == "ASSIGN_VARIABLE" and op.inputs[0] in handles}
    trainable = sum(sizes[v] for v in read & assigned)
    state = sum(sizes[v] for v in assigned - read)
    variables = sum(sizes.values())
    batch_tensors = [t for _, t in sig.inputs]
    # What the kernels keep outside the arena (the planner's tail, the subgraph's own
    # variable tensors aside: a trainable model's variables are resources, counted above).
    kept = {k: v for k, v in arena.tail_breakdown.items() if k != "variables"}
    parts = {"trainable weights": trainable, "optimizer state": state,
             "other variables": variables - trainable - state,
             **_arena_parts(arena, sg, batch_tensors, forward), **kept}
    first = sg.tensors[batch_tensors[0]].shape if batch_tensors else ()
    return TrainingPlan(
        signature=signature, subgraph=sig.subgraph, batch=first[0] if first else 1,
        arena_bytes=arena.head_bytes, variables_bytes=variables,
        total_bytes=arena.head_bytes + variables + sum(kept.values()), parts=parts, basis=Basis.ESTIMATED,
        notes=(*arena.notes, "the interpreter's structures and the kernels' own data are a "
               "per-operator figure measured on other models; not included: the subgraph that "
               "initialises the variables and the model file"))


def _handles(sg: Subgraph) -> dict[int, str]:
    """Resource tensor → the variable it names (``VAR_HANDLE``'s container/shared_name,
    which every subgraph that uses the variable repeats)."""
    return {op.outputs[0]: f"{op.options.get('container') or ''}/"
                           f"{op.options.get('shared_name') or ''}"
            for op in sg.operators if op.op_name == "VAR_HANDLE" and op.outputs}


def _variable_sizes(model: Model) -> dict[str, int]:
    """Bytes of every resource variable of the model, from the values its subgraphs read
    from and assign to it."""
    sizes: dict[str, int] = {}
    for sg in model.subgraphs:
        handles = _handles(sg)
        for op in sg.operators:
            value = (op.outputs[0] if op.op_name == "READ_VARIABLE" and op.outputs else
                     op.inputs[1] if op.op_name == "ASSIGN_VARIABLE" and len(op.inputs) > 1
                     else None)
            if value is not None and op.inputs and op.inputs[0] in handles:
                name = handles[op.inputs[0]]
                sizes[name] = max(sizes.get(name, 0), sg.tensors[value].nbytes)
    return sizes


def _forward_ops(sg: Subgraph, outputs: list[int]) -> list[Operator]:
    """The operators the signature's outputs depend on (the forward pass to the loss)."""
    producer = {t: op for op in sg.operators for t in op.outputs}
    seen: set[int] = set()
    stack = [t for t in outputs if t in producer]
    while stack:
        op = producer[stack.pop()]
        if op.index in seen:
            continue
        seen.add(op.index)
        stack.extend(t for t in op.inputs if t in producer and producer[t].index not in seen)
    return [op for op in sg.operators if op.index in seen]


def _arena_parts(arena: MemoryPlan, sg: Subgraph, batch: list[int],
                 forward: list[Operator]) -> dict[str, int]:
    """The arena at its fullest step, by what its live buffers hold (adds up to the head).
    A variable read is a copy in the arena (``READ_VARIABLE`` copies the variable)."""
    reads = {t for op in sg.operators if op.op_name == "READ_VARIABLE" for t in op.outputs}
    activations = {t for op in forward for t in op.outputs} - reads
    live = live_bytes_per_step(arena.buffers)
    peak = max(range(len(live)), key=live.__getitem__, default=0)
    parts = dict.fromkeys(("batch", "saved activations", "gradients", "variable copies",
                           "kernel temporaries"), 0)
    for b in arena.buffers:
        if b.first <= peak <= b.last:
            kind = ("kernel temporaries" if b.kind == "scratch" else
                    "batch" if b.tensor in batch else "variable copies" if b.tensor in reads
                    else "saved activations" if b.tensor in activations else "gradients")
            parts[kind] += b.size
    return parts | {"arena gaps": arena.head_bytes - sum(parts.values())}
