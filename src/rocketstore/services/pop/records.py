"""The revive log of POP (rocketstore.services.pop): its topic, and its records' bytes, ``ck``
checkpoints and ``bAck`` acknowledgements, as the package's docstring lays them out."""

from __future__ import annotations

from typing import Any

from rocketstore.format import _codec_py

__all__ = [
    "REVIVE_TOPIC_PREFIX",
    "REVIVE_GROUP",
    "CK_TAG",
    "BATCH_ACK_TAG",
    "REVIVE_QUEUE_ID",
    "ACK_RANGE_JSON",
    "revive_topic",
    "checkpoint_record",
    "checkpoint_json",
    "dumps",
]

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP
CK_TAG = "ck"  # PopAckConstants.CK_TAG
BATCH_ACK_TAG = "bAck"  # PopAckConstants.BATCH_ACK_TAG
REVIVE_QUEUE_ID = 0


def revive_topic(cluster: str) -> str:
    """``rmq_sys_REVIVE_LOG_<cluster>``."""
    return REVIVE_TOPIC_PREFIX + cluster


def checkpoint_record(
    group: str,
    topic: str,
    queue_id: int,
    base: int,
    now: int,
    invisible: int,
    offsets: list[int],
    numbers: list[int],
    nxt: int,
) -> dict[str, Any]:
    """A ``ck`` record (module docstring); ``d`` and ``rt`` are left out when the offsets are a
    run from ``so`` (then ``n`` counts them) and every delivery number is 0."""
    so = min(offsets) if offsets else nxt
    record: dict[str, Any] = {"c": group, "t": topic, "q": queue_id, "b": base, "pt": now, "it": invisible}
    record["so"], record["n"], record["nx"] = so, len(offsets), nxt
    if not offsets:
        return record
    if offsets[-1] - so != len(offsets) - 1 or offsets[0] != so or sorted(offsets) != offsets:
        record["d"] = [o - so for o in offsets]
    if any(numbers):
        record["rt"] = numbers
    return record


def checkpoint_json(
    group: str,
    topic: str,
    queue_id: int,
    base: int,
    now: int,
    invisible: int,
    offsets: list[int],
    numbers: list[int],
    nxt: int,
) -> bytes:
    """``dumps(checkpoint_record(...))``, the common record made without a dict (one per receive)."""
    if offsets and not any(numbers):
        so = offsets[0]
        if offsets[-1] - so == len(offsets) - 1 and sorted(offsets) == offsets:  # a run from so
            return _codec_py.checkpoint_run(
                base, group, invisible, len(offsets), nxt, now, queue_id, so, topic
            )
    return dumps(checkpoint_record(group, topic, queue_id, base, now, invisible, offsets, numbers, nxt))


def dumps(record: dict[str, Any]) -> bytes:
    """Compact JSON, keys sorted (as fastjson writes a bean). Group and topic names need no
    escaping (``[%|a-zA-Z0-9_-]``), ints and lists of ints none either: written by hand, as
    this runs once per receive and per acknowledgement."""
    parts = []
    for key in sorted(record):
        value = record[key]
        if isinstance(value, str):
            text = f'"{value}"'
        elif isinstance(value, (list, tuple)):
            text = "[" + ",".join(map(str, value)) + "]"
        else:
            text = str(value)
        parts.append(f'"{key}":{text}')
    return ("{" + ",".join(parts) + "}").encode()


#: What :func:`dumps` writes for the acknowledgement of a range of offsets (group, count, queue
#: id, first offset, topic), made without a dict: one is written per ``ack``.
ACK_RANGE_JSON = '{"c":"%s","n":%d,"q":%d,"so":%d,"t":"%s"}'
