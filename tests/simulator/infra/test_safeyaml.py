"""YAML from anywhere is parsed by libyaml where PyYAML has it, with the answers and messages
of PyYAML's pure-Python parser (``simulator/infra/safeyaml.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devicefit.simulator.errors import InputError
from devicefit.simulator.infra import safeyaml
from tests.paths import ROOT

#: Valid, hostile and broken texts: each bound, each kind of refusal, syntax errors.
TEXTS = {
    "nested": "a:\n  b: [1, 2, {c: d}]\n  e: 'x'\nf: 1.5\ng: 0x1f\nh: 2026-12-03\n",
    "merge": "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "empty": "",
    "comment only": "# nothing\n",
    "deep nesting": "a: " + "[" * 3000 + "]" * 3000 + "\n",
    "alias bomb": "a: &a [1, 1]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20)),
    "many aliases": "a: &a 1\nb: [" + ", ".join(["*a"] * 300) + "]\n",
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "long integer": "a: " + "9" * 50 + "\n",
    "not finite": "a: .inf\nb: 1e999\n",
    "unclosed list": "models: [\n",
    "bad indentation": "a:\n  b: 1\n c: 2\n",
    "tab": "a:\n\tb: 1\n",
    "unknown tag": "a: !!python/object:os.system 1\n",
    "bad timestamp": "a: 2026-13-45\n",
    "control character": "a: \x07\n",
    "two documents": "a: 1\n---\nb: 2\n",
}


def _outcome(parse: Any, text: str) -> tuple[str, Any]:
    try:
        return "data", parse(text)
    except InputError as exc:
        return "error", str(exc)


@pytest.mark.skipif(safeyaml._FAST_LOADER is None, reason="PyYAML built without libyaml")
@pytest.mark.parametrize("text", [*TEXTS.values(), *(p.read_text(encoding="utf-8") for p in
                                                     sorted((ROOT / "device_profiles")
                                                            .glob("*.yaml")))],
                         ids=[*TEXTS, *(p.stem for p in sorted((ROOT / "device_profiles")
                                                               .glob("*.yaml")))])
def test_libyaml_answers_as_the_pure_python_parser(text: str) -> None:
    path = Path("project.yaml")
    ours = _outcome(lambda t: safeyaml._parse(t, path, InputError), text)
    pure = _outcome(lambda t: safeyaml._parse_with(yaml.SafeLoader, t, path, InputError), text)
    assert ours == pure


def test_the_hostile_texts_are_refused_as_before() -> None:
    # The table above holds refusals of every kind, not only texts both parsers accept.
    refused = {name for name, text in TEXTS.items()
               if _outcome(lambda t: safeyaml.load_yaml(t, Path("p.yaml")), text)[0] == "error"}
    assert {"deep nesting", "alias bomb", "many aliases", "duplicate key", "long integer",
            "not finite", "unclosed list", "bad indentation", "tab", "unknown tag",
            "control character", "two documents"} <= refused
