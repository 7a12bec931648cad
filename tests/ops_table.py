"""The supported-operators tables of ``docs/ops.md``, made from what the simulator decides with.

Nothing here is a list of its own: TFLM's column is the probed table of the pinned
``tflite-micro`` wheel as :mod:`simulator.targets.tflm.ops` reads it, LiteRT's the probed table
of ``ai-edge-litert`` as :mod:`simulator.targets.litert.ops` reads it, the Edge TPU's the op
table and the registered checks of :mod:`simulator.targets.edgetpu.rules` (a check's text is
the first sentence of its docstring, else its registered name). :data:`tests.doccheck.GENERATED`
puts them between the page's ``<!-- doccheck: generated NAME -->`` markers, so a change of a
table or a rule that the page does not show fails the docs check (``python -m tests.doccheck
--update`` writes the new tables).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping

#: The order types are listed in.
TYPES = ("int4", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "bool")
#: Ops that no runtime here runs and that are one family, shown as one entry.
FAMILIES = ("STABLEHLO_",)


def _type_key(name: str) -> tuple[int, str]:
    return (TYPES.index(name) if name in TYPES else len(TYPES), name)


def refused(answers: Mapping[str, str]) -> set[str]:
    """The signatures (``data/weights/output``) a probed table refuses."""
    return {sig for sig, answer in answers.items() if answer != "ok"}


def types(signatures: set[str]) -> str:
    """Signatures in short: ``int8``, ``float32→int8``, ``float32 (weights int8/float16)``."""
    groups: dict[tuple[str, str], set[str]] = {}
    for sig in signatures:
        data, weights, out = sig.split("/")
        groups.setdefault((data, out), set()).add(weights)
    shown = []
    for data, out in sorted(groups, key=lambda k: (_type_key(k[0]), _type_key(k[1]))):
        text = data if data == out else f"{data}→{out}"
        weights = sorted(groups[(data, out)] - {"-"}, key=_type_key)
        if weights and weights != [data]:
            text += f" (weights {'/'.join(weights)})"
        shown.append(text)
    return ", ".join(shown)


def _operand(answer: str, index: str) -> str:
    """The operand a "Non-constant >dims< tensor" message names, else its input index."""
    m = re.search(r">(\w+)<", answer)
    return m.group(1) if m else f"input {index}"


def _zero_points(answers: Mapping[str, str], probed: Mapping[str, str],
                 without: str = "") -> list[str]:
    """The zero-point rules (``weights:int8``, ``activations:int16``) a kernel holds to, for
    the type combinations it runs at all."""
    shown = []
    for what, answer in answers.items():
        kind, _, dtype = what.partition(":")
        same = [sig for sig in probed if (sig.split("/")[1] == dtype if kind == "weights"
                                          else sig.split("/")[0] == sig.split("/")[2] == dtype)]
        if answer == "ok" or (same and all(probed[sig] != "ok" for sig in same)):
            continue
        shown.append(("symmetric int8 weights (zero point 0)" if kind == "weights"
                      else f"{dtype} zero point 0") + without)
    return shown


# --------------------------------------------------------------------------- TFLM
def tflm_cell(op: str) -> str:
    from devicefit.simulator.targets.tflm import ops as tflm

    if op not in tflm.builtin_ops():
        return "—"
    table = tflm.support()
    combos = table["combinations"].get(op, {})
    parts = [f"yes, except {types(refused(combos))}" if refused(combos) else "yes"]
    parts += [f"{_operand(answer, index)} constant"
              for index, answer in table.get("constant_inputs", {}).get(op, {}).items()
              if answer != "ok"]
    parts += _zero_points(table.get("zero_points", {}).get(op, {}), combos)
    return "; ".join(parts)


# --------------------------------------------------------------------------- LiteRT
def litert_cell(op: str) -> str:
    from devicefit.simulator.targets.litert import ops as litert

    table = litert.support()
    highest = table["op_versions"].get(op)
    if not highest:
        return "—"
    builtin = table["builtin"].get(op, {})
    xnnpack = refused(table["xnnpack"].get(op, {}))
    both, xnnpack_runs = refused(builtin) & xnnpack, refused(builtin) - xnnpack
    parts = [f"v1–{highest}" if highest > 1 else "v1"]
    if both:
        parts[0] += f", except {types(both)}"
    if xnnpack_runs:
        parts.append(f"{types(xnnpack_runs)} with XNNPACK only")
    zero_points = table["zero_points"]
    parts += _zero_points({what: answer for what, answer in zero_points["builtin"].get(op, {}).items()
                           if zero_points["xnnpack"].get(op, {}).get(what) != "ok"}, builtin)
    parts += _zero_points({what: answer for what, answer in zero_points["builtin"].get(op, {}).items()
                           if zero_points["xnnpack"].get(op, {}).get(what) == "ok"}, builtin,
                          without=" without XNNPACK")
    return "; ".join(parts)


# --------------------------------------------------------------------------- Edge TPU
def check_text(name: str, model: bool = False) -> str:
    """What a registered Edge TPU check asks: its docstring's first sentence, else its name."""
    from devicefit.simulator.targets.edgetpu.rules import MODEL_CHECKS, OP_CHECKS

    doc = inspect.getdoc((MODEL_CHECKS if model else OP_CHECKS)[name])
    if doc:
        first = re.split(r"(?<=\.)\s+(?=[A-Z])", " ".join(doc.split()))[0].rstrip(".")
        return first[:1].lower() + first[1:]
    words = name.replace("_", " ")
    return re.sub(r"\b(\d)bit\b", r"\1-bit", re.sub(r"\b1d\b", "1-D", words))


