"""Shared fixtures: where the real broker-written data lives."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests assert behaviour, not speed: on a shared, loaded machine hypothesis's timing checks
# (a 200 ms deadline per example, the too_slow health check) fail tests whose properties hold.
settings.register_profile("kafkafs", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("kafkafs")

ROOT = Path(__file__).resolve().parent.parent


def _find_shared() -> Path:
    env = os.environ.get("KAFKAFS_SHARED")
    if env:
        return Path(env)
    for parent in [ROOT, *ROOT.parents]:
        candidate = parent / "shared" / "fixtures"
        if candidate.is_dir():
            return candidate
    return ROOT.parent / "shared" / "fixtures"


FIXTURES = _find_shared()


def _build_kernel() -> None:
    """Compile the record kernel in place when its C source is newer than the module (a worktree used
    through PYTHONPATH has no `pip install -e` of its own); without gcc the suite runs on the Python
    reference and the kernel's differential tests skip."""
    import importlib.util

    script = ROOT / "scripts" / "build_kernel.py"
    if not script.exists():
        return
    spec = importlib.util.spec_from_file_location("_kafkafs_build_kernel", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if module.stale():
        module.build(quiet=True)


_build_kernel()


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"the shared fixtures are missing: {FIXTURES} (set KAFKAFS_SHARED)")
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def _private_cache_home(tmp_path_factory):
    """Mounts and commands started by tests keep their size cache in a temporary folder, never in the
    user's ~/.cache (subprocesses inherit the environment)."""
    saved = {name: os.environ.get(name) for name in ("XDG_CACHE_HOME", "CACHE_DIRECTORY")}
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    os.environ.pop("CACHE_DIRECTORY", None)
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# ---------------------------------------------------------------------------------------------- warnings


class _Warnings(logging.Handler):
    """Every WARNING or worse that kafkafs logs while a test runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "kafkafs" or record.name.startswith("kafkafs."):
            self.records.append(record)


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    """Any warning kafkafs logs during a test fails it, unless the test expects warnings: it looks at
    the log itself (the ``caplog`` fixture) or is marked ``allow_warnings`` (with the reason). A test
    that leaves a filter on a root handler fails too (:func:`_filters_left`)."""
    root = logging.getLogger()
    before = {handler: list(handler.filters) for handler in root.handlers}
    expects = "caplog" in getattr(item, "fixturenames", ()) or item.get_closest_marker("allow_warnings")
    catcher = None if expects else _Warnings()
    if catcher is not None:
        root.addHandler(catcher)
    try:
        result = yield
    finally:
        if catcher is not None:
            root.removeHandler(catcher)
        left = _filters_left(before)
    if left:
        raise AssertionError(f"filters left on the root logger's handlers (later tests lose lines):\n{left}")
    if catcher is not None and catcher.records:
        lines = "\n".join(f"  {r.name}: {r.levelname}: {r.getMessage()}" for r in catcher.records[:10])
        raise AssertionError(f"unexpected warnings logged (use caplog or mark allow_warnings):\n{lines}")
    return result


def _filters_left(before: dict[logging.Handler, list]) -> str:
    """The filters a test added to the root handlers it found (``before``: each one's filters then) and
    left there, taken off now (said one a line; "" when none). pytest (9) keeps one capture handler for
    the whole session (``caplog``'s, the report's): a filter left there acts in every later test. The
    say-once filter of an in-process ``main()``, left there before 85eba3b, dropped the second of two
    identical warnings in test_arrow_differential's walk test (the Python path's, after the kernel
    path's), a failure far from its cause. The hook is the innermost (``trylast``): pytest's handlers
    are on the root logger while it runs."""
    left = [(handler, f) for handler, filters in before.items() for f in handler.filters if f not in filters]
    for handler, f in left:
        handler.removeFilter(f)
    return "\n".join(f"  {f!r} on {handler!r}" for handler, f in left)
