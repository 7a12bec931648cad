"""The import graph of ``devicefit.sdk`` and ``devicefit.simulator``: no circles, no private
names across modules, one import root.

Every ``import`` statement counts, also one inside a function: an import deferred to break a
circle at load time still ties the two modules together (here ``if TYPE_CHECKING:`` blocks
are skipped, they never run; grimp's graph, which the layer contracts and
``benchmarks/import_graph.py`` read, has them too: :func:`test_no_circles_in_the_graph_tools_read`
holds its circles). The graph is
read from the source with :mod:`ast`, so the test sees the code as written, not what one run
happened to import.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchmarks.import_graph import circles, cycles, graphs

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("sdk", "simulator")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(["devicefit", *parts])] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk(tree: ast.AST):
    """Every node except those under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            yield from (n for child in node.orelse for n in [child, *_walk(child)])
            continue
        yield node
        yield from _walk(node)


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[:len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _known(name: str) -> str | None:
    """The module of ours that ``name`` (a module or module.attribute) denotes, if any."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _bare(path: Path) -> list[str]:
    """Imports of ``sdk``/``simulator`` outside the ``devicefit`` root: in a checkout both
    names also resolve, and a module imported under two names exists twice (two registries)."""
    found = []
    for node in _walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                 else [])
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # a module named in a string: lazy(Planner, "module:attr") bindings, `python -m module`
            names = [node.value] if re.fullmatch(r"\w+(\.\w+)+(:\w+)?", node.value) else []
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                  if n.split(".")[0] in PACKAGES]
    return found


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for each import of one of ours."""
    out = []
    for node in _walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(t, None, node.lineno) for a in node.names if (t := _known(a.name))]
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, path, node)
            for alias in node.names:
                # ``from pkg import submodule`` imports the submodule itself.
                target = _known(f"{source}.{alias.name}")
                if target == f"{source}.{alias.name}":
                    out.append((target, None, node.lineno))
                elif (target := _known(source)) is not None:
                    out.append((target, alias.name, node.lineno))
    return out


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_modules_are_found():
    assert "devicefit.simulator.simulate" in MODULES and "devicefit.sdk.cli" in MODULES
    assert any(t == "devicefit.simulator.report.report"
               for t, _, _ in GRAPH["devicefit.simulator.simulate"])


def test_no_import_circles():
    assert circles({m: [t for t, _, _ in imps] for m, imps in GRAPH.items()}) == []




def test_no_circles_in_the_graph_tools_read():
    """The graph grimp reads (``lint-imports``' and ``benchmarks/import_graph.py``'s): every
    import, also those under ``if TYPE_CHECKING:``, which a type checker and a reader follow
    though they never run."""
    every, running = graphs()
    assert cycles(every) == []
    assert cycles(running) == []


def test_no_private_names_from_other_modules():
    offenders = [f"{MODULES[m].relative_to(ROOT)}:{line}: {name} from {target}"
                 for m, imps in GRAPH.items() for target, name, line in imps
                 if target != m and name and name.startswith("_") and not name.startswith("__")]
    assert offenders == []


@pytest.mark.parametrize("module", sorted(m for m in MODULES
                                          if m.startswith("devicefit.simulator")))
def test_simulator_never_imports_sdk(module):
    assert [t for t, _, _ in GRAPH[module] if t.startswith("devicefit.sdk")] == []


#: The module that finds the built-in targets by their package's name (the door).
DOOR = "devicefit.simulator.target"


def _names_a_target_package(path: Path) -> list[str]:
    """Strings of ``path``'s code (not its docstrings) naming a module of the targets'
    packages: an import by name, which import-linter cannot see."""
    tree = ast.parse(path.read_text(), str(path))
    documented = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in documented
            and re.search(r"\bdevicefit\.simulator\.targets\b", node.value)]


def test_only_the_door_names_target_packages():
    """Generic code reaches a target through its record: besides the targets' own packages
    (a record binds its plug-ins as ``lazy(Planner, "devicefit.simulator.targets...")``),
    only :mod:`simulator.target` names their modules in a string (it finds the built-in
    ones by their package's name)."""
    named = [found for module, path in MODULES.items()
             if module != DOOR and not module.startswith("devicefit.simulator.targets")
             for found in _names_a_target_package(path)]
    assert named == []
    assert _names_a_target_package(MODULES[DOOR])


def test_the_checkout_is_what_runs():
    """An editable install (what ``make`` sets up) imports this checkout's code, not the copy
    hatch leaves in site-packages (a child Python started away from the checkout)."""
    import subprocess
    import sys

    code = "import devicefit.simulator.simulate as s, devicefit.sdk.cli as c; print(s.__file__, c.__file__)"
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                         env=env, check=True).stdout.split()
    assert [Path(p).resolve() for p in out] == [ROOT / "simulator" / "simulate.py",
                                                ROOT / "sdk" / "cli.py"]
