"""The Edge TPU op table (``edgetpu_ops.yaml``) and its registered constraint checks.

The table is data, every rule cited; each constraint is a small function registered by name
in :data:`OP_CHECKS` / :data:`MODEL_CHECKS` returning ``(ok, detail)``, where ``detail`` is
the user-facing sentence. :mod:`simulator.targets.edgetpu.partition` applies them to partition a model.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from devicefit.simulator.infra.safeyaml import load_own_data
from devicefit.simulator.read.model import Model, Operator, Subgraph, Tensor
from devicefit.simulator.read.reader import constant_values

log = logging.getLogger(__name__)

TABLE_PATH = Path(__file__).with_name("edgetpu_ops.yaml")
EIGHT_BIT = ("int8", "uint8")

# --------------------------------------------------------------------------- the op table


@dataclass(frozen=True)
class CheckSpec:
    name: str
    status: str  # key into OpTable.statuses


@dataclass(frozen=True)
class OpRule:
    op: str
    sources: tuple[str, ...]
    params: tuple[int, ...] = ()
    checks: tuple[CheckSpec, ...] = ()
    max_version: int | None = None
    skip: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParseLimit:
    max_version: int
    why: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class OpTable:
    compiler_version: str
    sources: dict[str, str]
    statuses: dict[str, str]
    model_requirements: tuple[CheckSpec, ...]
    op_requirements: tuple[CheckSpec, ...]
    supported_op_requirements: tuple[CheckSpec, ...]
    parse_max_versions: dict[str, ParseLimit]
    ops: dict[str, OpRule]
    #: Where the partition rule (one subgraph, dataflow, edgetpu.py) comes from.
    partition_sources: tuple[str, ...] = ()

    def status(self, key: str) -> str:
        return self.statuses[key]


@dataclass(frozen=True)
class OpContext:
    """What a constraint check sees: one operator with its tensors and constant data."""

    model: Model
    subgraph: Subgraph
    op: Operator

    def tensor(self, i: int) -> Tensor:
        return self.subgraph.tensors[i]

    def inputs(self) -> list[Tensor]:
        return [self.tensor(i) for i in self.op.inputs if i >= 0]

    def outputs(self) -> list[Tensor]:
        return [self.tensor(i) for i in self.op.outputs if i >= 0]

    def input(self, k: int) -> Tensor | None:
        if k < len(self.op.inputs) and self.op.inputs[k] >= 0:
            return self.tensor(self.op.inputs[k])
        return None

    def constant(self, k: int) -> np.ndarray | None:
        """The data of input ``k`` if it is a constant, as a numpy array of its shape."""
        t = self.input(k)
        if t is None or not t.has_data:
            return None
        return constant_values(self.model, t)


CheckResult = tuple[bool, str]
OpCheck = Callable[[OpContext], CheckResult]
ModelCheck = Callable[[Model], CheckResult]

#: Constraint name → function; the YAML refers to these names.
OP_CHECKS: dict[str, OpCheck] = {}
MODEL_CHECKS: dict[str, ModelCheck] = {}


def op_check(name: str) -> Callable[[OpCheck], OpCheck]:
    def register(fn: OpCheck) -> OpCheck:
        OP_CHECKS[name] = fn
        return fn
    return register


def model_check(name: str) -> Callable[[ModelCheck], ModelCheck]:
    def register(fn: ModelCheck) -> ModelCheck:
        MODEL_CHECKS[name] = fn
        return fn
    return register


def _specs(items: Iterable[Any], default_status: str) -> tuple[CheckSpec, ...]:
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(CheckSpec(item, default_status))
        else:
            out.append(CheckSpec(item["check"], item.get("status", default_status)))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def load_table(path: Path = TABLE_PATH) -> OpTable:
    """Read the op table and verify that every check, status and source it names exists."""
    raw = load_own_data(path)
    ops = {
        name: OpRule(
            op=name,
            sources=tuple(spec.get("source", ())),
            params=tuple(spec.get("params", ())),
            checks=_specs(spec.get("checks", ()), "unspecified"),
            max_version=spec.get("max_version"),
            skip=tuple(spec.get("skip", ())),
        )
        for name, spec in raw["ops"].items()
    }
    table = OpTable(
        compiler_version=str(raw["compiler_version"]),
        sources=dict(raw["sources"]),
        statuses=dict(raw["statuses"]),
        model_requirements=_specs(raw["model_requirements"], "unspecified"),
        op_requirements=_specs(raw["op_requirements"], "unspecified"),
        supported_op_requirements=_specs(raw["supported_op_requirements"], "unspecified"),
        parse_max_versions={
            name: ParseLimit(spec["max"], spec["why"], tuple(spec["source"]))
            for name, spec in raw["parse_max_versions"].items()
        },
        ops=ops,
        partition_sources=tuple(raw["partition"]["source"]),
    )
    _verify_table(table, raw)
    return table


def _verify_table(table: OpTable, raw: dict) -> None:
    problems = []
    for spec in table.model_requirements:
        if spec.name not in MODEL_CHECKS:
            problems.append(f"unknown model check '{spec.name}'")
    for spec in (*table.op_requirements, *table.supported_op_requirements,
                 *(c for r in table.ops.values() for c in r.checks)):
        if spec.name not in OP_CHECKS:
            problems.append(f"unknown op check '{spec.name}'")
        if spec.status not in table.statuses:
            problems.append(f"unknown status '{spec.status}' for check '{spec.name}'")
    cited = [s for r in table.ops.values() for s in r.sources] + list(table.partition_sources)
    cited += [s for lim in table.parse_max_versions.values() for s in lim.sources]
    cited += [s for key in ("model_requirements", "op_requirements", "supported_op_requirements")
              for item in raw[key] for s in item.get("source", ())]
    problems += [f"unknown source '{s}'" for s in cited if s not in table.sources]
    if problems:
        raise ValueError(f"{TABLE_PATH.name}: " + "; ".join(sorted(set(problems))))


# --------------------------------------------------------------------------- the checks


def _dims_over_1(shape: Iterable[int]) -> int:
    return sum(1 for d in shape if d > 1)


#: Operands that decide an op's output shape: when one is not a constant, the interpreter's
#: Prepare leaves the output dynamic-sized (``SetTensorToDynamic``) until it runs.
_SHAPE_OPERANDS: dict[str, tuple[int, ...]] = {
    "RESHAPE": (1,), "BROADCAST_TO": (1,), "FILL": (0,), "TILE": (1,), "PAD": (1,),
    "PADV2": (1,), "MIRROR_PAD": (1,), "SLICE": (1, 2), "STRIDED_SLICE": (1, 2, 3),
    "TRANSPOSE": (1,), "RESIZE_BILINEAR": (1,), "RESIZE_NEAREST_NEIGHBOR": (1,),
    "EXPAND_DIMS": (1,), "SPLIT": (0,), "SPLIT_V": (1, 2), "MEAN": (1,), "SUM": (1,),
    "REDUCE_MAX": (1,), "REDUCE_MIN": (1,), "REDUCE_PROD": (1,), "REDUCE_ANY": (1,),
    "ARG_MAX": (1,), "ARG_MIN": (1,), "RANGE": (0, 1, 2)}
#: Ops whose output size depends on the data itself.
_DATA_SIZED = frozenset({"WHERE", "UNIQUE", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5"})


@model_check("static_shapes")
def _static_shapes(model: Model) -> CheckResult:
    """The compiler runs the model in its TFLite interpreter first, which refuses a graph
    with a dynamic-sized tensor: one whose size is known only when the graph runs (a shape
    operand computed in the graph, a data-sized output). A -1 in a ``shape_signature``
    alone is not one: the interpreter allocates the stored shape, and compiler 16 compiles
    it (LibrEdgeTPU's dense templates, [-1, N] inputs: mapped whole, the compiled file's
    shapes static)."""
    sg = model.main
    for op in sg.operators:
        operands = [op.inputs[i] for i in _SHAPE_OPERANDS.get(op.op_name, ())
                    if i < len(op.inputs) and op.inputs[i] >= 0]
        computed = next((sg.tensors[i] for i in operands if not sg.tensors[i].has_data), None)
        if computed is None and op.op_name not in _DATA_SIZED:
            continue
        out = sg.tensors[op.outputs[0]].name if op.outputs and op.outputs[0] >= 0 else "?"
        why = (f"its shape operand '{computed.name}' is computed in the graph"
               if computed is not None else "its size depends on the data")
        return False, (f"op {op.index} {op.op_name} makes '{out}' dynamic-sized ({why}): "
                       "the Edge TPU compiler refuses graphs with dynamic-sized tensors; "
                       "convert with a fixed batch of 1 so that shapes are constants")
    return True, ""


def _first_not_8bit(tensors: Iterable[Tensor]) -> Tensor | None:
    """The first tensor that is not 8-bit; constants may be int32 (biases, shapes, axes)."""
    return next((t for t in tensors
                 if t.dtype not in ((*EIGHT_BIT, "int32") if t.has_data else EIGHT_BIT)), None)


@op_check("tensors_8bit")
def _tensors_8bit(ctx: OpContext) -> CheckResult:
    if (t := _first_not_8bit((*ctx.inputs(), *ctx.outputs()))) is not None:
        return False, (f"tensor '{t.name}' is {t.dtype}: the Edge TPU needs every tensor "
                       "8-bit quantized (int8/uint8); convert with full-integer quantization")
    return True, ""


#: UNIDIRECTIONAL_SEQUENCE_LSTM's cell state input (schema order); the integer LSTM kernel
#: keeps it in int16.
_LSTM_CELL_STATE = 19


@op_check("lstm_integer")
def _lstm_integer(ctx: OpContext) -> CheckResult:
    """An integer LSTM as TFLite writes it: 8-bit everywhere but the int16 cell state."""
    cell = ctx.input(_LSTM_CELL_STATE)
    if cell is not None and cell.dtype not in (*EIGHT_BIT, "int16"):
        return False, (f"cell state '{cell.name}' is {cell.dtype}: the Edge TPU maps an integer "
                       "LSTM (int8 with an int16 cell state)")
    others = [t for k, t in enumerate(ctx.op.inputs) if t >= 0 and k != _LSTM_CELL_STATE]
    if (t := _first_not_8bit((*(ctx.tensor(i) for i in others), *ctx.outputs()))) is not None:
        return False, (f"tensor '{t.name}' is {t.dtype}: an Edge TPU LSTM needs 8-bit "
                       "inputs, weights, outputs and hidden state (int16 only for the cell "
                       "state); convert with full-integer quantization")
    return True, ""


@op_check("align_corners_keeps_size")
def _align_corners_keeps_size(ctx: OpContext) -> CheckResult:
    if not ctx.op.options.get("align_corners", False):
        return True, ""
    x, out = ctx.input(0), ctx.outputs()[0]
    before = tuple(x.shape[1:3]) if x is not None else ()
    after = tuple(out.shape[1:3])
    if before != after:
        return False, (f"align_corners resize {'x'.join(map(str, before))} -> "
                       f"{'x'.join(map(str, after))}: compilers 15 and 16 leave an "
                       "align_corners resize that changes the size on the CPU; resize with "
                       "half_pixel_centers (or neither) instead")
    return True, ""


@op_check("innermost_3_dims")
def _innermost_3_dims(ctx: OpContext) -> CheckResult:
    for t in (*ctx.inputs(), *ctx.outputs()):
        if not t.has_data and len(t.shape) > 3 and _dims_over_1(t.shape[:-3]):
            return False, (f"tensor '{t.name}' has shape {list(t.shape)}: only the 3 innermost "
                           "dimensions may be larger than 1")
    return True, ""


@op_check("constant_parameters")
def _constant_parameters(ctx: OpContext) -> CheckResult:
    rule = load_table().ops.get(ctx.op.op_name)
    for k in rule.params if rule else ():
        t = ctx.input(k)
        if t is not None and not t.has_data:
            return False, (f"parameter '{t.name}' (input {k}) is computed at run time: weights "
                           "and biases must be compile-time constants")
    return True, ""


@op_check("no_fused_activation")
def _no_fused_activation(ctx: OpContext) -> CheckResult:
    act = ctx.op.options.get("fused_activation_function", "NONE")
    if act not in ("NONE", 0, None):
        return False, f"fused activation {act}: this op maps only without a fused activation"
    return True, ""


@op_check("constant_input_is_zero_padding")
def _constant_input_is_zero_padding(ctx: OpContext) -> CheckResult:
    consts = [k for k, t in enumerate(ctx.inputs()) if t.has_data]
    if not consts:
        return True, ""
    if len(ctx.inputs()) != 2:
        return False, ("a constant input is allowed only with exactly 2 inputs "
                       f"(this op has {len(ctx.inputs())})")
    values = ctx.constant(consts[0])
    if values is None or np.any(values):
        return False, "the constant input must be all zeros (a zero-padding concatenation)"
    return True, ""


@op_check("same_dilation")
def _same_dilation(ctx: OpContext) -> CheckResult:
    w = ctx.op.options.get("dilation_wfactor", 1)
    h = ctx.op.options.get("dilation_hfactor", 1)
    if w != h:
        return False, f"dilation {h}x{w} (h x w): x and y dilation must be the same"
    return True, ""


@op_check("default_weights_format")
def _default_weights_format(ctx: OpContext) -> CheckResult:
    fmt = ctx.op.options.get("weights_format", 0)
    if fmt not in (0, "DEFAULT"):
        return False, f"weights format {fmt}: only the default fully-connected format maps"
    return True, ""


@op_check("output_1d")
def _output_1d(ctx: OpContext) -> CheckResult:
    out = ctx.outputs()[0]
    if _dims_over_1(out.shape) > 1:
        return False, f"output shape {list(out.shape)}: the output must be one-dimensional"
    return True, ""


def _reduction(ctx: OpContext) -> tuple[tuple[int, ...], list[int] | None]:
    """A reduce op's input shape and its (constant) axes, normalised to 0..rank-1."""
    x = ctx.input(0)
    shape = x.shape if x is not None else ()  # a malformed op without its input
    values = ctx.constant(1)
    if values is None or not shape:
        return shape, None
    return shape, sorted({int(a) % len(shape) for a in np.atleast_1d(values)})


