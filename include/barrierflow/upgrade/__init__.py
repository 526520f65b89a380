"""Upgrading a pipeline to a changed spec: the steps of ``barrierflow upgrade`` and what they use.

Between :mod:`barrierflow.ops` (whose :func:`barrierflow.ops.upgrade.upgrade` is the operation)
and :mod:`barrierflow.runtime` (whose run driver the canary drives):

========================  =====================================================
:mod:`.steps`             the controller: the sequence of a change, recorded step by step, and its decisions
:mod:`.report`            the compatibility report of a change (all of ``--dry-run``)
:mod:`.plan`              what a change needs (rescale, value columns, rebuild) and what is refused
:mod:`.rewrite`           the rewrite step: the new savepoint cut, each stage given its part
:mod:`.record`            the persisted steps of an upgrade (continued by the same command; shown)
:mod:`.cut`               the new savepoint cut a rewrite records (carried, rescaled, assumed, empty parts)
:mod:`.rebuild`           rebuild a stage's state by replaying its input (keys that change meaning)
:mod:`.replay_range`      the bounded Kafka range such a rebuild replays, refused when no longer held
:mod:`.canary`            run a restored new spec with its commits held and deep-verify its checkpoints
:mod:`.chaos`             ``barrierflow chaos --upgrade-to``: the upgrade killed at random steps
========================  =====================================================
"""
