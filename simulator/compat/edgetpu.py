"""Edge TPU: which operators the Edge TPU compiler maps to the TPU, which stay on the CPU, why,
and what that costs (parameter cache, link traffic, latency).

The op table is data (``edgetpu_ops.yaml``, every rule cited); the constraints are small
functions registered by name in :data:`OP_CHECKS` / :data:`MODEL_CHECKS`, each returning
``(ok, detail)`` where ``detail`` is the user-facing sentence.

Partition, as the compiler does it by default (one Edge TPU subgraph, edgetpu#461): ops run in
execution order; unmappable ops before the first mappable one stay on the CPU (e.g. a float
input QUANTIZE); the TPU segment runs from the first mappable op up to the first op that
cannot map; that op and every op after it run on the CPU, the mappable ones with "More than
one subgraph is not supported". Parameters of mapped ops are cached on chip in execution
order while they fit the profile's ``param_cache_bytes``; the rest are streamed over the link
every inference. The figures are predictions; :func:`run_compiler` runs the real
``edgetpu_compiler`` when it is installed and :func:`parse_compiler_log` reads its output.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simulator.model import Model, Operator, Subgraph, Tensor
from simulator.profiles import Profile

log = logging.getLogger(__name__)

TABLE_PATH = Path(__file__).with_name("edgetpu_ops.yaml")
COMPILER = "edgetpu_compiler"
#: The compiler stops itself after 180 s ("Started a compilation timeout timer of 180
#: seconds"); the child process gets a margin on top before devicefit gives up on it.
COMPILER_TIMEOUT_S = 240.0
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
        return _constant_data(self.model, t)


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
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
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
    cited = [s for r in table.ops.values() for s in r.sources]
    cited += [s for lim in table.parse_max_versions.values() for s in lim.sources]
    cited += [s for key in ("model_requirements", "op_requirements", "supported_op_requirements")
              for item in raw[key] for s in item.get("source", ())]
    problems += [f"unknown source '{s}'" for s in cited if s not in table.sources]
    if problems:
        raise ValueError(f"{TABLE_PATH.name}: " + "; ".join(sorted(set(problems))))


# --------------------------------------------------------------------------- constant data


@functools.lru_cache(maxsize=4)
def _flatbuffer(path: str, sha256: str) -> bytes | None:
    """The model file's bytes if it is still the file the IR was read from."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def _constant_data(model: Model, t: Tensor) -> np.ndarray | None:
    """A constant tensor's values, read from the model file (the IR keeps only sizes)."""
    from ai_edge_litert import schema_py_generated as fb

    data = _flatbuffer(model.path, model.sha256)
    if data is None:
        return None
    buf = fb.Model.GetRootAs(data, 0).Buffers(t.buffer)
    offset, size = int(buf.Offset()), int(buf.Size())
    raw = data[offset:offset + size] if offset > 1 else buf.DataAsNumpy().tobytes()
    dtype = np.dtype(t.dtype) if t.dtype in ("int8", "uint8", "int32", "int64", "float32",
                                             "int16", "float16") else None
    if dtype is None or len(raw) < t.num_elements * dtype.itemsize:
        return None
    return np.frombuffer(raw, dtype=dtype, count=t.num_elements).reshape(t.shape)


# --------------------------------------------------------------------------- the checks


def _dims_over_1(shape: Iterable[int]) -> int:
    return sum(1 for d in shape if d > 1)


@model_check("static_shapes")
def _static_shapes(model: Model) -> CheckResult:
    dynamic = [t for t in model.main.tensors if t.is_dynamic]
    if dynamic:
        t = dynamic[0]
        return False, (f"tensor '{t.name}' has a dynamic shape {list(t.shape_signature or ())}: "
                       "the Edge TPU compiler refuses graphs with dynamic-sized tensors; "
                       "convert with a fixed batch of 1")
    return True, ""


@model_check("not_yet_compiled")
def _not_yet_compiled(model: Model) -> CheckResult:
    compiled = [op for op in model.main.operators if op.op_name == "CUSTOM:edgetpu-custom-op"]
    if compiled:
        return False, (f"op {compiled[0].index} is an edgetpu-custom-op: this model is already "
                       "compiled for the Edge TPU; give devicefit the .tflite from before "
                       "edgetpu_compiler")
    return True, ""


