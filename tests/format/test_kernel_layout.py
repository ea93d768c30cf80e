"""The C kernel's files (issue 23): every function Python calls (``k_*``) is in ``_kernel.c`` and in its
method table, and Python calls each one; every header stands alone (compiles by itself) behind its
include guard; no header includes another in a circle (``tests/test_layers.py`` reads the ``#include``
lines); the kernel compiles with no warning, so no static function is left unused (dead C); the lists of
headers (``_kernel.c``'s comment, pyproject's ``depends``) are the headers there are.

Standing alone and having no include circle together mean no circle at the level of use either: a
header that uses another's definitions must include it to compile alone, and two headers that used
each other would then include each other."""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from kafkafs._devtools import layers

ROOT = Path(__file__).resolve().parents[2]
FORMAT = ROOT / "kafkafs" / "format"
HEADERS = sorted(FORMAT.glob("_kernel_*.h"))
SOURCE = FORMAT / "_kernel.c"
DEFINED = re.compile(r"^static PyObject \*(k_\w+)\(", re.M)
TABLE_ENTRY = re.compile(r'\{"(\w+)", (k_\w+), METH_')
# entry points only the tests call, each the one way to test a part of the kernel by itself
TEST_HOOKS = {
    "crc32c": "forces the table or the SSE4.2 path, each checked against the crc32c package",
    "md5_halves": "the offset map's and the key index's own MD5, checked against hashlib",
}
FLAGS = ["-std=c11", "-Wall", "-Wextra", "-fno-strict-aliasing"]


def _compiler() -> list[str]:
    include = sysconfig.get_paths()["include"]
    if shutil.which("gcc") is None or not (Path(include) / "Python.h").exists():
        pytest.skip("no C compiler or no Python headers")
    return ["gcc", "-fsyntax-only", *FLAGS, f"-I{include}", f"-I{FORMAT}"]


@pytest.mark.parametrize("header", HEADERS, ids=lambda p: p.name)
def test_every_header_compiles_alone(header: Path) -> None:
    done = subprocess.run([*_compiler(), "-Wno-unused-function", "-x", "c", str(header)], capture_output=True,
                          text=True)
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr


def test_the_kernel_compiles_without_a_warning_so_no_static_function_is_unused() -> None:
    done = subprocess.run([*_compiler(), "-O2", str(SOURCE)], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize("header", HEADERS, ids=lambda p: p.name)
def test_every_header_has_its_include_guard(header: Path) -> None:
    text = header.read_text()
    guard = "KAFKAFS_" + header.stem.upper().lstrip("_") + "_H"
    assert f"\n#ifndef {guard}\n#define {guard}\n" in text
    assert text.rstrip().endswith(f"#endif /* {guard} */")


def test_every_python_facing_function_is_in_kernel_c_and_its_table() -> None:
    in_headers = {h.name: found for h in HEADERS if (found := DEFINED.findall(h.read_text()))}
    assert not in_headers, f"k_* functions in headers: {in_headers}"
    source = SOURCE.read_text()
    table = dict(TABLE_ENTRY.findall(source))
    assert set(DEFINED.findall(source)) == set(table.values())  # each one in the table, nothing else there
    assert all(name == function.removeprefix("k_") for name, function in table.items())


def test_python_calls_every_entry_point() -> None:
    """An entry point no code of kafkafs/, bench/ or scripts/ calls is dead C, but for the tests' hooks."""
    table = dict(TABLE_ENTRY.findall(SOURCE.read_text()))
    code = "\n".join(p.read_text() for folder in ("kafkafs", "bench", "scripts") for p in (ROOT / folder).rglob("*.py"))
    called = {name for name in table if re.search(rf"KERNEL\.{name}\(|kernel\.{name}\(|KERNEL, \"{name}\"", code)}
    assert set(table) - called == set(TEST_HOOKS)


def test_no_include_cycles() -> None:
    assert layers.include_cycles() == []
    graph = layers.include_graph()
    assert "kafkafs/format/_kernel_json.h" not in graph["kafkafs/format/_kernel_text.h"]  # the old circle


def test_the_lists_of_headers_are_the_headers() -> None:
    names = {h.name for h in HEADERS}
    comment = SOURCE.read_text().split("*/", 1)[0]
    assert {n for n in names if n not in comment} == set()
    pyproject = (ROOT / "pyproject.toml").read_text()
    depends = re.search(r"depends = \[([^\]]*)\]", pyproject)
    assert depends is not None
    assert set(re.findall(r"kafkafs/format/(_kernel_\w+\.h)", depends.group(1))) == names
