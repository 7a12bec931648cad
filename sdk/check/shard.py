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
from devicefit.simulator.report.report import build, plain_fields

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


@dataclass(frozen=True)
class Placement:
    """Where a shard's targets belong in the whole run (``shard`` in its JSON result)."""

    format: int
    index: int
    count: int
    #: Targets of the whole run.
    targets: int
    #: Each of this shard's targets' position in the whole run.
    positions: tuple[int, ...]
    project_sha256: str

    def __post_init__(self) -> None:
        # Read back from a file: merge indexes and counts with these.
        if not all(type(n) is int for n in (self.index, self.count, self.targets,
                                             *self.positions)):
            raise TypeError("shard placement: index, count, targets and positions are "
                            "integers")


@dataclass(frozen=True)
class ShardResult:
    """What ``check --results`` writes and ``check merge`` reads: the shard's
    :class:`CheckResult` (its JSON form, read back by :meth:`CheckResult.from_dict`) plus
    its ``shard`` placement."""

    result: CheckResult
    shard: Placement

    def to_dict(self) -> dict[str, Any]:
        return {**self.result.to_dict(), "shard": plain_fields(self.shard)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardResult:
        return cls(CheckResult.from_dict(data), build(Placement, data["shard"]))


def shard_result(result: CheckResult, project: Project, shard: Shard, positions: list[int],
                 total: int) -> ShardResult:
    """The result with where its targets belong (``check --results``)."""
    return ShardResult(result, Placement(SHARD_FORMAT, shard.index, shard.count, total,
                                         tuple(positions), project_digest(project)))


def load_shards(paths: Sequence[Path]) -> list[tuple[Path, ShardResult]]:
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
        try:
            docs.append((Path(path), ShardResult.from_dict(doc)))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{path}: malformed shard result: {type(exc).__name__}: "
                             f"{exc}") from None
    return docs


#: What every shard of one run shares: their placement's, their result's (all but what
#: each shard's own targets give).
_SAME_PLACEMENT = ("count", "targets", "project_sha256")
_OWN_RESULT = ("outcomes", "seconds")


def merge(shards: Sequence[tuple[Path, ShardResult]]) -> CheckResult:
    """One result from every shard of one run; :class:`InputError` if any is missing,
    repeated or from another project, mode or split."""
    if not shards:
        raise InputError("check merge needs the shard results (FILE.json ...)")
    first_path, first = shards[0]
    seen: dict[int, Path] = {}
    for path, one in shards:
        for key in _SAME_PLACEMENT:
            if getattr(one.shard, key) != getattr(first.shard, key):
                raise InputError(f"{path} and {first_path} are not shards of one run: "
                                 f"different {key.replace('_', ' ')}")
        for f in dataclasses.fields(CheckResult):
            if f.name not in _OWN_RESULT and \
                    getattr(one.result, f.name) != getattr(first.result, f.name):
                raise InputError(f"{path} and {first_path} are not shards of one run: "
                                 f"different {f.name}")
        if one.shard.index in seen:
            raise InputError(f"{path} and {seen[one.shard.index]} are both shard "
                             f"{one.shard.index}/{one.shard.count}")
        seen[one.shard.index] = path
    count, total = first.shard.count, first.shard.targets
    missing = [f"{k}/{count}" for k in range(1, count + 1) if k not in seen]
    if missing:
        raise InputError(f"missing shard result(s) {', '.join(missing)}: merge needs all "
                         f"{count}")
    placed: list[Outcome | None] = [None] * total
    for path, one in shards:
        positions, outcomes = one.shard.positions, one.result.outcomes
        if len(positions) != len(outcomes):
            raise InputError(f"{path}: {len(outcomes)} results for {len(positions)} targets")
        for position, outcome in zip(positions, outcomes):
            if not 0 <= position < total or placed[position] is not None:
                raise InputError(f"{path}: target {position} is not this shard's alone")
            placed[position] = outcome
    if any(o is None for o in placed):
        raise InputError("the shards do not cover every target: were they run on the same "
                         "commit?")
    # The work the runners did together (their wall times overlap).
    return dataclasses.replace(first.result, outcomes=tuple(o for o in placed if o is not None),
                               seconds=sum(one.result.seconds for _, one in shards))