@op_check("tensors_8bit")
def _tensors_8bit(ctx: OpContext) -> CheckResult:
    for t in (*ctx.inputs(), *ctx.outputs()):
        # Constants may be int32 (biases, shapes, axes); everything else must be 8-bit.
        allowed = (*EIGHT_BIT, "int32") if t.has_data else EIGHT_BIT
        if t.dtype not in allowed:
            return False, (f"tensor '{t.name}' is {t.dtype}: the Edge TPU needs every tensor "
                           "8-bit quantized (int8/uint8); convert with full-integer quantization")
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
    w = ctx.op.options.get("dilation_w_factor", 1)
    h = ctx.op.options.get("dilation_h_factor", 1)
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
    shape = ctx.input(0).shape
    values = ctx.constant(1)
    if values is None:
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


@op_check("softmax_1d_max_16000")
def _softmax_1d_max_16000(ctx: OpContext) -> CheckResult:
    x = ctx.input(0)
    if _dims_over_1(x.shape) > 1:
        return False, f"input shape {list(x.shape)}: Softmax maps only for a 1-D input"
    if x.num_elements > 16000:
        return False, f"{x.num_elements} elements: Softmax maps only up to 16,000 elements"
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


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class OpPlacement:
    index: int
    op: str
    version: int
    device: str  # "tpu" | "cpu"
    #: The compiler's status text: "Mapped to Edge TPU" or why not.
    status: str
    #: What exactly is wrong, for a person ("" when mapped).
    reason: str = ""
    param_bytes: int = 0
    #: Where the op's parameters live: "on-chip", "off-chip" (streamed) or "" (none / CPU).
    params_in: str = ""


@dataclass(frozen=True)
class OpTableRow:
    operator: str
    count: int
    status: str


@dataclass(frozen=True)
class FirstUnmapped:
    index: int
    op: str
    reason: str
    status: str


@dataclass
class LatencySplit:
    """Estimated time per inference, from the profile's cost model."""

    tpu_compute_ms: float
    link_ms: float
    cpu_ms: float
    #: The fixed cost of invoking the TPU once (driver, USB/PCIe round trips); 0 with no
    #: op on the TPU.
    invoke_ms: float
    total_ms: float
    #: Bytes over USB/PCIe per inference: TPU segment inputs/outputs + streamed parameters.
    link_bytes: int
    boundary_in_bytes: int
    boundary_out_bytes: int
    tpu_macs: int
    cpu_macs: int
    #: ``{op_index, op, device, dtype, macs, bytes_moved, estimated_ms}`` per operator.
    per_op: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CompilerLog:
    """Figures read from a real ``edgetpu_compiler`` run (stdout and/or its ``.log``)."""

    version: str | None = None
    on_chip_used_bytes: int | None = None
    on_chip_remaining_bytes: int | None = None
    off_chip_bytes: int | None = None
    subgraphs: int | None = None
    total_ops: int | None = None
    tpu_ops: int | None = None
    cpu_ops: int | None = None
    table: list[OpTableRow] = field(default_factory=list)
    error: str | None = None


@dataclass
class EdgeTpuReport:
    compiler_version: str
    #: "predicted" from the op table, or "compiler" when a real compiler run is attached.
    basis: str
    #: Why the compiler would produce no Edge TPU model at all (None when it compiles).
    compile_error: str | None
    total_ops: int
    mapped_ops: int
    cpu_ops: int
    tpu_subgraphs: int
    #: First and last op index of the TPU segment (inclusive), or None.
    segment: tuple[int, int] | None
    first_unmapped: FirstUnmapped | None
    param_cache_bytes: int | None
    onchip_param_bytes: int
    offchip_param_bytes: int
    ops: list[OpPlacement]
    table: list[OpTableRow]
    latency: LatencySplit | None = None
    compiler: CompilerLog | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def fully_mapped(self) -> bool:
        return self.compile_error is None and self.cpu_ops == 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _first_failure(ctx: OpContext, table: OpTable, specs: Iterable[CheckSpec],
                   skip: tuple[str, ...] = (), prefix: str = "") -> tuple[str, str] | None:
    for spec in specs:
        if spec.name not in skip:
            ok, detail = OP_CHECKS[spec.name](ctx)
            if not ok:
                return table.status(spec.status), prefix + detail
    return None


