"""The skip list against a sorted-dict model, and readers racing one writer."""

from __future__ import annotations

import bisect
import sys
import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkafs.errors import InvalidInput
from kafkafs.storage.skiplist import SkipList


class Model:
    """The obvious sorted map, the oracle."""

    def __init__(self) -> None:
        self.d: dict[int, object] = {}

    def keys(self) -> list[int]:
        return sorted(self.d)

    def entry(self, i: int, keys: list[int]) -> tuple[int, object] | None:
        return (keys[i], self.d[keys[i]]) if 0 <= i < len(keys) else None

    def floor(self, k: int) -> tuple[int, object] | None:
        keys = self.keys()
        return self.entry(bisect.bisect_right(keys, k) - 1, keys)

    def lower(self, k: int) -> tuple[int, object] | None:
        keys = self.keys()
        return self.entry(bisect.bisect_left(keys, k) - 1, keys)

    def ceiling(self, k: int) -> tuple[int, object] | None:
        keys = self.keys()
        return self.entry(bisect.bisect_left(keys, k), keys)

    def higher(self, k: int) -> tuple[int, object] | None:
        keys = self.keys()
        return self.entry(bisect.bisect_right(keys, k), keys)


keys = st.integers(-50, 300)


class SkipListMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sl: SkipList[object] = SkipList(seed=7, p=0.5, max_level=6)
        self.model = Model()

    @rule(k=keys, v=st.integers())
    def put(self, k: int, v: int) -> None:
        assert self.sl.put(k, v) == self.model.d.get(k)
        self.model.d[k] = v

    @precondition(lambda self: self.model.d)
    @rule(data=st.data())
    def remove_present(self, data: st.DataObject) -> None:
        k = data.draw(st.sampled_from(sorted(self.model.d)))
        assert self.sl.remove(k) == self.model.d.pop(k)

    @rule(k=keys)
    def remove_any(self, k: int) -> None:
        assert self.sl.remove(k) == self.model.d.pop(k, None)

    @rule()
    def clear_sometimes(self) -> None:
        if len(self.model.d) > 40:
            self.sl.clear()
            self.model.d.clear()

    @rule(k=keys)
    def neighbours(self, k: int) -> None:
        assert self.sl.get(k) == self.model.d.get(k)
        assert self.sl.get(k, "none") == self.model.d.get(k, "none")
        assert (k in self.sl) == (k in self.model.d)
        assert self.sl.floor(k) == self.model.floor(k)
        assert self.sl.lower(k) == self.model.lower(k)
        assert self.sl.ceiling(k) == self.model.ceiling(k)
        assert self.sl.higher(k) == self.model.higher(k)

    @rule(a=st.none() | keys, b=st.none() | keys, fi=st.booleans(), ti=st.booleans())
    def ranges(self, a: int | None, b: int | None, fi: bool, ti: bool) -> None:
        expected = [
            (k, self.model.d[k])
            for k in self.model.keys()
            if (a is None or k > a or (fi and k == a)) and (b is None or k < b or (ti and k == b))
        ]
        assert list(self.sl.items(a, b, from_inclusive=fi, to_inclusive=ti)) == expected
        assert list(self.sl.keys(a, b, from_inclusive=fi, to_inclusive=ti)) == [k for k, _ in expected]
        assert list(self.sl.values(a, b, from_inclusive=fi, to_inclusive=ti)) == [v for _, v in expected]

    @invariant()
    def same_contents(self) -> None:
        keys = self.model.keys()
        assert len(self.sl) == len(keys)
        assert bool(self.sl) == bool(keys)
        assert list(self.sl) == keys
        assert self.sl.first() == (self.model.entry(0, keys))
        assert self.sl.last() == (self.model.entry(len(keys) - 1, keys))


