"""Where a Kafka release's jars are on this machine: the project's own fetch (scripts/fetch_kafka.sh:
``$KAFKAFS_KAFKA_HOME`` or ``.kafka`` in the checkout, ``<version>/libs/``), then Maven's local
repository (``~/.m2/repository/org/apache/kafka/<artifact>/<version>/``)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def find_jar(artifact: str, version: str) -> Path | None:
    """The jar of ``org.apache.kafka:<artifact>:<version>``, or None when this machine has none."""
    name = f"{artifact}-{version}.jar"
    home = Path(os.environ.get("KAFKAFS_KAFKA_HOME") or ROOT / ".kafka")
    for candidate in (home / version / "libs" / name,
                      Path.home() / ".m2" / "repository" / "org" / "apache" / "kafka" / artifact / version / name):
        if candidate.is_file():
            return candidate
    return None
