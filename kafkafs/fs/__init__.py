"""kafkafs.fs."""
