#!/usr/bin/env python3
"""Copies Apache Kafka's message definitions (JSON, data under the Apache License 2.0) for the records
kafkafs decodes out of a Kafka release's jars into kafkafs/format/decoders/messages/, byte for byte,
with the release's LICENSE and NOTICE, and writes the list of what came from where (SOURCES.tsv).

Usage: scripts/update_kafka_messages.py [VERSION]     (default: the version in messages/SOURCES.tsv)
The jars are looked up where tests/format/test_kafka_definitions.py looks (kafka_jars.py): the
project's own fetch (.kafka/VERSION/libs, scripts/fetch_kafka.sh) and then ~/.m2.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kafkafs.format.decoders.definitions import (  # noqa: E402
    MESSAGES_DIR,
    SOURCES,
    kafka_version,
    select_resources,
)
from tests.kafka_jars import find_jar  # noqa: E402


def main() -> int:
    version = sys.argv[1] if len(sys.argv) > 1 else kafka_version()
    rows = []
    for artifact, folder, names in SOURCES:
        jar = find_jar(artifact, version)
        if jar is None:
            print(f"{artifact}-{version}.jar not found (run scripts/fetch_kafka.sh {version})", file=sys.stderr)
            return 1
        with zipfile.ZipFile(jar) as z:
            for path in select_resources(z.namelist(), folder, names):
                name = path.rsplit("/", 1)[1]
                (MESSAGES_DIR / name).write_bytes(z.read(path))
                rows.append((name, artifact, path))
            if artifact == "kafka-clients":
                (MESSAGES_DIR / "LICENSE").write_bytes(z.read("META-INF/LICENSE.txt"))
                (MESSAGES_DIR / "NOTICE").write_bytes(z.read("META-INF/NOTICE.txt"))
    shipped = {name for name, _, _ in rows}
    for stale in MESSAGES_DIR.glob("*.json"):
        if stale.name not in shipped:
            stale.unlink()
    lines = [f"# Apache Kafka {version}: file\tartifact (org.apache.kafka)\tpath inside {{artifact}}-{version}.jar"]
    lines += ["\t".join(row) for row in sorted(rows)]
    (MESSAGES_DIR / "SOURCES.tsv").write_text("\n".join(lines) + "\n")
    print(f"{len(rows)} definitions of Kafka {version} in {MESSAGES_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
