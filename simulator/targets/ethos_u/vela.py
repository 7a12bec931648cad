"""Run Arm's Vela compiler in a child process and read what it writes.

Vela (``ethos-u-vela``, an optional dependency: ``pip install 'devicefit[ethos-u]'``) runs
as ``python -c 'from ethosu.vela.vela import main; ...'`` with the interpreter devicefit runs
on, in a temporary folder, with a timeout: a crash or a hang of the compiler costs the
command one clear message, never the CLI process. It writes, for ``model.tflite``:

* ``model_vela.tflite`` — the compiled model: the NPU part as ``ethos-u`` custom ops, the
  rest left as TFLite operators for the Cortex-M;
* ``model_summary_<system config>.csv`` — one row: memory used per memory, encoded weight
  bytes, cycles, inference time at the configured clock;
* its operator database (with ``--enable-debug-db``; as JSON, see :mod:`._vela_main`) —
  one row per operator after Vela's graph rewrites (its per-layer report: cycles, MACs),
  each naming the operator of the input model it came from (the ``source`` table's
  ``ext_key``: the operator's index in its subgraph), the command stream that runs it
  (``queue``) and the operator whose command it is fused into (``group``);
* on stdout, for every operator it leaves on the CPU (``--show-cpu-operations``)::

      Warning (supported operators) operator: MEAN, ofm: 'model/Mean'
      Reason: Unsupported depth-reduction.  IFM: 1, 4, 8, 6

Vela leaves an operator it cannot run on the NPU to the CPU, but refuses a model whose
operators break its semantic checks (a float HARD_SWISH: "IFM has to be 8bit");
that refusal is raised as :class:`~simulator.errors.CompilerRefused` with Vela's words, a
finding about the model. Vela rejecting its configuration, crashing or hanging is a
:class:`~simulator.errors.ToolFailure` (exit 2).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import (
    CompileRefusal,
    CompilerRefused,
    MissingExtra,
    ToolFailure,
)
from devicefit.simulator.infra.fileio import temporary_folder
from devicefit.simulator.run import zygote
from devicefit.simulator.targets.ethos_u.config import VelaConfig

DISTRIBUTION = "ethos-u-vela"
#: Vela's reports devicefit reads beyond the summary: its operator database and the
#: reasons it leaves operators to the CPU.
_REPORTS = ("--enable-debug-db", "--show-cpu-operations")
#: The operator database's file beside the compiled one, and the tables read from it.
DATABASE_SUFFIX = "_devicefit_db.json"
DATABASE_TABLES = ("perf", "source", "queue", "group")
_LAUNCH = "devicefit.simulator.targets.ethos_u._vela_main"
#: Imported once by the zygote Vela's runs are forked from.
_PRELOAD = (_LAUNCH,)
#: A tensor name may hold a newline (Vela prints it as it is), so the ofm spans lines.
_REASON = re.compile(r"^Warning \(supported operators\) operator: (\S+), ofm: '([\s\S]*?)'[ \t]*\n"
                     r"Reason: (.*)$", re.MULTILINE)
#: How Regor's refusal of a model begins, and how the child hands it over (see
#: :mod:`._vela_main`): the mark on a line of its own, then the message; its own exit status.
REGOR_REFUSAL = "Compilation failed:"
REFUSED_MARK = "devicefit: Vela refused the model:"
REFUSED_EXIT = 3
#: Regor's words for an operator it refuses, e.g.::
#:
#:     Error: HARD_SWISH 'h_swish' Does not have valid TFLite Semantics.
#:      - IFM has to be 8bit
#:        IFM type=FLOAT32,
#:
#: (without the quoted output tensor when the operator has no name).
_REFUSED_OP = re.compile(r"Error: (\S+)(?: '([\s\S]*?)')? Does not have valid TFLite Semantics\."
                         r"[ \t]*\n - ([^\n]*)(?:\n {3}([^\n]*))?")


@dataclass(frozen=True)
class CpuReason:
    """Why Vela left one operator on the CPU, as Vela words it."""

    op: str
    ofm: str
    reason: str


@dataclass(frozen=True)
class VelaLayer:
    """One operator Vela scheduled: a row of its per-layer report (the database's ``perf``
    table), with the operator of the input model it came from."""

    #: Vela's operator ("Conv2D", "Relu", "LUT"; "Passthrough": left to the CPU).
    vela_op: str
    #: Its output tensor as Vela names it (a decomposed softmax's parts get made-up names).
    name: str
    cycles: int
    macs: int
    #: The input model's operator it came from: :attr:`VelaSource.id`.
    source: int
    #: The command stream that runs it (Vela numbers them from 1, one per ``ethos-u`` op of
    #: the compiled file in order); None: not an NPU command (a CPU operator).
    stream: int | None
    #: The position in the layers of the one whose NPU command it is fused into (an
    #: activation, a softmax's LUT); None: a command of its own.
    fused_with: int | None

    @property
    def unit(self) -> str:
        """"npu" or "cpu", as Vela's per-layer report says (its Passthrough is the CPU)."""
        return "cpu" if self.vela_op == "Passthrough" else "npu"


