"""``check --shard K/N`` splits a project's model × profile targets over N CI runners;
``check merge`` joins their JSON results into one :class:`CheckResult`, so every view
(table, JUnit, Markdown, HTML, JSON) and the exit code are those of one unsharded run.

The split depends only on the project file and the model files, so every runner of a CI
matrix computes the same one without talking to the others. Targets are dealt out largest
model first to the least loaded shard (the longest-processing-time rule): simulating, and
even more running, takes longer for bigger models, so the shards finish close together.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicefit.simulator.errors import InputError

from .gate import CheckResult, Outcome
from .project import Project

SHARD_FORMAT = 1


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as written on the command line
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` → ``Shard(2, 4)`` (an argparse type: a bad value is a usage error)."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index = count = 0
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N, e.g. 2/4; got {text!r}")
    return Shard(index, count)


def assign(weights: Sequence[int], count: int) -> list[int]:
    """The shard (0-based) of each target: heaviest first onto the least loaded shard; ties
    go by position, so the result is deterministic."""
    loads = [0] * count
    owner = [0] * len(weights)
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        k = min(range(count), key=lambda k: (loads[k], k))
        owner[i] = k
        loads[k] += max(weights[i], 1)
    return owner


def select(project: Project, shard: Shard) -> tuple[Project, list[int]]:
    """The project cut down to this shard's targets, and their positions in the project."""
    owner = assign([_weight(t.model_path) for t in project.targets], shard.count)
    positions = [i for i, k in enumerate(owner) if k == shard.index - 1]
    return (dataclasses.replace(project, targets=tuple(project.targets[i] for i in positions)),
            positions)


def _weight(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the target will be this shard's error, like in an unsharded run


def project_digest(project: Project) -> str:
    return hashlib.sha256(project.path.read_bytes()).hexdigest()


def shard_document(result: CheckResult, project: Project, shard: Shard, positions: list[int],
                   total: int) -> dict[str, Any]:
    """The JSON result plus where its targets belong (``check --results``)."""
    doc = result.to_dict()
    doc["shard"] = {"format": SHARD_FORMAT, "index": shard.index, "count": shard.count,
                    "targets": total, "positions": positions,
                    "project_sha256": project_digest(project)}
    return doc


def load_shards(paths: Sequence[Path]) -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in paths:
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: shard result not found") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: cannot read shard result: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("shard"), dict) or \
                doc["shard"].get("format") != SHARD_FORMAT:
            raise InputError(f"{path}: not a devicefit check shard result (write one with "
                             "'devicefit check --shard K/N --results FILE.json')")
        docs.append((Path(path), doc))
    return docs


def merge(docs: Sequence[tuple[Path, dict[str, Any]]]) -> CheckResult:
    """One result from every shard of one run; :class:`InputError` if any is missing,
    repeated or from another project, mode or split."""
    if not docs:
        raise InputError("check merge needs the shard results (FILE.json ...)")
    first_path, first = docs[0]
    same = ("count", "targets", "project_sha256")
    seen: dict[int, Path] = {}
    for path, doc in docs:
        s = doc["shard"]
        for key in same:
            if s.get(key) != first["shard"].get(key):
                raise InputError(f"{path} and {first_path} are not shards of one run: "
                                 f"different {key.replace('_', ' ')}")
        for key in ("project", "run", "baseline", "fail_on_risk"):
            if doc.get(key) != first.get(key):
                raise InputError(f"{path} and {first_path} are not shards of one run: "
                                 f"different {key}")
        if s["index"] in seen:
            raise InputError(f"{path} and {seen[s['index']]} are both shard "
                             f"{s['index']}/{s['count']}")
        seen[s["index"]] = path
    count, total = first["shard"]["count"], first["shard"]["targets"]
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
    if missing:
        raise InputError(f"missing shard result(s) {', '.join(missing)}: merge needs all "
                         f"{count}")
    placed: list[Outcome | None] = [None] * total
    try:
        for path, doc in docs:
            positions = doc["shard"]["positions"]
            if len(positions) != len(doc["results"]):
                raise InputError(f"{path}: {len(doc['results'])} results for "
                                 f"{len(positions)} targets")
            for position, data in zip(positions, doc["results"]):
                if not 0 <= position < total or placed[position] is not None:
                    raise InputError(f"{path}: target {position} is not this shard's alone")
                placed[position] = Outcome.from_dict(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"malformed shard result: {type(exc).__name__}: {exc}") from None
    if any(o is None for o in placed):
        raise InputError("the shards do not cover every target: were they run on the same "
                         "commit?")
    # The work the runners did together (their wall times overlap).
    seconds = sum(float(doc["seconds"]) for _, doc in docs)
    return CheckResult(first["project"], [o for o in placed if o is not None], first["run"],
                       first["baseline"], seconds, bool(first.get("fail_on_risk", False)))
