"""kafkafs.storage."""
