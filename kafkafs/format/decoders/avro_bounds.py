"""Bounds on the work of reading one Avro datum, checked before fastavro reads it (SPEC §8: bytes that
do not decode under their schema stay as SPEC §3 shows them, nothing fails; §3: damage stays local).

fastavro's compiled reader trusts the bytes in ways that one hostile record turns into a denial of
service of every reader of the log:

* **Items that take no bytes.** Avro writes an array in blocks, each a varint count then that many
  items. An item of ``null``, of a ``fixed`` of size 0 or of a record whose fields all take no bytes is
  zero bytes long, so a 5-byte count of 2^40 has fastavro append 2^40 items: memory without bound, for
  hours. (A map's entries hold a string key, one byte at least; every other item takes a byte at least.)
* **Nesting.** A recursive schema (a linked list, a tree) nests a level per byte or two, and fastavro
  reads each level with a C recursion of about 1.6 KB of stack: 5,000 levels (a 5 KB datum) overflow an
  8 MB stack and the process dies with SIGSEGV. A record that holds itself through record fields alone
  has no finite datum at all: fastavro recurses without reading a byte, whatever the bytes.

:func:`datum_bounds` analyses a fastavro-parsed schema once. It refuses (ValueError) a schema that has
no finite datum; it returns None when the datum's own bytes already bound fastavro's work (no array of
zero-width items, nesting bounded by the schema itself at :data:`MAX_NESTING` or less); else a check
``fits(data, pos)`` that walks the datum at ``data[pos:]`` by Avro's binary encoding, as fastavro reads it
(varints of at most 10 bytes, 64-bit and zig-zag; a negative block count is followed by a block size;
a union index picks its branch as Python indexes a list, so -1 is the last), with an explicit stack,
and answers False when

* records, arrays and maps nest more than :data:`MAX_NESTING` deep: orjson refuses to write JSON
  nested deeper (254 is its limit), so such a datum was never shown decoded anyway; at this depth
  fastavro's recursion stays under half a megabyte of stack, also on a thread's;
* its arrays hold more than :data:`MAX_EMPTY_ITEMS` zero-width items in all;
* its bytes end before the datum does (fastavro would fail too).

A datum that fits is then read by fastavro as before, in at most a few steps per byte (plus its
zero-width items); one that does not is shown as its bytes. The walk runs only for the schemas that
need it, and for a recursive schema without zero-width arrays only on datums long enough to nest past
the limit (records, arrays and maps on a path: at most ``n + (n + 1) * records`` for an ``n``-byte
datum, where ``records`` is the longest chain of records held directly in one another: each array, map
and union on a path reads a byte of its own, and between two of them there are only such chains).

Pure functions of their arguments; a check is immutable and safe to call from any thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MAX_NESTING", "MAX_EMPTY_ITEMS", "datum_bounds"]

#: Records, arrays and maps nested in one datum at most (orjson writes 254 levels, refuses 255).
MAX_NESTING = 254
#: Array items that take no bytes (``null``, ``fixed`` of size 0, a record of such fields), in all, per datum.
MAX_EMPTY_ITEMS = 10_000

# node kinds; a node is a list: [kind, arg, ...]
_FIXED = 0  # [_FIXED, size]: null (0), boolean (1), float (4), double (8), fixed
_VARINT = 1  # [_VARINT]: int, long, enum
_BYTES = 2  # [_BYTES]: bytes, string (a varint length, then that many bytes)
_RECORD = 3  # [_RECORD, fields (reversed, as the walk pushes them)]
_UNION = 4  # [_UNION, branches]
_ARRAY = 5  # [_ARRAY, items, nesting of a zero-width item or -1]
_MAP = 6  # [_MAP, values, -1]

_PRIMITIVES = {"null": (_FIXED, 0), "boolean": (_FIXED, 1), "float": (_FIXED, 4), "double": (_FIXED, 8),
               "int": (_VARINT,), "long": (_VARINT,), "bytes": (_BYTES,), "string": (_BYTES,)}
_KEY = [_BYTES]

Node = list[Any]


def datum_bounds(parsed: Any, named: dict[str, Any]) -> Callable[[bytes, int], bool] | None:
    """The check of a datum of the fastavro-parsed schema ``parsed`` (``named``: its named types, by
    full name) before fastavro reads it, or None when none is needed (see the module docstring);
    ValueError when the schema has no finite datum (a record holding itself through records alone)."""
    made: dict[str, Node] = {}
    root = _build(parsed, named, made, {})
    nodes = _reachable(root)
    records = [n for n in nodes if n[0] == _RECORD]
    chain = _longest_record_chain(records)
    zero: dict[int, int] = {}  # id(node) -> nesting of a zero-width node (records only; -1: not zero-width)
    for n in nodes:
        if n[0] == _ARRAY:
            n[2] = _zero_width_nesting(n[1], zero)
    counts_empties = any(n[0] == _ARRAY and n[2] >= 0 for n in nodes)
    deepest = _deepest(root, {}, set())
    if not counts_empties and deepest <= MAX_NESTING:
        return None
    # a datum of n bytes nests at most n + (n + 1) * chain deep: shorter ones need no walk
    short = -1 if counts_empties else (MAX_NESTING - chain) // (chain + 1)

    def fits(data: bytes, pos: int) -> bool:
        if len(data) - pos <= short:
            return True
        return _walk(root, data, pos)

    return fits


def _build(schema: Any, named: dict[str, Any], made: dict[str, Node], primitives: dict[str, Node]) -> Node:
    """The walk's node of a parsed schema; a named type is one node however often it is named."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            node = primitives.get(schema)
            if node is None:
                node = primitives[schema] = list(_PRIMITIVES[schema])
            return node
        if schema in made:
            return made[schema]
        if schema in named:
            node = _build(named[schema], named, made, primitives)
            made[schema] = node
            return node
        raise ValueError(f"unknown Avro type {schema!r}")
    if isinstance(schema, list):
        node = [_UNION, []]
        node[1].extend(_build(branch, named, made, primitives) for branch in schema)
        return node
    if not isinstance(schema, dict):
        raise ValueError(f"not an Avro schema: {schema!r}")
    kind = schema.get("type")
    name = schema.get("name")
    if kind in ("record", "error"):
        node = [_RECORD, []]
        if isinstance(name, str):
            made[name] = node
        fields = [_build(field["type"], named, made, primitives) for field in schema["fields"]]
        node[1].extend(reversed(fields))
        return node
    if kind == "array":
        return [_ARRAY, _build(schema["items"], named, made, primitives), -1]
    if kind == "map":
        return [_MAP, _build(schema["values"], named, made, primitives), -1]
    if kind in ("enum", "fixed"):
        node = [_VARINT] if kind == "enum" else [_FIXED, int(schema["size"])]
        if kind == "fixed" and node[1] < 0:
            raise ValueError(f"a fixed of size {node[1]}")
        if isinstance(name, str):
            made[name] = node
        return node
    return _build(kind, named, made, primitives)  # {"type": "long"}, {"type": "com.acme.Address"}


