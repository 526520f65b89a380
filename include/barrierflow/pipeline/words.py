"""How messages name a pipeline's parts, by where it keeps its cuts (Spark-free, no I/O).

The front doors (CLI, Airflow, UI, chaos, the operations) and the checks that phrase errors read
their wording here, keyed by the pipeline's :class:`~barrierflow.pipeline.model.CutLayout`
(chosen once, where the pipeline is opened): a stage keeping its own checkpoints calls a cut a
"checkpoint" and names its fields at the top level of a single-stage YAML; global checkpoints
are "global checkpoints" and a stage's fields are ``stages[<index>].``. Nothing here decides
behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class _Layout(Protocol):
    @property
    def name(self) -> str: ...


class _Laid(Protocol):
    """A pipeline as :func:`words` reads it: its layout
    (:attr:`barrierflow.pipeline.model.OpenedPipeline.layout`)."""

    @property
    def layout(self) -> _Layout: ...

#: What ``latest-valid`` verifies a global checkpoint by (the cut's checks and every stage's).
CUT_VERIFICATION = "passed global verification (every stage's checks and the cut over its channels)"


@dataclass(frozen=True)
class Words:
    """The wording of one layout.

    Attributes:
        cut_noun: how messages name a cut (``checkpoint`` / ``global checkpoint``).
        runner_noun: what runs (``job``: one Spark query; ``pipeline``).
        failure_causes: the usual causes of a failed verification.
        shuffle_partitions_field: the spec field that sets a stage's shuffle partitions.
        stage_field: how spec errors name a field of stage ``{index}`` (format string).
        stage_file: what a per-stage output file (``skew --html PATH``) adds before its suffix
            (format string with ``{stage}``).
        stage_label: how messages name a stage (format string with ``{stage}``; one stage of
            its own checkpoints is the pipeline).
        verified: the verification verdict of a cut ``latest-valid`` took.
        newest_verified: the verdict of the newest cut that passed.
        title: how messages name the pipeline (format string with ``{name}`` and ``{count}``,
            its number of stages).
    """

    cut_noun: str
    runner_noun: str
    failure_causes: str
    shuffle_partitions_field: str
    stage_field: str
    stage_file: str
    stage_label: str
    verified: str
    newest_verified: str
    title: str

    def stage_field_prefix(self, index: int) -> str:
        """How spec errors name a field of stage number ``index`` (nothing: top-level fields)."""
        return self.stage_field.format(index=index)

    def stage_file_suffix(self, stage: str) -> str:
        """What a per-stage output file adds to its name before the suffix."""
        return self.stage_file.format(stage=stage)

    def label(self, stage: str) -> str:
        """How messages name stage ``stage`` (``stage 'a'``, or ``pipeline 't'`` for a stage
        keeping its own checkpoints, whose name is the pipeline's)."""
        return self.stage_label.format(stage=repr(stage))


#: The wording of each layout, by its name (:attr:`barrierflow.pipeline.model.CutLayout.name`).
WORDS: dict[str, Words] = {
    "own": Words(
        cut_noun="checkpoint", runner_noun="job",
        failure_causes=("a damaged or partly deleted checkpoint store, or source data already deleted by the source's "
                        "retention"),
        shuffle_partitions_field="spark.shuffle_partitions", stage_field="", stage_file="",
        stage_label="pipeline {stage}", verified="passed structural verification",
        newest_verified="the newest checkpoint that passes structural verification",
        title="single-stage pipeline {name}"),
    "global": Words(
        cut_noun="global checkpoint", runner_noun="pipeline",
        failure_causes=("a damaged or partly deleted stage store, or channel records already deleted by the broker's "
                        "retention"),
        shuffle_partitions_field="stages[].shuffle_partitions", stage_field="stages[{index}].",
        stage_file="-{stage}", stage_label="stage {stage}", verified=CUT_VERIFICATION,
        newest_verified=CUT_VERIFICATION, title="pipeline {name} of {count} stages"),
}


def words(pipeline: _Laid) -> Words:
    """The wording of ``pipeline`` (an opened pipeline: by its layout)."""
    return WORDS[pipeline.layout.name]
