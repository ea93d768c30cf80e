"""A long differential run: the compiled kernel against the Python reference, past CI's size.

The same properties as tests/format/test_kernel_differential.py (whose strategies it uses; spans of
many batches through render_span_jsonl too), each
hypothesis example checking a list of inputs so that the run spends its time on inputs rather than
on the engine. It runs the properties in turns until ``--inputs`` inputs have been checked (or
``--minutes`` pass), writing its counts to ``--progress`` after every turn, so a run that is cut
short still says what it checked. A disagreement stops it with hypothesis' shrunk example.

    PYTHONPATH=. python tests/format/differential_long.py --inputs 1000000 --progress /tmp/diff.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kafkafs.format import jsonembed, kernel
from kafkafs.format.jsonspan import reference_span, render_span_jsonl
from tests.format.test_kernel_differential import (
    MODES,
    _check,
    _cuts_reference,
    _header,
    _same_span,
    _section,
    attributes,
    bound,
    int64,
    record,
    span_buffer,
    values,
)

COUNTS: dict[str, list[int]] = {}  # property -> [examples, inputs]


def _count(name: str, inputs: int) -> None:
    c = COUNTS.setdefault(name, [0, 0])
    c[0] += 1
    c[1] += inputs


modes = st.sampled_from(MODES)


def _turn(examples: int):
    """Settings for one turn of a property: ``examples`` examples, no database, no deadline."""
    return settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate, Phase.shrink],
                    suppress_health_check=list(HealthCheck))
bounds = st.tuples(bound, bound, bound, bound)


@_turn(300)
@given(st.lists(st.tuples(values, modes), min_size=20, max_size=60))
def prop_values(items):
    for data, mode in items:
        assert kernel.render_value(data, mode) == jsonembed.render_value(data, mode), (data, mode)
    _count("values", len(items))


@_turn(300)
@given(st.lists(st.tuples(st.binary(max_size=96), modes), min_size=20, max_size=60))
def prop_bytes(items):
    for data, mode in items:
        assert kernel.render_value(data, mode) == jsonembed.render_value(data, mode), (data, mode)
    _count("bytes", len(items))


@_turn(60)
@given(st.lists(record, max_size=8), attributes, int64, int64, int64, int64, bounds)
def prop_sections(records, attrs, base_offset, first_ts, max_ts, producer_id, bnds):
    data = _section(records)
    header = _header(len(records), attrs, base_offset, first_ts, max_ts, producer_id)
    for mode in MODES:
        _check(data, header, mode, bnds)
    _count("sections", len(MODES))


@_turn(60)
@given(st.lists(record, min_size=1, max_size=5), attributes,
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 3), st.binary(min_size=1, max_size=8)), min_size=1,
                max_size=4),
       st.integers(-1, 1), bounds)
def prop_damaged(records, attrs, damage, count_error, bnds):
    data = bytearray(_section(records))
    for where, how, junk in damage:
        i = where % (len(data) + 1)
        if how == 0:
            data[i : i + len(junk)] = junk
        elif how == 1:
            data[i:i] = junk
        elif how == 2:
            del data[i : i + len(junk)]
        else:
            del data[i:]
    header = _header(max(0, len(records) + count_error), attrs, 10, 1000, 2000, 9)
    for mode in MODES:
        _check(bytes(data), header, mode, bnds)
    _count("damaged", len(MODES))


@_turn(150)
@given(st.lists(st.sampled_from([0x80, 0xFF, 0x7F, 0x00, 0x01, 0x02, 0x10, 0x0F, 0x81, 0xC0]), max_size=16), attributes)
def prop_varints(raw, attrs):
    for count in (0, 1, 2, 3):
        _check(bytes(raw), _header(count, attrs, 0, 0, 0, 1), "auto", (None, None, None, None))
    _count("varints", 4)


@_turn(120)
@given(st.lists(span_buffer(), min_size=2, max_size=6), st.integers(1, 400))
def prop_spans(buffers, step):
    """render_span_jsonl (batch walk, CRC-32C, stop points) and span_cuts against their references."""
    from array import array

    for buf in buffers:
        for mode in MODES:
            ref = reference_span("topic.x", 7, buf, mode)
            _same_span(render_span_jsonl("topic.x", 7, buf, mode), ref)
            _same_span(render_span_jsonl("topic.x", 7, buf, mode, lengths=True), ref._replace(data=b""))
        for final, upper in ((True, -1), (False, -1), (True, 3 + len(buf) // 64)):
            raw, expect = kernel.KERNEL.span_cuts(buf, step, 3, final, upper)
            cuts = array("q")
            cuts.frombytes(raw)
            assert (cuts.tolist(), expect) == _cuts_reference(buf, step, 3, final, upper)
    _count("spans", len(buffers) * len(MODES))


TURNS = [prop_values, prop_bytes, prop_sections, prop_damaged, prop_varints, prop_spans]


def _stale_sources() -> list[str]:
    """The kernel's C files newer than the module this process loaded (a run must test the source)."""
    from pathlib import Path

    built = Path(kernel.KERNEL.__file__)
    return [src.name for src in sorted(built.parent.glob("_kernel*.[ch]")) if src.stat().st_mtime_ns > built.stat().st_mtime_ns]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=600)
    parser.add_argument("--progress", default="differential-long.json")
    args = parser.parse_args()
    if kernel.KERNEL is None:
        print("the kernel is not built", file=sys.stderr)
        return 2
    stale = _stale_sources()
    if stale:
        print(f"the built kernel is older than {', '.join(stale)}: run scripts/build_kernel.py first", file=sys.stderr)
        return 2
    start = time.time()
    turn = 0
    while True:
        TURNS[turn % len(TURNS)]()
        turn += 1
        total_examples = sum(c[0] for c in COUNTS.values())
        total_inputs = sum(c[1] for c in COUNTS.values())
        state = {"examples": total_examples, "inputs": total_inputs, "by_property": COUNTS,
                 "seconds": round(time.time() - start), "turns": turn, "failures": 0}
        with open(args.progress, "w") as f:
            json.dump(state, f)
        if total_inputs >= args.inputs or time.time() - start > args.minutes * 60:
            print(json.dumps(state))
            return 0


if __name__ == "__main__":
    sys.exit(main())