def edgetpu_cell(op: str) -> str:
    from devicefit.simulator.targets.edgetpu.rules import load_table

    table = load_table()
    rule, limit = table.ops.get(op), table.parse_max_versions.get(op)
    unparsed = (f"above v{limit.max_version} the model is not compiled at all ({limit.why})"
                if limit else None)
    if rule is None:
        return "—" + (f"; {unparsed}" if unparsed else "")
    parts = []
    if rule.params:
        parts.append(f"input{'s' if len(rule.params) > 1 else ''} "
                     f"{', '.join(map(str, rule.params))} constant")
    parts += [check_text(spec.name) for spec in rule.checks]
    if rule.max_version is not None:
        parts.append(f"up to v{rule.max_version}")
    if unparsed:
        parts.append(unparsed)
    return "TPU" + (": " + "; ".join(parts) if parts else "")


def edgetpu_requirements() -> list[str]:
    """What the Edge TPU asks of every operator and of the whole model."""
    from devicefit.simulator.targets.edgetpu.rules import load_table

    table = load_table()

    def listed(specs) -> str:
        shown = []
        for s in specs:
            exempt = [f"`{op}`" for op, rule in table.ops.items() if s.name in rule.skip]
            shown.append(f"{check_text(s.name)} (the compiler says \"{table.status(s.status)}\""
                         + (f"; not asked of {', '.join(exempt)}, whose rows say what they need"
                            if exempt else "") + ")")
        return "; ".join(shown)

    return [f"- The whole model (else the compiler makes no Edge TPU model): "
            f"{'; '.join(check_text(s.name, model=True) for s in table.model_requirements)}.",
            f"- Every operator: {listed(table.op_requirements)}.",
            f"- Every operator of the table, before its own conditions: "
            f"{listed(table.supported_op_requirements)}.",
            f"- The compiler's op table is version {table.compiler_version}'s; an operator "
            f"not in it stays on the CPU (\"{table.status('not_supported')}\")."]


# --------------------------------------------------------------------------- the tables
def sources() -> list[str]:
    from devicefit.simulator.targets.edgetpu.rules import load_table
    from devicefit.simulator.targets.litert import ops as litert
    from devicefit.simulator.targets.tflm import ops as tflm

    return [f"TFLM: `{tflm.support()['wheel']}` ({tflm.support()['kernels']} kernels, "
            f"`simulator/targets/tflm/tflm_support.json`); LiteRT: `{litert.support()['wheel']}` "
            f"(builtin kernels and XNNPACK, `simulator/targets/litert/litert_support.json`); "
            f"Edge TPU: compiler {load_table().compiler_version}'s op table "
            f"(`simulator/targets/edgetpu/edgetpu_ops.yaml` and `rules.py`)."]


def _builtin_ops() -> tuple[list[str], list[str]]:
    """The builtin ops some runtime here runs, and those none runs."""
    from devicefit.simulator.targets.edgetpu.rules import load_table
    from devicefit.simulator.targets.litert import ops as litert
    from devicefit.simulator.targets.tflm import ops as tflm

    versions = litert.support()["op_versions"]
    known = set(tflm.builtin_ops()) | set(versions) | set(load_table().ops)
    run = {op for op in known if op in tflm.builtin_ops() or versions.get(op)
           or op in load_table().ops}
    return sorted(run), sorted(known - run)


def table() -> list[str]:
    """One row per builtin operator, a column per runtime."""
    run, none = _builtin_ops()
    rows = [*sources(), "", "| operator | TFLM | LiteRT | Edge TPU |", "| --- | --- | --- | --- |"]
    rows += [f"| `{op}` | {tflm_cell(op)} | {litert_cell(op)} | {edgetpu_cell(op)} |"
             for op in run]
    shown = [f"`{op}`" for op in none if not op.startswith(FAMILIES)]
    shown += [f"{sum(op.startswith(f) for op in none)} `{f}*` ops" for f in FAMILIES
              if any(op.startswith(f) for op in none)]
    return [*rows, "", f"No runtime here runs {', '.join(shown)}."]


def custom_table() -> list[str]:
    """The custom operators a runtime here registers."""
    from devicefit.simulator.targets.litert import ops as litert
    from devicefit.simulator.targets.tflm import ops as tflm

    def lite(op: str) -> str:
        if op in litert.LITERT_CUSTOM_OPS:
            return "yes"
        return "with XNNPACK" if op in litert.XNNPACK_CUSTOM_OPS else "—"

    names = sorted(tflm.custom_ops() | litert.LITERT_CUSTOM_OPS | litert.XNNPACK_CUSTOM_OPS,
                   key=str.lower)
    return ["| custom operator | TFLM | LiteRT |", "| --- | --- | --- |",
            *(f"| `{op}` | {'yes' if op in tflm.custom_ops() else '—'} | {lite(op)} |"
              for op in names)]
