"""``--remote-log-metadata-decoder``: what ``kafka-dump-log`` prints for a ``__remote_log_metadata``
record, the Java ``toString`` of the object Kafka's ``RemoteLogMetadataSerde`` makes of it.

The record is framed as a metadata record (read by :func:`kafkafs.format.decoders.internal
.remote_log_metadata_record`, from Kafka's own definitions); the objects print as Kafka 4.x's
storage API writes them::

    RemoteLogSegmentMetadata{remoteLogSegmentId=RemoteLogSegmentId{topicIdPartition=ID:topic-0, id=ID},
      startOffset=0, endOffset=9, brokerId=1, maxTimestampMs=.., eventTimestampMs=..,
      segmentLeaderEpochs={0=0}, segmentSizeInBytes=.., customMetadata=Optional.empty,
      state=COPY_SEGMENT_STARTED, txnIdxEmpty=false}

(one line), ``RemoteLogSegmentMetadataUpdate{..}``, ``RemotePartitionDeleteMetadata{..}`` and
``RemoteLogSegmentMetadataSnapshot{..}``. What Kafka refuses raises ValueError with its message.
"""

from __future__ import annotations

import base64

from ..errors import CorruptRecordError

__all__ = ["remote_log_metadata_text"]

SEGMENT_STATES = {0: "COPY_SEGMENT_STARTED", 1: "COPY_SEGMENT_FINISHED", 2: "DELETE_SEGMENT_STARTED",
                  3: "DELETE_SEGMENT_FINISHED"}
PARTITION_DELETE_STATES = {0: "DELETE_PARTITION_MARKED", 1: "DELETE_PARTITION_STARTED", 2: "DELETE_PARTITION_FINISHED"}


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _topic_id_partition(entry: dict) -> str:
    """``TopicIdPartition.toString``: ``topicId + ":" + topic + "-" + partition``."""
    return f"{entry['id']}:{entry['name']}-{entry['partition']}"


def _segment_id(entry: dict) -> str:
    return f"RemoteLogSegmentId{{topicIdPartition={_topic_id_partition(entry['topicIdPartition'])}, id={entry['id']}}}"


def _custom(data: dict) -> str:
    """``Optional<CustomMetadata>``: ``Optional[CustomMetadata{N bytes}]`` or ``Optional.empty``."""
    raw = data.get("customMetadata")
    if raw is None:
        return "Optional.empty"
    return f"Optional[CustomMetadata{{{len(base64.b64decode(raw))} bytes}}]"


def _epochs(entries: list[dict]) -> str:
    """The leader epochs as a Java ``TreeMap`` prints them: ``{0=0, 3=120}``."""
    if not entries:
        raise ValueError("segmentLeaderEpochs can not be null or empty")
    epochs = {e["leaderEpoch"]: e["offset"] for e in entries}
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(epochs.items())) + "}"


def _state(table: dict[int, str], state: int, unknown: str = "state can not be null") -> str:
    """A state's name; an id Kafka does not know fails as Kafka's constructors do (a null state)."""
    name = table.get(state)
    if name is None:
        raise ValueError(unknown)
    return name


def _offsets(start: int, end: int) -> None:
    if start < 0:
        raise ValueError(f"Unexpected start offset = {start}. StartOffset for a remote segment cannot be negative")
    if end < start:
        raise ValueError(
            f"Unexpected end offset = {end}. EndOffset for a remote segment cannot be less than startOffset = {start}"
        )


def remote_log_metadata_text(value: bytes | None) -> str:
    """The line ``kafka-dump-log --remote-log-metadata-decoder`` prints for ``value``; ValueError with
    Kafka's message where Kafka's serde refuses it."""
    from ..format.decoders.internal import remote_log_metadata_record, remote_log_metadata_types
    from .metadata_errors import metadata_error

    try:
        record = remote_log_metadata_record(value)
    except CorruptRecordError:
        raise ValueError(metadata_error(value, remote_log_metadata_types())) from None
    kind, d = record["type"], record["data"]
    if kind == "REMOTE_LOG_SEGMENT_METADATA_RECORD":
        _offsets(d["startOffset"], d["endOffset"])
        state = _state(SEGMENT_STATES, d["remoteLogSegmentState"])
        return (
            f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id(d['remoteLogSegmentId'])}, "
            f"startOffset={d['startOffset']}, endOffset={d['endOffset']}, brokerId={d['brokerId']}, "
            f"maxTimestampMs={d['maxTimestampMs']}, eventTimestampMs={d['eventTimestampMs']}, "
            f"segmentLeaderEpochs={_epochs(d['segmentLeaderEpochs'])}, segmentSizeInBytes={d['segmentSizeInBytes']}, "
            f"customMetadata={_custom(d)}, state={state}, txnIdxEmpty={_bool(d.get('txnIndexEmpty', False))}}}"
        )
    if kind == "REMOTE_LOG_SEGMENT_METADATA_UPDATE_RECORD":
        state = _state(SEGMENT_STATES, d["remoteLogSegmentState"])
        return (
            f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId={_segment_id(d['remoteLogSegmentId'])}, "
            f"customMetadata={_custom(d)}, state={state}, eventTimestampMs={d['eventTimestampMs']}, "
            f"brokerId={d['brokerId']}}}"
        )
    if kind == "REMOTE_PARTITION_DELETE_METADATA_RECORD":
        # RemotePartitionDeleteMetadata takes a null state without a message of its own
        state = _state(PARTITION_DELETE_STATES, d["remotePartitionDeleteState"], "null")
        return (
            f"RemotePartitionDeleteMetadata{{topicPartition={_topic_id_partition(d['topicIdPartition'])}, "
            f"state={state}, eventTimestampMs={d['eventTimestampMs']}, brokerId={d['brokerId']}}}"
        )
    # REMOTE_LOG_SEGMENT_METADATA_SNAPSHOT_RECORD
    _offsets(d["startOffset"], d["endOffset"])
    state = _state(SEGMENT_STATES, d["remoteLogSegmentState"])
    return (
        f"RemoteLogSegmentMetadataSnapshot{{segmentId={d['segmentId']}, startOffset={d['startOffset']}, "
        f"endOffset={d['endOffset']}, maxTimestampMs={d['maxTimestampMs']}, "
        f"segmentLeaderEpochs={_epochs(d['segmentLeaderEpochs'])}, segmentSizeInBytes={d['segmentSizeInBytes']}, "
        f"customMetadata={_custom(d)}, state={state}, txnIdxEmpty={_bool(d.get('txnIndexEmpty', False))}}}"
    )
