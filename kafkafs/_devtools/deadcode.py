"""Functions nothing calls outside the tests: ``python -m kafkafs._devtools.deadcode``.

Lists every function and method of ``kafkafs/`` whose name no code of ``kafkafs/``, ``bench/`` or
``scripts/`` mentions (as a name, an attribute, or a string that is exactly the name, as ``getattr``
takes it), and exits 1 if there is any (``tests/test_layers.py`` asks for none). It reads names, not
types: a method shares its uses with every namesake, so what it lists is surely uncalled, and a
function it passes over may still be.

Not listed: dunder methods; methods of a class whose base is outside kafkafs (a framework calls them:
pyfuse3's ``Operations``, Spark's data source classes, ``logging.Filter``) other than ``NamedTuple``,
``Exception`` and the like; ``Protocol`` classes (declarations); a ``main`` that pyproject names as a
script or that ``if __name__ == "__main__":`` calls. :data:`KEPT` names the few kept on purpose, each
with its reason.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = ["Definition", "definitions", "uses", "dead", "main"]

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent
CALLERS = ("kafkafs", "bench", "scripts")
#: Bases that add no framework calls: a method of a class built on these is ours to call.
_PLAIN_BASES = {
    "object", "NamedTuple", "Generic", "Exception", "BaseException", "ValueError", "KeyError", "OSError",
    "RuntimeError", "TypeError", "Enum", "IntEnum", "dict", "list", "tuple", "str", "int",
}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Uncalled on purpose, each with its reason (printed with the count; a new entry needs a reason as good).
KEPT = {
    "SkipList.ceiling": "SPEC §2 names the skip list's floor, ceiling and range",
    "RecordFilter.with_bits": "landed (tables, issue 22) with only its tests calling it: theirs to wire or drop",
}


class Definition(NamedTuple):
    name: str
    qualname: str
    path: Path
    line: int


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _python_files(folder: str) -> Iterator[Path]:
    base = ROOT / folder
    if base.is_dir():
        yield from sorted(base.rglob("*.py"))


def definitions(root: Path = PACKAGE) -> list[Definition]:
    """Every function and method of the package that a caller of the package could call."""
    trees = {path: ast.parse(path.read_text(), str(path)) for path in sorted(root.rglob("*.py"))}
    classes = [n for tree in trees.values() for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    local = {c.name for c in classes}
    # a framework's class: a base from outside (``pyfuse3.Operations``), or a local class built on one
    framework = {"Protocol"}
    changed = True
    while changed:
        changed = False
        for c in classes:
            if c.name in framework:
                continue
            for base in c.bases:
                name = _base_name(base)
                outside = isinstance(base, ast.Attribute) or (name not in local and name not in _PLAIN_BASES)
                if outside or name in framework:
                    framework.add(c.name)
                    changed = True
                    break
    out = []
    for path, tree in trees.items():
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out.append(Definition(node.name, node.name, path, node.lineno))
            elif isinstance(node, ast.ClassDef):
                if node.name in framework:
                    continue  # declarations (a Protocol), or a framework calls the methods
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        out.append(Definition(item.name, f"{node.name}.{item.name}", path, item.lineno))
    return [d for d in out if not (d.name.startswith("__") and d.name.endswith("__"))]


def uses(folders: tuple[str, ...] = CALLERS) -> set[str]:
    """Every name that code in ``folders`` mentions, outside ``__all__`` lists and its own ``def`` lines."""
    out: set[str] = set()
    for folder in folders:
        for path in _python_files(folder):
            tree = ast.parse(path.read_text(), str(path))
            skipped: set[int] = set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                    skipped.update(id(n) for n in ast.walk(node.value))
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    out.add(node.id)
                elif isinstance(node, ast.Attribute):
                    out.add(node.attr)
                elif isinstance(node, ast.alias):
                    out.add(node.name.rpartition(".")[2])
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
                    if _IDENTIFIER.match(node.value):
                        out.add(node.value)
    pyproject = ROOT / "pyproject.toml"
    if pyproject.exists():
        out.update(re.findall(r'=\s*"[\w.]+:(\w+)"', pyproject.read_text()))  # [project.scripts]
    return out


def dead(root: Path = PACKAGE) -> list[Definition]:
    """The definitions no caller mentions (those in :data:`KEPT` too)."""
    used = uses()
    return [d for d in definitions(root) if d.name not in used]


def main(argv: list[str] | None = None) -> int:
    found = dead()
    unexplained = [d for d in found if d.qualname not in KEPT]
    for d in found:
        why = KEPT.get(d.qualname)
        print(f"{d.path.relative_to(ROOT)}:{d.line}: {d.qualname} has no caller outside the tests"
              + (f" (kept: {why})" if why else ""))
    print(f"{len(unexplained)} functions without a caller ({len(found) - len(unexplained)} kept on purpose)")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
