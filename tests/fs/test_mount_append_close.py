"""The ``append`` file's partial last line and close (SPEC §3 "A partial last line waits for the next write or
for close"), with the shell idioms that share one open file between processes (R21-7): a child the shell
forks inherits the descriptor and closes its copy at exit or when it replaces its standard output; that is
not the file's close, and the line the shell is writing goes on. The last close ends it, before close()
returns."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.fuse

if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None or shutil.which("bash") is None:
    pytest.skip("FUSE or bash is not available", allow_module_level=True)


def bash(script: str, *, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, check=check, timeout=60, text=True)


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


@pytest.fixture
def part(mounted, logdir_copy) -> Path:
    return mounted(logdir_copy, "--rw") / "events-3"


def test_a_childs_close_does_not_end_the_line_the_shell_is_writing(part):
    """Failed before (seen): "CCC" and "333" two records; the JSON object cut at /bin/true's close (the error
    went to nobody) and ``x"}`` appended as a plain record; "date is: ", the date and "" three records."""
    before = len(records(part / "records.jsonl"))
    result = bash(
        f"""cd {part}
        ( printf 'CCC'; sleep 0.2; printf '333\\n' ) >> append
        ( printf '{{"key":"k","value":"'; /bin/true; printf 'x"}}\\n' ) >> append
        {{ printf 'date is: '; date +%s | tr -d '\\n'; printf '\\n'; }} >> append
        ( printf '{{"key":"t","value":"'; echo -n 42 | tr -d '\\n'; printf '"}}\\n' ) >> append
        """
    )
    assert result.stderr == ""  # tr checks the close of its standard output: no "write error"
    new = records(part / "records.jsonl")[before:]
    assert [(r["key"], r["value"]) for r in new[:2]] == [(None, "CCC333"), ("k", "x")]
    assert new[2]["key"] is None and new[2]["value"].startswith("date is: ")
    assert new[2]["value"][len("date is: ") :].isdigit()
    assert [(r["key"], r["value"]) for r in new[3:]] == [("t", "42")]


def test_the_last_close_appends_the_partial_line_before_it_returns(part):
    """The shell's own close of ``>> append`` ends a partial line, also after children shared it, and a
    background child that still holds the file keeps it going after the shell's part has exited."""
    out = bash(
        f"""cd {part}
        printf 'no newline' >> append; tail -n 1 records.jsonl
        ( printf 'after a child'; /bin/true ) >> append; tail -n 1 records.jsonl
        ( printf 'bg '; ( sleep 0.2; printf 'end\\n' ) & ) >> append
        for i in $(seq 200); do tail -n 1 records.jsonl | grep -q 'end"' && break; sleep 0.02; done
        tail -n 1 records.jsonl
        """
    ).stdout
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["no newline", "after a child", "bg end"]


def test_a_half_json_object_at_the_last_close_fails_the_close(part):
    before = len(records(part / "records.jsonl"))
    fd = os.open(part / "append", os.O_WRONLY | os.O_APPEND)
    os.write(fd, b'{"key":"k","value":"')
    pid = os.fork()
    if pid == 0:  # a child's copy, closed at its exit: the line goes on
        os._exit(0)
    os.waitpid(pid, 0)
    os.write(fd, b'half"')
    with pytest.raises(OSError) as info:
        os.close(fd)
    assert info.value.errno == 22  # EINVAL: the last close says the line is not a record; nothing appended
    assert len(records(part / "records.jsonl")) == before


def test_two_descriptors_of_one_process_keep_their_lines_apart(part):
    """Each open has its own partial line. A close while this process holds another descriptor of the file
    cannot be told from a child's (the file matches, not the open): its line is appended at that open's
    last close (RELEASE), which close() does not wait for."""
    before = len(records(part / "records.jsonl"))
    f1 = os.open(part / "append", os.O_WRONLY | os.O_APPEND)
    f2 = os.open(part / "append", os.O_WRONLY | os.O_APPEND)
    os.write(f1, b"AAA")
    os.write(f2, b"BBB")
    os.write(f1, b"111\nx1")
    os.write(f2, b"222\ny2")
    os.close(f1)
    os.close(f2)  # the last descriptor: "y2" before close() returns
    values = [r["value"] for r in records(part / "records.jsonl")[before:]]
    assert values[:2] == ["AAA111", "BBB222"] and "y2" in values
    deadline = time.monotonic() + 5
    while "x1" not in values and time.monotonic() < deadline:
        time.sleep(0.02)
        values = [r["value"] for r in records(part / "records.jsonl")[before:]]
    assert sorted(values[2:]) == ["x1", "y2"]
