"""Imports point down only (ARCHITECTURE.md): format < storage < fs, spark < cli."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kafkafs"

ALLOWED = {
    "format": {"format", "errors"},
    "storage": {"storage", "format", "errors"},
    "fs": {"fs", "storage", "format", "errors"},
    "spark": {"spark", "storage", "format", "errors"},
}
FORBIDDEN_MODULES = {
    "format": {"trio", "pyfuse3", "pyspark", "mmap", "os", "time", "logging"},
    "storage": {"trio", "pyfuse3", "pyspark"},
}


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = path.relative_to(PACKAGE).parts[:-1]
                base = list(parts[: len(parts) - (node.level - 1)]) if node.level > 1 else list(parts)
                mod = ".".join(["kafkafs", *base, *(node.module.split(".") if node.module else [])])
                yield mod
            elif node.module:
                yield node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name


def test_layers_import_downwards_only():
    problems = []
    for layer, allowed in ALLOWED.items():
        for path in (PACKAGE / layer).rglob("*.py"):
            for mod in _imports(path):
                top = mod.split(".")[0]
                if mod.startswith("kafkafs."):
                    sub = mod.split(".")[1]
                    if sub not in allowed and sub != "__init__":
                        problems.append(f"{path.relative_to(PACKAGE)} imports {mod}")
                elif mod == "kafkafs":
                    continue
                elif top in FORBIDDEN_MODULES.get(layer, set()):
                    problems.append(f"{path.relative_to(PACKAGE)} imports {mod}")
    assert not problems, "\n".join(problems)


def test_nothing_imports_the_cli():
    for path in PACKAGE.rglob("*.py"):
        if path.name == "cli.py":
            continue
        assert "kafkafs.cli" not in set(_imports(path)) and "from .cli" not in path.read_text(), path
