"""kafkafs: Apache Kafka's on-disk log as ordinary files."""

__version__ = "0.1.0"