def _own_status(ctx: OpContext, table: OpTable) -> tuple[str, str] | None:
    """Why the op cannot map by itself, as (status, reason); None when it can."""
    op = ctx.op
    rule = table.ops.get(op.op_name)
    failure = _first_failure(ctx, table, table.op_requirements, rule.skip if rule else ())
    if failure or rule is None:
        kind = "custom op" if op.is_custom else op.op_name
        return failure or (table.status("not_supported"), f"{kind} is not in the Edge TPU op table")
    failure = _first_failure(ctx, table, table.supported_op_requirements, rule.skip)
    if failure is None and rule.max_version is not None and op.version > rule.max_version:
        failure = table.status("version"), (
            f"{op.op_name} v{op.version}: the compiler maps up to v{rule.max_version} "
            "(v3 comes from half_pixel_centers/align_corners; resize without them)")
    return failure or _first_failure(ctx, table, rule.checks, prefix=f"{op.op_name}: ")


def _compile_error(model: Model, table: OpTable) -> str | None:
    for spec in table.model_requirements:
        ok, detail = MODEL_CHECKS[spec.name](model)
        if not ok:
            return detail
    for op in model.main.operators:
        limit = table.parse_max_versions.get(op.op_name)
        if limit is not None and op.version > limit.max_version:
            return (f"op {op.index} {op.op_name} is version {op.version} but compiler "
                    f"{table.compiler_version} reads up to v{limit.max_version} ({limit.why}): "
                    "the compiler cannot parse the model")
    return None


def _group(ops: list[OpPlacement]) -> list[OpTableRow]:
    """Rows like the compiler's log: one per (operator, status), in order of appearance."""
    counts: dict[tuple[str, str], int] = {}
    for p in ops:
        counts[(p.op, p.status)] = counts.get((p.op, p.status), 0) + 1
    return [OpTableRow(op, n, status) for (op, status), n in counts.items()]


def _param_tensors(sg: Subgraph, op: Operator) -> list[Tensor]:
    return [sg.tensors[i] for i in op.inputs if i >= 0 and sg.tensors[i].has_data]


def partition(model: Model, profile: Profile | None = None) -> EdgeTpuReport:
    """Predict the compiler's partition and parameter caching (no latency, no compiler run)."""
    table = load_table()
    sg = model.main
    error = _compile_error(model, table)
    own: list[tuple[str, str] | None] = []
    for op in sg.operators:
        own.append(("", error) if error else _own_status(OpContext(model, sg, op), table))
    mappable = [s is None for s in own]
    start = next((i for i, ok in enumerate(mappable) if ok), None)
    end = start
    while end is not None and end + 1 < len(mappable) and mappable[end + 1]:
        end += 1
    cache = profile.cost_model.param_cache_bytes if profile is not None else None
    onchip = offchip = 0
    seen_buffers: set[int] = set()
    placements = []
    for op, status in zip(sg.operators, own):
        on_tpu = start is not None and start <= op.index <= end
        if on_tpu:
            fresh = [t for t in _param_tensors(sg, op) if t.buffer not in seen_buffers]
            seen_buffers.update(t.buffer for t in fresh)
            nbytes = sum(model.buffer_sizes[t.buffer] for t in fresh)
            fits = cache is None or onchip + nbytes <= cache
            onchip, offchip = (onchip + nbytes, offchip) if fits else (onchip, offchip + nbytes)
            placements.append(OpPlacement(op.index, op.op_name, op.version, "tpu",
                                          table.status("mapped"), "", nbytes,
                                          ("on-chip" if fits else "off-chip") if nbytes else ""))
        elif error:
            placements.append(OpPlacement(op.index, op.op_name, op.version, "cpu",
                                          "Model not compiled", error))
        elif status is None:  # mappable, but after the segment ended
            placements.append(OpPlacement(
                op.index, op.op_name, op.version, "cpu", table.status("subgraph"),
                f"runs on the CPU after op {end + 1} left the single Edge TPU subgraph"))
        else:
            placements.append(OpPlacement(op.index, op.op_name, op.version, "cpu", *status))
    first = next((p for p in placements if p.device == "cpu"
                  and p.status != table.status("subgraph")), None)
    mapped = sum(p.device == "tpu" for p in placements)
    return EdgeTpuReport(
        compiler_version=table.compiler_version,
        basis="predicted",
        compile_error=error,
        total_ops=len(placements),
        mapped_ops=mapped,
        cpu_ops=len(placements) - mapped,
        tpu_subgraphs=1 if mapped else 0,
        segment=(start, end) if mapped else None,
        first_unmapped=FirstUnmapped(first.index, first.op, first.reason, first.status)
        if first else None,
        param_cache_bytes=cache,
        onchip_param_bytes=onchip,
        offchip_param_bytes=offchip,
        ops=placements,
        table=_group(placements),
    )


