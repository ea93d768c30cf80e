"""The kernel's GIL rule (written in the kernel where it handles the GIL, _kernel_text.h): no path takes or
releases the GIL twice; growth of the output buffer works with or without the GIL held.

Issue 20, defect 1: a header key that is not UTF-8 took the GIL back to decode it, and an output buffer
that then grew restored the saved thread state a second time: the thread waited for the GIL it held, and
one 3 KB batch froze every read of a mount (and ``consume``). Each entry point that renders headers runs
hostile batches here from four threads, in a subprocess with a timeout (a hang fails the test instead of
freezing pytest), in every ``--values`` mode, against the Python reference; once on the kernel as built
and once on a build with ``KAFKAFS_GIL_CHECK`` (a take or release of the GIL in the wrong state aborts
with a message). The C source is checked for the rule's shape.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kafkafs.format import kernel
from kafkafs.format.batchheader import BatchHeader
from kafkafs.format.jsonrender import line_prefix, render_lines
from kafkafs.format.records import decode_records
from tests.kafka_layout import record

from .gil_worker import ENTRIES

pytestmark = pytest.mark.skipif(kernel.KERNEL is None, reason="the compiled kernel is not built")

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120  # each run takes about a second; a deadlock never ends


def _build_script():
    spec = importlib.util.spec_from_file_location("_kafkafs_build_kernel_gil", ROOT / "scripts" / "build_kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_worker(entry: str, checked: Path | None = None) -> None:
    cmd = [sys.executable, "-m", "tests.format.gil_worker", entry, *([str(checked)] if checked else [])]
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{entry}: the kernel hung on non-UTF-8 header keys (a GIL deadlock?)")
    assert done.returncode == 0, f"{entry}: exit {done.returncode}\n{done.stderr[-3000:]}"
    assert done.stdout.strip() == f"ok {entry}"


@pytest.mark.parametrize("entry", ENTRIES)
def test_binary_header_keys_that_grow_the_buffer_never_hang(entry):
    _run_worker(entry)


@pytest.fixture(scope="module")
def checked_kernel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gil-checked-kernel")
    if not _build_script().build(quiet=True, gil_check=True, out_dir=out):
        pytest.fail("the kernel did not build with KAFKAFS_GIL_CHECK")
    (built,) = out.glob("_kernel*.so")
    return built


@pytest.mark.parametrize("entry", ENTRIES)
def test_binary_header_keys_keep_the_gil_rule_under_checks(entry, checked_kernel):
    _run_worker(entry, checked_kernel)


def test_the_checked_build_aborts_on_a_broken_rule(checked_kernel, tmp_path):
    """The checks are live: a module that restores a thread state while holding the GIL aborts with the
    rule's message (the exact mistake of defect 1), instead of hanging."""
    source = tmp_path / "broken.c"
    source.write_text(
        '#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n#define KAFKAFS_GIL_CHECK 1\n'
        f'#include "{(ROOT / "kafkafs" / "format" / "_kernel_text.h").as_posix()}"\n'
        "static PyObject *twice(PyObject *s, PyObject *a) {\n"
        "    (void)s; (void)a;\n"
        "    PyThreadState *ts = gil_release();\n"
        "    PyThreadState *copy = ts;\n"
        "    int taken = gil_take(&ts);\n"
        "    ts = copy; /* as put_header_key left it: the state still set while the GIL is held */\n"
        "    gil_take(&ts);\n"
        "    gil_give(&ts, taken);\n"
        "    gil_restore(&ts);\n"
        "    Py_RETURN_NONE;\n}\n"
        'static PyMethodDef m[] = {{"twice", twice, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};\n'
        'static struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "broken", "", -1, m, NULL, NULL, NULL, NULL};\n'
        "PyMODINIT_FUNC PyInit_broken(void) { return PyModule_Create(&d); }\n"
    )
    import sysconfig

    so = tmp_path / ("broken" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{sysconfig.get_paths()['include']}", str(source), "-o",
                    str(so)], check=True, capture_output=True)
    done = subprocess.run([sys.executable, "-c", "import broken; broken.twice()"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=TIMEOUT_S)
    assert done.returncode != 0
    assert "kafkafs kernel GIL rule broken in gil_take: the GIL is held" in done.stderr


# ------------------------------------------------------------------------------------ header keys in C

_EDGES = [0x00, 0x01, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF,
          0xF0, 0xF4, 0xF5, 0xFF]


def _section(keys: list[bytes]) -> bytes:
    return b"".join(record(i, 0, None, None, [(key, None)]) for i, key in enumerate(keys))


def test_header_keys_decode_as_pythons_replace_exhaustively():
    """The kernel decodes a header key that is not UTF-8 in C now (no GIL): every 1- and 2-byte key, and
    every 3- and 4-byte key over the bytes where UTF-8's rules change, as ``bytes.decode('utf-8',
    'replace')`` does (a header key renders alike in every mode; the modes are the workers')."""
    keys = [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]
    keys += [bytes(c) for c in itertools.product(_EDGES, repeat=3)]
    keys += [bytes(c) for c in itertools.product(_EDGES[4:16], repeat=4)]
    keys += [b"ok" + k + b"\x7f" + k for k in keys[:2048]]
    data = _section(keys)
    header = BatchHeader(0, 0, 0, 0, 2, 0, 0, len(keys) - 1, 0, 0, -1, 0, 0, len(keys))
    batch = decode_records(data, header)
    assert [h[0].key for h in batch.headers] == [k.decode("utf-8", "replace") for k in keys]
    got = kernel.render_raw(line_prefix("t", 0), data, header, "string", None, None, None, None, 0)
    assert got == b"".join(render_lines("t", 0, batch, "string", range(len(batch))))


# ------------------------------------------------------------------------------------ the rule in the source

_GIL_HELPERS = {"gil_release", "gil_restore", "gil_take", "gil_give", "gil_check"}
_PY_CALL = re.compile(r"\b_?Py[A-Z]\w*\s*\(")


def _functions(text: str) -> dict[str, str]:
    """Top-level C function bodies by name (comments, strings and preprocessor lines blanked first)."""
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    text = re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)
    text = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", text)
    out: dict[str, str] = {}
    depth, start, head = 0, 0, 0
    for i, c in enumerate(text):
        if c == "{":
            if depth == 0:
                start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                signature = text[head:start]
                m = re.search(r"(\w+)\s*\([^;{}]*\)\s*$", signature)
                if m and "=" not in signature.split(m.group(1))[0].split("\n")[-1]:
                    out[m.group(1)] = text[start : i + 1]
                head = i + 1
        elif c == ";" and depth == 0:
            head = i + 1
    return out


