"""Data-quality reports computed from the checkpoint store (no Spark needed).

* :mod:`barrierflow.reports.skew` — the watermark-skew report (``barrierflow skew``, Airflow
  DAG ``barrierflow_skew__<name>``).
"""