# --------------------------------------------------------------------------- compiler log

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(B|KiB|MiB|GiB)\s*$")
_SIZE_FACTORS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_ROW = re.compile(r"^([A-Z][A-Z0-9_]*|CUSTOM\S*)\s{2,}(\d+)\s{2,}(\S.*?)\s*$")
_SUMMARY = {
    "On-chip memory used for caching model parameters": ("on_chip_used_bytes", "size"),
    "On-chip memory remaining for caching model parameters": ("on_chip_remaining_bytes", "size"),
    "Off-chip memory used for streaming uncached model parameters": ("off_chip_bytes", "size"),
    "Number of Edge TPU subgraphs": ("subgraphs", "int"),
    "Total number of operations": ("total_ops", "int"),
    "Number of operations that will run on Edge TPU": ("tpu_ops", "int"),
    "Number of operations that will run on CPU": ("cpu_ops", "int"),
}
_ERRORS = ("ERROR:", "Invalid model", "Model could not be parsed", "Compilation failed",
           "Internal compiler error")


def _compiler_size(text: str) -> int | None:
    """``7.67MiB`` → bytes. The compiler rounds to 2 decimals, so this is ±0.5 % at most."""
    m = _SIZE.match(text)
    return round(float(m.group(1)) * _SIZE_FACTORS[m.group(2)]) if m else None


def parse_compiler_log(text: str) -> CompilerLog:
    """Read ``edgetpu_compiler`` stdout (``-s``) or its ``*_edgetpu.log`` into figures."""
    out = CompilerLog()
    errors = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Edge TPU Compiler version"):
            out.version = stripped.rsplit(" ", 1)[-1]
            continue
        key, sep, value = stripped.partition(":")
        if sep and key in _SUMMARY:
            attr, kind = _SUMMARY[key]
            parsed = _compiler_size(value) if kind == "size" else int(value.strip())
            setattr(out, attr, parsed)
            continue
        if stripped.startswith(_ERRORS) and "successfully" not in stripped:
            errors.append(stripped)
            continue
        m = _ROW.match(stripped)
        if m and m.group(1) != "Operator":
            out.table.append(OpTableRow(m.group(1), int(m.group(2)), m.group(3)))
    if errors:
        out.error = " ".join(errors)
    if out.table:
        mapped = sum(r.count for r in out.table if r.status == "Mapped to Edge TPU")
        total = sum(r.count for r in out.table)
        # The summary lines are missing from the .log and from fully mapped compilations.
        out.tpu_ops = mapped if out.tpu_ops is None else out.tpu_ops
        out.cpu_ops = total - mapped if out.cpu_ops is None else out.cpu_ops
        out.total_ops = total if out.total_ops is None else out.total_ops
    return out


def compiler_available() -> bool:
    return shutil.which(COMPILER) is not None


