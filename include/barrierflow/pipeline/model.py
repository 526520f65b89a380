"""The opened pipeline: a pipeline is a graph of stages, and a single-stage spec is a graph of one.

:func:`open_pipeline` loads a spec once (:func:`barrierflow.spec.loader.load_any_spec`: a
:class:`~barrierflow.spec.stages.PipelineSpec` for every YAML) and opens it on the layout
:func:`barrierflow.pipeline.layout.cut_layout` chooses, the one place the on-disk choice is
made (:attr:`OpenedPipeline.layout`). It gives every offline operation what it works on:

* :attr:`OpenedPipeline.stages`: each stage's name, runnable spec, checkpoint
  store, work-dir layout, input partitions (``topic:p`` of the channels it reads), back-edge
  partitions and whether its channels live on the embedded broker. A single-stage YAML is one
  stage named after the pipeline that keeps its own checkpoints, running the YAML's own spec on
  its store and its layout, with no channels. A stage of several is derived by
  :func:`barrierflow.pipeline.stage_options.derive_stage_spec` (store
  ``<checkpoint.storage>/stages/<stage>``, work dir ``<work_dir>/stages/<stage>``).
* :attr:`OpenedPipeline.cuts`: the pipeline's cuts (its global checkpoints), read through one
  protocol (:class:`~barrierflow.checkpointing.global_store.CutLog`): the
  :class:`~barrierflow.checkpointing.global_store.GlobalCheckpointStore` of a pipeline of
  several stages (``global/chk-<n>/``, ``_pipeline.json``, ``_cutoffs.json``), or
  :class:`~barrierflow.checkpointing.global_store.SingleStageCuts` for one stage, derived from
  its stage store: its files stay where they always were (``chk-<n>`` at the store's root),
  checkpoint ``n`` *is* cut ``n``, nothing on disk moves.

How messages name these (a "checkpoint" or a "global checkpoint", field prefixes) is not the
model's: :mod:`barrierflow.pipeline.words`.

Contract: Spark-free and read-only; opening reads only the spec file (no store object, no
broker). Channels on the embedded broker get a placeholder address (that broker runs only with
its pipeline): an opened pipeline serves offline operations; running one starts the broker
(:mod:`barrierflow.ops.run`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from barrierflow.checkpointing.global_store import GlobalCheckpointStore, SingleStageCuts, completed_cut
from barrierflow.checkpointing.store import CheckpointStore
from barrierflow.errors import CheckpointCorruptError, CheckpointNotFoundError, UserInputError
from barrierflow.pipeline.layout import GLOBAL_CHECKPOINTS, OWN_CHECKPOINTS, CutLayout, cut_layout, stage_specs
from barrierflow.pipeline.stage_options import pipeline_work_dir
from barrierflow.pipeline.words import words
from barrierflow.sinks.factory import ChannelOutput
from barrierflow.spec.graph import StageGraph, build_graph
from barrierflow.spec.loader import load_any_spec
from barrierflow.spec.models import StageSpec
from barrierflow.spec.stages import (
    ChannelSinkSpec,
    ChannelSourceSpec,
    ChannelSpec,
    PipelineSpec,
    one_stage_pipeline,
)
from barrierflow.storage import open_store
from barrierflow.workdir.layout import JobLayout

if TYPE_CHECKING:
    from barrierflow.checkpointing.global_manifest import GlobalManifest
    from barrierflow.storage import ObjectStore

#: The address an offline pipeline gives channels on the embedded broker (never connected to).
OFFLINE_SERVERS = "embedded-broker-not-running:9"


def channel_partition(topic: str, partition: int) -> str:
    """The key of one channel partition in barrier offsets (``topic:p``, as the Kafka source
    spells it: :func:`barrierflow.kafka_io.partition_ids.partition_id`)."""
    return f"{topic}:{partition}"


@dataclass(frozen=True)
class Stage:
    """One stage as every offline operation sees it.

    Attributes:
        name: the stage's name (a single-stage pipeline: the pipeline's name).
        spec: the single-stage spec it runs as (a single-stage pipeline: its own spec).
        store: its checkpoint store (``chk-<n>`` at its root).
        layout: its work dir (local Spark checkpoint, control files, snapshots, write-ahead batches).
        input_partitions: the partitions (``topic:p``) of the channels it reads.
        back_edge_partitions: those of them that close a cycle.
        embedded_inputs: whether a channel it reads is on the embedded broker (which runs only
            with its pipeline, so offline checks cannot ask it for retained ranges).
        rate_factors: ``topic:p`` -> how many times slower that input partition is read (the
            channel sources' ``partition_rate_factors``; benchmarks of a slow partition).
        output: the channel it writes (None: its sink is the derived spec's sink).
    """

    name: str
    spec: StageSpec
    store: CheckpointStore
    layout: JobLayout
    input_partitions: frozenset[str] = frozenset()
    back_edge_partitions: frozenset[str] = frozenset()
    embedded_inputs: bool = False
    rate_factors: Mapping[str, float] = field(default_factory=dict)
    output: ChannelOutput | None = None

    @property
    def source_type(self) -> str:
        """The registered source kind its input is read with
        (:func:`barrierflow.sources.registry.kind_named`): ``channel`` for a stage fed by
        channels, else its source's ``kind`` (its ``type``; ``spark_kafka`` for a Kafka source
        with ``reader: spark``)."""
        return "channel" if self.input_partitions else self.spec.source.kind

    @property
    def back_edge_topics(self) -> tuple[str, ...]:
        """The topics of the back-edge channels it reads (a cycle), sorted."""
        return tuple(sorted({p.rsplit(":", 1)[0] for p in self.back_edge_partitions}))


@dataclass(frozen=True)
class OpenedPipeline:
    """A loaded spec, its stages and its cuts (module docstring).

    Attributes:
        spec: the spec as loaded.
        spec_path: where it came from (named in messages).
        stages: every stage, in the spec's order.
        cuts: the pipeline's cuts: :class:`GlobalCheckpointStore` for global checkpoints,
            :class:`SingleStageCuts` for a stage's own.
        root: the pipeline-level checkpoint store (attempt and abandoned ids in
            ``_pipeline.json``; for a stage's own checkpoints, the stage's store itself).
        work_dir: the pipeline's work dir (its lease ``job.lease`` lives there).
        layout: where its cuts are kept (:func:`cut_layout`).
    """

    spec: PipelineSpec
    spec_path: str
    stages: tuple[Stage, ...]
    cuts: GlobalCheckpointStore | SingleStageCuts
    root: CheckpointStore
    work_dir: str
    layout: CutLayout

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def objects(self) -> ObjectStore:
        """The objects of the pipeline's checkpoint storage (``checkpoint.storage``)."""
        return self.root.objects

    @property
    def storage(self) -> str:
        """The URI of the pipeline's checkpoint storage."""
        return self.root.uri

    def cut_location(self, checkpoint_id: int) -> str:
        """Where cut ``checkpoint_id`` is recorded, as messages name it (the stage's manifest, or
        the global manifest that names every stage's)."""
        return self.cuts.location(checkpoint_id)

    @property
    def channels(self) -> tuple[ChannelSpec, ...]:
        """The channels between the stages (none for one stage)."""
        return tuple(self.spec.channels)

    def refuse_stage_processes(self, flag: str) -> None:
        """Raise UserInputError naming ``flag`` (``--processes``, ``--stage``) when the stages
        cannot run as processes of their own (:attr:`CutLayout.named_stages`)."""
        if not self.layout.named_stages:
            raise UserInputError(f"{flag} is for pipelines of several stages; {self.spec_path} has one stage "
                                 "(run it without the flag)")

    def refuse_drop_stages(self, names: tuple[str, ...]) -> None:
        """Raise UserInputError when stages are named to be dropped (``upgrade --drop-stage``)
        of a pipeline whose only stage keeps its own checkpoints: it has none to drop."""
        if names and not self.layout.named_stages:
            raise UserInputError(f"--drop-stage applies to pipelines of several stages; {self.spec_path} has one "
                                 "stage")

    def layout_change(self, other: OpenedPipeline) -> str:
        """What differs between this pipeline's checkpoint layout and ``other``'s (one stage's
        own checkpoints, or the global checkpoints of several): ``"<spec> has several stages and
        <spec> one"``, or "" when they are laid out alike."""
        if self.layout == other.layout:
            return ""
        several, one = (self, other) if self.layout.named_stages else (other, self)
        return f"{several.spec_path} has several stages and {one.spec_path} one"

    def refuse_accept_duplicates(self, accept_duplicates: bool) -> None:
        """Raise UserInputError when ``accept_duplicates`` is asked of a pipeline whose restore
        cannot write committed output again (:attr:`CutLayout.replays_committed_epochs`)."""
        if accept_duplicates and not self.layout.replays_committed_epochs:
            raise UserInputError("--accept-duplicates applies to single-stage pipelines only (the recovery DAG's "
                                 "accept_duplicates too): a pipeline of several stages restores only complete "
                                 "global checkpoints, whose final sinks are never ahead of them; restore without it")

    def connected_stages(self, embedded: str | None) -> tuple[Stage, ...]:
        """The stages as a run derives them, with ``embedded`` (the running embedded broker's
        ``host:port``) for the channels that live on it instead of the offline placeholder:
        what a restore needs, whose barrier check reads the channels. :attr:`stages` itself
        when nothing changes (no embedded channel, or ``embedded`` None)."""
        spec = self.spec
        if embedded is None or not any(c.is_embedded for c in spec.channels):
            return self.stages
        graph, problems = build_graph(spec)
        if graph is None:  # pragma: no cover - opening built the same graph
            raise UserInputError(f"pipeline {spec.name}: {problems}")
        servers = {c.name: c.bootstrap_servers() or embedded for c in spec.channels}
        return stages_of(spec, graph, work_dir=self.work_dir, servers=servers)

    def upstream(self, name: str) -> tuple[Stage, ...]:
        """The stages whose output reaches stage ``name`` through channels, and that stage, in
        the spec's order (one stage: itself)."""
        from barrierflow.pipeline.final_stages import upstream_stages

        needed = set(upstream_stages(self.spec, name))
        return tuple(s for s in self.stages if s.name in needed)

    def replay_obstacle(self, name: str) -> str | None:
        """Why stage ``name``'s output cannot be recomputed by replaying its upstream stages in
        batch (:func:`barrierflow.pipeline.final_stages.replay_obstacle`: a cycle, an upstream
        stage not in append mode), or None (one stage reads no other: None)."""
        from barrierflow.pipeline.final_stages import replay_obstacle

        return replay_obstacle(self.spec, name)

    def stage(self, name: str) -> Stage:
        """The stage called ``name``. Raises UserInputError naming the stages there are."""
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise UserInputError(f"pipeline {self.name} has no stage {name!r}; its stages: "
                             f"{[s.name for s in self.stages]}")

    def newest_cut(self) -> GlobalManifest | None:
        """The newest completed cut of the current timeline whose manifest reads (an unreadable
        newer one is stepped over: ``verify`` reports it), or None."""
        for checkpoint_id in reversed(self.cuts.completed_ids()):
            try:
                return self.cuts.get(checkpoint_id)
            except (CheckpointCorruptError, CheckpointNotFoundError):
                continue
        return None

    def completed_cut(self, checkpoint_id: int | None = None) -> int:
        """``checkpoint_id`` if it is a completed cut of the current timeline (None: the newest).

        Raises:
            CheckpointNotFoundError: none completed, or ``checkpoint_id`` did not (or was
                abandoned by a restore); the message lists the completed ones.
        """
        return completed_cut(self.cuts, self.name, checkpoint_id, noun=words(self).cut_noun)


def stage_pipeline(spec: StageSpec, *, store: CheckpointStore | None = None,
                   layout: JobLayout | None = None, spec_path: str = "<spec>") -> OpenedPipeline:
    """The pipeline of the runnable stage spec ``spec`` (a job built on a stage spec, a test),
    which keeps its own checkpoints: one stage named after it, on ``store`` and ``layout`` when
    given (a running job passes its own, whose writes carry its fence), else the spec's."""
    return _own(one_stage_pipeline(spec), spec, spec_path, store=store, layout=layout)


def _own(pipeline: PipelineSpec, spec: StageSpec, spec_path: str, *, store: CheckpointStore | None = None,
         layout: JobLayout | None = None) -> OpenedPipeline:
    store = store if store is not None else CheckpointStore.for_spec(spec)
    layout = layout if layout is not None else JobLayout.for_spec(spec)
    stage = Stage(spec.name, spec, store, layout)
    return OpenedPipeline(pipeline, spec_path, (stage,), SingleStageCuts(spec.name, store), store,
                          str(layout.work_dir), OWN_CHECKPOINTS)


def _servers(spec: PipelineSpec) -> dict[str, str]:
    """Each channel's ``host:port`` list; the embedded broker's channels get a placeholder.
    Raises UserInputError for an ``env:VAR`` that is not set."""
    return {c.name: c.bootstrap_servers() or OFFLINE_SERVERS for c in spec.channels}


def stages_of(spec: PipelineSpec, graph: StageGraph, *, work_dir: str, servers: Mapping[str, str]
              ) -> tuple[Stage, ...]:
    """Every stage of ``spec`` (``graph`` its graph), in the spec's order, derived with
    :func:`~barrierflow.pipeline.stage_options.derive_stage_spec` (``work_dir``: the pipeline's,
    ``servers``: channel name -> ``host:port`` list); the running pipeline builds its stage jobs
    on them too.

    Raises:
        UserInputError: a stage cannot be derived (see :func:`~barrierflow.pipeline.stage_options.derive_stage_spec`).
    """
    stages = []
    specs = stage_specs(spec, servers=servers, work_dir=work_dir)
    for stage in spec.stages:
        derived = specs[stage.name]
        inputs: set[str] = set()
        back: set[str] = set()
        embedded = False
        for name in stage.input_channels:
            channel = spec.channel(name)
            ids = {channel_partition(channel.topic_for(spec.name), p) for p in range(channel.partitions)}
            inputs |= ids
            embedded = embedded or channel.is_embedded
            if graph.is_back_edge(name, stage.name):
                back |= ids
        rates = {channel_partition(spec.channel(s.channel).topic_for(spec.name), number): factor
                 for s in stage.sources if isinstance(s, ChannelSourceSpec)
                 for number, factor in enumerate(s.partition_rate_factors) if factor != 1}
        sink = stage.sinks[0]
        output = None
        if isinstance(sink, ChannelSinkSpec):
            written = spec.channel(sink.channel)
            output = ChannelOutput(servers=servers[written.name], topic=written.topic_for(spec.name),
                                   stage=stage.name, key_column=sink.key_column, client=written.client)
        stages.append(Stage(stage.name, derived, CheckpointStore.for_spec(derived), JobLayout.for_spec(derived),
                            frozenset(inputs), frozenset(back), embedded, rates, output))
    return tuple(stages)


def _global(spec: PipelineSpec, spec_path: str) -> OpenedPipeline:
    graph, problems = build_graph(spec)
    if graph is None:
        raise UserInputError(f"pipeline {spec.name}: {problems}")
    work_dir = pipeline_work_dir(spec)
    stages = stages_of(spec, graph, work_dir=work_dir, servers=_servers(spec))
    cuts = GlobalCheckpointStore(open_store(spec.checkpoint.storage), spec.name)
    return OpenedPipeline(spec, spec_path, stages, cuts, cuts.root, work_dir, GLOBAL_CHECKPOINTS)


def open_spec(spec: PipelineSpec, spec_path: str = "<spec>") -> OpenedPipeline:
    """Open the loaded pipeline ``spec`` (module docstring): its stages on the layout
    :func:`cut_layout` chooses, the one place the choice is made.

    Raises:
        UserInputError: a stage cannot be derived (its name is too long, its channels cannot
            be read as one source), or a channel's ``env:VAR`` is not set.
    """
    if cut_layout(spec) is OWN_CHECKPOINTS:
        (only,) = stage_specs(spec, servers={}).values()
        return _own(spec, only, spec_path)
    return _global(spec, spec_path)


def open_pipeline(spec_path: str | os.PathLike[str]) -> OpenedPipeline:
    """Load the spec at ``spec_path`` once and open the pipeline (:func:`open_spec`).

    Raises:
        SpecError: the spec does not load (single- or multi-stage).
        UserInputError: see :func:`open_spec`.
    """
    return open_spec(load_any_spec(spec_path), str(spec_path))
