"""The barrier protocol of one stage, below everything that uses it.

* :mod:`.offsets` — the wire format: the source offset JSON in Spark's offset log, carrying
  the barrier id (and the pipeline attempt that wrote it).
* :mod:`.control` — the control channel between the coordinator and the sources' planner
  (barrier requests, hold, the replay plan).
* :mod:`.planner` — the pure batch planner: how far each partition advances, where a barrier
  is injected.
* :mod:`.replay_plan` — the replay of committed epochs after a restore to an older checkpoint.

Nothing here imports checkpointing, sources, sinks or recovery; they all import this.
"""