def run_compiler(model_path: str | Path, timeout_s: float = COMPILER_TIMEOUT_S) -> CompilerLog:
    """Run the real ``edgetpu_compiler`` (child process, timeout) into a temp folder; parse it.

    A crash, a refusal or a timeout is recorded in ``CompilerLog.error``, not raised: the
    prediction stands on its own and the compiler's word is reported beside it.
    """
    exe = shutil.which(COMPILER)
    if exe is None:
        return CompilerLog(error=f"{COMPILER} is not on PATH")
    with tempfile.TemporaryDirectory(prefix="devicefit-edgetpu-") as tmp:
        try:
            proc = subprocess.run([exe, "-s", "-o", tmp, str(Path(model_path).resolve())],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            parsed = CompilerLog(error=f"{COMPILER} did not finish within {timeout_s:.0f} s")
        except OSError as exc:
            parsed = CompilerLog(error=f"{COMPILER} could not start: {exc}")
        else:
            text = proc.stdout + "\n" + proc.stderr
            parsed = parse_compiler_log(text)
            logs = sorted(Path(tmp).glob("*_edgetpu.log"))
            if not parsed.table and logs:  # the per-op table only went to the .log file
                parsed = parse_compiler_log(text + "\n" + logs[0].read_text(errors="replace"))
            if proc.returncode != 0 and parsed.error is None:
                parsed.error = f"{COMPILER} exited with status {proc.returncode}"
    if parsed.error:
        log.warning("%s on %s: %s", COMPILER, model_path, parsed.error)
    return parsed


# --------------------------------------------------------------------------- latency


def _boundary_bytes(model: Model, segment: tuple[int, int]) -> tuple[int, int]:
    """Bytes into and out of the TPU segment per inference (graph I/O and CPU hand-overs)."""
    sg = model.main
    first, last = segment
    inside = range(first, last + 1)
    produced_by: dict[int, int] = {t: op.index for op in sg.operators for t in op.outputs}
    consumed_by: dict[int, set[int]] = {}
    for op in sg.operators:
        for t in op.inputs:
            consumed_by.setdefault(t, set()).add(op.index)
    ins: set[int] = set()
    outs: set[int] = set()
    for i in inside:
        op = sg.operators[i]
        ins.update(t for t in op.inputs if t >= 0 and not sg.tensors[t].has_data
                   and produced_by.get(t, -1) not in inside)
        outs.update(t for t in op.outputs if t >= 0 and (
            t in sg.outputs or any(c not in inside for c in consumed_by.get(t, ()))))
    return (sum(sg.tensors[t].nbytes for t in ins), sum(sg.tensors[t].nbytes for t in outs))


def estimate_split_latency(model: Model, report: EdgeTpuReport, profile: Profile) -> LatencySplit:
    """TPU compute + link traffic + a fixed invoke cost + CPU fallback, from the cost model.

    TPU: mapped MACs at ``tpu_macs_per_second × tpu_efficiency`` (the peak is never reached
    on real layers). Link: the segment's input and output tensors plus the streamed
    (off-chip) parameters cross USB/PCIe every inference, at ``link_bandwidth``. Invoke:
    ``invoke_overhead`` once per inference when any op runs on the TPU (driver and link round
    trips; it dominates small models). CPU: the ops left on the host, with the host CPU cost
    model (:func:`simulator.latency.estimate_latency`). The built-in profile's constants are
    fitted to Coral's published latencies (``benchmarks/bench_edgetpu_latency.py``).
    """
    from simulator.compute import op_work
    from simulator.latency import estimate_latency
    from simulator.report import OpCompute

    cost = profile.cost_model
    tpu_rate = cost.tpu_macs_per_second * cost.tpu_efficiency
    work = op_work(model)
    on_tpu = {p.index for p in report.ops if p.device == "tpu"}
    tpu_macs = sum(w.macs for w in work if w.op_index in on_tpu)
    cpu_work = [OpCompute(w.op_index, w.op, w.macs, w.bytes_moved)
                for w in work if w.op_index not in on_tpu]
    cpu = estimate_latency(model, cpu_work, profile) if cpu_work else None
    cpu_ms = {o.op_index: o.ms for o in cpu.per_op} if cpu else {}
    b_in, b_out = _boundary_bytes(model, report.segment) if report.segment else (0, 0)
    link_bytes = b_in + b_out + report.offchip_param_bytes
    per_op = []
    for w in work:
        device = "tpu" if w.op_index in on_tpu else "cpu"
        ms = 1e3 * w.macs / tpu_rate if device == "tpu" else cpu_ms[w.op_index]
        per_op.append({"op_index": w.op_index, "op": w.op, "device": device, "dtype": w.dtype,
                       "macs": w.macs, "bytes_moved": w.bytes_moved, "estimated_ms": ms})
    tpu_ms = sum(o["estimated_ms"] for o in per_op if o["device"] == "tpu")
    link_ms = 1e3 * link_bytes / cost.link_bytes_per_second
    invoke_ms = cost.invoke_overhead_ms if on_tpu else 0.0
    total_cpu = cpu.total_ms if cpu else 0.0
    return LatencySplit(
        tpu_compute_ms=tpu_ms, link_ms=link_ms, cpu_ms=total_cpu, invoke_ms=invoke_ms,
        total_ms=tpu_ms + link_ms + invoke_ms + total_cpu, link_bytes=link_bytes,
        boundary_in_bytes=b_in, boundary_out_bytes=b_out, tpu_macs=tpu_macs,
        cpu_macs=sum(c.macs for c in cpu_work), per_op=per_op)


# --------------------------------------------------------------------------- entry points


def edgetpu_partition(model: Model, profile: Profile) -> EdgeTpuReport:
    """The Edge TPU prediction for ``model`` on an ``edgetpu`` ``profile``: partition,
    parameter cache and latency split. Static analysis only (no compiler run)."""
    report = partition(model, profile)
    cost = profile.cost_model
    if cost.tpu_macs_per_second and cost.link_bytes_per_second:
        report.latency = estimate_split_latency(model, report, profile)
    else:
        report.notes.append(f"profile '{profile.name}' lacks cost_model.tpu_macs_per_second or "
                            "link_bandwidth: no latency split")
    if cost.param_cache_bytes is None:
        report.notes.append(f"profile '{profile.name}' has no cost_model.param_cache: every "
                            "parameter counted as cached on chip")
    return report


def edgetpu_report(model: Model, profile: Profile, *, use_compiler: bool = True) -> EdgeTpuReport:
    """:func:`edgetpu_partition` plus the real compiler's figures when it is installed."""
    report = edgetpu_partition(model, profile)
    if use_compiler and compiler_available():
        report.compiler = run_compiler(model.path)
        report.basis = "compiler" if report.compiler.error is None else "predicted"
    else:
        report.notes.append(f"{COMPILER} is not installed: figures are predicted from the "
                            f"compiler {report.compiler_version} op table")
    return report


def check(model: Model, profile: Profile) -> list[Any]:
    """Ops that stop the model from running on the target (the compat registry's contract).

    Ops falling back to the CPU are not failures (LiteRT runs them on the host; their cost is
    in the latency estimate). The model fails when the Edge TPU cannot be used at all — the
    compiler would refuse it, or not one op maps — or when the host's LiteRT lacks an op.
    """
    from simulator.compat import UnsupportedOp, litert

    found = list(litert.check(model, profile))
    report = partition(model, profile)
    if report.mapped_ops == 0 and report.first_unmapped is not None:
        f = report.first_unmapped
        found.append(UnsupportedOp(f.index, f.op, f"no op maps to the Edge TPU: {f.reason}"))
    return found


def section(model: Model, profile: Profile) -> dict[str, Any]:
    """``compatibility.edgetpu`` of the simulate report."""
    return edgetpu_report(model, profile).to_dict()


# --------------------------------------------------------------------------- text view


def text_lines(section: dict[str, Any]) -> list[str]:
    """``compatibility.edgetpu`` as the lines ``devicefit simulate`` prints (no new figures)."""
    from simulator.units import format_size, format_time_ms

    def b(n: int | None) -> str:
        return "-" if n is None else f"{n:,} B" + (f" ({format_size(n)})" if n >= 10240 else "")

    compiler = section.get("compiler")
    basis = ("real compiler output below" if section["basis"] == "compiler"
             else f"predicted from the compiler {section['compiler_version']} op table")
    lines = [f"Edge TPU ({basis})"]
    if section["compile_error"]:
        lines.append(f"  NOT COMPILED  {section['compile_error']}")
    seg = section["segment"]
    where = f" (one subgraph: ops {seg[0]}-{seg[1]})" if seg else ""
    lines.append(f"  mapped       {section['mapped_ops']} of {section['total_ops']} ops on the TPU"
                 f"{where}; {section['cpu_ops']} on the CPU")
    first = section["first_unmapped"]
    if first and not section["compile_error"]:
        lines.append(f"  first CPU op op {first['index']} {first['op']}: {first['reason']}")
    cache = section["param_cache_bytes"]
    lines.append(f"  parameters   {b(section['onchip_param_bytes'])} cached on chip"
                 + (f" of {b(cache)}" if cache is not None else "")
                 + f"; {b(section['offchip_param_bytes'])} streamed every inference")
    lat = section.get("latency")
    if lat:
        lines.append(f"  latency      {format_time_ms(lat['total_ms'])} = invoke "
                     f"{format_time_ms(lat['invoke_ms'])} + TPU "
                     f"{format_time_ms(lat['tpu_compute_ms'])} + link "
                     f"{format_time_ms(lat['link_ms'])} ({b(lat['link_bytes'])}) + CPU "
                     f"{format_time_ms(lat['cpu_ms'])} (estimated)")
    rows = [("Operator", "Count", "Status")] + [
        (r["operator"], str(r["count"]), r["status"]) for r in section["table"]]
    width = max(len(r[0]) for r in rows)
    lines += [f"  {op.ljust(width)}  {count.rjust(5)}  {status}" for op, count, status in rows]
    lines += [f"  note         {n}" for n in section["notes"]]
    if compiler:
        if compiler["error"]:
            lines.append(f"  compiler     {compiler['error']}")
        else:
            lines.append(f"  compiler {compiler['version']}: {compiler['tpu_ops']} TPU / "
                         f"{compiler['cpu_ops']} CPU ops, on-chip "
                         f"{b(compiler['on_chip_used_bytes'])}, off-chip "
                         f"{b(compiler['off_chip_bytes'])}")
    return lines
