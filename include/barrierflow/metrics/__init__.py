"""Prometheus metrics of a running pipeline: the figures (:mod:`.run_metrics`), their text
exposition (:mod:`.exposition`) and the ``/metrics`` endpoint (:mod:`.server`)."""

from barrierflow.metrics.run_metrics import RunMetrics
from barrierflow.metrics.server import ADDRESS_FILE, MetricsServer, read_address

__all__ = ["ADDRESS_FILE", "MetricsServer", "RunMetrics", "read_address"]
