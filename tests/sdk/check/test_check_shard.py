"""``check --shard K/N`` + ``check merge``: the shards of a CI matrix give the same report
(JSON, JUnit, Markdown, HTML) and exit code as one unsharded run, on real zoo models with a
passing target, a failing budget, a regression against a baseline and a corrupt model."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from devicefit.sdk.check import CheckResult, Outcome, TargetStatus
from devicefit.sdk.check.shard import assign, load_shards, merge
from devicefit.sdk.cli import main
from tests.paths import ROOT
from tests.zoo import model_path

MODELS = ("chain_int8", "mlp_int8", "residual_int8", "inception_int8")
LOOSE = "{flash: 100MB, arena: 100MB, latency: 100s}"
VIEWS = {"--junit": "junit.xml", "--markdown": "summary.md", "--html": "report.html"}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("shard-project")
    for name in MODELS:
        shutil.copy(model_path(name), folder / f"{name}.tflite")
    (folder / "broken.tflite").write_bytes(model_path("chain_int8").read_bytes()[:300])
    f = folder / "devicefit.yaml"
    f.write_text(f"""baseline: baseline.json
defaults:
  budgets: {LOOSE}
  regression: {{arena: 5%, flash: 0%}}
models:
  - path: chain_int8.tflite
    profiles: [stm32l4r5-cortex-m4, nrf52840-cortex-m4, esp32-s3]
  - path: mlp_int8.tflite
    profiles: [android-arm64-cpu, stm32l4r5-cortex-m4]
  - path: residual_int8.tflite
    profiles:
      - stm32h743-cortex-m7
      - {{name: nrf52840-cortex-m4, budgets: {{arena: 1KiB}}}}
  - path: inception_int8.tflite
    profiles: [android-arm64-cpu]
  - path: broken.tflite
    profiles: [esp32-s3]
""")
    return f


def _baseline(project: Path, tmp: Path) -> Path:
    """A baseline from the working targets, with mlp's flash made smaller than it is."""
    good = tmp / "good.yaml"
    good.write_text(project.read_text().split("  - path: broken.tflite")[0])
    for name in MODELS:
        shutil.copy(project.parent / f"{name}.tflite", tmp / f"{name}.tflite")
    out = tmp / "baseline.json"
    # Exit 1: residual's arena override fails; the baseline is written all the same.
    assert main(["check", str(good), "--update-baseline", "--baseline", str(out)]) == 1
    data = json.loads(out.read_text())
    for metrics in data["models"]["mlp_int8"].values():
        metrics["flash_bytes"] = int(metrics["flash_bytes"] * 0.8)
    out.write_text(json.dumps(data))
    return out


def _views(folder: Path) -> list[str]:
    return [arg for flag, name in VIEWS.items() for arg in (flag, str(folder / name))]


def _normal(folder: Path, json_path: Path) -> dict[str, str]:
    """The views with the run's durations and start times taken out (they differ between
    any two runs)."""
    texts = {name: (folder / name).read_text() for name in VIEWS.values()}
    texts["junit.xml"] = re.sub(r' (time|timestamp)="[0-9.:T-]+"', "", texts["junit.xml"])
    texts["summary.md"] = re.sub(r" · [0-9.]+ s", "", texts["summary.md"])
    doc = json.loads(json_path.read_text())
    doc.pop("shard", None)
    texts["json"] = json.dumps(_no_seconds(doc), indent=1, sort_keys=True)
    return texts


