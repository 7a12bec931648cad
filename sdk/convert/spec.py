"""What a conversion is asked to do, as one frozen value: :class:`ConversionSpec`.

The same spec comes from ``devicefit convert`` flags, from a YAML file (``--spec FILE``, flags
override its keys) or from ``convert(..., **options)`` keywords, and fit's trials build one
per candidate. Flags, keywords and YAML keys map one to one:

=========================  ==============================  =================================
flag                       ``convert()`` keyword           YAML key
=========================  ==============================  =================================
``--scheme S``             ``scheme``                      ``scheme``
``--io-type T``            ``io_type``                     ``io_type``
``--weights W``            ``weights``                     ``weights``
``--calibration DATA``     ``calibration``                 ``calibration``
``--eval DATA``            ``eval_data``                   ``eval``
``--sparsity N:M``         ``sparsity_pattern``            ``sparsity: {kind: "n:m", pattern: "2:4"}``
``--prune-channels F``     ``prune_channels``              ``sparsity: {kind: channel, ratio: 0.5}``
(none)                     (none)                          ``sparsity: [{kind: channel, ...}, {kind: "n:m", ...}]``
``--train DATA``           ``train``                       ``fine_tune: {train: DATA, ...}``
``--epochs N``             ``epochs``                      ``fine_tune: {epochs: N}``
``--distill``              ``distill``                     ``fine_tune: {distill: true}``
``--qat [auto]``           ``qat`` ("always" or "auto")    ``qat: always`` or ``qat: auto``
``--optimize-memory``      ``optimize_memory``             ``optimize_memory: true`` or a mapping
``--patches G``            ``patches``                     ``optimize_memory: {patches: G}``
``--max-mac-overhead P``   ``max_mac_overhead`` (P/100)    ``optimize_memory: {max_mac_overhead: P}``
``--patch-objective O``    ``patch_objective``             ``optimize_memory: {patch_objective: O}``
``--float-baseline``       ``float_baseline``              ``float_baseline``
``--unsafe``               ``unsafe``                      (flag only)
=========================  ==============================  =================================

``--unsafe`` (run Python code stored in the model) has no YAML key on purpose: a spec file
arrives in a pull request like the model, and trusting code must stay a decision made where
the command runs. Relative data paths in a YAML file are relative to the file's folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from devicefit.sdk.convert import sparsity
from devicefit.sdk.convert.data import RANDOM, DataSource
from devicefit.sdk.convert.quantize import SCHEME_IO_TYPES, QuantSettings
from devicefit.sdk.convert.sparsity import SparsitySpec
from devicefit.simulator.errors import InputError, UsageError, did_you_mean
from devicefit.simulator.infra.safeyaml import load_yaml, read_regular_file
from devicefit.simulator.profiles import IO_TYPES

__all__ = ["ConversionSpec", "FineTuning", "MemoryOptimization", "OPTIONS", "SPEC_KEYS"]

#: How much ``--patches`` may add in multiply-accumulates by default (a fraction).
DEFAULT_MAC_OVERHEAD = 0.2


@dataclass(frozen=True)
class FineTuning:
    """Training after pruning, or of the 4-bit layers (``--train``/``--epochs``/
    ``--distill``)."""

    train: DataSource
    epochs: int
    #: The unpruned model teaches the pruned one (soft labels).
    distill: bool = False


@dataclass(frozen=True)
class MemoryOptimization:
    """``--optimize-memory``: reorder operators and write an offline arena plan (TFLM)."""

    #: Run the first stage patch by patch: "auto" or a grid such as "3x3".
    patches: str | None = None
    #: Most extra multiply-accumulates patches may cost, as a fraction of the model's.
    max_mac_overhead: float = DEFAULT_MAC_OVERHEAD
    patch_objective: str = "arena"

    def options(self) -> dict[str, Any]:
        """The keyword arguments of ``simulator.optimize.optimize_model_bytes``."""
        return {"patches": self.patches, "max_mac_overhead": self.max_mac_overhead,
                "patch_objective": self.patch_objective}


@dataclass(frozen=True)
class ConversionSpec:
    """Everything ``convert`` is asked to do besides which model, profile and output."""

    #: Quantization scheme and I/O type; None: the profile's default.
    scheme: str | None = None
    io_type: str | None = None
    #: "int8"; "int4": 4-bit weights where the profile's runtime runs them; "auto": int4 on
    #: the layers that cost least accuracy, as few as the flash budget needs
    #: (:mod:`sdk.convert.lowbit`); "lut4": int8 filters clustered to 16 values per channel,
    #: stored as TFLM's look-up-table compression (:mod:`sdk.convert.lut`).
    weights: str = "int8"
    #: Representative data for full-integer schemes.
    calibration: DataSource | None = None
    #: Evaluation data (labels give accuracy; without them agreement and SQNR).
    eval_data: DataSource | None = None
    #: Applied in this order (convert takes one kind; fit's trials may combine channel
    #: pruning with N:M).
    sparsity: tuple[SparsitySpec, ...] = ()
    fine_tune: FineTuning | None = None
    #: ``--qat``: the layers ``--weights int4|auto`` put at 4 bits train on the int4 grid on
    #: ``fine_tune``'s data, then are quantized again; "always", or "auto": only when PTQ
    #: int4 loses more than :data:`sdk.convert.lowbit.COSTLY_DROP_PP` (``pipeline.qat_int4``).
    qat: str | None = None
    optimize_memory: MemoryOptimization | None = None
    #: Also convert the float32 model to report the size against (a second conversion).
    float_baseline: bool = False
    #: Trust the model: allow Lambda layers and SavedModel ops touching files/network/Python.
    unsafe: bool = False

    # ----------------------------------------------------------------------- flat options
    @classmethod
    def from_options(cls, **options: Any) -> ConversionSpec:
        """The spec for ``convert()``'s keywords / the CLI's flag values (:data:`OPTIONS`);
        a UsageError (naming flags) for combinations that make no sense."""
        _refuse_unknown(options)
        o = {**OPTIONS, **{k: v for k, v in options.items() if v is not None}}
        spec = sparsity.from_options(o)
        return cls.checked(o, () if spec is None else (spec,))

    @classmethod
    def checked(cls, o: Mapping[str, Any], specs: tuple[SparsitySpec, ...]) -> ConversionSpec:
        """The spec for all options ``o`` (:data:`OPTIONS`) but sparsity, and ``specs``."""
        train, epochs = o["train"], o["epochs"]
        if train is not None and epochs <= 0:
            raise UsageError("--train needs --epochs N (N >= 1)")
        if epochs > 0 and train is None:
            raise UsageError("--epochs needs --train DATA (labelled training samples)")
        if o["patches"] is not None and not o["optimize_memory"]:
            raise UsageError("--patches rewrites the graph as part of --optimize-memory: add it")
        if o["distill"] and train is None:
            raise UsageError("--distill fine-tunes with the original model as teacher: add --train")
        if o["weights"] not in WEIGHT_BITS:
            raise UsageError(f"--weights {o['weights']!r}: choose "
                             f"{', '.join(WEIGHT_BITS[:-1])} or {WEIGHT_BITS[-1]}")
        _check_qat(o)
        if train is not None and not specs and o["qat"] is None:
            raise UsageError("--train fine-tunes after pruning: add " + " or ".join(
                f"{k.flag} {k.metavar}" for k in sparsity.KINDS.values()) + ", or --qat")
        return cls(
            scheme=o["scheme"], io_type=o["io_type"], weights=o["weights"],
            calibration=o["calibration"],
            eval_data=o["eval_data"], sparsity=specs,
            fine_tune=None if train is None else FineTuning(train, epochs, bool(o["distill"])),
            qat=o["qat"], optimize_memory=MemoryOptimization(
                o["patches"], o["max_mac_overhead"], o["patch_objective"])
            if o["optimize_memory"] else None,
            float_baseline=bool(o["float_baseline"]), unsafe=bool(o["unsafe"]))

    def options(self) -> dict[str, Any]:
        """The flat options that build this spec again (the inverse of :meth:`from_options`
        for specs flags can express: one sparsity kind without per-layer ratios)."""
        out = {**OPTIONS, "scheme": self.scheme, "io_type": self.io_type,
               "weights": self.weights, "calibration": self.calibration, "eval_data": self.eval_data,
               "float_baseline": self.float_baseline, "unsafe": self.unsafe, "qat": self.qat}
        for spec in self.sparsity:
            out[sparsity.KINDS[spec.kind].option] = spec.option_value()
        if self.fine_tune is not None:
            out.update(train=self.fine_tune.train, epochs=self.fine_tune.epochs,
                       distill=self.fine_tune.distill)
        if self.optimize_memory is not None:
            out.update(optimize_memory=True, **self.optimize_memory.options())
        return out

    def settings(self, quant: QuantSettings) -> dict[str, Any]:
        """The conversion-metadata keys the spec decides (quantization as ``quant`` resolved
        it for the profile, and each sparsity kind's); convert and fit store the same."""
        return {"scheme": quant.scheme, "io_type": quant.io_type,
                "per_channel": quant.per_channel, "weights": self.weights,
                **{k: v for kind in self.sparsity for k, v in kind.settings().items()}}

    def with_options(self, **options: Any) -> ConversionSpec:
        """This spec with the given options (None: not given) replacing its own: flags
        over a ``--spec`` file. A sparsity flag replaces the file's sparsity, all kinds."""
        _refuse_unknown(options)
        given = {k: v for k, v in options.items() if v is not None}
        flagged = sparsity.from_options(given)
        return ConversionSpec.checked({**self.options(), **given},
                                      self.sparsity if flagged is None else (flagged,))

    # ----------------------------------------------------------------------- YAML
    @classmethod
    def load(cls, path: str | Path) -> ConversionSpec:
        """The spec in a YAML file; an InputError with file:line for a bad key or value."""
        path = Path(path)
        text = read_regular_file(path, "conversion spec")
        data, lines = load_yaml(text, path, error=InputError)
        return cls.from_mapping({} if data is None else data, source=path, lines=lines)

    @classmethod
    def from_mapping(cls, data: Any, *, source: str | Path = "<spec>",
                     lines: Mapping[tuple[str, ...], int] | None = None) -> ConversionSpec:
        """The spec a YAML mapping describes (:data:`SPEC_KEYS`). Relative data paths are
        taken relative to ``source``'s folder when ``source`` is a file."""
        reader = _Reader(Path(source), dict(lines or {}))
        top = reader.mapping(data, (), SPEC_KEYS)
        options: dict[str, Any] = {}
        for key, allowed in (("scheme", tuple(SCHEME_IO_TYPES)), ("io_type", IO_TYPES),
                             ("weights", WEIGHT_BITS), ("qat", QAT_MODES)):
            if key in top:
                options[key] = reader.choice(top[key], (key,), allowed)
        for key, option in (("calibration", "calibration"), ("eval", "eval_data")):
            if key in top:
                options[option] = reader.data(top[key], (key,))
        if "float_baseline" in top:
            options["float_baseline"] = reader.boolean(top["float_baseline"], ("float_baseline",))
        if "fine_tune" in top:
            if "sparsity" not in top and "qat" not in top:
                reader.fail(("fine_tune",), "fine-tuning follows pruning: add a 'sparsity' "
                                            "mapping (kind: " + " or ".join(sparsity.KINDS) +
                            "), or 'qat'")
            ft = reader.mapping(top["fine_tune"], ("fine_tune",), FINE_TUNE_KEYS)
            for key in ("train", "epochs"):
                if key not in ft:
                    reader.fail(("fine_tune",), f"missing key '{key}'")
            options.update(train=reader.data(ft["train"], ("fine_tune", "train")),
                           epochs=reader.integer(ft["epochs"], ("fine_tune", "epochs"), 1),
                           distill=reader.boolean(ft.get("distill", False),
                                                  ("fine_tune", "distill")))
        if "optimize_memory" in top:
            options.update(reader.memory(top["optimize_memory"]))
        specs: list[SparsitySpec] = []
        if "sparsity" in top:
            entries = top["sparsity"] if isinstance(top["sparsity"], list) else [top["sparsity"]]
            for i, entry in enumerate(entries):
                # The line map keys list items by their index as text.
                where = ("sparsity", str(i)) if isinstance(top["sparsity"], list) else ("sparsity",)
                try:
                    specs.append(sparsity.from_mapping(entry))
                except (ValueError, UsageError) as exc:
                    reader.fail(where, str(exc))
                if [s.kind for s in specs].count(specs[-1].kind) > 1:
                    reader.fail(where, f"kind {specs[-1].kind} is given twice")
        try:
            return cls.checked({**OPTIONS, **options}, tuple(specs))
        except UsageError as exc:
            reader.fail((), str(exc))

    def to_mapping(self) -> dict[str, Any]:
        """The YAML form (data given as paths only; ``unsafe`` is never written)."""
        out: dict[str, Any] = {}
        for key, value in (("scheme", self.scheme), ("io_type", self.io_type),
                           ("calibration", self.calibration), ("eval", self.eval_data)):
            if value is not None:
                out[key] = str(value)
        if self.weights != "int8":
            out["weights"] = self.weights
        if self.qat is not None:
            out["qat"] = self.qat
        if self.sparsity:
            kinds = [spec.to_mapping() for spec in self.sparsity]
            out["sparsity"] = kinds[0] if len(kinds) == 1 else kinds
        if self.fine_tune is not None:
            out["fine_tune"] = {"train": str(self.fine_tune.train),
                                "epochs": self.fine_tune.epochs,
                                "distill": self.fine_tune.distill}
        if self.optimize_memory is not None:
            m = self.optimize_memory
            out["optimize_memory"] = {"patches": m.patches,
                                      "max_mac_overhead": round(m.max_mac_overhead * 100, 6),
                                      "patch_objective": m.patch_objective}
        if self.float_baseline:
            out["float_baseline"] = True
        return out


#: ``convert()``'s keywords (= the CLI's dests) and their defaults.
OPTIONS: dict[str, Any] = {
    "scheme": None, "io_type": None, "weights": "int8", "calibration": None, "eval_data": None,
    **{k.option: None for k in sparsity.KINDS.values()},
    "train": None, "epochs": 0, "distill": False, "qat": None,
    "optimize_memory": False, "patches": None, "max_mac_overhead": DEFAULT_MAC_OVERHEAD,
    "patch_objective": "arena", "float_baseline": False, "unsafe": False,
}
#: ``--weights``: the bits of the weights of conv and fully-connected layers.
WEIGHT_BITS = ("int8", "int4", "auto", "lut4")
#: The ``--weights`` that quantize the float model again with int4 layers.
INT4_WEIGHTS = ("int4", "auto")
#: ``--qat``: "always" trains the 4-bit layers; "auto" only when PTQ int4 loses too much.
QAT_MODES = ("always", "auto")
SPEC_KEYS = ("scheme", "io_type", "weights", "calibration", "eval", "sparsity", "fine_tune",
             "qat", "optimize_memory", "float_baseline")
FINE_TUNE_KEYS = ("train", "epochs", "distill")
MEMORY_KEYS = ("patches", "max_mac_overhead", "patch_objective")


def _check_qat(o: Mapping[str, Any]) -> None:
    """``--qat`` trains the layers ``--weights int4|auto`` put at 4 bits and reports PTQ
    against QAT: it needs those weights, labelled training data and evaluation data."""
    mode = o["qat"]
    if mode is None:
        return
    if mode not in QAT_MODES:
        raise UsageError(f"--qat {mode!r}: give --qat (always) or --qat auto")
    if o["weights"] not in INT4_WEIGHTS:
        raise UsageError("--qat trains the layers 4-bit weights go to: add --weights int4 or "
                         "--weights auto")
    if o["train"] is None:
        raise UsageError("--qat trains the 4-bit layers: add --train DATA (labelled) and "
                         "--epochs N")
    if o["eval_data"] is None:
        raise UsageError("--qat measures PTQ int4 against QAT int4 in the runtime: add --eval "
                         "DATA")
    if o["distill"]:
        raise UsageError("--distill teaches a pruned model; --qat trains with the labels: "
                         "give one of them")


def _refuse_unknown(options: Mapping[str, Any]) -> None:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown conversion option {unknown[0]!r}"
                        f"{did_you_mean(unknown[0], list(OPTIONS))}")


