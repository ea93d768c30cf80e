"""kafkafs.spark."""
