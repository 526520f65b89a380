"""Nexmark, side by side: barrierflow and Flink SQL on the same Kafka topic of Nexmark events.

* :mod:`bench.nexmark.generator`: the events (persons, auctions, bids), deterministic from a seed,
  as flat JSON objects with an ``event_type`` discriminator;
* :mod:`bench.nexmark.queries`: q0, q1, q2, q5, q7, q8 as barrierflow transformations and specs;
* :mod:`bench.nexmark.flink_job`: the same queries in Flink SQL (a stand-alone script for the Flink
  virtual environment);
* :mod:`bench.nexmark.scenario`: ``python -m bench --scenario nexmark``.
"""