def _children(node: Node) -> list[Node]:
    kind = node[0]
    if kind in (_RECORD, _UNION):
        return node[1]  # type: ignore[no-any-return]  # a node's list of nodes
    if kind in (_ARRAY, _MAP):
        return [node[1]]
    return []


def _reachable(root: Node) -> list[Node]:
    seen: dict[int, Node] = {}
    pending = [root]
    while pending:
        node = pending.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            pending.extend(_children(node))
    return list(seen.values())


def _longest_record_chain(records: list[Node]) -> int:
    """The most records a datum nests directly in one another (a record field whose type is a record; no
    union, array or map between them, each of which reads a byte of its own). ValueError when a record
    holds itself that way: such a schema has no finite datum."""
    state: dict[int, int] = {}  # 1: on the path; done: 2 + the longest chain from it
    for start in records:
        if id(start) in state:
            continue
        path = [(start, iter([f for f in start[1] if f[0] == _RECORD]), 1)]
        state[id(start)] = 1
        while path:
            node, fields, longest = path[-1]
            field = next(fields, None)
            if field is None:
                path.pop()
                state[id(node)] = 2 + longest
                if path:
                    parent, rest, best = path[-1]
                    path[-1] = (parent, rest, max(best, longest + 1))
                continue
            seen = state.get(id(field))
            if seen == 1:
                raise ValueError("a record holds itself through records alone: no datum of it is finite")
            if seen is None:
                state[id(field)] = 1
                path.append((field, iter([f for f in field[1] if f[0] == _RECORD]), 1))
            else:
                path[-1] = (node, fields, max(longest, seen - 2 + 1))
    return max((state[id(r)] - 2 for r in records), default=0)


