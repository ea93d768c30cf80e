"""README.md's snippets, from README's own text, so that README and the code cannot drift apart.

Every fenced block says what it is: ``sh`` and ``python`` blocks are run, ``toml`` blocks are settings
files and are loaded, ``text`` blocks are listings (synopses, trees) and are not run. Quick checks (the
default suite): every block has one of those kinds, Python blocks compile, every ``kafkafs`` command
README shows (in blocks and in inline code) parses with the real argument parser, TOML blocks load.

The whole walk (``test_readme_snippets_in_order``, slow: two Spark sessions and a stream take minutes on
a loaded 2-core machine; ``-m slow`` runs it) is what the README promises a new user: run
``scripts/demo.sh``, then every ``sh`` and ``python`` block in the order printed, on the demo's
directory. The test runs the demo with its own folder instead of ``/tmp/kafkafs-demo`` (and replaces
that path in each snippet), with ``kafkafs`` on ``PATH`` as ``. .venv/bin/activate`` puts it there; the
Python blocks run one after the other in one interpreter, as pasted into one session. It needs FUSE and
Spark. The quick part of it runs in the default suite: the demo, the lines it prints, and every ``sh``
block that starts no Spark, in order.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEMO = "/tmp/kafkafs-demo"
KINDS = {"sh", "python", "toml", "text"}


@dataclasses.dataclass(frozen=True)
class Block:
    kind: str
    text: str
    line: int  # README line of the opening fence

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.kind})"


def blocks(text: str | None = None) -> list[Block]:
    """README's fenced blocks, in order."""
    out = []
    lines = (README.read_text() if text is None else text).splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"README.md:{start + 1}: a fence that is never closed"
        out.append(Block(m.group(1), "\n".join(body) + "\n", start + 1))
        i += 1
    return out


def kafkafs_commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``kafkafs ...`` command README shows: lines of ``sh`` blocks, and
    inline code that is an example (it names a path; synopses with ``[``, ``|`` or ``...`` are not)."""
    out = []
    for block in blocks():
        if block.kind != "sh":
            continue
        text = block.text.replace("\\\n", " ")
        for n, line in enumerate(text.splitlines()):
            for part in re.split(r"&&|\|\||;|\|", line.split("#")[0]):
                words = re.sub(r"\s[<>]\s*\S+", "", part).strip()  # redirections are the shell's
                if words.startswith("kafkafs "):
                    out.append((f"{block} line {n + 1}", words))
    for n, line in enumerate(README.read_text().splitlines()):
        for span in re.findall(r"`(kafkafs [^`]+)`", line):
            if "/" in span and not re.search(r"\[|\||\.\.\.|<|>", span):  # an example, with its paths
                out.append((f"README.md:{n + 1}", span))
    return out


# ---------------------------------------------------------------------------------------------- quick


def test_every_block_says_what_it_is():
    found = blocks()
    assert found, "README has no fenced blocks?"
    unknown = [str(b) for b in found if b.kind not in KINDS]
    assert not unknown, f"blocks without a known kind ({', '.join(sorted(KINDS))}): {unknown}"
    assert any(b.kind == "python" for b in found) and any(b.kind == "sh" for b in found)


def test_no_merge_conflict_is_left():
    markers = [n + 1 for n, line in enumerate(README.read_text().splitlines())
               if re.match(r"^(<<<<<<< |=======$|>>>>>>> )", line)]
    assert not markers, f"README.md: merge conflict markers at lines {markers}"


def test_python_blocks_compile():
    for block in blocks():
        if block.kind == "python":
            compile(block.text, str(block), "exec")


def test_toml_blocks_are_settings_kafkafs_loads(tmp_path):
    from kafkafs.storage.config import Settings

    for block in blocks():
        if block.kind == "toml":
            path = tmp_path / "kafkafs.toml"
            path.write_text(block.text)
            Settings.load(str(path), {})


def test_every_kafkafs_command_parses():
    from kafkafs.cli import build_parser

    commands = kafkafs_commands()
    assert len(commands) >= 4
    for where, command in commands:
        argv = shlex.split(command)[1:]
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            pytest.fail(f"{where}: `{command}` does not parse")


def test_blocks_parse_this_readme_shape():
    text = "a\n```sh\necho 1\n```\n\n```text\nx\n```\n"
    assert blocks(text) == [Block("sh", "echo 1\n", 2), Block("text", "x\n", 6)]


# ---------------------------------------------------------------------------------------------- the walk


def _can_mount() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse here"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 here"
    return None


def _unmount(path: Path) -> None:
    if os.path.ismount(path):
        subprocess.run(["fusermount3", "-uz", str(path)], capture_output=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """``scripts/demo.sh DIR`` with this checkout's kafkafs (``KAFKAFS``: no bootstrap); yields the
    folder, an environment with ``kafkafs`` on ``PATH``, and what the demo printed."""
    reason = _can_mount()
    if reason:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("readme")
    bin_dir = base / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "kafkafs"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec {shlex.quote(sys.executable)} -m kafkafs "$@"\n')
    wrapper.chmod(0o755)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "PYTHONPATH": str(ROOT)}
    folder = base / "kafkafs-demo"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh"), str(folder)], capture_output=True, text=True,
                          env={**env, "KAFKAFS": str(wrapper)}, timeout=300)
    try:
        assert proc.returncode == 0, proc.stderr
        assert os.path.ismount(folder / "mnt"), "the demo mounts its directory"
        yield folder, env, proc.stdout
    finally:
        for name in ("mnt", "rw"):
            _unmount(folder / name)


def test_demo_mounts_read_only_and_its_lines_work(demo):
    folder, env, said = demo
    assert f"{folder}/logs is mounted at {folder}/mnt (read-only)" in said
    lines = said.split("Try:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    script = [line.strip() for line in lines if line.strip()]
    assert any(" produce " in line for line in script) and any(line.startswith("tail -n 1 -f") for line in script)
    # the demo still shows an append: `tail -f` of the read-only mount, then produce, then kill; a person
    # waits to see the records before the kill, the script waits for them in tail's output
    follow = folder / "tail.out"
    for i, line in enumerate(script):
        if line.startswith("tail -n 1 -f"):
            script[i] = line.replace(" &", f" > {follow} &", 1)
        elif line.startswith("kill $!"):
            script[i] = (f"for i in $(seq 100); do grep -q 'plain text works too' {follow} && break; sleep 0.2; done; "
                         + line)
    proc = subprocess.run(["bash", "-e", "-c", "\n".join(script)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    shown = follow.read_text()
    assert '"status":"new"' in shown and "plain text works too" in shown, "the read-only mount shows the appends"


class _PythonSession:
    """One interpreter for README's Python blocks, fed one block at a time (as pasted into one shell)."""

    DRIVER = (
        "import json, os, sys, traceback\n"
        "out = os.fdopen(int(sys.argv[1]), 'w')\n"
        "ns = {'__name__': '__main__'}\n"
        "for request in sys.stdin:\n"
        "    code, where = json.loads(request)\n"
        "    try:\n"
        "        exec(compile(code, where, 'exec'), ns)\n"
        "        out.write(json.dumps(None) + '\\n')\n"
        "    except BaseException:\n"
        "        out.write(json.dumps(traceback.format_exc()) + '\\n')\n"
        "    out.flush()\n"
    )

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        read, write = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", self.DRIVER, str(write)], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd,
                                     pass_fds=(write,), text=True)
        os.close(write)
        self.answers = os.fdopen(read)

    def run(self, code: str, where: str) -> str | None:
        self.proc.stdin.write(json.dumps([code, where]) + "\n")
        self.proc.stdin.flush()
        line = self.answers.readline()
        assert line, f"{where}: the Python session died"
        return json.loads(line)

    def close(self) -> None:
        try:
            self.run("spark.stop() if 'spark' in dir() else None", "end")
        finally:
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
            self.answers.close()