def _no_seconds(value):
    if isinstance(value, dict):
        return {k: _no_seconds(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_no_seconds(v) for v in value]
    return value


@pytest.fixture(scope="module")
def runs(project, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shard-runs")
    baseline = _baseline(project, tmp_path_factory.mktemp("baseline"))
    shutil.copy(baseline, project.parent / "baseline.json")
    whole = tmp / "whole"
    whole.mkdir()
    # --fail-on-risk (no target is at risk): a flag that must travel through the shards.
    code = main(["check", str(project), *_views(whole), "--results", str(whole / "all.json"),
                 "--fail-on-risk"])
    shards = []
    codes = []
    for k in (1, 2, 3):
        out = tmp / f"shard{k}.json"
        codes.append(main(["check", str(project), "--shard", f"{k}/3", "--results", str(out),
                           "--fail-on-risk"]))
        shards.append(out)
    merged = tmp / "merged"
    merged.mkdir()
    merged_code = main(["check", "merge", *map(str, reversed(shards)), *_views(merged)])
    assert main(["check", "merge", *map(str, shards), "--json"]) == merged_code
    return {"whole": whole, "code": code, "shards": shards, "codes": codes, "merged": merged,
            "merged_code": merged_code, "tmp": tmp}


def test_merged_shards_give_the_unsharded_report_and_exit_code(runs, capsys):
    assert runs["code"] == 2  # the corrupt model is an error; a budget and a rule fail too
    assert runs["merged_code"] == runs["code"]
    whole = _normal(runs["whole"], runs["whole"] / "all.json")
    # The merged JSON as `check merge --json` printed it (the last command of the fixture).
    main(["check", "merge", *map(str, runs["shards"]), "--json"])
    (runs["merged"] / "merged.json").write_text(capsys.readouterr().out)
    merged = _normal(runs["merged"], runs["merged"] / "merged.json")
    for view in whole:
        assert merged[view] == whole[view], view
    doc = json.loads((runs["whole"] / "all.json").read_text())
    statuses = {o["status"] for o in doc["results"]}
    assert statuses == {"pass", "fail", "error"}
    assert any(r["ok"] is False for o in doc["results"] for r in o["regressions"])


def test_merge_is_the_unsharded_result_field_by_field(runs):
    """The merged :class:`CheckResult` equals the unsharded run's, both read back through
    the one typed path (``ShardResult.from_dict``), field by field: a field the merge
    dropped (as it once dropped ``fail_on_risk``) fails here whatever its name."""
    whole = load_shards([runs["whole"] / "all.json"])[0][1].result
    merged = merge(load_shards(runs["shards"]))
    # Set by this run, so that the comparison below can tell a dropped one from a default
    # (baseline_written: only a run that writes the baseline has one).
    assert whole.fail_on_risk is True and whole.baseline is not None and whole.run is False
    for f in dataclasses.fields(CheckResult):
        if f.name == "outcomes":
            assert len(merged.outcomes) == len(whole.outcomes)
            for m, w in zip(merged.outcomes, whole.outcomes):
                for g in dataclasses.fields(Outcome):
                    if g.name != "seconds":  # wall time
                        assert getattr(m, g.name) == getattr(w, g.name), (w.model, g.name)
        elif f.name != "seconds":
            assert getattr(merged, f.name) == getattr(whole, f.name), f.name


def test_a_shard_result_reads_back_to_its_own_json(runs):
    for path in [runs["whole"] / "all.json", *runs["shards"]]:
        doc = json.loads(path.read_text())
        ((_, read),) = load_shards([path])
        assert read.to_dict() == doc
        assert all(isinstance(o.status, TargetStatus) for o in read.result.outcomes)


def test_shards_split_the_targets_once_each(runs):
    docs = [json.loads(p.read_text()) for p in runs["shards"]]
    positions = [i for d in docs for i in d["shard"]["positions"]]
    assert sorted(positions) == list(range(docs[0]["shard"]["targets"]))
    assert all(d["results"] for d in docs), "9 targets over 3 shards: none is empty"
    # A shard's own exit code is that of its targets alone.
    for d, code in zip(docs, runs["codes"]):
        assert code == d["exit_code"]


def test_the_split_is_deterministic_and_balanced():
    weights = [500, 100, 100, 300, 200, 100, 100]
    owner = assign(weights, 3)
    assert owner == assign(weights, 3)
    loads = [sum(w for w, k in zip(weights, owner) if k == s) for s in range(3)]
    assert max(loads) - min(loads) <= max(weights) - min(weights)
    assert assign([1] * 4, 4) == [0, 1, 2, 3]


@pytest.mark.parametrize("drop, message", [
    (1, "missing shard result(s) 2/3"),
    (None, "are both shard 1/3"),
])
def test_merge_refuses_missing_or_repeated_shards(runs, capsys, drop, message):
    shards = [str(p) for p in runs["shards"]]
    args = shards[:drop] + shards[drop + 1:] if drop is not None else shards + shards[:1]
    assert main(["check", "merge", *args]) == 2
    assert message in capsys.readouterr().err


def test_merge_refuses_a_shard_of_another_project(runs, tmp_path, capsys):
    other = json.loads(runs["shards"][0].read_text())
    other["shard"]["project_sha256"] = "0" * 64
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    assert main(["check", "merge", str(path), *map(str, runs["shards"][1:])]) == 2
    assert "not shards of one run" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--shard", "4/3"], "expected K/N with 1 <= K <= N"),
    (["--shard", "1/2", "--update-baseline"], "--update-baseline needs every target"),
], ids=["index-over-count", "sharded-baseline"])
def test_bad_shard_usage_exits_2(project, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        code = main(["check", str(project), *args])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_merge_of_a_plain_json_report_is_refused(runs, tmp_path, capsys):
    plain = json.loads(runs["shards"][0].read_text())
    del plain["shard"]
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(plain))
    assert main(["check", "merge", str(path)]) == 2
    assert "not a devicefit check shard result" in capsys.readouterr().err