@dataclass(frozen=True)
class VelaSource:
    """An operator of the input model as Vela's database lists it: every operator of every
    subgraph, in file order (its ``ext_key`` restarts at 0 with each subgraph)."""

    id: int
    #: Vela's name for its type ("Conv2D" for CONV_2D).
    op: str
    subgraph: int
    index: int


@dataclass(frozen=True)
class VelaRun:
    """One Vela compilation: the compiled bytes and Vela's own figures, unchanged."""

    compiled: bytes
    #: The summary CSV's single row, column name → text, as Vela wrote it.
    summary: dict[str, str]
    #: Vela's operators in its order (its per-layer report) and the input model's.
    layers: tuple[VelaLayer, ...]
    sources: tuple[VelaSource, ...]
    cpu_reasons: tuple[CpuReason, ...]
    #: Vela's "CPU operators = N" / "NPU operators = N" lines (its own, rewritten ops).
    vela_cpu_ops: int | None
    vela_npu_ops: int | None
    version: str
    #: The ``.ini`` Vela read and the options it ran with, for the report.
    ini: str
    command: tuple[str, ...]


def vela_version() -> str | None:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def require_vela() -> str:
    """The installed Vela version; a clear error when the optional dependency is missing."""
    found = vela_version()
    try:
        importable = importlib.util.find_spec("ethosu.vela") is not None
    except ImportError:
        importable = False
    if found is None or not importable:
        raise MissingExtra("ethosu", "the Ethos-U target")
    return found


def run_vela(model_bytes: bytes, config: VelaConfig, name: str = "model") -> VelaRun:
    """Compile ``model_bytes`` with Vela for ``config``; raise :class:`CompilerRefused` if
    Vela refuses the model, :class:`ToolFailure` with Vela's last words if it fails
    otherwise or exceeds ``config.timeout_s``."""
    found = require_vela()
    with temporary_folder("devicefit-vela-") as tmp:
        work = Path(tmp)
        src = work / f"{name}.tflite"
        src.write_bytes(model_bytes)
        ini = work / "devicefit_vela.ini"
        ini_text = config.ini_text()
        ini.write_text(ini_text, encoding="utf-8")
        out = work / "out"
        args = config.vela_args(ini)
        options = [*args, "--output-dir", str(out), *_REPORTS]
        run = zygote.run(_LAUNCH, [*options, str(src)], preload=_PRELOAD,
                         env=zygote.child_env(), timeout_s=config.timeout_s, work=work, cwd=work)
        if run.code is None:
            raise ToolFailure(f"Vela {found} did not finish within {config.timeout_s:g} s "
                                 f"(profile key ethos_u.timeout)")
        stdout, stderr = run.stdout.decode(errors="replace"), run.stderr.decode(errors="replace")
        if run.code == REFUSED_EXIT and REFUSED_MARK in stderr:
            raise CompilerRefused(refusal(found, stderr.partition(REFUSED_MARK)[2].strip()))
        compiled = out / f"{name}_vela.tflite"
        if run.code is not None and run.code < 0 and (int4 := _int4_weights(model_bytes)):
            # Vela 5.2 dies of SIGFPE on int4 weights: what Vela does with this model.
            raise CompilerRefused(CompileRefusal(
                f"Vela {found}", f"Vela {found} was killed by signal {-run.code} compiling "
                f"this model, which has int4 weights ({int4}): it does not compile them",
                reason="int4 weights"))
        if run.code != 0 or not compiled.is_file():
            # Not the model's fault as far as Vela says (a configuration it rejects, a
            # crash): a failure of the tool, not a finding.
            raise ToolFailure(f"Vela {found} failed (exit {run.code}): "
                                 f"{_last_words(stderr, stdout)}")
        summaries = sorted(out.glob(f"{name}_summary_*.csv"))
        if len(summaries) != 1:
            raise ToolFailure(f"Vela {found} wrote {len(summaries)} summary CSVs, expected 1")
        layers, sources = read_database(out / f"{name}{DATABASE_SUFFIX}", found)
        summary_rows = _csv_rows(summaries[0].read_text())
        if len(summary_rows) != 1:
            raise ToolFailure(f"Vela {found}: summary CSV has {len(summary_rows)} rows")
        return VelaRun(
            compiled=compiled.read_bytes(), summary=summary_rows[0], layers=layers,
            sources=sources,
            cpu_reasons=tuple(parse_reasons(stdout)),
            vela_cpu_ops=_count(stdout, "CPU"), vela_npu_ops=_count(stdout, "NPU"),
            version=found, ini=ini_text,
            command=("vela", *args, *_REPORTS, f"{name}.tflite"))