@op_check("reduce_not_batch")
def _reduce_not_batch(ctx: OpContext) -> CheckResult:
    shape, axes = _reduction(ctx)
    if axes is None:
        return False, "the reduction axes are not a constant"
    if len(shape) >= 2 and 0 in axes:
        return False, f"reduces over axes {axes}, including the batch axis 0"
    return True, ""


@op_check("z_reduction_multiple_of_4")
def _z_reduction_multiple_of_4(ctx: OpContext) -> CheckResult:
    shape, axes = _reduction(ctx)
    if axes and len(shape) >= 3 and len(shape) - 1 in axes and shape[-1] % 4:
        return False, f"reduces over z (channels) of size {shape[-1]}: z must be a multiple of 4"
    return True, ""


@op_check("pad_not_batch")
def _pad_not_batch(ctx: OpContext) -> CheckResult:
    pads = ctx.constant(1)
    if pads is None:
        return False, "the paddings are not a constant"
    if pads.ndim == 2 and pads.shape[0] >= 2 and np.any(pads[0]):
        return False, f"pads the batch axis by {pads[0].tolist()}"
    return True, ""


@op_check("pack_not_batch")
def _pack_not_batch(ctx: OpContext) -> CheckResult:
    out = ctx.outputs()[0]
    if len(out.shape) >= 2 and int(ctx.op.options.get("axis", 0)) % len(out.shape) == 0:
        return False, "packs along the batch axis 0"
    return True, ""


