"""The shape of kafkafs/ (ARCHITECTURE.md), from :mod:`kafkafs._devtools.layers`: each room imports only
the rooms below it (format < storage < fs/views < fs/tree < fs, and spark; nothing imports the CLI),
no FUSE below ``fs/``, no import cycle among the modules (type-only imports and re-exports counted) nor
among the C kernel's files, and a test module for every module of ``fs/`` and ``storage/``. A module over
500 lines is a signal (a warning in the test report), never a failure: modules split by concept, never to
pass a line count."""

from __future__ import annotations

import warnings
from pathlib import Path

from kafkafs._devtools import deadcode, layers

PACKAGE = layers.PACKAGE
MAX_LINES = 500
PROJECT = layers.Project()


def test_every_import_keeps_to_the_table():
    found = layers.problems(PROJECT)
    assert not found, "\n".join(found)


def test_every_module_is_in_a_room():
    assert all(layers.room_of(name) is not None for name in PROJECT.paths)
    assert layers.room_of("kafkafs.fs.views.layout").name == "kafkafs.fs.views"
    assert layers.room_of("kafkafs.fs.mount").name == "kafkafs.fs"
    assert layers.room_of("kafkafs.cli").name == "kafkafs"


def test_no_import_cycles():
    cycles = layers.cycles(PROJECT.graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_include_cycles_in_the_kernel():
    cycles = layers.include_cycles()
    assert not cycles, "include cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_check_finds_cycles():
    assert layers.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layers.cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert layers.cycles({"a": {"b"}, "b": set()}) == []


def _project(tmp_path: Path, files: dict[str, str]) -> layers.Project:
    root = tmp_path / "kafkafs"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return layers.Project(root)


def test_function_local_type_checking_and_reexported_imports_are_seen(tmp_path):
    project = _project(tmp_path, {
        "__init__.py": "",
        "fs/__init__.py": "",
        "fs/views/__init__.py": "",
        "fs/views/a.py": "from .b import helper\n",  # re-exports b's helper
        "fs/views/b.py": "def helper(): ...\n",
        "fs/views/c.py": "from .a import helper\n",  # is an import of b
        "fs/views/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..tree.t import T\n"
                         "def f():\n    import pyfuse3\n",
        "fs/tree/__init__.py": "",
        "fs/tree/t.py": "class T: ...\n",
    })
    graph = project.graph()
    assert "kafkafs.fs.views.b" in graph["kafkafs.fs.views.c"]
    found = layers.problems(project)
    assert any("views.d (kafkafs.fs.views) imports kafkafs.fs.tree.t" in p for p in found)  # a tree import in views, even type-only
    assert any("imports pyfuse3" in p for p in found)  # FUSE below fs/, even in a function


def test_include_cycles_are_found(tmp_path):
    root = tmp_path / "kafkafs"
    (root / "format").mkdir(parents=True)
    (root / "format" / "a.h").write_text('#include "b.h"\n')
    (root / "format" / "b.h").write_text('#include <stdint.h>\n#include "a.h"\n')
    assert layers.include_cycles(root) == [["kafkafs/format/a.h", "kafkafs/format/b.h"]]


def test_the_command_prints_the_table_and_exits_0(capsys):
    assert layers.main([]) == 0
    out = capsys.readouterr().out
    assert "| fs.views |" in out and "| fs.tree |" in out and "0 import cycles" in out


def test_modules_over_500_lines_are_a_signal_not_a_failure():
    """Issue "three rooms": the 500-line rule stays a signal, not a reason to split. A long module is named
    in the test report's warnings so that a reader looks at whether it holds one concept or two."""
    long = {name: n for name, path in PROJECT.paths.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    for name, n in sorted(long.items()):
        warnings.warn(f"{name}: {n} lines (over {MAX_LINES}: one concept or two?)", stacklevel=1)
    assert len(PROJECT.paths) > 50  # the scan saw the package (a wrong root would warn of nothing)


def test_every_module_of_fs_and_storage_has_its_own_test_module():
    """Tests mirror units: ``kafkafs/<folder>/<name>.py`` is tested in ``tests/<folder>/test_<name>.py``."""
    tests = PACKAGE.parent / "tests"
    missing = [
        str(path.relative_to(PACKAGE).with_suffix(""))
        for layer in ("fs", "storage")
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        if path.stem != "__init__"
        and not (tests / path.parent.relative_to(PACKAGE) / f"test_{path.stem}.py").exists()
    ]
    assert not missing, f"modules without a test module of their own: {missing}"


def test_every_function_has_a_caller_outside_the_tests():
    """``python -m kafkafs._devtools.deadcode``: no function or method that only tests call (those kept
    on purpose say why)."""
    found = [d for d in deadcode.dead() if d.qualname not in deadcode.KEPT]
    assert not found, "\n".join(f"{d.path}:{d.line}: {d.qualname}" for d in found)
    assert set(deadcode.KEPT) <= {d.qualname for d in deadcode.dead()}, "a kept function is called now: unkeep it"


def test_the_dead_code_check_finds_an_uncalled_function(tmp_path):
    root = tmp_path / "kafkafs"
    root.mkdir()
    (root / "m.py").write_text(
        "import pyfuse3\n"
        "def never_called_anywhere_xyz(): ...\n"
        "class C:\n    def method_nobody_calls_xyz(self): ...\n    def __len__(self): ...\n"
        "class Ops(pyfuse3.Operations):\n    def lookup_xyz_framework(self): ...\n"
    )
    names = {d.qualname for d in deadcode.dead(root)}
    assert {"never_called_anywhere_xyz", "C.method_nobody_calls_xyz"} <= names
    assert "C.__len__" not in names and "Ops.lookup_xyz_framework" not in names


def test_the_hops_of_a_by_offset_read():
    """``python -m kafkafs._devtools.hops``: a ``cat by-offset/N.json`` runs the adapter, the tree and
    one view (the record finder), and nothing of records.jsonl's sizing or reading."""
    from kafkafs._devtools import hops

    label, rw, scenario = hops.SCENARIOS[0]
    found = {m for m in hops.modules_run(rw, scenario) if m.startswith("kafkafs.fs")}
    assert {"kafkafs.fs.operations", "kafkafs.fs.tree.partition_nodes", "kafkafs.fs.views.record"} <= found
    assert not found & {"kafkafs.fs.views.sizing", "kafkafs.fs.views.reading", "kafkafs.fs.views.layout"}
