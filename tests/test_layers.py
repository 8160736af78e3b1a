"""The import contract of ``src/rocketstore``: no import cycles, and each module imports only modules
of its own layer or of lower ones (ARCHITECTURE.md's "Layers" table, which LAYERS mirrors).

The graph is read from the sources, not from ``sys.modules``: every ``import`` and ``from ...
import`` anywhere in a module (inside functions too, so an import hidden in a function still
counts), except in ``if TYPE_CHECKING:`` blocks, which never run. The compiled twins
(``cext/*.pyx``) import Python modules too; their imports count as the module ``_codec`` etc.
``_impl`` loads the twins by name (``importlib``), which no import statement shows, so those
edges are declared here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "rocketstore"
CEXT = ROOT / "cext"

#: The compiled twins, by module name; each is built from cext/<last part>.pyx.
TWINS = ("format._crc32", "format._codec", "format._scan", "log._store", "queues._index")
#: Compiled modules written in plain C (cext/<name>.c): they import nothing of the package.
PLAIN_C = ("_facade",)

#: Imports no statement shows: the selector loads both twins of each kernel by name.
DYNAMIC = {"_impl": {name + suffix for name in TWINS for suffix in ("", "_py")}}

#: Lowest first. A module may import modules of its own layer and of the layers before it. A
#: folder (``log``, ``cli``, ...) stands for every module under it; the public modules at the top
#: of the package are named one by one.
LAYERS: list[tuple[str, set[str]]] = [
    ("base", {"base", "errors", "status", "message", "config"}),
    ("format", {"format"}),
    ("files", {"files"}),
    ("log", {"log"}),
    ("queues", {"queues", "_impl"}),
    ("services", {"services"}),
    ("processes", {"processes"}),
    (
        "facade",
        {
            "consume",
            "group",
            "roles",
            "joined",
            "_facade_py",
            "_facade",
            "storebase",
            "store",
            "lowlevel",
            "__init__",
        },
    ),
    ("tools", {"cli", "spark", "__main__"}),
]

#: Imports of the compiled twins that break the contract and cannot be changed from the Python
#: side (cext/ is being split by its own work); each names what its import should become. The
#: test fails when one of them is gone, so this list only shrinks.
PENDING_COMPILED: dict[tuple[str, str], str] = {}


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


MODULES = _module_names()
KNOWN = set(MODULES) | set(TWINS) | set(PLAIN_C)


def _is_module(dotted: str) -> bool:
    """Whether ``rocketstore.<dotted>`` is a module of the package (or a compiled twin)."""
    return dotted in KNOWN


def _target(absolute: str) -> str | None:
    """The package module an import of ``absolute`` (a dotted name) runs: the longest prefix that
    is a module; ``__init__`` for the package itself; None outside the package."""
    parts = absolute.split(".")
    if parts[0] != "rocketstore":
        return None
    parts = parts[1:]
    while parts:
        if _is_module(".".join(parts)):
            return ".".join(parts)
        parts.pop()
    return "__init__"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The absolute dotted names the import statements of ``tree`` import (outside
    ``if TYPE_CHECKING:`` blocks, wherever else they are)."""
    found: set[str] = set()
    here = module.split(".") if module != "__init__" else []
    package = ["rocketstore"] + (here if is_package else here[:-1])

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                # ``from rocketstore import errors`` imports the module rocketstore.errors
                sub = f"{source}.{alias.name}"
                found.add(sub if _target(sub) == sub.removeprefix("rocketstore.") else source)
        visit(node)

    visit(tree)
    return found


_PYX_IMPORT = re.compile(
    r"^\s*(?:from\s+(rocketstore[\w.]*)\s+(c?import)\s+(.*)|import\s+(rocketstore[\w.]*))"
)


def _pyx_imported_names(text: str) -> set[str]:
    """The same for a Cython source: its Python-level ``import``s of the package (a line-based
    reading; ``cimport``s are C-level and left out)."""
    found: set[str] = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _PYX_IMPORT.match(line)
        if not match:
            continue
        if match.group(4):
            found.add(match.group(4))
            continue
        source, keyword, names = match.group(1), match.group(2), match.group(3)
        if keyword == "cimport":
            continue
        if names.lstrip().startswith("(") and ")" not in names:
            rest = lines[i + 1 :]
            names += " " + " ".join(rest[: next(j for j, s in enumerate(rest) if ")" in s) + 1])
        for piece in names.strip("() ").split(","):
            name = piece.split(" as ")[0].strip(" ()")
            if not name:
                continue
            sub = f"{source}.{name}"
            found.add(sub if _target(sub) == sub.removeprefix("rocketstore.") else source)
    return found


_PYX_INCLUDE = re.compile(r'^include\s+"([^"]+)"', re.M)


def _pyx_text(path: Path) -> str:
    """A Cython source with the files it ``include``s put in place (they are compiled into it,
    and their imports are its own), as the compiler reads it."""
    text = path.read_text(encoding="utf-8")
    return _PYX_INCLUDE.sub(lambda m: _pyx_text(path.parent / m.group(1)), text)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports (names relative to the package)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        names = _imported_names(tree, module, path.name == "__init__.py")
        graph[module] = {t for t in map(_target, names) if t is not None and t != module}
    for twin in TWINS:
        source = CEXT / f"{twin.rsplit('.', 1)[-1]}.pyx"
        names = _pyx_imported_names(_pyx_text(source))
        graph[twin] = {t for t in map(_target, names) if t is not None and t != twin}
    for name in PLAIN_C:
        graph[name] = set()
    for module, targets in DYNAMIC.items():
        graph[module] |= targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = walk(node)
            if found:
                return found
    return None


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    for rank, (_name, members) in enumerate(LAYERS):
        if module in members or top in members:
            return rank
    raise KeyError(module)


