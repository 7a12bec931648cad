"""``simulate --run`` on a phone GPU profile: the delegate asked, beside the prediction.

The target's ``ask_accelerator`` hook (:mod:`simulator.run.measure` calls it after the CPU
run): one child (:mod:`.live`) compiles the model for GPU|CPU on the machine's Vulkan
adapter and runs the run's inputs through the GPU path and the CPU's fp32 and fp16 modes.
The section gets what the delegate answered (its partition, each difference from the
predicted one named) or why it was not asked, and the fp16 check; never nothing. An answer
that ran is kept on disk (:mod:`.cache`) and read back, said so, when asked again.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from devicefit.simulator.profile_types import Profile
from devicefit.simulator.read.model import Model
from devicefit.simulator.read.reader import read_model
from devicefit.simulator.report.report import TargetSection
from devicefit.simulator.targets.gpu import cache
from devicefit.simulator.targets.gpu.delegate import DelegateAnswer
from devicefit.simulator.targets.gpu.live import (
    SECONDS_PER_SAMPLE,
    LiveDelegate,
    LiveRun,
    PrecisionCheck,
    precision_check,
    run_live,
)
from devicefit.simulator.targets.gpu.partition import GpuReport, partition
from devicefit.simulator.targets.gpu.settings import gpu_settings
from devicefit.simulator.types import ModelRuns

#: The delegate's words when Dawn finds no Vulkan adapter to run on.
NO_ADAPTER = "No adapters found"


def ask(section: TargetSection, model: Model, profile: Profile, setup: ModelRuns
        ) -> tuple[TargetSection, list[str]]:
    """``section`` (the predicted partition) with the live delegate's answers, and notes."""
    assert isinstance(section, GpuReport)  # the GPU target's own section
    precision = gpu_settings(profile).precision
    entry = cache.key(model, precision, setup)
    known = cache.cached(entry)
    if known is not None:
        answer, seconds, check = known
        live = dataclasses.replace(delegate_answer(section, answer, seconds), precision=check,
                                   cached=True)
    else:
        inputs = (str(setup.input_path) if setup.input_path
                  else "the --run inputs (random, seed 0)")
        run = run_live(model, setup.input_request, precision, setup.timeout_s)
        live = answered(section, run, precision_check(run, model, inputs, 1))
        if run.answer.ok and live.precision is not None:
            cache.store(entry, run.answer, run.seconds, live.precision)
    notes = [] if live.precision else [f"fp16 accuracy not checked: {live.not_checked}"]
    if live.not_asked:
        notes.append(f"GPU delegate not asked: {live.not_asked}")
    return dataclasses.replace(section, live=live), notes


def answered(section: GpuReport, run: LiveRun, check: PrecisionCheck | str) -> LiveDelegate:
    """What one child of :func:`.live.run_live` answered, beside the prediction."""
    live = delegate_answer(section, run.answer, run.seconds)
    if isinstance(check, str):
        return dataclasses.replace(live, not_checked=check)
    return dataclasses.replace(live, precision=check)


def delegate_answer(section: GpuReport, answer: DelegateAnswer, seconds: float
                    ) -> LiveDelegate:
    """The delegate's answer beside the predicted partition: every difference named."""
    if not answer.ok:
        why = (f"no GPU adapter ({answer.error})" if NO_ADAPTER in answer.error
               else f"the delegate did not compile the model ({answer.error})")
        return LiveDelegate(not_asked=why, adapter=answer.adapter, seconds=seconds,
                            total_ops=section.total_ops)
    on_gpu = section.total_ops if answer.gpu_ops is None else answer.gpu_ops
    found = []
    if on_gpu != section.gpu_ops:
        found.append(f"ops on the GPU: the delegate {on_gpu}, predicted {section.gpu_ops}")
    said = {line.split(":")[0]: line for line in answer.unsupported}
    predicted = {o.op: o.reason for o in section.ops
                 if o.device == "cpu" and not o.reason.startswith("supported,")}
    found += [f"{op}: the delegate refuses it ({said[op]}); predicted on the GPU"
              for op in sorted(said.keys() - predicted.keys())]
    found += [f"{op}: predicted on the CPU ({predicted[op]}); the delegate takes it"
              for op in sorted(predicted.keys() - said.keys())]
    return LiveDelegate(not_asked="", adapter=answer.adapter, seconds=seconds,
                        gpu_ops=answer.gpu_ops, total_ops=section.total_ops,
                        refused=tuple(sorted(answer.unsupported)), disagreements=tuple(found))


def eval_precision(path: Path, model: Model, x: np.ndarray, labels: np.ndarray | None,
                   profile: Profile, timeout_s: float = 60.0) -> LiveDelegate:
    """The delegate asked and the fp16 check on evaluation data (``convert --eval`` for a
    GPU profile): ``x`` the first input's float samples, quantized here to its type when it
    is an integer one; ``labels`` class indices or one-hot rows."""
    tensor = model.main.tensors[model.main.inputs[0]]
    samples = x.astype(np.float32)
    q = tensor.quantization
    if tensor.dtype in ("int8", "uint8", "int16") and q is not None and q.scale:
        info = np.iinfo(np.dtype(tensor.dtype))
        samples = np.clip(np.round(samples / q.scale[0] + q.zero_point[0]), info.min,
                          info.max).astype(tensor.dtype)
    run = run_live(model, lambda work: {}, gpu_settings(profile).precision, timeout_s,
                   samples=len(samples), work_files={"samples": samples})
    y = labels
    if y is not None:
        y = y.argmax(1) if y.ndim == 2 and y.shape[1] > 1 else y.reshape(-1)
    check = precision_check(run, model, f"the evaluation data of {path.name}", len(samples), y)
    return answered(partition(model, profile), run, check)


def convert_check(path: Path, profile: Profile, x: np.ndarray, labels: np.ndarray | None
                  ) -> GpuReport:
    """The GPU section of a model ``convert`` wrote: the predicted partition with the
    delegate asked and the fp16 check on the evaluation data (the target's
    ``accelerator_eval``)."""
    model = read_model(path)
    live = eval_precision(path, model, x, labels, profile,
                          timeout_s=max(60.0, SECONDS_PER_SAMPLE * len(x)))
    return dataclasses.replace(partition(model, profile), live=live)
