"""kafkafs.format."""