def test_the_github_matrix_example_shards_then_merges():
    """examples/ci/github-actions-sharded.yml is documentation: its commands must parse."""
    import shlex

    import yaml

    from devicefit.sdk.cli import build_parser

    example = ROOT / "examples" / "ci" / "github-actions-sharded.yml"
    jobs = yaml.safe_load(example.read_text())["jobs"]
    assert jobs["shard"]["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert jobs["merge"]["needs"] == "shard"
    commands = {name: [s["run"] for s in job["steps"] if "devicefit check" in s.get("run", "")]
                for name, job in jobs.items()}
    (shard_run,), (merge_run,) = commands["shard"], commands["merge"]
    shard = build_parser().parse_args(
        shlex.split(shard_run.replace("${{ matrix.shard }}", "3"))[1:])
    assert (shard.shard.index, shard.shard.count) == (3, 4) and shard.results
    merge = build_parser().parse_args(shlex.split(merge_run)[1:])
    assert merge.file == "merge" and merge.shard_results and merge.junit and merge.markdown


def test_merge_writes_the_baseline_an_unsharded_run_would(project, tmp_path):
    good = project.parent / "good.yaml"
    good.write_text(project.read_text().split("  - path: broken.tflite")[0]
                    .replace("baseline: baseline.json", ""))
    whole, merged = tmp_path / "whole.json", tmp_path / "merged.json"
    assert main(["check", str(good), "--update-baseline", "--baseline", str(whole)]) == 1
    shards = [tmp_path / f"s{k}.json" for k in (1, 2)]
    for k, path in enumerate(shards, 1):
        main(["check", str(good), "--shard", f"{k}/2", "--results", str(path)])
    assert main(["check", "merge", *map(str, shards), "--update-baseline", "--baseline",
                 str(merged)]) == 1
    assert json.loads(merged.read_text()) == json.loads(whole.read_text())


@pytest.mark.parametrize("flag", ["--junit", "--markdown", "--html", "--update-baseline"])
@pytest.mark.parametrize("victim", ["project", "model"])
def test_merge_never_writes_over_the_project_or_its_models(runs, project, capsys, flag, victim):
    """Found by the fault campaign: merge knew only the shard files as inputs, so
    ``--junit vww.tflite`` replaced a model and ``--markdown devicefit.yaml`` the project."""
    path = project if victim == "project" else project.parent / "mlp_int8.tflite"
    before = path.read_bytes()
    args = ["--baseline", str(path), "--update-baseline"] if flag == "--update-baseline" \
        else [flag, str(path)]
    assert main(["check", "merge", *map(str, runs["shards"]), *args]) == 2
    assert "would replace an input" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_merge_keeps_fail_on_risk(project, tmp_path, capsys):
    """A sharded run with --fail-on-risk and its merge agree on the exit code: the flag
    travels in the shard results (it was dropped, so merge exited 0 on an at-risk target)."""
    from devicefit.simulator.simulate import simulate

    model = project.parent / "chain_int8.tflite"
    latency = simulate(str(model), "stm32l4r5-cortex-m4").latency
    # A latency budget inside the estimate's band: met by the estimate, not by its top.
    budget = (latency.estimated_device_ms + latency.band_ms[1]) / 2
    risky = tmp_path / "risky.yaml"
    risky.write_text(f"""models:
  - path: {model}
    profiles: [stm32l4r5-cortex-m4, {{name: esp32-s3, budgets: {{latency: 100s}}}}]
    budgets: {{latency: {budget:.3f}ms}}
""")
    shards = [tmp_path / f"s{k}.json" for k in (1, 2)]
    codes = [main(["check", str(risky), "--shard", f"{k}/2", "--results", str(s),
                   "--fail-on-risk"]) for k, s in zip((1, 2), shards)]
    assert max(codes) == 1  # the at-risk target's shard fails
    capsys.readouterr()
    merged = main(["check", "merge", *map(str, shards), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["fail_on_risk"] is True
    assert merged == max(codes)
