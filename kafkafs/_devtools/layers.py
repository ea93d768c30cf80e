"""The rooms of kafkafs and what each may import, checked against the code: ``python -m kafkafs._devtools.layers``.

Prints the table of rooms as the code has it (each room's modules, lines, what it says of itself and
what it imports), then every import that breaks the table and every import cycle, and exits 1 if
there is any (``tests/test_layers.py`` runs the same checks).

How imports are read: with :mod:`ast`, every import of every module wherever it stands (inside a
function too), and those under ``if TYPE_CHECKING:`` as well: a module that names another's type in an
annotation and calls what it is handed is tied to it at the call level, so those count for cycles
(not for the third-party rules: they never run). A name imported from a module that only re-exports
it counts as an import of the module that defines it, so a re-export cannot hide a cycle. The C
kernel's ``#include "..."`` lines are a graph of their own, held to the same rule.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "ROOMS", "Room", "Import", "Project", "room_of", "problems", "cycles", "include_cycles", "table", "main",
]

PACKAGE = Path(__file__).resolve().parent.parent


class Room(NamedTuple):
    """A folder (or file) of the package, what it may import of the package, and the third-party or
    standard modules it must not import."""

    name: str  # dotted, as the modules it holds begin ("kafkafs.fs.views")
    may_import: frozenset[str]
    forbidden: frozenset[str] = frozenset()


def _room(name: str, may: Iterable[str] = (), forbidden: Iterable[str] = ()) -> Room:
    return Room(name, frozenset(may), frozenset(forbidden))


_FUSE = ("pyfuse3", "trio", "outcome")

#: The table, lowest first. A module belongs to the room with the longest name it starts with.
ROOMS: tuple[Room, ...] = (
    _room("kafkafs.errors"),
    _room("kafkafs.format", ["kafkafs.errors"], ["trio", "pyfuse3", "pyspark", "mmap", "os", "time", "logging"]),
    _room("kafkafs.storage", ["kafkafs.format", "kafkafs.errors"], ["trio", "pyfuse3", "pyspark"]),
    _room("kafkafs.fs.views", ["kafkafs.storage", "kafkafs.format", "kafkafs.errors"], [*_FUSE, "pyspark"]),
    _room(
        "kafkafs.fs.tree", ["kafkafs.fs.views", "kafkafs.storage", "kafkafs.format", "kafkafs.errors"], [*_FUSE, "pyspark"]
    ),
    _room(
        "kafkafs.fs",
        ["kafkafs.fs.tree", "kafkafs.fs.views", "kafkafs.storage", "kafkafs.format", "kafkafs.errors"],
        ["pyspark"],
    ),
    _room("kafkafs.spark", ["kafkafs.storage", "kafkafs.format", "kafkafs.errors"], _FUSE),
    # tools that look at the code (layers, deadcode) or drive it (hops): above everything, imported by nothing
    _room(
        "kafkafs._devtools",
        ["kafkafs.fs", "kafkafs.fs.tree", "kafkafs.fs.views", "kafkafs.spark", "kafkafs.storage", "kafkafs.format",
         "kafkafs.errors"],
    ),
    # the commands (cli, consume, produce, dump, ...): anything below them; only kafkafs.__main__ imports the CLI
    _room(
        "kafkafs",
        ["kafkafs.fs", "kafkafs.fs.tree", "kafkafs.fs.views", "kafkafs.spark", "kafkafs.storage", "kafkafs.format",
         "kafkafs.errors"],
    ),
)
_BY_NAME = {room.name: room for room in ROOMS}


def room_of(module: str) -> Room | None:
    """The room ``module`` is in (None outside kafkafs)."""
    best = None
    for room in ROOMS:
        if (module == room.name or module.startswith(room.name + ".")) and (best is None or len(room.name) > len(best.name)):
            best = room
    return best


class Import(NamedTuple):
    """One module imported by another: ``runs`` False under ``if TYPE_CHECKING:``."""

    module: str
    runs: bool
    line: int


@dataclass
class Project:
    """The package's modules and their imports, read from ``root`` (a ``kafkafs`` folder)."""

    root: Path = PACKAGE
    paths: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, list[Import]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for path in sorted(self.root.rglob("*.py")):
            self.paths[self.module_name(path)] = path
        trees = {name: ast.parse(path.read_text(), str(path)) for name, path in self.paths.items()}
        origins = {name: _reexports(name, self._package_of(name), tree, self.paths) for name, tree in trees.items()}
        for name, tree in trees.items():
            self.imports[name] = list(self._imports(name, tree, origins))

    def module_name(self, path: Path) -> str:
        parts = list(path.relative_to(self.root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)

    def _package_of(self, name: str) -> str:
        return name if self.paths[name].name == "__init__.py" else name.rpartition(".")[0]

    def _imports(self, name: str, tree: ast.AST, origins: dict[str, dict[str, str]]) -> Iterator[Import]:
        typing_only = _type_checking_nodes(tree)
        package = self._package_of(name)
        for node in ast.walk(tree):
            runs = id(node) not in typing_only
            if isinstance(node, ast.ImportFrom):
                mod = _absolute(node, package)
                yield Import(mod, runs, node.lineno)
                for alias in node.names:
                    sub = f"{mod}.{alias.name}"
                    if sub in self.paths:
                        yield Import(sub, runs, node.lineno)
                    origin = origins.get(mod, {}).get(alias.name)
                    if origin is not None and origin != mod:
                        yield Import(origin, runs, node.lineno)  # a re-export: the module that defines it
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(alias.name, runs, node.lineno)

    def graph(self) -> dict[str, set[str]]:
        """Module -> the kafkafs modules it imports (a package's ``__init__`` it sits in excepted:
        importing one's own package runs it first, which is no cycle)."""
        out: dict[str, set[str]] = {name: set() for name in self.paths}
        for name, found in self.imports.items():
            for imp in found:
                mod = imp.module
                if mod in self.paths and mod != name and not name.startswith(mod + "."):
                    out[name].add(mod)
        return out


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *(node.module.split(".") if node.module else [])])


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of every node inside an ``if TYPE_CHECKING:`` block."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _reexports(name: str, package: str, tree: ast.Module, paths: dict[str, Path]) -> dict[str, str]:
    """Names ``name`` imports at its top level from another kafkafs module (and does not define
    itself): ``{name: the module it comes from}``."""
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            mod = _absolute(node, package)
            if mod in paths:
                for alias in node.names:
                    out[alias.asname or alias.name] = mod
    return out