def _kernel_functions() -> dict[str, str]:
    build = _build_script()
    out: dict[str, str] = {}
    for path in [*build.SOURCES, *build.HEADERS]:
        for name, body in _functions(Path(path).read_text()).items():
            assert name not in out, f"{name} defined twice"
            out[name] = body
    return out


def test_the_source_keeps_the_gil_rule():
    functions = _kernel_functions()
    assert _GIL_HELPERS <= set(functions), "the GIL helpers moved: update this test with the rule"
    problems = []
    for name, body in functions.items():
        if name in _GIL_HELPERS:
            continue
        if re.search(r"\bPyEval_(SaveThread|RestoreThread)\b|\bPyGILState_(Ensure|Release)\b", body):
            problems.append(f"{name}: handles the GIL itself, not through gil_release/gil_restore/gil_take/gil_give")
        # an entry point releases once and takes back once, in that order, calling no Python in between
        marks = re.findall(r"\b(gil_release|gil_restore|Py_BEGIN_ALLOW_THREADS|Py_END_ALLOW_THREADS)\b", body)
        pairs = [("gil_release", "gil_restore"), ("Py_BEGIN_ALLOW_THREADS", "Py_END_ALLOW_THREADS")]
        for release, restore in pairs:
            seq = [m for m in marks if m in (release, restore)]
            if seq and (seq != [release, restore] * (len(seq) // 2) or len(seq) % 2):
                problems.append(f"{name}: {release}/{restore} not paired once each, in order: {seq}")
        for m in re.finditer(r"gil_release\(\)|Py_BEGIN_ALLOW_THREADS", body):
            end = re.compile(r"gil_restore\(|Py_END_ALLOW_THREADS").search(body, m.end())
            inside = body[m.end() : end.start() if end else len(body)]
            if _PY_CALL.search(inside):
                problems.append(f"{name}: calls Python while the GIL is released: {_PY_CALL.search(inside).group()}")
        if len(re.findall(r"\bgil_take\(", body)) != len(re.findall(r"\bgil_give\(", body)):
            problems.append(f"{name}: gil_take and gil_give not paired")
    assert not problems, "\n".join(problems)
