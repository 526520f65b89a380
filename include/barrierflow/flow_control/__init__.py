"""Flow control: how far each source partition may advance in the next micro-batch.

Beside :mod:`barrierflow.barriers` (the barrier protocol), on the same layer, and like it pure
and Spark-free. The sources' planner (:mod:`barrierflow.sources.planning`) combines these for
every source kind, a stage's channel source included:

* :mod:`.watermark_alignment` — watermark alignment and idleness: which partitions pause and
  the event-time ceiling a batch may reach.
* :mod:`.batch_sizing` — the adaptive per-partition cap that keeps a batch near the trigger's
  target duration.
* :mod:`.watermark_history` — the bounded per-batch history (in the work dir) both learn from.

Nothing here imports another barrierflow package.
"""