@dataclass
class _Reader:
    """Checks one YAML mapping; the first problem is an InputError with file:line."""

    source: Path
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)

    def fail(self, key: tuple[str, ...], message: str) -> NoReturn:
        line = next((self.lines[key[:i]] for i in range(len(key), 0, -1)
                     if key[:i] in self.lines), None)
        where = f"{self.source}:{line}" if line else str(self.source)
        dotted = ".".join(key)
        raise InputError(f"{where}: {dotted}: {message}" if key else f"{where}: {message}")

    def mapping(self, value: Any, key: tuple[str, ...], allowed: tuple[str, ...]) -> dict:
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping with keys {', '.join(allowed)}, "
                           f"got {type(value).__name__}")
        for k in value:
            if k not in allowed:
                self.fail((*key, str(k)), f"unknown key{did_you_mean(str(k), list(allowed))} "
                                          f"(allowed here: {', '.join(allowed)})")
        return value

    def choice(self, value: Any, key: tuple[str, ...], allowed: tuple[str, ...]) -> str:
        if value not in allowed:
            self.fail(key, f"{value!r} is not one of {', '.join(allowed)}")
        return value

    def boolean(self, value: Any, key: tuple[str, ...]) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {value!r}")
        return value

    def integer(self, value: Any, key: tuple[str, ...], lo: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            self.fail(key, f"expected an integer >= {lo}, got {value!r}")
        return value

    def number(self, value: Any, key: tuple[str, ...]) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            self.fail(key, f"expected a number >= 0, got {value!r}")
        return float(value)

    def data(self, value: Any, key: tuple[str, ...]) -> str:
        if not isinstance(value, str) or not value.strip():
            self.fail(key, f"expected a data path (.npy, .npz or a folder), got {value!r}")
        if value == RANDOM or Path(value).is_absolute() or not self.source.is_file():
            return value
        return str(self.source.parent / value)

    def memory(self, value: Any) -> dict[str, Any]:
        key = ("optimize_memory",)
        if isinstance(value, bool):
            return {"optimize_memory": value}
        m = self.mapping(value, key, MEMORY_KEYS)
        out: dict[str, Any] = {"optimize_memory": True}
        if "patches" in m:
            from devicefit.simulator.optimize.patches import parse_grid

            try:
                parse_grid(m["patches"] if isinstance(m["patches"], str) else repr(m["patches"]))
            except UsageError:
                self.fail((*key, "patches"), f"expected 'auto' or a grid such as \"3x3\", "
                                             f"got {m['patches']!r}")
            out["patches"] = m["patches"]
        if "max_mac_overhead" in m:  # in percent, as the flag takes it
            out["max_mac_overhead"] = self.number(m["max_mac_overhead"],
                                                  (*key, "max_mac_overhead")) / 100
        if "patch_objective" in m:
            from devicefit.simulator.optimize.patches import OBJECTIVES

            out["patch_objective"] = self.choice(m["patch_objective"],
                                                 (*key, "patch_objective"), OBJECTIVES)
        return out