def _int4_weights(model_bytes: bytes) -> str:
    """The first operators with int4 constants, "op 0 CONV_2D, op 3 CONV_2D", or ""."""
    from devicefit.simulator.read.reader import parse_model

    sg = parse_model(model_bytes).main
    found = [f"op {op.index} {op.op_name}" for op in sg.operators
             if any(i >= 0 and sg.tensors[i].has_data and sg.tensors[i].dtype == "int4"
                    for i in op.inputs)]
    return ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")


def refusal(found: str, message: str) -> CompileRefusal:
    """Vela's refusal as a record: its whole message, and the operator, rule and figures
    when it names an operator (the operator's index in the model is the caller's to find:
    only the model knows it)."""
    m = _REFUSED_OP.search(message)
    if m is None:  # its first line says why ("Output tensor x does not have any writers.")
        first = next((ln for ln in message.splitlines() if ln.strip()), "")
        return CompileRefusal(f"Vela {found}", message,
                              reason=first.removeprefix(REGOR_REFUSAL).strip() or None)
    detail = m.group(4).strip().rstrip(",").strip() if m.group(4) else None
    return CompileRefusal(f"Vela {found}", message, op=m.group(1), tensor=m.group(2),
                          reason=m.group(3).strip(), detail=detail or None)


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def read_database(path: Path, found: str) -> tuple[tuple[VelaLayer, ...], tuple[VelaSource, ...]]:
    """Vela's operators and the input model's, from the database :mod:`._vela_main` wrote."""
    try:
        tables = json.loads(path.read_text(encoding="utf-8"))
        return database_layers(tables), database_sources(tables)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ToolFailure(f"Vela {found}: its operator database is missing or unreadable "
                             f"({exc})") from exc


def _rows(tables: dict[str, Any], name: str) -> list[dict[str, str]]:
    table = tables[name]
    return [dict(zip(table["header"], row, strict=True)) for row in table["data"]]


def _int(text: str) -> int:
    return int(text) if text else 0  # Vela leaves a figure it has not got empty


def database_layers(tables: dict[str, Any]) -> tuple[VelaLayer, ...]:
    """The ``perf`` table's rows (Vela's per-layer report) with their command streams: a
    row's own optimised operator in the ``queue``, else that of the row it is grouped with."""
    perf = _rows(tables, "perf")
    position = {r["id"]: k for k, r in enumerate(perf)}
    stream = {r["optimised_id"]: int(r["cmdstream_id"]) for r in _rows(tables, "queue")}
    lead = {r["id"]: position.get(r["group_id"]) for r in _rows(tables, "group")}
    layers = []
    for r in perf:
        head = lead.get(r["id"])
        commands = r["optimised_id"] if head is None else perf[head]["optimised_id"]
        layers.append(VelaLayer(r["operator"], r["name"], _int(r["op_cycles"]),
                                _int(r["mac_count"]), int(r["source_id"]),
                                None if r["operator"] == "Passthrough" else stream.get(commands),
                                head))
    return tuple(layers)


def database_sources(tables: dict[str, Any]) -> tuple[VelaSource, ...]:
    """The ``source`` table: the input model's operators, a new subgraph wherever the index
    in the subgraph (``ext_key``) does not grow."""
    found, subgraph, last = [], 0, -1
    for r in _rows(tables, "source"):
        index = int(r["ext_key"])
        if index <= last:
            subgraph += 1
        last = index
        found.append(VelaSource(int(r["id"]), r["operator"], subgraph, index))
    return tuple(found)


def parse_reasons(stdout: str) -> list[CpuReason]:
    """Vela's "supported operators" warnings: each names an op, its output and a reason."""
    return [CpuReason(m.group(1), m.group(2), m.group(3).strip())
            for m in _REASON.finditer(stdout)]


def _count(stdout: str, unit: str) -> int | None:
    m = re.search(rf"^{unit} operators = (\d+) ", stdout, re.MULTILINE)
    return int(m.group(1)) if m else None


def _last_words(*streams: str) -> str:
    for text in streams:
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return "no output"
