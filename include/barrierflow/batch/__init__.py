"""The batch side over a pipeline's committed lake output (Spark batch, never the stream).

* :mod:`.lake`: which files are committed output (``part-*.parquet`` of the Parquet sink's
  root, never ``_staging/``), where the rollups live, Spark paths of storage URIs.
* :mod:`.rollups`: daily rollups (Parquet partitioned by ``day``; a rerun of a day replaces
  that day only).
* :mod:`.source_records`: the source's records of an event-time range as a batch DataFrame
  (the generator is deterministic per offset).
* :mod:`.recompute`: the stream-vs-batch comparison: recompute the pipeline's aggregates from
  the source records with Spark batch and compare them, row by row, with what the stream
  committed.

Reports are stored in the checkpoint store under ``reports/`` (as the skew report is), so
Airflow tasks, the CLI and the Checkpoints page read one document.
"""
