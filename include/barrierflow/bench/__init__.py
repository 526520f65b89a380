"""Benchmarks that print numbers (never timed tests)."""
