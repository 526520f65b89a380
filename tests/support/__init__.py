"""What the tests run against, never shipped with the library: throwaway servers (S3, PostgreSQL,
Kafka-protocol broker, Airflow, a Spark standalone cluster), the headless-Chromium driver, the
test drivers' JVM class archive and a synthetic Spark checkpoint directory.

The test doubles a user's own tests may want (failing and slow object stores, the staged-batch
writer) ship in :mod:`barrierflow.testing` instead."""
