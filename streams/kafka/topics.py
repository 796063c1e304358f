"""Every topic of a ttsflow deployment, by name and shape: the pipeline's five, the worker's
done topic and the stage's faust-internal ones (names as faust derives them from the app id).

Names only, no broker: :mod:`streams.kafka.admin` creates what :func:`topic_specs` lists, and
the stage names its dedup table with :func:`dedup_table_name`, so the changelog the admin
makes is the one faust writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.settings import KafkaSettings, StageSettings

__all__ = ["TopicSpec", "dedup_changelog_topic", "dedup_table_name", "done_topic_config", "open_changelog_topic",
           "open_table_name", "rate_changelog_topic", "rate_table_name", "topic_specs"]


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


_COMPACT = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "segment.ms": str(3600 * 1000)}


def done_topic_config(dedup_window_s: int) -> dict[str, str]:
    return {"cleanup.policy": "compact,delete", "retention.ms": str(2 * dedup_window_s * 1000),
            "min.compaction.lag.ms": "0", "segment.ms": str(3600 * 1000)}


def topic_specs(kafka: KafkaSettings, stage: StageSettings, *, partitions: int | None = None) -> list[TopicSpec]:
    """Every topic of a ttsflow deployment: the five of the pipeline and the stage's
    faust-internal ones (names as faust derives them from the app id)."""
    n = partitions or kafka.partitions
    app = stage.stage_app_id
    return [
        TopicSpec(kafka.topic_requests, n), TopicSpec(kafka.topic_segments, n),
        TopicSpec(kafka.topic_completed, n), TopicSpec(kafka.topic_dlq, n), TopicSpec(kafka.topic_chunks, n),
        TopicSpec(kafka.topic_done, n, done_topic_config(stage.dedup_window_s)),
        # the dedup table's changelog: entries expire a bucket at a time (streams/stage/dedup.py)
        TopicSpec(dedup_changelog_topic(stage), n,
                  {"cleanup.policy": "compact,delete", "retention.ms": str(2 * stage.dedup_window_s * 1000),
                   "segment.ms": str(min(3600, stage.dedup_window_s) * 1000)}),
        # open requests sent in pieces (streams/stage/pieces.py): one entry per open request, deleted when it closes
        TopicSpec(open_changelog_topic(stage), n, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                                                   "segment.ms": str(3600 * 1000)}),
        # each user's admission bucket (streams/stage/admission.py): one small entry per user and partition
        TopicSpec(rate_changelog_topic(stage), n, {"cleanup.policy": "compact", "min.compaction.lag.ms": "0",
                                                   "segment.ms": str(3600 * 1000)}),
        TopicSpec(f"{app}-__assignor-__leader", 1),
        # pronunciation lexicons (streams/stage/lexicons.py): small, read whole by every stage
        TopicSpec(kafka.topic_lexicons, 1, _COMPACT), TopicSpec(kafka.topic_lexicons_global, 1, _COMPACT),
    ]


def dedup_table_name(stage: StageSettings) -> str:
    """The dedup table's name (its changelog is ``<app id>-<name>-changelog``).

    ``seen`` replaced the per-user ``dedup`` maps; ids recorded there are not carried over
    (the worker's done set still stops a repeated id it answered). A ``seen-eos`` table left
    by a stage that once ran faust's exactly_once (refused at load now) is not read: its
    changelog ends in transaction markers that faust's plain recovery waits on forever."""
    return "seen"


def open_table_name(stage: StageSettings) -> str:
    """The table of open requests sent in pieces (its changelog is ``<app id>-open-changelog``)."""
    return "open"


def rate_table_name(stage: StageSettings) -> str:
    """The table of users' admission buckets (its changelog is ``<app id>-rate-changelog``)."""
    return "rate"


def rate_changelog_topic(stage: StageSettings) -> str:
    return f"{stage.stage_app_id}-{rate_table_name(stage)}-changelog"


def open_changelog_topic(stage: StageSettings) -> str:
    return f"{stage.stage_app_id}-{open_table_name(stage)}-changelog"


def dedup_changelog_topic(stage: StageSettings) -> str:
    """The dedup table's changelog topic, named as faust names it (``<app id>-<table>-changelog``)."""
    return f"{stage.stage_app_id}-{dedup_table_name(stage)}-changelog"
