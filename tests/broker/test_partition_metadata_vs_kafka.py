"""``partition.metadata`` as Kafka's own reader reads it (review12 R12-7; SPEC §9).

A broker whose reader (``PartitionMetadataFile.read``) throws on a partition folder's topic id file does
not start ("Error starting LogManager"), so ``verify`` must call exactly those files damaged. The
default suite holds kafkafs's reader to the table ``KAFKA_VERDICTS`` (tests/storage/
test_partition_metadata.py); this slow test measures that table again with the real reader of each
fetched release, through a few lines of Java run from Kafka's jars.
"""

from __future__ import annotations

import subprocess

import pytest

from kafkafs.errors import CorruptRecordError
from kafkafs.storage.partition_metadata import parse_partition_metadata
from tests.storage.test_partition_metadata import KAFKA_VERDICTS

from .harness import Kafka, find_kafka

_READER = """
import java.io.File;
import org.apache.kafka.storage.internals.checkpoint.PartitionMetadataFile;
import org.apache.kafka.storage.internals.log.LogDirFailureChannel;

public class ReadPartitionMetadata {
    public static void main(String[] args) {
        for (String dir : args) {
            try {
                PartitionMetadataFile file = new PartitionMetadataFile(new File(dir, "partition.metadata"), new LogDirFailureChannel(1));
                System.out.println("OK " + file.read().topicId());
            } catch (Throwable t) {
                System.out.println("ERR " + t.getClass().getSimpleName());
            }
        }
    }
}
"""


def _kafkas() -> list[Kafka]:
    found = [find_kafka(), find_kafka("3.9.2")]
    return [k for i, k in enumerate(found) if k is not None and k not in found[:i]]


@pytest.mark.slow
def test_the_table_is_what_kafkas_reader_says(tmp_path):
    kafkas = _kafkas()
    if not kafkas:
        pytest.skip("no real Kafka here")
    folders = []
    for i, (data, _) in enumerate(KAFKA_VERDICTS):
        folder = tmp_path / f"t-{i}"
        folder.mkdir()
        (folder / "partition.metadata").write_bytes(data)
        folders.append(str(folder))
    source = tmp_path / "ReadPartitionMetadata.java"
    source.write_text(_READER)
    for kafka in kafkas:
        done = subprocess.run([kafka.java, "-cp", kafka.classpath, str(source), *folders],
                              capture_output=True, text=True, timeout=300)
        verdicts = [line.split() for line in done.stdout.splitlines() if line.startswith(("OK ", "ERR "))]
        assert len(verdicts) == len(KAFKA_VERDICTS), done.stdout + done.stderr[-3000:]
        for (data, expected), verdict in zip(KAFKA_VERDICTS, verdicts, strict=True):
            said = verdict[1] if verdict[0] == "OK" else None
            assert said == expected, (kafka.version, data, verdict)
            try:
                ours: str | None = parse_partition_metadata(data)[1]
            except CorruptRecordError:
                ours = None
            assert ours == said, (kafka.version, data, verdict)
