"""Benchmarks that print numbers (never timed tests): ``python -m bench`` (:mod:`bench.run`),
``make bench``; docs/benchmarks.md holds the current figures, bench/results/ every run
(:mod:`bench.record` writes each run's record). Not part of the library (the wheel ships
``include/barrierflow`` only); a benchmark may import ``barrierflow`` and ``tests.support``."""