def violations(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)}


def _describe(edges: set[tuple[str, str]]) -> str:
    return "\n".join(
        f"  {a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})" for a, b in sorted(edges)
    )


GRAPH = import_graph()


def test_every_module_has_a_layer():
    named = set().union(*(members for _name, members in LAYERS))
    missing = sorted(m for m in GRAPH if m not in named and m.split(".")[0] not in named)
    assert not missing, f"modules in no layer of LAYERS: {missing}"
    stale = sorted(n for n in named if n not in GRAPH)
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_import_cycles():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or ())


def test_modules_import_only_their_layer_or_lower_ones():
    python = {(a, b) for a, b in violations(GRAPH) if a not in TWINS}
    assert not python, "modules import modules of higher layers:\n" + _describe(python)


def test_compiled_twins_import_only_their_layer_or_lower_ones():
    compiled = {(a, b) for a, b in violations(GRAPH) if a in TWINS}
    unexpected = compiled - set(PENDING_COMPILED)
    assert not unexpected, "the compiled twins import from higher layers:\n" + _describe(unexpected)
    gone = set(PENDING_COMPILED) - compiled
    assert not gone, f"PENDING_COMPILED lists imports that are fixed now, drop them: {sorted(gone)}"


# ---- the graph reader itself: each rule on a small source, so a reader that misses an import fails


@pytest.mark.parametrize(
    "source, expected",
    [
        ("import rocketstore.log.commitlog", {"log.commitlog"}),
        ("from rocketstore import errors", {"errors"}),
        ("from rocketstore import MessageStore", {"__init__"}),
        ("from rocketstore.consume import TagFilter", {"consume"}),
        ("from . import errors", {"errors"}),
        ("from .message import Message", {"message"}),
        ("def f():\n    from rocketstore.queues.dispatch import resync\n", {"queues.dispatch"}),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from rocketstore.store import X\n", set()),
        ("if TYPE_CHECKING:\n    pass\nelse:\n    from rocketstore.store import X\n", {"store"}),
        ("import os, numpy", set()),
    ],
)
def test_the_reader_finds_each_kind_of_import(source, expected):
    names = _imported_names(ast.parse(source), "commitlog", False)
    assert {t for t in map(_target, names) if t is not None} == expected


def test_the_reader_resolves_relative_imports_inside_subpackages():
    names = _imported_names(ast.parse("from ._common import x\nfrom .. import store"), "cli._commands", False)
    assert {_target(n) for n in names} == {"cli._common", "store"}


def test_the_pyx_reader_reads_included_files(tmp_path):
    (tmp_path / "part").mkdir()
    (tmp_path / "part" / "inner.pxi").write_text("from rocketstore.errors import StoreError\n")
    (tmp_path / "outer.pxi").write_text('include "part/inner.pxi"\n')
    (tmp_path / "m.pyx").write_text('import numpy\ninclude "outer.pxi"\n')
    assert _pyx_imported_names(_pyx_text(tmp_path / "m.pyx")) == {"rocketstore.errors"}


def test_the_pyx_reader_finds_python_imports_and_skips_cimports():
    text = (
        "from _codec cimport *\n"
        "from rocketstore.errors import (CorruptRecordError,\n    StoreReadOnlyError)\n"
        "from rocketstore import message as _message_mod\n"
        "def f():\n    from rocketstore.consume import GetMessageResult\n"
    )
    assert {_target(n) for n in _pyx_imported_names(text)} == {"errors", "message", "consume"}


def test_a_cycle_and_an_upward_import_are_found():
    graph = {"message": {"errors"}, "errors": {"log.commitlog"}, "log.commitlog": {"message"}}
    assert find_cycle(graph) == ["errors", "log.commitlog", "message", "errors"]
    assert violations(graph) == {("errors", "log.commitlog")}


def test_architecture_md_shows_each_module_in_its_layer():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text[text.index("## Layers") :]
    rows = [line for line in table.splitlines() if line.startswith("| **")][: len(LAYERS)]
    assert len(rows) == len(LAYERS), "ARCHITECTURE.md's layer table has a row per layer"
    for row, (name, members) in zip(rows, LAYERS):
        for module in sorted(members):
            shown = module.removesuffix("_py") if module.removesuffix("_py") in TWINS else module
            if module == "__init__":
                continue  # "the package's __init__"
            assert re.search(rf"`{re.escape(shown)}[`.*/ ]", row), (
                f"ARCHITECTURE.md: {module} in the {name} row"
            )


#: The most lines a module of ``src/rocketstore`` may have: one a reader can hold in mind.
MAX_MODULE_LINES = 1000
#: Modules longer still, each with what is to shorten it.
LONG_MODULES: dict[str, str] = {}


def test_no_module_is_longer_than_a_reader_holds():
    long = {}
    for name, path in MODULES.items():
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_MODULE_LINES and name not in LONG_MODULES:
            long[name] = lines
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them, or list them with why): {long}"
