"""Sizing: a partition's first sizing spread over threads with progress; quick ones log nothing."""

from __future__ import annotations

import logging

from kafkafs.fs.views import layout, sizing
from kafkafs.storage.logdir import LogDir

from ..conftest import expected_jsonl
from .test_layoutcache import tree_of


def test_first_sizing_uses_threads_and_logs_progress(logdir_copy, monkeypatch, caplog):
    import threading
    import time

    threads = set()
    original = layout.lay_out_span

    def lay_out_span(*args, **kw):
        threads.add(threading.get_ident())
        time.sleep(0.01)  # slow enough that every worker gets segments
        return original(*args, **kw)

    monkeypatch.setattr(layout, "lay_out_span", lay_out_span)
    t = tree_of(logdir_copy, None)
    try:
        jobs = t.partitions.state("orders-0").sizing_jobs()
        assert len(jobs) > 3
        p = sizing.Progress(len(jobs), 1, sizing.log_progress("orders-0"), after=0.0, every=0.0)
        with caplog.at_level(logging.INFO, "kafkafs"):
            sizing.size_layouts(jobs, t.partitions.cache, p, threads=4)
        assert len(threads) > 1
        lines = [r.message for r in caplog.records if "segments" in r.message]
        assert lines and lines[-1].startswith(f"orders-0: sized {len(jobs)}/{len(jobs)} segments")
        assert "MB/s" in lines[-1]
        assert t.resolve("orders-0/records.jsonl").attr().size == len(expected_jsonl(logdir_copy, "orders-0"))
    finally:
        t.close()


def test_quick_sizings_log_nothing(built_logdir, caplog):
    t = tree_of(built_logdir, None)
    try:
        with caplog.at_level(logging.INFO, "kafkafs"):
            t.resolve("orders-0/records.jsonl").attr()
        assert not [r for r in caplog.records if "segments" in r.message]
    finally:
        t.close()


def test_sizing_counts_and_reading_renders_whole_batches(logdir_copy, tmp_path, monkeypatch):
    """Sizing asks the kernel's span walk for lengths only (no batch rendered, no Python per batch);
    reads render each batch once from its bytes."""
    from kafkafs.fs.views import layout as spans
    from kafkafs.fs.views import render

    calls = {"lengths": 0, "render": 0, "one batch": 0}

    def counted(fn):
        def count(*args, lengths=False, **kw):
            result = fn(*args, lengths=lengths, **kw)
            calls["lengths" if lengths else "render"] += len(result.batch_ends)
            return result
        return count

    def counted_into(fn):
        def count(*args, **kw):
            result = fn(*args, **kw)
            calls["render"] += len(result.batch_ends)
            return result
        return count

    def one_batch(fn):
        def count(*args, **kw):
            calls["one batch"] += 1
            return fn(*args, **kw)
        return count

    monkeypatch.setattr(spans, "render_span_jsonl", counted(spans.render_span_jsonl))
    monkeypatch.setattr(render, "render_span_jsonl", counted(render.render_span_jsonl))
    monkeypatch.setattr(render, "render_span_into", counted_into(render.render_span_into))  # spans into blocks
    monkeypatch.setattr(render, "raw_jsonl_lengths", one_batch(render.raw_jsonl_lengths))
    monkeypatch.setattr(render, "render_raw_jsonl", one_batch(render.render_raw_jsonl))
    with LogDir(logdir_copy) as d:
        nbatches = sum(1 for _ in d.log("orders-0").batches())
    t = tree_of(logdir_copy, tmp_path / "cache")
    try:
        want = expected_jsonl(logdir_copy, "orders-0")
        assert t.resolve("orders-0/records.jsonl").attr().size == len(want)
        assert calls == {"lengths": nbatches, "render": 0, "one batch": 0}
        assert t.read_file("orders-0/records.jsonl", chunk=7000) == want
        assert calls["render"] == nbatches and calls["one batch"] == 0
        assert t.read_file("orders-0/by-offset/13-1020.jsonl") == expected_jsonl(logdir_copy, "orders-0", 13, 1020)
    finally:
        t.close()
