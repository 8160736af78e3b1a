"""RocketMQ 5.x's compacted topics (``cleanup.policy=COMPACTION``), read.

A 5.x broker with ``enableCompaction`` compacts such a topic's queues in the background
(``CompactionStore``): it copies the latest message of each key (the ``KEYS`` property) into
``compaction/compactionLog/<topic>/<queueId>/<20-digit start>`` (records in the CommitLog's
format, at their original queue offsets) and indexes them in
``compaction/compactionCq/<topic>/<queueId>/`` (46-byte units of the BatchConsumeQueue's layout,
a sparse queue: one unit per record kept, ``commitlog_offset`` its position in the compaction
log). ``compaction/position-checkpoint`` (JSON) says how far each queue was compacted.

:class:`CompactionLog` reads one queue's log; :func:`latest_per_key` makes the compacted view,
the latest message of each key, a key whose latest message has an empty body (a tombstone)
left out. rocketstore reads these files and never writes them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rocketstore.errors import CorruptRecordError
from rocketstore.message import MessageExt
from rocketstore.queues.batchcq import load_units

__all__ = ["CLEANUP_POLICY", "COMPACTION", "CompactionLog", "compacted_topics", "latest_per_key"]

#: the topic attribute naming its cleanup policy, and the value of a compacted topic's
CLEANUP_POLICY = "cleanup.policy"
COMPACTION = "COMPACTION"
DIRECTORY = "compaction"


def compacted_topics(attributes: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """The topics whose ``cleanup.policy`` is ``COMPACTION`` in ``attributes`` ({topic: attributes})."""
    return frozenset(t for t, attrs in attributes.items() if attrs.get(CLEANUP_POLICY) == COMPACTION)


class CompactionLog:
    """One queue's compaction log and its sparse queue. ``decode(buffer, position)`` decodes a
    record (the codec's ``decode_record``)."""

    def __init__(
        self, root: str | os.PathLike[str], topic: str, queue_id: int, decode: Callable[..., Any]
    ) -> None:
        base = os.path.join(os.fspath(root), DIRECTORY)
        self.topic = topic
        self.queue_id = queue_id
        self.units = load_units(os.path.join(base, "compactionCq", topic, str(queue_id)), sparse=True)
        self._decode = decode
        self._files: list[tuple[int, bytes]] = []
        directory = os.path.join(base, "compactionLog", topic, str(queue_id))
        try:
            names = sorted((n for n in os.listdir(directory) if len(n) == 20 and n.isdigit()), key=int)
        except (FileNotFoundError, NotADirectoryError):
            names = []
        for name in names:
            with open(os.path.join(directory, name), "rb") as f:
                self._files.append((int(name), f.read()))

    def messages(self) -> list[MessageExt]:
        """The records the log keeps, in queue order, each checked (CRC, topic, queue id, queue
        offset, size against its unit); :class:`CorruptRecordError` names the first that is not."""
        out = []
        for offset, size, base in zip(
            self.units["commitlog_offset"].tolist(), self.units["size"].tolist(), self.units["base"].tolist()
        ):
            msg = self._read(offset, size)
            if (msg.topic, msg.queue_id, msg.queue_offset) != (self.topic, self.queue_id, base):
                raise CorruptRecordError(
                    f"compaction log {self.topic}-{self.queue_id}: the record at {offset} is not queue offset {base}'s"
                )
            out.append(msg)
        return out

    def _read(self, offset: int, size: int) -> MessageExt:
        for start, data in self._files:
            if start <= offset < start + len(data):
                msg: MessageExt = self._decode(
                    data, offset - start, end=min(len(data), offset - start + size)
                )
                if msg.size != size:
                    break
                msg.commitlog_offset = offset  # its place in the compaction log
                return msg
        raise CorruptRecordError(
            f"compaction log {self.topic}-{self.queue_id}: no record of {size} bytes at {offset}"
        )

    @property
    def max_offset(self) -> int:
        """The queue offset after the last record the log keeps (0: none)."""
        return int(self.units["base"][-1]) + 1 if len(self.units) else 0


def latest_per_key(messages: Iterable[MessageExt]) -> dict[str, MessageExt]:
    """{key: the last message of ``messages`` with that key}, in the order of those last
    messages, a key whose last message has an empty body (a tombstone) left out; a message
    with several keys counts for each, one without keys for none."""
    latest: dict[str, MessageExt] = {}
    for msg in messages:
        for key in (msg.keys or "").split():
            latest.pop(key, None)
            latest[key] = msg
    return {key: msg for key, msg in latest.items() if len(msg.body)}
