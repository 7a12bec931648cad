"""The phone GPU target: the partition LiteRT's GPU delegate makes, by its cited rules
(simulator/targets/gpu/rules.py), on zoo models that fall back for different reasons, a
custom op built in code and a public model; the boundary bytes and the GPU memory; the
profile and ``simulate`` through the CLI.

The expected partitions are the rules' answers; where the delegate itself was asked
(LiteRT's WebGPU accelerator on SwiftShader, ``benchmarks/probe_gpu_paths.py``) it gave the
same ops on the GPU for these models (docs/benchmarks.md, "The phone GPU")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from devicefit.simulator.errors import ProfileError
from devicefit.simulator.profiles import load_profile
from devicefit.simulator.read.reader import parse_model, read_model
from devicefit.simulator.targets.gpu.partition import partition, subsets, text_lines
from devicefit.simulator.targets.gpu.rules import NOT_SUPPORTED, TYPE_SHAPE
from tests.paths import ROOT
from tests.tflite_builder import custom_model

PROFILE = ROOT / "device_profiles" / "android-gpu-adreno.yaml"


@pytest.fixture(scope="module")
def adreno():
    return load_profile(PROFILE)


def test_profile_selects_the_gpu_target_with_the_delegates_defaults(adreno):
    assert adreno.runtime.name == "gpu"
    assert adreno.target_settings.max_partitions == 1
    assert adreno.target_settings.precision == "fp16"
    assert adreno.runtime.threads == 4  # inherited from android-arm64-cpu: the CPU part


def test_control_flow_falls_back_and_its_operands_cross_back_to_the_cpu(
        model_zoo, adreno):
    model = read_model(model_zoo("if_float32"))
    report = partition(model, adreno)
    sg = model.main
    # IF has no parser in NewOperationParser: the delegate's own words.
    (cpu,) = [o for o in report.ops if o.device == "cpu"]
    assert (cpu.op, cpu.reason) == ("IF", NOT_SUPPORTED)
    # The layer each fallback comes from: its output tensor, as the Ethos-U's partition.
    assert cpu.layer == sg.tensors[sg.operators[cpu.index].outputs[0]].name == "Identity"
    assert all(o.layer for o in report.ops)
    assert (report.gpu_ops, report.cpu_ops, len(report.partitions)) == (3, 1, 1)
    (part,) = report.partitions
    # In: the graph input; out: what IF reads of the GPU ops' results.
    assert part.in_bytes == sum(sg.tensors[t].nbytes for t in sg.inputs)
    if_op = sg.operators[cpu.index]
    crossing = [t for t in if_op.inputs if t >= 0 and not sg.tensors[t].has_data]
    assert part.out_bytes == sum(sg.tensors[t].nbytes for t in crossing) == 33


def test_rank_5_tensors_cut_the_graph_and_only_the_largest_partition_is_kept(
        model_zoo, adreno, tmp_path: Path):
    model = read_model(model_zoo("unet_int8"))
    report = partition(model, adreno)
    refused = {(o.op, o.reason) for o in report.ops if o.reason == TYPE_SHAPE}
    assert refused == {("RESHAPE", TYPE_SHAPE), ("TILE", TYPE_SHAPE)}
    sg = model.main
    for o in report.ops:
        if o.reason == TYPE_SHAPE:  # IsAllAllowedTensors: a tensor of rank >= 5
            op = sg.operators[o.index]
            assert max(len(sg.tensors[t].shape) for t in (*op.inputs, *op.outputs)
                       if t >= 0) >= 5
            assert "has rank 5" in o.rule
    # The supported ops cut into 3 subsets; the delegate keeps the largest, 4 ops.
    assert report.candidate_partitions == 3
    assert [len(p.ops) for p in report.partitions] == [4]
    left = [o for o in report.ops if o.device == "cpu" and o.reason.startswith("supported")]
    assert left and all(o.partition is None for o in left)
    # Each fallback line names the Keras layers it comes from (a fused op: its first name).
    [tiles] = [line for line in text_lines(report) if line.startswith("  on CPU       TILE")]
    # Keras numbers its names per process (functional_1, functional_1_1, ...): the test is
    # on the names' shape, not on how many models this worker built before.
    assert re.match(r"  on CPU       TILE \(ops 4, 6, 11, 13, layers "
                    r"'functional[\d_]*/up_sampling2d[\d_]*/Repeat/Tile', "
                    r"'functional[\d_]*/up_sampling2d[\d_]*/Repeat_1/Tile' and 2 more\): ",
                    tiles), tiles
    [convs] = [line for line in text_lines(report) if line.startswith("  on CPU       CONV_2D")]
    assert re.search(r"'functional[\d_]*/conv2d[\d_]*/Relu', ", convs) and ";" not in convs
    # With more partitions allowed, every supported op runs on the GPU.
    wide = tmp_path / "wide.yaml"
    wide.write_text(f"extends: {PROFILE}\nname: wide\ngpu:\n  max_partitions: 8\n")
    more = partition(model, load_profile(wide))
    assert len(more.partitions) == 3
    assert more.gpu_ops == sum(1 for o in report.ops if o.reason != TYPE_SHAPE)
    assert more.boundary_bytes > report.boundary_bytes  # every cut adds a crossing


def test_int16_activations_leave_nothing_on_the_gpu(model_zoo, adreno):
    report = partition(read_model(model_zoo("chain_int16x8")), adreno)
    assert report.gpu_ops == 0 and report.partitions == ()
    assert {o.reason for o in report.ops} == {TYPE_SHAPE}
    assert all(o.rule.endswith("is int16)") for o in report.ops)


def test_float16_weights_run_whole_and_are_held_in_fp16(model_zoo, adreno, tmp_path: Path):
    model = read_model(model_zoo("chain_float16"))
    report = partition(model, adreno)
    assert report.cpu_ops == 0
    (part,) = report.partitions
    sg = model.main
    consts = {t for op in sg.operators for t in op.inputs if t >= 0 and sg.tensors[t].has_data}
    # fp16: two bytes an element, whatever the file stores (float16 or int32 shapes).
    assert part.weight_bytes == 2 * sum(sg.tensors[t].num_elements for t in consts)
    exact = tmp_path / "fp32.yaml"
    exact.write_text(f"extends: {PROFILE}\nname: fp32\ngpu:\n  precision: fp32\n")
    fp32 = partition(model, load_profile(exact)).partitions[0]
    assert (fp32.weight_bytes, fp32.tensor_bytes) == (2 * part.weight_bytes,
                                                      2 * part.tensor_bytes)


def test_a_custom_op_without_a_parser_is_not_supported(tmp_path: Path):
    path = tmp_path / "custom.tflite"
    path.write_bytes(custom_model("MyOp"))
    report = partition(parse_model(path.read_bytes(), str(path)))
    assert [(o.device, o.reason) for o in report.ops] == [("cpu", NOT_SUPPORTED)]
    assert report.partitions == ()


def test_subsets_follow_data_flow_not_file_order(model_zoo):
    # On a branching graph, a supported op whose inputs are ready joins the open subset.
    sg = read_model(model_zoo("branches_int8")).main
    cut = subsets(sg, [True] * len(sg.operators))
    assert cut == [(True, list(range(len(sg.operators))))]
    alternate = [i % 2 == 0 for i in range(len(sg.operators))]
    cut = subsets(sg, alternate)
    assert sorted(i for _, nodes in cut for i in nodes) == list(range(len(sg.operators)))
    assert all(all(alternate[i] == kind for i in nodes) for kind, nodes in cut)


def test_simulate_shows_the_partition_in_text_and_json(model_zoo):
    model = str(model_zoo("if_float32"))
    cli = [sys.executable, "-m", "devicefit.sdk.cli", "simulate", model, "--profile",
           str(PROFILE)]
    text = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    assert "on CPU       IF (op 3, layer 'Identity'): Operation is not supported." in text.stdout
    # The one partition's two crossings (in, and back to IF) carry the profile's sync each.
    assert "(2 crossing(s), 65 B)" in text.stdout
    assert "Verdict: PASS\n" in text.stdout
    done = subprocess.run([*cli, "--format", "json"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    gpu = json.loads(done.stdout)["compatibility"]["gpu"]
    assert (gpu["gpu_ops"], gpu["cpu_ops"]) == (3, 1)
    assert gpu["ops"][3]["reason"] == NOT_SUPPORTED


@pytest.mark.parametrize("text,words", [
    ("extends: android-gpu-adreno\nname: b\ngpu:\n  precision: fp8\n", "one of fp16, fp32"),
    ("extends: android-arm64-cpu\nname: b\ngpu:\n  max_partitions: 2\n",
     "gpu.max_partitions is a setting of the gpu target"),
    ("extends: android-arm64-cpu\nname: b\nbudgets:\n  gpu_memory: 1GiB\n",
     r"b.yaml:4: budgets.gpu_memory is for a GPU \(device.class mobile-gpu\); this "
     r"profile's device is 'mobile-cpu'"),
    ("extends: android-gpu-adreno\nname: b\nbudgets:\n  gpu_memory: lots\n", "gpu_memory"),
    ("extends: android-gpu-adreno\nname: b\ngpu:\n  transfer_bandwidth: fast\n",
     "a rate above 0 such as 320MB/s"),
    ("extends: android-gpu-adreno\nname: b\ngpu:\n  memory_bandwidth: 0MB/s\n",
     "a rate above 0 such as 320MB/s"),
])
def test_bad_gpu_settings_and_budgets_are_one_clear_error(tmp_path: Path, text, words):
    path = tmp_path / "b.yaml"
    path.write_text(text)
    with pytest.raises(ProfileError, match=words):
        load_profile(path)
