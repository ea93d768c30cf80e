"""Fixtures of the broker tests: a real Kafka (``tests/broker/harness.py``), skipped with the reason
said where its jars or a Java 17 are missing. The API is described in ``tests/broker/README.md``.

- ``kafka`` (session): the newest fetched :class:`~tests.broker.harness.Kafka` (its tools:
  ``kafka.dump_log(...)``, ``kafka.storage(...)``, ``kafka.tool("kafka-consumer-groups", ...)``).
- ``kafka39`` (session): Kafka 3.9 where it was fetched, else the test skips.
- ``broker``: a started single-node KRaft broker in the test's temporary folder, stopped at teardown
  (also when the test fails; its ``server.log`` path is printed so a failure shows where to look).
- ``make_broker(config=None, *, start=True, kafka=None)``: more brokers (e.g. two releases, or a
  broker with settings of the test's own); each one stopped at teardown.
- ``module_broker``: one broker for a whole test module (tests give their topics distinct names).
- ``mounted(logdir, *args)``: a kafkafs mount (``tests/fs/conftest.py``'s ``Mounts``), unmounted at
  teardown, also on failure; its log must hold no warning unless ``mount.allow_errors = True``.

Every test in this folder gets the ``broker`` marker (``-m "not broker"`` leaves them out), and every
broker JVM still alive at the end of the session is killed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from .harness import Broker, Kafka, find_kafka, new_workdir, stop_all, why_missing

HERE = Path(__file__).resolve().parent

_SUMMARY = {"ran": 0, "skipped": 0}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.broker)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "broker" not in report.keywords:
        return
    if report.when == "call":
        _SUMMARY["ran"] += 1
    elif report.when == "setup" and report.skipped:
        _SUMMARY["skipped"] += 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not (_SUMMARY["ran"] or _SUMMARY["skipped"]):
        return
    kafka = find_kafka()
    if kafka is None:
        terminalreporter.write_line(
            f"broker tests: {_SUMMARY['skipped']} SKIPPED, no real Kafka here: {why_missing()}",
            yellow=True,
            bold=True,
        )
    else:
        terminalreporter.write_line(
            f"broker tests: {_SUMMARY['ran']} ran against Kafka {kafka.version} (Java {kafka.java_major})"
            + (f", {_SUMMARY['skipped']} skipped" if _SUMMARY["skipped"] else "")
        )


@pytest.fixture(scope="session", autouse=True)
def _no_broker_left() -> Iterator[None]:
    yield
    stop_all()


@pytest.fixture(scope="session")
def kafka() -> Kafka:
    found = find_kafka()
    if found is None:
        pytest.skip(f"no real Kafka: {why_missing()}")
    return found


@pytest.fixture(scope="session")
def kafka39() -> Kafka:
    found = find_kafka("3.9.2")
    if found is None:
        pytest.skip(f"no Kafka 3.9: {why_missing('3.9.2')}")
    return found


class BrokerFactory:
    """``make_broker(config=None, *, start=True, kafka=None, log_levels=None)`` -> a :class:`Broker`
    in its own folder under ``base``; :meth:`close` stops every one of them."""

    def __init__(self, kafka: Kafka, base: Path) -> None:
        self.kafka = kafka
        self.base = base
        self.brokers: list[Broker] = []

    def __call__(
        self,
        config: Mapping[str, str | int] | None = None,
        *,
        start: bool = True,
        kafka: Kafka | None = None,
        log_levels: Mapping[str, str] | None = None,
    ) -> Broker:
        broker = Broker(
            kafka or self.kafka, new_workdir(self.base), dict(config or {}), dict(log_levels or {})
        )
        self.brokers.append(broker)
        return broker.start() if start else broker

    def close(self) -> None:
        for broker in self.brokers:
            broker.close()
            print(f"broker {broker.kafka.version} log: {broker.log_file}")


@pytest.fixture
def make_broker(kafka: Kafka, tmp_path: Path) -> Iterator[BrokerFactory]:
    factory = BrokerFactory(kafka, tmp_path)
    yield factory
    factory.close()


@pytest.fixture
def broker(make_broker: BrokerFactory) -> Broker:
    return make_broker()


@pytest.fixture
def mounted(tmp_path: Path):
    from tests.fs.conftest import Mounts

    mounts = Mounts(tmp_path / "mounts")
    mounts.base.mkdir()
    yield mounts
    problems = mounts.close()
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture(scope="module")
def module_broker(kafka: Kafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    factory = BrokerFactory(kafka, tmp_path_factory.mktemp("module-broker"))
    yield factory()
    factory.close()
