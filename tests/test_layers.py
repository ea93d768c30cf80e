"""The shape of kafkafs/ (ARCHITECTURE.md): imports point down only (format < storage < fs, spark < cli),
no import cycle anywhere, no module over 500 lines.

Imports are walked with ``ast`` over every module, including function-local ones (an import hidden in
a function is still a dependency). Imports under ``if TYPE_CHECKING:`` never run: they must point down
like any other, but they are not edges of the cycle check (a node module may name the tree that makes
it in an annotation)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kafkafs"
MAX_LINES = 500

ALLOWED = {
    "format": {"format", "errors"},
    "storage": {"storage", "format", "errors"},
    "fs": {"fs", "storage", "format", "errors"},
    "spark": {"spark", "storage", "format", "errors"},
    "errors": set(),
}
FORBIDDEN_MODULES = {
    "format": {"trio", "pyfuse3", "pyspark", "mmap", "os", "time", "logging"},
    "storage": {"trio", "pyfuse3", "pyspark"},
}


def _module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """The ids of the import statements inside ``if TYPE_CHECKING:`` blocks."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else test.attr if isinstance(test, ast.Attribute) else None
            if name == "TYPE_CHECKING":
                out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _imports(path: Path, root: Path = PACKAGE) -> Iterator[tuple[str, bool]]:
    """``(module, runs)`` for every import of ``path``, wherever it is; ``from pkg import name`` gives
    ``pkg.name`` when that is a module of kafkafs. ``runs`` is False under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    typing_only = _type_checking_nodes(tree)
    name = _module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        runs = id(node) not in typing_only
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
            else:
                mod = node.module or ""
            yield mod, runs
            for alias in node.names:
                if f"{mod}.{alias.name}" in MODULES:
                    yield f"{mod}.{alias.name}", runs
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, runs


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "kafkafs" else None


def test_layers_import_downwards_only():
    problems = []
    for name, path in MODULES.items():
        layer = _layer(name)
        if layer not in ALLOWED:
            continue
        for mod, _runs in _imports(path):
            if mod.startswith("kafkafs."):
                if _layer(mod) not in ALLOWED[layer] | {layer}:
                    problems.append(f"{name} imports {mod}")
            elif mod.split(".")[0] in FORBIDDEN_MODULES.get(layer, set()):
                problems.append(f"{name} imports {mod}")
    assert not problems, "\n".join(problems)


def test_nothing_imports_the_cli():
    for name, path in MODULES.items():
        if name in ("kafkafs.cli", "kafkafs.__main__"):
            continue
        assert "kafkafs.cli" not in {mod for mod, _ in _imports(path)}, name


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself
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
                    work.append((child, iter(sorted(graph[child]))))
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
                if len(component) > 1 or node in graph[node]:
                    out.append(sorted(component))
    return out


def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, path in MODULES.items():
        for mod, runs in _imports(path):
            if not runs or mod not in MODULES or mod == name:
                continue
            if name.startswith(mod + "."):
                continue  # a module importing its own package runs the package's __init__ first: no cycle
            graph[name].add(mod)
    return graph


def test_no_import_cycles():
    cycles = _cycles(_import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_function_local_and_type_checking_imports_are_seen(tmp_path):
    text = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\ndef f():\n    from ..b import B\n"
    fake = tmp_path / "kafkafs" / "storage" / "m.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(text)
    found = set(_imports(fake, tmp_path / "kafkafs"))
    assert ("kafkafs.storage.a", False) in found and ("kafkafs.b", True) in found


def test_no_module_over_500_lines():
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_every_module_of_fs_and_storage_has_its_own_test_module():
    """Tests mirror units: ``kafkafs/<layer>/<name>.py`` is tested in ``tests/<layer>/test_<name>.py``."""
    tests = PACKAGE.parent / "tests"
    missing = [
        f"{layer}/{path.stem}"
        for layer in ("fs", "storage")
        for path in sorted((PACKAGE / layer).glob("*.py"))
        if path.stem != "__init__" and not (tests / layer / f"test_{path.stem}.py").exists()
    ]
    assert not missing, f"modules without a test module of their own: {missing}"
