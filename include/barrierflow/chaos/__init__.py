"""``barrierflow chaos``: exactly-once checked on the user's own pipeline under random kills.

The method, in order (:func:`barrierflow.chaos.runner.run_chaos`):

1. **Judge the spec** (:mod:`.scratch`): every source must be bounded (a generator with
   ``records_per_partition``; Kafka, from ``earliest`` or fixed offsets to the end offsets
   seen at the start, which must not move while chaos runs) and the transformation must not
   be declared non-deterministic (``transformation.deterministic: false``). Otherwise the
   spec is refused with the reason.
2. **Two scratch copies** of the pipeline (:mod:`.scratch`): the same sources and
   transformation, but a new pipeline name, work dir, checkpoint storage, channel topics and
   outputs (Parquet paths, PostgreSQL tables created like the spec's, Kafka topics, Iceberg
   tables under scratch names, in a scratch SQLite catalog for a local one, Delta paths) under a
   scratch dir or prefix. Nothing the spec's own pipeline owns is touched.
3. **The reference**: the first copy runs once, without failures, to the end of its sources.
   If it committed no row there is nothing to compare: refused, naming why
   (:func:`.scratch.nothing_to_compare`), before any kill.
4. **The chaos run** (:mod:`.runner`): the second copy runs with the same command again and
   again (``barrierflow run COPY --until-exhausted``, ``--processes`` if asked); N times it is
   killed with SIGKILL: the whole process group, one stage process (``--processes``), or the
   driver's JVM alone; a share of the runs instead crash themselves at a protocol point of
   :mod:`barrierflow.faults`. After the N kills the copy runs to the end.
5. **Compare** (:mod:`.outputs`) the committed output of both copies as multisets of rows,
   each sink read by a reader of its own (Parquet: pyarrow over the committed files;
   PostgreSQL: SQL; Kafka: a ``read_committed`` consumer of kafka-python, not the client
   the sink writes with; Iceberg: a pyiceberg scan; Delta: the ``deltalake`` package), check
   each table's own history for a checkpoint id committed twice, and write the report
   (:mod:`.report`): kills by kind, restarts, checkpoints, rows, missing, extra, duplicated
   per output and per format, time; JSON and an HTML page with a plot.

With ``--upgrade-to NEW_SPEC`` step 4 is replaced by upgrades of the copy under kills
(:mod:`barrierflow.upgrade.chaos`: ``barrierflow upgrade`` killed in its rewrite, canary,
commit or rollback and run again until it completes, back and forth), compared with the same
never-upgraded reference.

What a pass proves: for this pipeline, these sinks and this storage, none of the kills that
happened lost or duplicated a committed row. What it does not prove: kills it did not make
(another seed finds other moments), failures that are not process deaths (a disk that lies,
a network partition: see the outage tests), or rows whose content depends on timing (declare
such a transformation ``deterministic: false`` and chaos refuses it).
"""