@op_check("split_not_batch")
def _split_not_batch(ctx: OpContext) -> CheckResult:
    x, axis = ctx.input(1), ctx.constant(0)
    if x is None or axis is None:
        return False, "the split axis is not a constant"
    if len(x.shape) >= 2 and int(np.atleast_1d(axis)[0]) % len(x.shape) == 0:
        return False, "splits along the batch axis 0"
    return True, ""


@op_check("prelu_alpha_1d")
def _prelu_alpha_1d(ctx: OpContext) -> CheckResult:
    alpha = ctx.input(1)
    if alpha is not None and _dims_over_1(alpha.shape[:-1]):
        return False, (f"alpha shape {list(alpha.shape)}: alpha must be 1-D (in Keras, PReLU "
                       "with shared_axes=[1, 2])")
    return True, ""


@op_check("softmax_1d")
def _softmax_1d(ctx: OpContext) -> CheckResult:
    # The 2019 table's "up to 16,000 elements" does not hold for compiler 16: LibrEdgeTPU's
    # 128x128 trackers map a 16,384-element Softmax.
    x = ctx.input(0)
    if x is None:
        return False, "the operator has no input tensor"
    if _dims_over_1(x.shape) > 1:
        return False, f"input shape {list(x.shape)}: Softmax maps only for a 1-D input"
    return True, ""


@op_check("unit_strides")
def _unit_strides(ctx: OpContext) -> CheckResult:
    strides = ctx.constant(3)
    if strides is None or np.any(strides != 1):
        shown = strides.tolist() if strides is not None else "not constant"
        return False, f"strides {shown}: only strides of 1 map"
    for mask in ("ellipsis_mask", "new_axis_mask"):
        if ctx.op.options.get(mask, 0):
            return False, f"{mask} is set: only {mask} == 0 maps"
    return True, ""


@op_check("quantize_8bit_to_8bit")
def _quantize_8bit_to_8bit(ctx: OpContext) -> CheckResult:
    src, dst = ctx.inputs()[0], ctx.outputs()[0]
    if src.dtype not in EIGHT_BIT or dst.dtype not in EIGHT_BIT:
        return False, (f"QUANTIZE {src.dtype} -> {dst.dtype}: only an 8-bit to 8-bit requantize "
                       "maps; give the model 8-bit inputs (inference_input_type int8/uint8)")
    return True, ""