# ---------------------------------------------------------------------------------------------- checks


def problems(project: Project) -> list[str]:
    """Every import against the table: a room importing a kafkafs room it may not, or a third-party
    or standard module it must not (imports under TYPE_CHECKING never run: only the first rule)."""
    out = []
    for name, found in sorted(project.imports.items()):
        room = room_of(name)
        if room is None:
            continue
        for imp in found:
            if name.startswith(imp.module + "."):
                continue  # a package the module is in: it runs first anyway (``from ... import __version__``)
            target = room_of(imp.module)
            where = f"{project.paths[name].relative_to(project.root.parent)}:{imp.line}"
            if target is not None:
                if target.name != room.name and target.name not in room.may_import:
                    out.append(f"{where}: {name} ({room.name}) imports {imp.module} ({target.name})")
            elif imp.runs and imp.module.split(".")[0] in room.forbidden:
                out.append(f"{where}: {name} ({room.name}) imports {imp.module}")
        if name != "kafkafs.__main__" and name != "kafkafs.cli" and any(i.module == "kafkafs.cli" for i in found):
            out.append(f"{name} imports kafkafs.cli (nothing but kafkafs.__main__ may)")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member, or a member importing itself
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    out.append(sorted(component))
    return out


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def include_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """C and header files of the package -> the package's files they ``#include "..."``."""
    files = {p.relative_to(root.parent).as_posix(): p for p in sorted(root.rglob("*")) if p.suffix in (".c", ".h")}
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        found = set()
        for included in _INCLUDE.findall(path.read_text()):
            target = (path.parent / included).resolve().relative_to(root.parent.resolve()).as_posix()
            if target in files:
                found.add(target)
        out[name] = found
    return out


def include_cycles(root: Path = PACKAGE) -> list[list[str]]:
    return cycles(include_graph(root))


# ---------------------------------------------------------------------------------------------- the table


def _says(project: Project, room: Room) -> str:
    """The first sentence of the room's docstring (its package's, or the module's)."""
    path = project.paths.get(room.name)
    if path is None:
        return ""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    first = doc.strip().split("\n\n")[0].replace("\n", " ")
    return first.split(": ")[0] if len(first) > 120 else first


def table(project: Project) -> str:
    """The rooms as the code has them, as a Markdown table."""
    members: dict[str, list[str]] = {room.name: [] for room in ROOMS}
    imported: dict[str, set[str]] = {room.name: set() for room in ROOMS}
    for name in project.paths:
        room = room_of(name)
        if room is None:
            continue
        members[room.name].append(name)
        for imp in project.imports[name]:
            target = room_of(imp.module)
            if target is not None and target.name != room.name and not name.startswith(imp.module + "."):
                imported[room.name].add(target.name)
    rows = ["| room | modules | lines | imports (found in the code) | may import | what it says of itself |",
            "|---|---|---|---|---|---|"]
    for room in reversed(ROOMS):
        mods = members[room.name]
        lines = sum(len(project.paths[m].read_text().splitlines()) for m in mods)
        short = lambda names: ", ".join(sorted(n.removeprefix("kafkafs.") or "kafkafs" for n in names)) or "-"  # noqa: E731
        rows.append(
            f"| {room.name.removeprefix('kafkafs.') if room.name != 'kafkafs' else 'kafkafs (commands)'} | {len(mods)} | "
            f"{lines} | {short(imported[room.name])} | {short(room.may_import)} | {_says(project, room)} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    project = Project()
    print(table(project))
    found = problems(project)
    py_cycles = cycles(project.graph())
    c_cycles = include_cycles()
    print()
    for line in found:
        print(f"against the table: {line}")
    for cycle in py_cycles:
        print("import cycle: " + " <-> ".join(cycle))
    for cycle in c_cycles:
        print("include cycle: " + " <-> ".join(cycle))
    print(f"{len(found)} imports against the table, {len(py_cycles)} import cycles, {len(c_cycles)} include cycles")
    return 1 if found or py_cycles or c_cycles else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