TestSkipListMachine = SkipListMachine.TestCase
TestSkipListMachine.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_basics() -> None:
    sl = SkipList([(30, "c"), (10, "a"), (20, "b")], seed=1)
    assert list(sl.items()) == [(10, "a"), (20, "b"), (30, "c")]
    assert sl.floor(25) == (20, "b")
    assert sl.floor(5) is None
    assert sl.ceiling(31) is None
    assert sl.higher(10) == (20, "b")
    assert sl.lower(10) is None
    assert sl.put(20, "B") == "b"
    assert sl.get(20) == "B"
    assert len(sl) == 3
    assert sl.remove(99) is None
    assert list(sl.values(11)) == ["B", "c"]
    assert list(sl.keys(10, 30, from_inclusive=False, to_inclusive=True)) == [20, 30]
    assert repr(sl) == "SkipList([(10, 'a'), (20, 'B'), (30, 'c')])"
    assert "x" not in sl
    empty: SkipList[str] = SkipList()
    assert not empty and empty.first() is None and empty.last() is None and list(empty) == []


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInput):
        SkipList(p=1.0)
    with pytest.raises(InvalidInput):
        SkipList(max_level=0)
    with pytest.raises(InvalidInput):
        SkipList().put("1", 1)  # type: ignore[arg-type]


def _shape(sl: SkipList[object]) -> list[int]:
    heights, node = [], sl._head.next[0]
    while node is not None:
        heights.append(len(node.next))
        node = node.next[0]
    return heights


def test_seeded_levels_are_deterministic() -> None:
    a, b, c = SkipList(seed=42), SkipList(seed=42), SkipList(seed=43)
    for k in range(500):
        a.put(k, k)
        b.put(k, k)
        c.put(k, k)
    assert _shape(a) == _shape(b)
    assert _shape(a) != _shape(c)


def test_search_is_logarithmic() -> None:
    sl: SkipList[int] = SkipList(((k * 10, k) for k in range(20000)), seed=3)
    steps = 0
    node, level = sl._head, sl._level
    for lv in range(level - 1, -1, -1):  # walk as _last_below does, counting hops
        nxt = node.next[lv]
        while nxt is not None and nxt.key <= 123_457:
            node, nxt = nxt, nxt.next[lv]
            steps += 1
    assert node.key == 123_450
    assert steps < 150  # a list walk would take 12346
    assert sl.floor(123_457) == (123_450, 12345)


def test_iteration_survives_removal_of_the_current_node() -> None:
    sl = SkipList(((k, k) for k in range(10)), seed=5)
    seen = []
    for k, _ in sl.items():
        seen.append(k)
        if k == 3:
            sl.remove(3)
            sl.remove(4)
            sl.put(100, 100)
    # keys present throughout all come, in order; 4 (removed meanwhile) may come or not
    assert seen == sorted(set(seen))
    assert [k for k in seen if k != 4] == [0, 1, 2, 3, 5, 6, 7, 8, 9, 100]


def test_readers_race_one_writer() -> None:
    """Keys present throughout are never missed by readers, whatever the writer does meanwhile."""
    stable = list(range(0, 4000, 40))  # present for the whole test
    sl: SkipList[int] = SkipList(((k, k) for k in stable), seed=11)
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            # churn keys between the stable ones, and around the ends
            k = (i * 7919) % 4100 - 50
            if k % 40 == 0:
                k += 1
            if sl.get(k) is None:
                sl.put(k, k)
            else:
                sl.remove(k)
            if i % 97 == 0:
                sl.put(stable[i % len(stable)], stable[i % len(stable)])  # replace a value in place
            i += 1

    def reader(seed: int) -> None:
        n = 0
        while not stop.is_set() and not errors:
            k = stable[(seed + n * 13) % len(stable)]
            n += 1
            if sl.get(k) != k:
                errors.append(f"get({k}) missed")
            if sl.floor(k) != (k, k) or sl.ceiling(k) != (k, k):
                errors.append(f"floor/ceiling({k}) missed")
            f = sl.floor(k + 1)
            if f is None or not k <= f[0] <= k + 1:
                errors.append(f"floor({k + 1}) = {f}")
            lo = sl.higher(k)
            if lo is None and k != stable[-1] and max(stable) > k:
                errors.append(f"higher({k}) is None")
            if n % 20 == 0:
                got = [key for key, _ in sl.items(k, k + 400)]
                if got != sorted(set(got)):
                    errors.append("range not strictly increasing")
                want = [s for s in stable if k <= s < k + 400]
                if not set(want) <= set(got):
                    errors.append(f"range from {k} missed {set(want) - set(got)}")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=writer)] + [
            threading.Thread(target=reader, args=(s,)) for s in range(3)
        ]
        for t in threads:
            t.start()
        time.sleep(0.6)
        stop.set()
        for t in threads:
            t.join(5)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:5]
    assert all(sl.get(k) == k for k in stable)
    assert list(sl.keys()) == sorted(sl.keys())
