"""The C kernel's files (issue 23): every function Python calls (``k_*``) is in ``_kernel.c``, every
header stands alone (compiles by itself) behind its include guard, no header includes another in a
circle (``tests/test_layers.py``), and the lists of headers (``_kernel.c``'s comment, pyproject's
``depends``) are the headers there are."""

from __future__ import annotations

import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

FORMAT = Path(__file__).resolve().parents[2] / "kafkafs" / "format"
HEADERS = sorted(FORMAT.glob("_kernel_*.h"))
SOURCE = FORMAT / "_kernel.c"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
@pytest.mark.parametrize("header", HEADERS, ids=lambda p: p.name)
def test_every_header_compiles_alone(header: Path, tmp_path: Path) -> None:
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        pytest.skip("no Python headers")
    done = subprocess.run(
        ["gcc", "-fsyntax-only", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-function", f"-I{include}",
         f"-I{FORMAT}", "-x", "c", str(header)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0 and "warning" not in done.stderr, done.stderr


@pytest.mark.parametrize("header", HEADERS, ids=lambda p: p.name)
def test_every_header_has_its_include_guard(header: Path) -> None:
    text = header.read_text()
    guard = "KAFKAFS_" + header.stem.upper().lstrip("_") + "_H"
    assert f"#ifndef {guard}\n#define {guard}\n" in text and text.rstrip().endswith("#endif /* " + guard + " */")


def test_every_python_facing_function_is_in_kernel_c() -> None:
    defined = re.compile(r"^static PyObject \*(k_\w+)\(", re.M)
    in_headers = {h.name: defined.findall(h.read_text()) for h in HEADERS}
    assert not any(in_headers.values()), in_headers
    functions = set(defined.findall(SOURCE.read_text()))
    table = set(re.findall(r'\{"\w+", (k_\w+), METH_', SOURCE.read_text()))
    assert functions == table  # each one in the method table, and nothing else there


def test_the_lists_of_headers_are_the_headers() -> None:
    names = {h.name for h in HEADERS}
    comment = SOURCE.read_text().split("*/", 1)[0]
    assert {n for n in names if n not in comment} == set()
    pyproject = (FORMAT.parents[1] / "pyproject.toml").read_text()
    depends = re.search(r"depends = \[([^\]]*)\]", pyproject)
    assert depends is not None
    assert set(re.findall(r"kafkafs/format/(_kernel_\w+\.h)", depends.group(1))) == names
    included = set(re.findall(r'#include "(_kernel_\w+\.h)"', SOURCE.read_text()))
    assert included == names - {"_kernel_arrowbuf.h"} or included == names
