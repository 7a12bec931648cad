"""The conversion spec: one value from flags, keywords or YAML; clear errors for bad YAML;
the sparsity kinds as a registry; fit's trials as specs; and a real conversion from a YAML
spec that writes the same bytes as the same settings given as flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from devicefit.sdk.commands import convert as convert_command
from devicefit.sdk.convert import sparsity
from devicefit.sdk.convert.spec import OPTIONS, ConversionSpec, FineTuning, MemoryOptimization
from devicefit.sdk.fit.space import Candidate
from devicefit.simulator.errors import InputError, UsageError
from devicefit.simulator.profiles import load_profile

MCU = "stm32l4r5-cortex-m4"


def test_keywords_build_the_nested_spec_and_back():
    spec = ConversionSpec.from_options(
        calibration="c.npz", sparsity_pattern="2:4", train="t.npz", epochs=2, distill=True,
        optimize_memory=True, patches="auto", scheme="int8")
    assert spec.sparsity == (sparsity.NMPattern(2, 4),)
    assert spec.fine_tune == FineTuning("t.npz", 2, True)
    assert spec.optimize_memory == MemoryOptimization("auto", 0.2, "arena")
    assert ConversionSpec.from_options(**spec.options()) == spec
    assert set(spec.options()) == set(OPTIONS)


@pytest.mark.parametrize("options, words", [
    ({"sparsity_pattern": "2:4", "prune_channels": 0.5}, "choose one of --sparsity"),
    ({"train": "t.npz"}, "--train needs --epochs"),
    ({"epochs": 2}, "--epochs needs --train"),
    ({"patches": "auto"}, "--optimize-memory"),
    ({"distill": True}, "--distill"),
    ({"train": "t.npz", "epochs": 1}, "fine-tunes after pruning"),
    ({"prune_channels": 1.5}, "--prune-channels 1.5"),
    ({"sparsity_pattern": "4:2"}, "0 < N < M"),
    ({"weights": "int2"}, "--weights 'int2': choose int8, int4, auto or lut4"),
])
def test_option_combinations_that_make_no_sense_are_usage_errors(options, words):
    with pytest.raises(UsageError, match=words):
        ConversionSpec.from_options(**options)


def test_an_unknown_keyword_is_a_type_error_with_a_suggestion():
    with pytest.raises(TypeError, match="did you mean 'calibration'"):
        ConversionSpec.from_options(calibraton="c.npz")


def test_a_yaml_file_gives_the_same_spec_with_paths_relative_to_it(tmp_path):
    (tmp_path / "cfg").mkdir()
    path = tmp_path / "cfg" / "convert.yaml"
    path.write_text("scheme: int8\ncalibration: data/train.npz\neval: /abs/test.npz\n"
                    "sparsity:\n  kind: channel\n  ratio: 0.5\n"
                    "fine_tune:\n  train: data/train.npz\n  epochs: 4\n  distill: true\n"
                    "optimize_memory:\n  patches: 2x2\n  max_mac_overhead: 30\n"
                    "float_baseline: true\nweights: int4\n")
    spec = ConversionSpec.load(path)
    data = str(tmp_path / "cfg" / "data" / "train.npz")
    assert spec == ConversionSpec(
        scheme="int8", calibration=data, eval_data="/abs/test.npz",
        sparsity=(sparsity.ChannelRatio(0.5),), fine_tune=FineTuning(data, 4, True),
        optimize_memory=MemoryOptimization("2x2", 0.3, "arena"), float_baseline=True,
        weights="int4")
    assert ConversionSpec.from_mapping(spec.to_mapping()) == spec


@pytest.mark.parametrize("text, words", [
    ("schem: int8\n", ":1: schem: unknown key; did you mean 'scheme'?"),
    ("scheme: int8\nunsafe: true\n", ":2: unsafe: unknown key"),
    ("scheme: int4\n", "scheme: 'int4' is not one of int8"),
    ("sparsity:\n  kind: nm\n", "'kind' must be one of n:m, channel"),
    ("sparsity:\n  kind: n:m\n  pattern: 2:4\n", "quote it"),  # YAML 1.1 reads 2:4 as 124
    ("sparsity:\n  kind: channel\n  ratio: 0.5\n  rate: 1\n", "unknown key 'rate'"),
    ("sparsity:\n  kind: [channel]\n", "'kind' must be one of n:m, channel"),
    # The second item's own line, not the line of 'sparsity:'.
    ("sparsity:\n  - {kind: channel, ratio: 0.5}\n  - {kind: channel, ratio: 0.2}\n",
     ":3: sparsity.1: kind channel is given twice"),
    ("sparsity: {kind: channel, ratio: 0.5}\nfine_tune:\n  train: t.npz\n",
     ":2: fine_tune: missing key 'epochs'"),
    ("fine_tune:\n  train: t.npz\n  epochs: 2\n", "add a 'sparsity' mapping"),
    ("optimize_memory:\n  patches: 1x1\n", ":2: optimize_memory.patches: expected 'auto'"),
    ("optimize_memory:\n  patch_objective: tail\n", "'tail' is not one of arena, head"),
    ("- scheme\n", "must be a mapping"),
    ("weights: int2\n", "weights: 'int2' is not one of int8, int4, auto"),
])
def test_bad_yaml_is_one_input_error_naming_the_file_line_and_key(tmp_path, text, words):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        ConversionSpec.load(path)
    assert str(caught.value).startswith(str(path))
    assert words in str(caught.value)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    convert_command.register(parser.add_subparsers())
    return parser.parse_args(["convert", "m.keras", "--profile", MCU, "-o", "o.tflite", *argv])


def test_flags_given_override_the_spec_file_and_the_rest_comes_from_it(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("scheme: int16x8\ncalibration: c.npz\n"
                    "sparsity: {kind: n:m, pattern: \"2:4\"}\n"
                    "fine_tune: {train: t.npz, epochs: 3}\n")
    spec = convert_command.spec_from_args(_args("--spec", str(path), "--scheme", "int8",
                                                "--prune-channels", "0.25"))
    assert spec.scheme == "int8"  # the flag
    assert spec.sparsity == (sparsity.ChannelRatio(0.25),)  # a kind flag replaces the file's
    assert spec.calibration == str(tmp_path / "c.npz") and spec.fine_tune.epochs == 3
    assert convert_command.spec_from_args(_args()) == ConversionSpec()


def test_flags_keep_a_spec_files_sparsity_that_no_flag_can_say(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("calibration: c.npz\nsparsity:\n"
                    "  - {kind: channel, ratio: 0.0, layers: {conv2+conv3: 0.5}}\n"
                    "  - {kind: n:m, pattern: \"2:4\"}\n")
    spec = convert_command.spec_from_args(_args("--spec", str(path), "--scheme", "int8"))
    assert spec.sparsity == (sparsity.ChannelRatio(0.0, (("conv2+conv3", 0.5),)),
                             sparsity.NMPattern(2, 4))
    assert spec.scheme == "int8"


def test_the_cli_offers_one_flag_per_registered_sparsity_kind():
    args = _args("--sparsity", "2:4")
    assert {k.option for k in sparsity.KINDS.values()} <= set(vars(args))
    with pytest.raises(SystemExit):  # the kinds' flags exclude each other
        _args("--sparsity", "2:4", "--prune-channels", "0.5")


def test_the_registry_has_one_kind_per_module_named_as_profiles_name_them():
    assert list(sparsity.KINDS) == ["n:m", "channel"]
    allowed = {k for name in (MCU, "android-arm64-cpu", "coral-edgetpu")
               for k in load_profile(name).sparsity.kinds}
    assert allowed - {"none"} == set(sparsity.KINDS)
    for kind in sparsity.KINDS.values():
        spec = kind.from_mapping({"pattern": "2:4"} if kind.name == "n:m" else {"ratio": 0.5})
        assert spec.kind == kind.name
        assert sparsity.from_mapping(spec.to_mapping()) == spec
        assert kind.parse(spec.option_value()) == spec


def test_a_profile_refuses_a_kind_with_its_targets_reason():
    with pytest.raises(UsageError, match="TFLite-Micro kernels do not skip zero weights"):
        sparsity.check_allowed(load_profile(MCU), "n:m", sparsity.NMPattern(2, 4))


def test_outcomes_cross_the_process_as_dicts_and_merge_in_order():
    first = sparsity.SparsityOutcome(pruned_layers=[sparsity.PrunedLayer("c", "Conv2D", 8, 4)],
                                     prune_stages=[0.25, 0.5])
    second = sparsity.SparsityOutcome(skipped={"d": "why"}, masks=2)
    merged = first.merged(second)
    assert sparsity.SparsityOutcome.from_dict(merged.to_dict()) == merged
    assert (merged.masks, merged.prune_stages, merged.skipped) == (2, [0.25, 0.5], {"d": "why"})


def test_fit_trials_are_specs_with_their_scheme_and_sparsity():
    base = ConversionSpec(optimize_memory=MemoryOptimization("auto"))
    spec = Candidate("int8", 0.0, "2:4", layers=(("a+b", 0.5),)).spec(base)
    assert spec.scheme == "int8" and spec.optimize_memory == base.optimize_memory
    assert spec.sparsity == (sparsity.ChannelRatio(0.0, (("a+b", 0.5),)),
                             sparsity.NMPattern(2, 4))
    assert spec.sparsity[0].layer_ratios() == {"a": 0.5, "b": 0.5}
    assert Candidate("float16").spec(base).sparsity == ()


@pytest.mark.slow
def test_a_yaml_spec_converts_to_the_same_bytes_as_the_same_flags(tmp_path, capsys):
    from devicefit.sdk.cli import main
    from examples.digits import cached_cnn, load_digits
    from tests.paths import TESTS

    model = str(cached_cnn(TESTS / "artifacts" / "convert"))
    data = load_digits().save_npz(tmp_path)
    by_flags, by_spec = tmp_path / "flags.tflite", tmp_path / "spec.tflite"
    assert main(["convert", model, "--profile", MCU, "--calibration", str(data["train"]),
                 "--prune-channels", "0.5", "-o", str(by_flags)]) == 0
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"calibration: {Path(data['train']).name}\n"
                    "sparsity:\n  kind: channel\n  ratio: 0.5\n")
    assert main(["convert", model, "--profile", MCU, "--spec", str(spec),
                 "-o", str(by_spec)]) == 0
    assert by_spec.read_bytes() == by_flags.read_bytes()
    bad = tmp_path / "bad.yaml"
    bad.write_text("calibraton: x.npz\n")
    assert main(["convert", model, "--profile", MCU, "--spec", str(bad),
                 "-o", str(tmp_path / "x.tflite")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:1: calibraton: unknown key; did you mean 'calibration'?" in err
    assert "Traceback" not in err
