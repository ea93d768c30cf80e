"""A read-only mount follows its log directory's Schema Registry (review10 R10-8; SPEC §8 and §3 "Live"):
a schema registered after the mount started decodes the records framed with it, old and new, in
``records.jsonl``, ``by-offset/``, ``by-key/`` and ``table.jsonl``, as ``kafkafs consume`` does; a hard
delete takes it away again; and a ``records.jsonl`` open across the change reads whole lines of the
size it was shown."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import orjson
import pytest

from tests.fs.views.test_schemas_change import COUNT, _append, _framed, _schema

pytestmark = pytest.mark.fuse

if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
    pytest.skip("FUSE is not available", allow_module_level=True)

#: SPEC §3: records show up within a second; a schema's change is followed at its folder's event.
LIVE_S = 1.0


def _lines(data: bytes) -> list[dict]:
    return [orjson.loads(line) for line in data.splitlines()]


def _wait_for(check, timeout: float) -> float:
    """Seconds until ``check()`` is true (fails after ``timeout``)."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            pytest.fail(f"not seen within {timeout} s")
        time.sleep(0.02)
    return time.monotonic() - start


def test_a_schema_registered_while_mounted_decodes_and_open_readers_read_whole_lines(mounted, tmp_path):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _append(logdir, "_schemas-0", [_schema("a-value", 1, {"type": "string"})])
    _append(logdir, "data-0", [(b"k%d" % (i % 7), _framed(2, i)) for i in range(200)])  # id 2: not known yet
    m = mounted(logdir)
    records = m / "data-0" / "records.jsonl"
    reader = open(records, "rb")  # noqa: SIM115 - held open across the change
    try:
        size = os.fstat(reader.fileno()).st_size
        head = reader.read(3000)
        assert not any("valueSchemaId" in line for line in _lines(head[: head.rindex(b"\n")]))

        _append(logdir, "_schemas-0", [_schema("b-value", 2, COUNT)])  # the registry registers id 2
        _append(logdir, "data-0", [(b"k0", _framed(2, 200))])  # and a producer writes with it

        def decoded() -> bool:
            lines = _lines(records.read_bytes())
            return len(lines) == 201 and all(line.get("valueSchemaId") == 2 for line in lines)

        took = _wait_for(decoded, 10 * LIVE_S)
        assert took < 3 * LIVE_S, f"decoded after {took:.2f} s"  # (a margin for a loaded machine)
        lines = _lines(records.read_bytes())
        assert [line["value"] for line in lines] == [{"n": i} for i in range(201)]
        assert records.stat().st_size == len(records.read_bytes())
        assert orjson.loads((m / "data-0" / "by-offset" / "5.json").read_bytes())["value"] == {"n": 5}
        assert orjson.loads((m / "data-0" / "by-key" / "k3.json").read_bytes())["value"] == {"n": 199}
        assert [line["value"]["n"] for line in _lines((m / "data-0" / "by-key" / "k1.jsonl").read_bytes())] == list(
            range(1, 201, 7))
        table = _lines((m / "data-0" / "table.jsonl").read_bytes())
        assert sorted(line["value"]["n"] for line in table) == [193, 194, 195, 197, 198, 199, 200]  # k0's: 200
        # the same as kafkafs consume says
        consumed = subprocess.run([sys.executable, "-m", "kafkafs", "consume", str(logdir), "data-0"],
                                  capture_output=True, check=True).stdout
        assert _lines(consumed) == lines

        # the reader open across the change: the lines it was shown, whole, and the records since
        rest = reader.read()
        shown = head + rest
        assert len(shown) >= size and shown.endswith(b"\n")
        old = _lines(shown)
        assert len(old) == 201 and [line["offset"] for line in old] == list(range(201))
        assert not any("valueSchemaId" in line for line in old[:200])
        assert os.fstat(reader.fileno()).st_size == len(shown)

        # a hard delete (the tombstone): the schema no longer resolves, the values show their bytes again
        _append(logdir, "_schemas-0", [_schema("b-value", 2, None)])
        _wait_for(lambda: not any("valueSchemaId" in line for line in _lines(records.read_bytes())), 10 * LIVE_S)
        assert "valueSchemaId" not in orjson.loads((m / "data-0" / "by-offset" / "5.json").read_bytes())
        assert records.stat().st_size == len(records.read_bytes())
    finally:
        reader.close()


def test_a_size_the_size_summary_answered_follows_the_schemas(mounted, tmp_path):
    """A mount answers ``ls -l`` of a partition it has not opened from the size summary (``kafkafs index``
    or a mount before it kept it, under the decoder's identity), and the kernel keeps that size while no
    event in the folder says otherwise; when the schemas change, the kernel lets go of it: the next
    ``stat`` and a ``cat`` agree on the decoded file at once (not after the kernel's timeout)."""
    from kafkafs.fs.views.prefill import index_logdir

    logdir = tmp_path / "logs"
    logdir.mkdir()
    _append(logdir, "_schemas-0", [_schema("a-value", 1, {"type": "string"})])
    _append(logdir, "data-0", [(b"k%d" % (i % 7), _framed(2, i)) for i in range(200)])
    cache = str(tmp_path / "cache")
    index_logdir(str(logdir), cache_dir=cache)  # the size summary, as a mount before this one leaves it
    m = mounted(logdir, "--cache-dir", cache)
    records = m / "data-0" / "records.jsonl"
    shown = records.stat().st_size  # from the summary (the kernel keeps it: the folder is watched)
    _append(logdir, "_schemas-0", [_schema("b-value", 2, COUNT)])

    def agreed() -> bool:
        size = records.stat().st_size
        data = records.read_bytes()
        return size == len(data) and len(_lines(data)) == 200 and all("valueSchemaId" in line for line in _lines(data))

    _wait_for(agreed, 5 * LIVE_S)  # (the kernel's own timeout for it is 10 s)
    assert records.stat().st_size != shown


def test_a_schema_file_added_to_the_schemas_dir_while_mounted_decodes(mounted, tmp_path):
    """R10-8 leftover: ``--schemas DIR`` is followed too: a schema file added there after the mount
    started decodes the records framed with it, at the poll loop's next turn (about a second)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    _append(logdir, "data-0", [(b"k%d" % (i % 7), _framed(2, i)) for i in range(50)])  # id 2: no schema yet
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    m = mounted(logdir, "--schemas", str(schemas))
    records = m / "data-0" / "records.jsonl"
    assert not any("valueSchemaId" in line for line in _lines(records.read_bytes()))
    (schemas / "2.avsc").write_bytes(orjson.dumps(COUNT))

    def decoded() -> bool:
        lines = _lines(records.read_bytes())
        return len(lines) == 50 and all(line.get("valueSchemaId") == 2 for line in lines)

    _wait_for(decoded, 5 * LIVE_S)
    assert _lines(records.read_bytes())[7]["value"] == {"n": 7}
