"""The quick look at installed distributions (``simulator/infra/distributions.py``) answers as
importlib.metadata, or not at all."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from devicefit.simulator.infra import distributions
from tests.dummy_target import distribution


def test_every_installed_version_is_importlib_metadatas() -> None:
    names = {dist.metadata["Name"] for dist in importlib.metadata.distributions()}
    assert len(names) > 10
    for name in sorted(names):
        assert distributions.version(name) == importlib.metadata.version(name), name
    assert distributions.version("tflite-micro") == distributions.version("TFLite_Micro")
    assert distributions.version("no-such-distribution-here") is None


def _site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site), str(tmp_path / "missing"), *map(str, extra)])
    return site


def test_an_entry_point_group_is_found_where_it_is_declared(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    site = _site(tmp_path, monkeypatch)
    other = site / "other-1.0.dist-info"
    other.mkdir()
    (other / "entry_points.txt").write_text("[console_scripts]\nother = other:main\n")
    assert not distributions.may_declare("devicefit.targets")
    distribution(site, "npu", "npu = npu:TARGET")
    assert distributions.may_declare("devicefit.targets")


def test_what_only_importlib_metadata_reads_gets_no_answer(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    plugins = tmp_path / "plugins.zip"
    plugins.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip archive
    _site(tmp_path, monkeypatch, plugins)
    assert distributions.may_declare("devicefit.targets")
    assert distributions.version("npu") is None

    class Finder:
        def find_distributions(self, context: object = None) -> list[object]:
            return []

    monkeypatch.setattr(sys, "path", [])
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    assert distributions.may_declare("devicefit.targets")


@pytest.mark.parametrize(("header", "version"), [
    ("Version: 1.2.3", "1.2.3"),
    ("version:\t1.2.3  ", "1.2.3  "),  # email keeps trailing blanks
    ("Version: 1.2\n  .3", None),  # folded: importlib.metadata decides
    ("Version: 1\nVersion: 2", None),
    ("Summary: x", None),
])
def test_the_version_header_is_read_as_email_reads_it(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      header: str, version: str | None) -> None:
    info = _site(tmp_path, monkeypatch) / "npu-9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: npu\n{header}\n\nVersion: 7\n")
    assert distributions.version("npu") == version
    if version is not None:
        assert importlib.metadata.version("npu") == version
