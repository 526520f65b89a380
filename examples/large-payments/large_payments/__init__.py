"""Example user package: large payments from one Kafka topic to another (see ../README.md)."""
