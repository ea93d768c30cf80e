"""Damaged log directories, and the commands that must survive them (issue 9's fuzz campaign).

:func:`make_template` writes one small partition with every kind of batch (plain, each codec,
headers, null keys and values, a transaction and its ABORT marker) across a few segments, plus the
log directory's checkpoints. :func:`damage` copies it and breaks one thing: bytes of a segment, an
index or a checkpoint, batch fields under a recomputed CRC, or file and folder names.
:func:`run_commands` puts one damaged directory through ``verify``, ``consume``, ``dump`` (every file)
and ``recover``, in this process (``kafkafs.cli.main``) so that ten thousand inputs take minutes, and
says what went wrong: a traceback (any exception out of ``main``), a hang (an alarm), a command that
``verify`` still rejects after ``recover``.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import shutil
import signal
import struct
import sys
import traceback
from pathlib import Path

from kafkafs.format.batch import Codec, encode_batch, encode_control_batch, read_batch_header
from kafkafs.format.crc import crc32c
from kafkafs.storage.config import Settings
from kafkafs.storage.logdir import LogDir

TOPIC = "fz"
PARTITION = f"{TOPIC}-0"
SETTINGS = {"segment.bytes": 3000, "index.interval.bytes": 200}
TIMEOUT_S = 30


def make_template(path: Path) -> Path:
    """A log directory with one partition of five or so segments holding every kind of batch."""
    path.mkdir(parents=True, exist_ok=True)
    with LogDir(path, Settings(SETTINGS), writable=True) as logdir:
        log = logdir.create_partition(TOPIC, 0)
        rng = random.Random(7)
        ts = 1_763_700_000_000
        for i in range(40):
            codec = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD][i % 5]
            rows = []
            for j in range(rng.choice([1, 3, 8])):
                key = None if j % 4 == 0 else b"key-%d" % (j % 5)
                value = None if j % 7 == 6 else (b'{"n":%d,"s":"v%d"}' % (i, j) if j % 2 else rng.randbytes(30))
                headers = (("h", b"x"),) if j % 3 == 0 else ()
                rows.append((ts + i * 100 + j, key, value, headers))
            if i == 20:  # a transaction that aborts: a .txnindex entry
                start = log.log_end_offset
                log.append_batches(encode_batch(rows, base_offset=0, producer_id=42, producer_epoch=0,
                                                base_sequence=0, transactional=True))
                log.append_batches(encode_control_batch("ABORT", producer_id=42, producer_epoch=0,
                                                        timestamp=ts + i * 100 + 50))
                assert log.log_end_offset > start
                continue
            log.append_batches(encode_batch(rows, compression=codec))
        log.flush()
    return path


# ------------------------------------------------------------------------------------------ damage


def _batch_positions(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos + 61 <= len(data):
        try:
            h = read_batch_header(data, pos)
        except Exception:  # noqa: BLE001 - the template is whole; only damaged data stops here
            break
        if h is None:
            break
        out.append(pos)
        pos = h.end
    return out


def _reseal(data: bytearray, pos: int) -> None:
    length = struct.unpack_from(">i", data, pos + 8)[0]
    end = min(len(data), pos + 12 + length)
    if end > pos + 21:
        struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21 : end])))


_FIELDS = [  # (offset in the header, struct format)
    (0, ">q"), (8, ">i"), (12, ">i"), (16, ">b"), (21, ">h"), (23, ">i"), (27, ">q"), (35, ">q"),
    (43, ">q"), (51, ">h"), (53, ">i"), (57, ">i"),
]
_INTERESTING = [0, 1, -1, 2, 5, 6, 7, 61, 0x7F, 0x7FFF, 0x7FFFFFFF, -0x80000000, 1 << 20, 255, 4096]


def _mutate_bytes(data: bytearray, rng: random.Random) -> str:
    if not data:
        data.extend(rng.randbytes(rng.randrange(1, 200)))
        return "filled an empty file"
    kind = rng.randrange(7)
    if kind == 0:
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        return "flipped bits"
    if kind == 1:
        cut = rng.randrange(len(data))
        del data[cut:]
        return f"truncated at {cut}"
    if kind == 2:
        data.extend(rng.randbytes(rng.randrange(1, 300)) if rng.random() < 0.7 else bytes(rng.randrange(1, 5000)))
        return "garbage appended"
    if kind == 3:
        i = rng.randrange(len(data))
        n = rng.randrange(1, 200)
        data[i : i + n] = bytes(len(data[i : i + n]))
        return "zeroed a range"
    if kind == 4:
        i = rng.randrange(len(data))
        n = rng.randrange(1, 64)
        data[i : i + n] = rng.randbytes(len(data[i : i + n]))
        return "random bytes over a range"
    if kind == 5:
        i, j = sorted(rng.randrange(len(data) + 1) for _ in range(2))
        data[i:i] = data[i:j]
        return "a range duplicated"
    i = rng.randrange(len(data))
    data[i] = rng.choice([0, 0xFF, 0x7F, 0x80])
    return "one byte set"


def _mutate_segment(data: bytearray, rng: random.Random) -> str:
    positions = _batch_positions(bytes(data))
    if not positions or rng.random() < 0.35:
        return _mutate_bytes(data, rng)
    pos = rng.choice(positions)
    kind = rng.randrange(4)
    if kind <= 1:  # a header field, with the CRC recomputed half of the time (a buggy writer)
        off, fmt = rng.choice(_FIELDS)
        value = rng.choice(_INTERESTING)
        try:
            struct.pack_into(fmt, data, pos + off, value)
        except struct.error:
            struct.pack_into(fmt, data, pos + off, 1)
        resealed = kind == 0 and off >= 21
        if resealed:
            _reseal(data, pos)
        return f"batch at {pos}: field at +{off} = {value}{' (CRC recomputed)' if resealed else ''}"
    if kind == 2:  # damage inside the records, CRC recomputed: only decoding can tell
        length = struct.unpack_from(">i", data, pos + 8)[0]
        end = min(len(data), pos + 12 + length)
        if end - pos > 62:
            i = rng.randrange(pos + 61, end)
            data[i] = rng.randrange(256)
            _reseal(data, pos)
            return f"batch at {pos}: record byte {i - pos} changed, CRC recomputed"
        return _mutate_bytes(data, rng)
    # swap two batches, or repeat one
    other = rng.choice(positions)
    h1 = read_batch_header(bytes(data), pos)
    chunk = bytes(data[pos : h1.end])
    data[other:other] = chunk
    return f"batch at {pos} repeated at {other}"


_CHECKPOINT_GARBAGE = [
    b"", b"0\n", b"0\n1\n", b"0\n1\nfz 0 999999999999999999999\n", b"0\n1\nfz 0 -5\n", b"7\n0\n",
    b"0\n2\nfz 0 1\n", b"0\n-1\n", b"\xff\xfe\n", b"0\n1\nfz 0 1 2 3\n", b"0\n99999999\n",
    b"0\n1\nfz x 1\n", b"0\n1\n" + b"a" * 300 + b" 0 1\n", b"\x00" * 100,
]


def damage(template: Path, target: Path, rng: random.Random) -> str:
    """Copy ``template`` to ``target`` and break one or two things; return what was done."""
    shutil.copytree(template, target)
    part = target / PARTITION
    what = []
    for _ in range(rng.choice([1, 1, 1, 2])):
        kind = rng.random()
        files = sorted(p for p in part.iterdir() if p.is_file())
        if kind < 0.45:
            path = rng.choice([p for p in files if p.suffix == ".log"])
            data = bytearray(path.read_bytes())
            what.append(f"{path.name}: {_mutate_segment(data, rng)}")
            path.write_bytes(bytes(data))
        elif kind < 0.65:
            indexes = [p for p in files if p.suffix in (".index", ".timeindex", ".txnindex")]
            path = rng.choice(indexes)
            data = bytearray(path.read_bytes())
            if rng.random() < 0.15:
                path.unlink()
                what.append(f"{path.name}: removed")
            else:
                what.append(f"{path.name}: {_mutate_bytes(data, rng)}")
                path.write_bytes(bytes(data))
        elif kind < 0.8:
            name = rng.choice(["recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                               "cleaner-offset-checkpoint", PARTITION + "/leader-epoch-checkpoint",
                               ".kafka_cleanshutdown", "meta.properties"])
            path = target / name
            if rng.random() < 0.5:
                data = rng.choice(_CHECKPOINT_GARBAGE)
            else:
                data = bytearray(path.read_bytes()) if path.exists() else bytearray(b"0\n1\nfz 0 3\n")
                _mutate_bytes(data, rng)
            path.write_bytes(bytes(data))
            what.append(f"{name}: checkpoint damaged")
        else:
            what.append(_damage_names(target, part, rng))
    return "; ".join(what)


def _damage_names(target: Path, part: Path, rng: random.Random) -> str:
    logs = sorted(p for p in part.glob("*.log") if p.is_file() and not p.is_symlink())
    kind = rng.randrange(8)
    if not logs:  # an earlier damage left no regular segment file to name-damage
        return "no segment file left to rename"
    victim = rng.choice(logs)
    if kind == 0:
        new = part / (victim.name + rng.choice([".deleted", ".cleaned", ".swap"]))
        victim.rename(new)
        return f"{victim.name} renamed {new.name}"
    if kind == 1:
        name = rng.choice(["0000000000000000000x.log", "1.log", "000000000000000000000000042.log",
                           "99999999999999999999.log", "-0000000000000000001.log", "00000000000000000000.index.swap",
                           "00000000000000000000.log.cleaned", ".log", "00000000000000000007.timeindex"])
        shutil.copyfile(victim, part / name)
        return f"{victim.name} copied to {name}"
    if kind == 2:
        base = int(victim.name[:20]) + rng.choice([-1, 1, 3, 1000, -int(victim.name[:20])])
        new = part / f"{max(base, 0):020d}.log"
        if not new.exists():
            victim.rename(new)
        return f"{victim.name} renamed {new.name}"
    if kind == 3:
        name = rng.choice(["fz-00", "fz-1-delete", "fz-x", "-0", "fz-99999999999", "a" * 250 + "-0", "fz-0.bak",
                           "fz-2147483648", "f z-0", "__consumer_offsets-0"])
        dest = target / name
        if not dest.exists():
            shutil.copytree(part, dest)
        return f"partition copied to {name!r}"
    if kind == 4:
        (part / "00000000000000000003.log").mkdir(exist_ok=True)
        return "a directory named like a segment"
    if kind == 5:
        victim.unlink()
        return f"{victim.name} removed"
    if kind == 6:
        link = part / f"{int(victim.name[:20]) + 1:020d}.log"
        if not link.exists() and not link.is_symlink():
            os.symlink("/etc/hostname", link)
        return "a link named like a segment"
    (target / f"{TOPIC}-1").write_bytes(b"not a folder")
    return "a file named like a partition"


# ------------------------------------------------------------------------------------------ commands


class Hang(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise Hang()


@contextlib.contextmanager
def _captured():
    """stdout/stderr of in-process commands go to buffers (cli.main writes to sys.stdout.buffer)."""
    out, err = io.TextIOWrapper(io.BytesIO()), io.TextIOWrapper(io.BytesIO())
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved


def run_cli(*args: str, timeout: int = TIMEOUT_S) -> tuple[int | None, str, str]:
    """``kafkafs ARGS`` in this process: (exit code, stdout, problem); the problem is "" when the command
    neither raised (a traceback for a user) nor ran past ``timeout`` seconds."""
    from kafkafs.cli import main

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    problem = ""
    code: int | None = None
    with _captured() as (out, _err):
        try:
            code = main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except Hang:
            problem = f"hang: {' '.join(args)} ran past {timeout} s"
        except BaseException:  # noqa: BLE001 - exactly what the campaign looks for
            problem = f"traceback: {' '.join(args)}\n{traceback.format_exc()}"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        try:
            out.flush()
            text = out.buffer.getvalue().decode("utf-8", "replace")  # type: ignore[attr-defined]
        except ValueError:
            text = ""
    return code, text, problem


def run_commands(logdir: Path) -> list[str]:
    """Every command over one damaged directory; the problems found (empty: all well)."""
    problems = []

    def call(*args: str, allowed: tuple[int, ...] = (0, 1, 2)) -> tuple[int | None, str]:
        code, out, problem = run_cli(*args)
        if problem:
            problems.append(problem)
        elif code not in allowed:
            problems.append(f"exit {code}: {' '.join(args)}")
        return code, out

    call("verify", str(logdir))
    for name in sorted(os.listdir(logdir)):
        if (logdir / name).is_dir():
            call("consume", str(logdir), name)
            files = [f for f in sorted(os.listdir(logdir / name))
                     if (logdir / name / f).is_file() and not (logdir / name / f).is_symlink()]
            # every .log, and one other file (index, checkpoint, ...) of each partition
            others = [f for f in files if not f.endswith(".log")]
            chosen = [f for f in files if f.endswith(".log")] + others[len(files) % max(len(others), 1):][:1]
            for f in chosen:
                call("dump", str(logdir / name / f), "--deep-iteration", "--print-data-log")
    code, out = call("recover", str(logdir))
    # recover exits 1 when it found and cut damage (SPEC §4), 0 when nothing was wrong: either way it
    # finished when it says so, and what it left must verify, but for the batches it says it kept as
    # Kafka keeps them (their CRC holds, their records do not decode: verify still reports those)
    if code in (0, 1) and "clean shutdown marked" in out:
        # a partition recover refuses (it holds a link) is left as it was, and verify says so: only the
        # partitions recover did recover must verify
        refused = set(re.findall(r"^(\S+): refused:", out, re.M))
        kept = set(re.findall(r"^(\S+): .*kept \d+ batch\(es\) whose records do not decode", out, re.M))
        # a folder a broker refuses to start with (fz-2147483648: not an int partition, as Kafka 4's
        # parseTopicPartitionName says) is named by recover and left as it is, and verify names it too
        refused |= set(re.findall(r"^(\S+): not a partition folder", out, re.M))
        after, text = call("verify", str(logdir))
        damaged = set(re.findall(r"^(\S+): .*: \d+ problem\(s\)$", text, re.M))
        damaged |= set(re.findall(r"^(\S+): not a partition folder", text, re.M))
        other = [line for line in re.findall(r"^  (?!note: )(.*)$", text, re.M)
                 if not re.match(r"\S+\.log position \d+: ", line) or line.split(":")[0] not in out]
        if after != 0 and not (damaged and damaged <= refused | kept and (not other or damaged <= refused)):
            problems.append(f"verify rejects what recover left:\n{text}")
    return problems


# ------------------------------------------------------------------------------------------ the mount


def read_everything(root: Path, timeout: float) -> tuple[int, list[str]]:
    """Read every file under a read-only mount (the views of each partition, a few lookups that are not
    listed, every segment file), each read in a thread given ``timeout`` seconds; return the files
    read and the problems (hangs, errors other than the EIO/ENOENT that damage may cause)."""
    import errno
    import threading

    problems: list[str] = []
    count = 0

    def attempt(label: str, fn) -> object:
        result: list[object] = []

        def work() -> None:
            try:
                result.append(fn())
            except OSError as exc:
                if exc.errno not in (errno.EIO, errno.ENOENT, errno.EINVAL, errno.EFBIG):
                    result.append(f"{label}: unexpected {exc!r}")
                else:
                    result.append(None)
            except BaseException as exc:  # noqa: BLE001
                result.append(f"{label}: {exc!r}")

        t = threading.Thread(target=work, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            problems.append(f"hang: {label} took over {timeout} s")
            return None
        value = result[0] if result else None
        if isinstance(value, str):
            problems.append(value)
            return None
        return value

    def read(path: Path) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    partitions = attempt(f"ls {root}", lambda: sorted(os.listdir(root))) or []
    for name in partitions:
        p = root / name
        if not attempt(f"stat {p}", lambda p=p: p.is_dir()):
            attempt(f"read {p}", lambda p=p: read(p))
            count += 1
            continue
        children = attempt(f"ls {p}", lambda p=p: os.listdir(p)) or []
        for child in ("records.jsonl", "partition.json"):
            if child in children:
                attempt(f"read {p / child}", lambda c=p / child: read(c))
                count += 1
        for sub in ("segments", "by-offset"):
            listed = attempt(f"ls {p / sub}", lambda s=p / sub: sorted(os.listdir(s))) or []
            chosen = listed if sub == "segments" else listed[:3] + listed[-2:]
            for f in chosen:
                attempt(f"read {p / sub / f}", lambda c=p / sub / f: read(c))
                count += 1
        for extra in ("by-offset/0.json", "by-offset/57.json", "by-offset/10-60.jsonl", "by-time/0.json",
                      "by-time/1763700001000..1763700003000.jsonl", "by-offset/99999.json"):
            attempt(f"read {p / extra}", lambda c=p / extra: read(c))
            count += 1
    return count, problems