def _zero_width_nesting(node: Node, zero: dict[int, int]) -> int:
    """How deep a datum of ``node`` nests (records) when it takes no bytes, or -1 when it takes some."""
    kind = node[0]
    if kind == _FIXED:
        return 0 if node[1] == 0 else -1
    if kind != _RECORD:
        return -1
    known = zero.get(id(node))
    if known is None:
        deepest = 0
        for field in node[1]:  # records inside records form no cycle (refused above)
            inner = _zero_width_nesting(field, zero)
            if inner < 0:
                deepest = -2
                break
            deepest = max(deepest, inner)
        known = zero[id(node)] = deepest + 1 if deepest >= 0 else -1
    return known


def _deepest(node: Node, memo: dict[int, float], path: set[int]) -> float:
    """How deep records, arrays and maps nest in a datum of ``node`` at most (inf when it recurses)."""
    key = id(node)
    if key in path:
        return float("inf")
    if key in memo:
        return memo[key]
    path.add(key)
    inner = max((_deepest(child, memo, path) for child in _children(node)), default=0.0)
    path.discard(key)
    depth = inner + (1 if node[0] in (_RECORD, _ARRAY, _MAP) else 0)
    memo[key] = depth
    return depth


def _walk(root: Node, data: bytes, pos: int) -> bool:
    """Whether the datum at ``data[pos:]`` nests at most MAX_NESTING deep, holds at most MAX_EMPTY_ITEMS
    zero-width items and does not run past the end (see the module docstring)."""
    end = len(data)
    empties = MAX_EMPTY_ITEMS
    # what is left to read, latest last: (node, containers around it, -1 for a node to read; for an array
    # or map already entered: the items left in its current block, 0 when a block count comes next)
    stack: list[tuple[Node, int, int]] = []
    pop, push = stack.pop, stack.append
    node, depth, left = root, 0, -1
    try:
        while True:
            kind = node[0]
            if left < 0:
                if kind == _RECORD:
                    depth += 1
                    if depth > MAX_NESTING:
                        return False
                    # fields in reading order (stored reversed): leaves are read here, the first field that
                    # is not goes next, the ones after it wait on the stack (the next one on top)
                    fields = node[1]
                    k = len(fields) - 1
                    while k >= 0:
                        field = fields[k]
                        fk = field[0]
                        if fk == _VARINT:
                            while data[pos] & 0x80:
                                pos += 1
                            pos += 1
                        elif fk == _FIXED:
                            pos += field[1]
                        elif fk == _BYTES:
                            size, pos = _long(data, pos)
                            if size < 0:
                                return False
                            pos += size
                        else:
                            break
                        k -= 1
                    if pos > end:
                        return False
                    if k >= 0:
                        for field in fields[:k]:
                            push((field, depth, -1))
                        node = fields[k]
                        continue
                elif kind == _UNION:
                    index, pos = _long(data, pos)
                    branches = node[1]
                    if not -len(branches) <= index < len(branches):
                        return False
                    node = branches[index]
                    continue
                elif kind == _VARINT:
                    while data[pos] & 0x80:
                        pos += 1
                    pos += 1
                elif kind == _FIXED:
                    pos += node[1]
                    if pos > end:
                        return False
                elif kind == _BYTES:
                    size, pos = _long(data, pos)
                    pos += size
                    if size < 0 or pos > end:
                        return False
                else:  # an array or a map: its first block count comes next
                    depth += 1
                    if depth > MAX_NESTING:
                        return False
                    left = 0
                    continue
            else:
                if left == 0:  # a block count: 0 ends the array or map
                    count, pos = _long(data, pos)
                    if count < 0:
                        count = -count
                        _size, pos = _long(data, pos)
                    if count > 0 and node[2] >= 0:  # items that take no bytes: counted, not walked
                        empties -= count
                        if empties < 0 or depth + node[2] > MAX_NESTING:
                            return False
                        continue  # the next block count
                    left = count
                if left > 0:  # an item (each takes a byte at least: this loop ends with the bytes)
                    push((node, depth, left - 1))
                    if kind == _MAP:
                        push((node[1], depth, -1))
                        node, left = _KEY, -1
                    else:
                        node, left = node[1], -1
                    continue
            if not stack:
                return True
            node, depth, left = pop()
    except (IndexError, ValueError):  # ran past the end; a varint longer than 10 bytes
        return False


def _long(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` as fastavro reads it (64 bits), and the position after it."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
    value &= 0xFFFFFFFFFFFFFFFF
    return (value >> 1) ^ -(value & 1), pos + 1
