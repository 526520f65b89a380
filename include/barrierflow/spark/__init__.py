"""Spark's streaming checkpoint folder: the only code that knows its layout.

A Structured Streaming checkpoint directory holds::

    metadata                       the query id (JSON)
    offsets/<V>                    the plan of batch V: version line, metadata JSON, one offset line per source
    commits/<V>                    written after the sink committed batch V: version line, JSON
    sources/<n>/...                sources' own metadata
    state/<op>/<partition>/<v>.delta, <v>.snapshot
                                   HDFSBackedStateStore files; version v is the state after batch v-1

barrierflow never writes into a live Spark checkpoint. :mod:`.offset_log` and
:mod:`.commit_log` read the two logs with their version line checked (in the spirit of Spark's
``HDFSMetadataLog``); :mod:`.state_files` knows the delta/snapshot chains.
"""

from barrierflow.spark.errors import SparkLogError

__all__ = ["SparkLogError"]
