"""Retention of checkpoints: bounded storage that never deletes what is still needed."""