def _run_sh(block: Block, folder: Path, env: dict[str, str]) -> None:
    text = block.text.replace(DEMO, str(folder))
    proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], capture_output=True, text=True,
                          env=env, cwd=folder, timeout=600)
    assert proc.returncode == 0, f"{block}: exit {proc.returncode}\n{text}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, f"{block}:\n{proc.stderr}"


def _needs_spark(block: Block) -> bool:
    return block.kind == "python" or "kafkafs export" in block.text


def test_readme_shell_snippets(demo):
    """The quick part of the walk (the default suite): every ``sh`` block that starts no Spark, in order."""
    folder, env, _said = demo
    ran = 0
    try:
        for block in blocks():
            if block.kind == "sh" and not _needs_spark(block):
                _run_sh(block, folder, env)
                ran += 1
    finally:
        _unmount(folder / "rw")
    assert ran >= 2


@pytest.mark.spark
@pytest.mark.slow  # two Spark sessions, a stream: minutes on a loaded 2-core machine
def test_readme_snippets_in_order(demo):
    folder, env, _said = demo
    session: _PythonSession | None = None
    ran = []
    try:
        for block in blocks():
            if block.kind == "sh":
                _run_sh(block, folder, env)
            elif block.kind == "python":
                session = session or _PythonSession(env, folder)
                error = session.run(block.text.replace(DEMO, str(folder)), str(block))
                assert error is None, f"{block}:\n{error}"
            else:
                continue
            ran.append(block)
    finally:
        if session is not None:
            session.close()
        _unmount(folder / "rw")
    assert sum(b.kind == "python" for b in ran) >= 3 and sum(b.kind == "sh" for b in ran) >= 3
    # what the snippets say they did
    from kafkafs.storage.logdir import LogDir

    with LogDir(folder / "logs") as ld:
        names = ld.partition_names()
        assert "orders-upper-0" in names, "the stream wrote its topic"
        orders = sum(ld.log(n).log_end_offset - ld.log(n).log_start_offset for n in names
                     if n.startswith("orders-") and not n.startswith("orders-upper"))
        upper = ld.log("orders-upper-0")
        assert upper.log_end_offset == orders, "every order went through the stream"
    assert list((folder / "exports" / "paid-orders").glob("*.parquet"))
    assert list((folder / "exports" / "orders").glob("part-*.csv"))
