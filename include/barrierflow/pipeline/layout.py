"""Where a pipeline keeps its cuts on disk (a stage's own checkpoints, or global checkpoints),
chosen once from the loaded spec, and the runnable spec of each stage that follows from it
(Spark-free, no I/O). :func:`barrierflow.pipeline.model.open_pipeline` opens a pipeline on it;
the batch side derives its stage specs through it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from barrierflow.faults import PIPELINE_POINTS, STAGE_POINTS
from barrierflow.pipeline.stage_options import derive_stage_spec, own_stage_spec, pipeline_work_dir
from barrierflow.spec.models import StageSpec
from barrierflow.spec.stages import PipelineSpec


@dataclass(frozen=True)
class CutLayout:
    """Where a pipeline keeps its cuts on disk, and what follows from that; chosen once, by
    :func:`cut_layout` where a pipeline is opened. The two layouts:

    * :data:`OWN_CHECKPOINTS`: the only stage's checkpoints are the cuts (``chk-<n>`` at the root
      of ``checkpoint.storage``, the stage's work dir ``work_dir``): where a single-stage YAML has
      always been stored, so every such store opens and restores unchanged;
    * :data:`GLOBAL_CHECKPOINTS`: one global checkpoint (``global/chk-<n>/``) over the stage
      stores below ``stages/<stage>``.

    Attributes:
        name: ``own`` or ``global`` (the key of the words that name it, :mod:`barrierflow.pipeline.words`).
        protocol_points: the protocol points of :mod:`barrierflow.faults` a run reaches before
            its sinks': every stage's, and for global checkpoints the coordinator's.
        named_stages: whether the stages are named apart from the pipeline: they may run as
            processes of their own (``run --processes``, ``--stage``), be dropped by name
            (``upgrade --drop-stage``), and a final stage's batch side is named (``--stage
            NAME``, a DAG per final stage). A stage keeping its own checkpoints is the pipeline.
        replays_committed_epochs: whether a restore may write committed output again
            (``accept_duplicates``): a stage restoring its own checkpoints replays committed
            epochs; global checkpoints are restored complete only, and the final sinks are
            never ahead of them.
        kill_mode: what a chaos run kills by default (``group``: the process group; ``mixed``:
            the stage processes too).
    """

    name: str
    protocol_points: tuple[str, ...]
    named_stages: bool
    replays_committed_epochs: bool
    kill_mode: str


OWN_CHECKPOINTS = CutLayout("own", STAGE_POINTS, named_stages=False, replays_committed_epochs=True,
                            kill_mode="group")
GLOBAL_CHECKPOINTS = CutLayout("global", STAGE_POINTS + PIPELINE_POINTS, named_stages=True,
                               replays_committed_epochs=False, kill_mode="mixed")


def cut_layout(spec: PipelineSpec) -> CutLayout:
    """The on-disk choice, made here and nowhere else: a pipeline of one stage without channels
    (a single-stage YAML; the loader refuses ``stages`` of one stage without channels) keeps its
    only stage's own checkpoints, every other one global checkpoints (:class:`CutLayout`),
    several stages without channels between them included: one cut across all of them."""
    return GLOBAL_CHECKPOINTS if spec.channels or len(spec.stages) > 1 else OWN_CHECKPOINTS


def stage_specs(spec: PipelineSpec, *, servers: Mapping[str, str], work_dir: str | None = None
                ) -> dict[str, StageSpec]:
    """Each stage's runnable spec, by stage name in the spec's order, on the layout
    :func:`cut_layout` chooses: the only stage on the pipeline's own paths
    (:func:`~barrierflow.pipeline.stage_options.own_stage_spec`), else each stage derived below
    ``stages/<stage>`` (:func:`~barrierflow.pipeline.stage_options.derive_stage_spec`; ``servers``:
    channel name -> ``host:port`` list, ``work_dir``: the pipeline's, default
    :func:`~barrierflow.pipeline.stage_options.pipeline_work_dir`).

    Raises:
        UserInputError: a stage cannot be derived.
    """
    if cut_layout(spec) is OWN_CHECKPOINTS:
        return {spec.stages[0].name: own_stage_spec(spec)}
    base = work_dir if work_dir is not None else pipeline_work_dir(spec)
    return {s.name: derive_stage_spec(spec, s, work_dir=base, servers=servers) for s in spec.stages}
