"""The import graph of ``devicefit`` as a standard tool reads it: grimp (import-linter's graph
library), which parses every module of the package and sees every import, also those under
``if TYPE_CHECKING:`` (they never run, but a type checker and a reader follow them, so an
arrow there is an arrow). Prints the graph's size and its circles, each with the import lines
that close it; exits 1 if there is a circle.

``tests/test_imports.py`` holds the same answer; ``lint-imports`` (``make lint``) checks the
layers of ``[tool.importlinter]`` in pyproject.toml on the same graph.

    PYTHONPATH=. python benchmarks/import_graph.py
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grimp

PACKAGE = "devicefit"


@dataclass(frozen=True)
class Arrow:
    importer: str
    imported: str
    #: ``line: text`` of each import statement behind the arrow.
    lines: tuple[str, ...]
    #: Whether every one of them is under ``if TYPE_CHECKING:``.
    type_checking_only: bool


def graphs() -> tuple[grimp.ImportGraph, grimp.ImportGraph]:
    """The graph with every import, and the one without ``TYPE_CHECKING`` imports."""
    return (grimp.build_graph(PACKAGE, cache_dir=None),
            grimp.build_graph(PACKAGE, exclude_type_checking_imports=True, cache_dir=None))


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The circles of ``graph``: its strongly connected components of more than one module,
    each sorted."""
    return circles({m: graph.find_modules_directly_imported_by(m) for m in graph.modules})


def circles(imports: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module of ``imports`` (module →
    the modules it imports), each sorted (Tarjan's algorithm, by an explicit stack: the
    graph is deeper than a comfortable recursion)."""
    edges = {m: sorted(set(targets) - {m}) for m, targets in imports.items()}
    for imported in {w for targets in edges.values() for w in targets} - edges.keys():
        edges[imported] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(found)


def arrows(graph: grimp.ImportGraph, running: grimp.ImportGraph,
           component: list[str]) -> list[Arrow]:
    """The imports between the modules of one circle."""
    inside = set(component)
    out = []
    for importer in component:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & inside):
            details = graph.get_import_details(importer=importer, imported=imported)
            out.append(Arrow(importer, imported,
                             tuple(f"{d['line_number']}: {d['line_contents']}" for d in details),
                             not running.direct_import_exists(importer=importer,
                                                              imported=imported)))
    return out


def main() -> int:
    graph, running = graphs()
    found = cycles(graph)
    print(f"{PACKAGE}: {len(graph.modules)} modules, {graph.count_imports()} imports "
          f"({graph.count_imports() - running.count_imports()} only under TYPE_CHECKING)")
    print(f"{len(found)} cycles")
    for component in found:
        print(f"- {', '.join(component)}")
        for a in arrows(graph, running, component):
            where = "; ".join(a.lines)
            print(f"    {a.importer} -> {a.imported}"
                  f"{' (TYPE_CHECKING only)' if a.type_checking_only else ''}: {where}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
