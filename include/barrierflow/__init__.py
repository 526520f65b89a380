"""barrierflow: Asynchronous Barrier Snapshots for PySpark Structured Streaming.

The core library. Everything here is usable and testable without Airflow; the Airflow
DAGs in ``dags/`` and the spark-submit entry points in ``jobs/`` are thin callers.
"""

from barrierflow.errors import BarrierflowError

__all__ = ["BarrierflowError", "__version__"]
__version__ = "0.1.0"
