"""Retention (spec §9): deleting old CommitLog segments, and the queue and index files below them.

A :class:`Cleaner` belongs to one writable :class:`~rocketstore.MessageStore`. Each pass
(:meth:`Cleaner.run_once`, every ``clean_resource_interval_ms`` on a background thread, or a
manual :meth:`Cleaner.clean`) does what RocketMQ's ``CleanCommitLogService`` and
``CleanConsumeQueueService`` do:

1. **Disk check** of the CommitLog's partition (and the store root's, when it is another one),
   usage being ``used / (used + available)`` as RocketMQ 5.x computes it:

   =====================================  ==================================================
   usage (percent)                        effect
   =====================================  ==================================================
   > ``disk_space_warning_level_ratio``    disk full: puts are refused (they raise
   (90)                                   ``PutRefusedDiskFullError``, SERVICE_NOT_AVAILABLE)
   > ``disk_space_clean_forcibly_ratio``   a disk-full stays; with ``delete_unexpired_when_disk_full``
   (85)                                   (off by default) segments go regardless of age
   at or below both                       disk OK: puts are accepted again
   > ``disk_max_used_space_ratio`` (75)    expired segments may be deleted at any hour
   =====================================  ==================================================

   By default nothing younger than ``file_reserved_time`` is ever deleted to make room (RocketMQ's
   broker does, ``cleanFileForciblyEnable``): a full disk refuses puts instead.

2. **CommitLog**, when the local hour is one of ``delete_when``, the disk is above
   ``disk_max_used_space_ratio`` (or unreadable), or the pass is manual: walk the segments oldest
   first and delete each one whose file mtime is ``file_reserved_time`` hours old (any age when
   cleaning forcibly), at most ``delete_files_batch_max`` per pass. The walk stops at the first
   segment that may not go, so no hole is ever left; the last segment, and any segment the
   writer has not finished, never goes; nor does a segment whose records are not all dispatched
   into the ConsumeQueues and the index (the pass dispatches first; when that fails it deletes
   nothing).
3. **ConsumeQueues and index**, when the CommitLog's min offset grew: delete the queue files
   whose last unit points below it and correct every queue's min offset (§4.5, §4.6), then the
   index files that end below it (§5.4).

Deletion while readers hold views (``ReferenceResource``): RocketMQ counts references and
unmaps a file when the last reader releases it (forcibly after 120 s). Here each zero-copy view
(``read(zero_copy=True)`` bodies, ``iter_messages(zero_copy=True)``, ``queue_units`` arrays) is
such a reference, kept by Python's ``mmap`` itself: a segment is unlinked at once and its map is
unmapped when the last view is released, never before, so a reader can neither crash nor see
other bytes. Until then the file's blocks stay allocated (an unlinked, still-mapped file), which
is why a pass's freed space may show up only once old views are dropped. A read that starts
after the deletion raises :class:`~rocketstore.errors.MessageNotFoundError`.

**Policies** (docs/guide/retention.md) add to step 2, per store (``StoreConfig``) and
per topic (attributes in ``topics.json``, :func:`topic_policy`): ``retention_ms`` (age, at any
pass), ``retention_bytes`` (the CommitLog's and each topic's size) and ``delete_when_consumed``
(every group with an offset for the topic consumed past the segment). With any set, each pass
decides segment by segment (:class:`RetentionView`): a segment goes when every topic with a
record in it lets it go, consumption being a gate no age or size rule passes; only
``clean(force=True)`` does. Which topics a segment holds and how far groups consumed are read
from the ConsumeQueues and the consumer offset table at each pass; nothing else is stored.

Time, disk usage and the local hour are injectable (``clock``, ``disk_usage``, ``local_hour``),
so tests run hours of retention without waiting.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from rocketstore.base._background import start_weak_thread
from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.base._failurelog import FailureLog
from rocketstore.errors import CorruptRecordError, DiskFullError, MessageNotFoundError, StoreConfigError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.message import is_system_topic
from rocketstore.queues.compaction import CLEANUP_POLICY, COMPACTION, DELETE
from rocketstore.queues.consumequeue import PLACEHOLDER_SIZE, first_unit_where
from rocketstore.services.parts import StoreParts

__all__ = [
    "Cleaner",
    "disk_usage",
    "MANUAL_PASSES",
    "RetentionView",
    "retention_report",
    "TopicPolicy",
    "topic_policy",
    "retention_attribute_changes",
    "policies_active",
    "UNCHANGED",
    "ATTR_RETENTION_MS",
    "ATTR_RETENTION_BYTES",
    "ATTR_DELETE_WHEN_CONSUMED",
    "ATTR_RESERVE_TIME",
]

log = logging.getLogger("rocketstore.services.retention")

HOUR_MS = 3_600_000
#: Passes a manual clean runs at most (RocketMQ's ``executeDeleteFilesManually`` arms 20).
MANUAL_PASSES = 20


def disk_usage(path: str) -> float:
    """The fraction of the file system holding ``path`` that is in use, as RocketMQ 5.x's
    ``getDiskPartitionSpaceUsedPercent``: used / (used + available to unprivileged users), so a
    file system whose reserved blocks are all that is left reads as full. -1.0 when unreadable."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1.0
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    usable = st.f_bavail * st.f_frsize
    if used + usable <= 0:
        return -1.0
    return used / (used + usable)


_statvfs_usage = disk_usage


def _local_hour(at_ms: int) -> int:
    return time.localtime(at_ms / 1000).tm_hour


def _mtime_ms(path: str) -> Optional[int]:
    try:
        return os.stat(path).st_mtime_ns // 1_000_000
    except FileNotFoundError:
        return None


# ---- retention policies ----

#: Topic attributes (``topics.json``, TopicConfig's ``attributes`` map) that set a topic's
#: policies. RocketMQ 5.x defines no retention attribute for its local store; these take Kafka's
#: topic-config names. Values are strings, as every 5.x attribute value is.
ATTR_RETENTION_MS = "retention.ms"
ATTR_RETENTION_BYTES = "retention.bytes"
ATTR_DELETE_WHEN_CONSUMED = "delete.when.consumed"
#: RocketMQ 5.x's own per-topic age (``TopicAttributes.TOPIC_RESERVE_TIME_ATTRIBUTE``, hours,
#: -1 = the store's), read when ``retention.ms`` is absent; never written.
ATTR_RESERVE_TIME = "reserve.time"
RETENTION_ATTRIBUTES = (ATTR_RETENTION_MS, ATTR_RETENTION_BYTES, ATTR_DELETE_WHEN_CONSUMED)

#: ``set_topic_retention``'s "leave this policy as it is"
UNCHANGED: Any = type(
    "_Unchanged",
    (),
    # pickled as itself (a joined writer sends it to the writing process: rocketstore.processes.writers)
    {"__repr__": lambda self: "UNCHANGED", "__reduce__": lambda self: "UNCHANGED"},
)()

_MAX_LONG = (1 << 63) - 1


@dataclass(frozen=True)
class TopicPolicy:
    """The retention a topic gets: its attributes over the store's options.

    ``retention_ms``: None is RocketMQ's rule (``file_reserved_time`` hours, at the
    ``delete_when`` hours, when the disk fills or on a manual clean); -1 no age limit; else
    the age in ms after which a segment may go at any pass. ``retention_bytes``: None or -1
    no cap. ``source`` names where each came from ("topic" or "store").
    """

    retention_ms: Optional[int]
    retention_bytes: Optional[int]
    delete_when_consumed: bool
    source: dict[str, str] = field(default_factory=dict)
    #: attribute values that could not be read (key -> value); the policy keeps data for them
    bad_attributes: dict[str, str] = field(default_factory=dict)
    #: "delete", or "compaction": the latest message of each key is kept in the compaction log
    #: (rocketstore.services.compaction) before segments go
    cleanup_policy: str = "delete"

    @property
    def explicit(self) -> bool:
        """Whether a pass outside the ``delete_when`` hours may delete for this topic."""
        return self.retention_ms is not None or self.retention_bytes not in (None, -1)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "retention_ms": self.retention_ms,
            "retention_bytes": self.retention_bytes,
            "delete_when_consumed": self.delete_when_consumed,
            "cleanup_policy": self.cleanup_policy,
            "source": dict(self.source),
        }
        if self.bad_attributes:
            out["bad_attributes"] = dict(self.bad_attributes)
        return out


def _long_attribute(attributes: Mapping[str, str], name: str, bad: dict[str, str]) -> int:
    """The attribute ``name`` as a long (-1 or more); -1, noted in ``bad``, when it is not one."""
    value = _parse_long(attributes[name], -1)
    if value is None:
        bad[name] = attributes[name]
        return -1
    return value


def _parse_long(text: str, low: int) -> Optional[int]:
    try:
        value = int(text.strip())
    except (ValueError, AttributeError):
        return None
    return value if low <= value <= _MAX_LONG else None


def topic_policy(config: Any, attributes: dict[str, str], topic: Optional[str] = None) -> TopicPolicy:
    """The policy of ``topic`` with these ``attributes`` in a store with this ``config``.

    The store's ``delete_when_consumed`` applies to user topics only: RocketMQ's system topics
    (delay levels, retry, dead letters) have no consumer group of their own to wait for, and
    would hold every segment they have a record in for ever. Their own attribute still applies.

    An attribute value that cannot be read keeps data (no age limit, no cap, and consumption
    required) and is reported in ``bad_attributes``: a hand-edited ``topics.json`` never makes
    a pass delete more than it would without it.
    """
    source: dict[str, str] = {}
    bad: dict[str, str] = {}
    retention_ms: Optional[int] = config.retention_ms
    source["retention_ms"] = "store" if config.retention_ms is not None else "file_reserved_time"
    if ATTR_RETENTION_MS in attributes:
        retention_ms, source["retention_ms"] = _long_attribute(attributes, ATTR_RETENTION_MS, bad), "topic"
    elif ATTR_RESERVE_TIME in attributes:
        hours = _parse_long(attributes[ATTR_RESERVE_TIME], -1)
        if hours is None:
            bad[ATTR_RESERVE_TIME] = attributes[ATTR_RESERVE_TIME]
            retention_ms, source["retention_ms"] = -1, "topic reserve.time"
        elif hours > 0:
            retention_ms, source["retention_ms"] = min(hours * HOUR_MS, _MAX_LONG), "topic reserve.time"
    retention_bytes: Optional[int] = config.topic_retention_bytes
    source["retention_bytes"] = "store"
    if ATTR_RETENTION_BYTES in attributes:
        retention_bytes, source["retention_bytes"] = (
            _long_attribute(attributes, ATTR_RETENTION_BYTES, bad),
            "topic",
        )
    consumed = bool(config.delete_when_consumed)
    source["delete_when_consumed"] = "store"
    if consumed and topic is not None and is_system_topic(topic):
        consumed, source["delete_when_consumed"] = False, "system topic"
    if ATTR_DELETE_WHEN_CONSUMED in attributes:
        text = attributes[ATTR_DELETE_WHEN_CONSUMED].strip().lower()
        if text not in ("true", "false"):
            bad[ATTR_DELETE_WHEN_CONSUMED] = attributes[ATTR_DELETE_WHEN_CONSUMED]
        consumed, source["delete_when_consumed"] = text != "false", "topic"
    cleanup = "compaction" if attributes.get(CLEANUP_POLICY, "").upper() == COMPACTION else "delete"
    return TopicPolicy(retention_ms, retention_bytes, consumed, source, bad, cleanup)


def retention_attribute_changes(
    retention_ms: Any = UNCHANGED,
    retention_bytes: Any = UNCHANGED,
    delete_when_consumed: Any = UNCHANGED,
    cleanup_policy: Any = UNCHANGED,
) -> dict[str, Optional[str]]:
    """Check ``set_topic_retention``'s arguments and turn them into attribute changes: a value
    sets the attribute, None removes it (the store's option applies again), UNCHANGED leaves it.
    ``retention_ms`` and ``retention_bytes`` are ints, 0 or more, or -1 (no limit);
    ``cleanup_policy`` is "delete" or "compaction" (RocketMQ 5.x's ``cleanup.policy``)."""
    changes: dict[str, Optional[str]] = {}
    if cleanup_policy is not UNCHANGED:
        if cleanup_policy is not None and (
            not isinstance(cleanup_policy, str) or cleanup_policy.upper() not in (COMPACTION, DELETE)
        ):
            raise StoreConfigError(
                f'cleanup_policy must be None, "delete" or "compaction", not {cleanup_policy!r}'
            )
        changes[CLEANUP_POLICY] = None if cleanup_policy is None else cleanup_policy.upper()
    for name, key, value in (
        ("retention_ms", ATTR_RETENTION_MS, retention_ms),
        ("retention_bytes", ATTR_RETENTION_BYTES, retention_bytes),
    ):
        if value is UNCHANGED:
            continue
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not -1 <= value <= _MAX_LONG
        ):
            raise StoreConfigError(
                f"{name} must be None, -1 (no limit) or an int in 0 .. 2**63-1, not {value!r}"
            )
        changes[key] = None if value is None else str(int(value))
    if delete_when_consumed is not UNCHANGED:
        if delete_when_consumed is not None and not isinstance(delete_when_consumed, bool):
            raise StoreConfigError(
                f"delete_when_consumed must be None or a bool, not {delete_when_consumed!r}"
            )
        changes[ATTR_DELETE_WHEN_CONSUMED] = (
            None if delete_when_consumed is None else str(delete_when_consumed).lower()
        )
    return changes


def policies_active(config: Any, topics_table: Any) -> bool:
    """Whether any policy beyond RocketMQ 4.x's age-at-hour rule is set (store or topic)."""
    if (
        config.retention_ms is not None
        or config.retention_bytes is not None
        or config.topic_retention_bytes is not None
        or config.delete_when_consumed
    ):
        return True
    for entry in list(topics_table.topics.values()):
        attrs = entry.get("attributes")
        if isinstance(attrs, dict) and (
            any(k in attrs for k in RETENTION_ATTRIBUTES) or ATTR_RESERVE_TIME in attrs
        ):
            return True
    return False


def _is_placeholder(unit: tuple[int, int, int]) -> bool:
    return unit[0] == 0 and unit[1] == PLACEHOLDER_SIZE


class RetentionView:
    """One look at a store for retention: which topics have records in a segment, how far
    every group consumed each topic, how many bytes a topic holds past an offset.

    Built per pass (or per report) from the live ConsumeQueues, the topic table and the consumer
    offset table; nothing is kept between passes, and nothing is written. Costs: whether a topic
    has records in a segment is one binary search per queue of the topic, only for queues whose
    next record lies in it; the consumption floor is one unit and one record header per
    (group, queue); byte totals read the units of capped topics only.
    """

    def __init__(
        self,
        config: Any,
        commitlog: Any,
        queues: Any,
        topics_table: Any,
        offsets: Any,
        now: int,
        mtime: Callable[[str], Optional[int]] = _mtime_ms,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.topics_table = topics_table
        self.offsets = offsets
        self.now = now
        self._mtime = mtime
        self.queues_of: dict[str, list[Any]] = {}
        for cq in list(queues):
            self.queues_of.setdefault(cq.topic, []).append(cq)
        self._policies: dict[str, TopicPolicy] = {}
        self._next: dict[int, tuple[int, int]] = {}  # id(cq) -> (searched from, first phy there)
        self._floors: dict[str, tuple[int, dict[str, dict[str, Any]]]] = {}
        self._bytes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._mtimes: dict[str, Optional[int]] = {}
        #: whether a decision relied on consumer offsets (persisted before a deletion)
        self.used_offsets = False

    def policy(self, topic: str) -> TopicPolicy:
        found = self._policies.get(topic)
        if found is None:
            found = self._policies[topic] = topic_policy(
                self.config, self.topics_table.attributes(topic), topic
            )
        return found

    # -- what a segment holds --

    def _first_phy_from(self, cq: Any, start: int) -> int:
        """CommitLog offset of the queue's first unit at or past ``start`` (a large number when
        none): units point forward along a queue, so a binary search finds it."""
        cached = self._next.get(id(cq))
        if cached is not None and cached[0] <= start <= cached[1]:
            return cached[1]

        def reached(unit: tuple[int, int, int]) -> bool:
            return unit[0] >= start and not _is_placeholder(unit)

        qo = first_unit_where(cq, reached)
        phy = _MAX_LONG
        if qo < cq.max_offset:
            try:
                phy = int(cq.unit(qo)[0])
            except MessageNotFoundError:
                phy = _MAX_LONG
        self._next[id(cq)] = (start, phy)
        return phy

    def topics_in(self, start: int, end: int) -> list[str]:
        """Topics with a record in the CommitLog range ``[start, end)`` (a segment)."""
        return [
            topic
            for topic, cqs in self.queues_of.items()
            if any(self._first_phy_from(cq, start) < end for cq in cqs)
        ]

    def oldest_phy(self, topic: str) -> int:
        """CommitLog offset of the topic's oldest record still in its queues (large: none)."""
        start = self.commitlog.min_offset
        return min(
            (self._first_phy_from(cq, start) for cq in self.queues_of.get(topic, [])), default=_MAX_LONG
        )

    # -- consumption --

    def floor(self, topic: str) -> tuple[int, dict[str, dict[str, Any]]]:
        """(the lowest CommitLog offset some group has yet to consume in ``topic``, per group:
        {"floor": offset, "committed": {queue id: offset}}). Offsets come from the consumer
        offset table (a POP group's lowest un-acknowledged position lives there too). With no
        group the floor is -1: nobody has consumed anything. A unit at a group's position that
        does not point at its own record (damage) counts as -1 too."""
        found = self._floors.get(topic)
        if found is not None:
            return found
        groups: dict[str, dict[str, Any]] = {}
        lowest = -1 if self.offsets is None else _MAX_LONG
        names = self.offsets.groups(topic) if self.offsets is not None else []
        if not names:
            lowest = -1
        for group in names:
            committed = self.offsets.query_all(group, topic)
            group_floor = _MAX_LONG
            for cq in self.queues_of.get(topic, []):
                position = committed.get(cq.queue_id, -1)
                nxt = max(position, cq.min_offset)
                if nxt >= cq.max_offset:
                    continue
                group_floor = min(group_floor, self._unconsumed_phy(cq, nxt))
            groups[group] = {"floor": group_floor, "committed": committed}
            lowest = min(lowest, group_floor)
        found = self._floors[topic] = (lowest, groups)
        return found

    def _unconsumed_phy(self, cq: Any, queue_offset: int) -> int:
        try:
            phy, size, _ = cq.unit(queue_offset)
            msg = self.commitlog.read(int(phy))
        except (MessageNotFoundError, CorruptRecordError, ValueError, OSError):
            return -1
        if msg.topic != cq.topic or msg.queue_id != cq.queue_id or msg.queue_offset != queue_offset:
            return -1
        return int(phy)

    # -- sizes --

    def topic_bytes_from(self, topic: str, start: int) -> int:
        """Bytes of the topic's records at CommitLog offset ``start`` and after."""
        arrays = self._bytes.get(topic)
        if arrays is None:
            phys, sizes = [], []
            for cq in self.queues_of.get(topic, []):
                for _, view in cq.iter_units():
                    keep = ~((view["commitlog_offset"] == 0) & (view["size"] == PLACEHOLDER_SIZE))
                    phys.append(view["commitlog_offset"][keep].astype(np.int64))
                    sizes.append(view["size"][keep].astype(np.int64))
                    del view
            phy = np.concatenate(phys) if phys else np.empty(0, np.int64)
            size = np.concatenate(sizes) if sizes else np.empty(0, np.int64)
            order = np.argsort(phy, kind="stable")
            phy = phy[order]
            suffix = np.concatenate((np.cumsum(size[order][::-1])[::-1], [0]))
            arrays = self._bytes[topic] = (phy, suffix)
        phy, suffix = arrays
        return int(suffix[int(np.searchsorted(phy, start, side="left"))])

    # -- decisions --

    def holds(
        self,
        topic: Optional[str],
        mf: MappedFile,
        *,
        scheduled: bool,
        forced: bool = False,
        override_consumed: bool = False,
    ) -> list[dict[str, Any]]:
        """Why ``topic`` (None: a segment no topic has records in, under the store's options)
        keeps segment ``mf``: an empty list when it lets it go."""
        cfg = self.config
        policy = self.policy(topic) if topic is not None else topic_policy(cfg, {})
        held: list[dict[str, Any]] = []
        if topic is not None and policy.delete_when_consumed and not override_consumed:
            lowest, groups = self.floor(topic)
            self.used_offsets = True
            if lowest < mf.end_offset:
                behind = {g: dict(v["committed"]) for g, v in groups.items() if v["floor"] < mf.end_offset}
                held.append({"policy": "delete_when_consumed", "groups": behind, "no_group": not groups})
        if forced:
            return held
        cap = cfg.retention_bytes
        if cap is not None and self.commitlog.max_offset - mf.file_from_offset > cap:
            return held
        topic_cap = policy.retention_bytes
        capped = topic is not None and topic_cap is not None and topic_cap != -1
        if capped and self.topic_bytes_from(topic or "", mf.file_from_offset) > (topic_cap or 0):
            return held
        if mf.path not in self._mtimes:
            self._mtimes[mf.path] = self._mtime(mf.path)
        mtime = self._mtimes[mf.path]
        age = None if mtime is None else self.now - mtime
        if policy.retention_ms is None:
            limit = int(cfg.file_reserved_time * HOUR_MS)
            if age is not None and age < limit:
                held.append({"policy": "file_reserved_time", "age_ms": age, "retention_ms": limit})
            elif not scheduled:
                held.append({"policy": "delete_when", "hours": list(cfg.delete_hours)})
        elif policy.retention_ms == -1:
            held.append({"policy": "retention_ms", "age_ms": age, "retention_ms": -1})
        elif age is not None and age < policy.retention_ms:
            held.append({"policy": "retention_ms", "age_ms": age, "retention_ms": policy.retention_ms})
        if held and topic is not None and topic_cap not in (None, -1):
            held.append(
                {
                    "policy": "retention_bytes",
                    "bytes": self.topic_bytes_from(topic, mf.file_from_offset),
                    "retention_bytes": topic_cap,
                }
            )
        return held

    def segment_holds(
        self, mf: MappedFile, topics: Optional[list[str]] = None, **how: Any
    ) -> dict[str, list[dict[str, Any]]]:
        """{topic: holds} of every topic with records in ``mf`` (or of ``topics``, when the caller
        knows them) that keeps it ("" stands for the store's options when no topic has records
        there). Empty: the segment may go."""
        if topics is None:
            topics = self.topics_in(mf.file_from_offset, mf.end_offset)
        out: dict[str, list[dict[str, Any]]] = {}
        for topic in list[Optional[str]](topics) or [None]:
            held = self.holds(topic, mf, **how)
            if held:
                out[topic or ""] = held
        return out

    def presence(self, candidates: list[MappedFile]) -> dict[str, np.ndarray]:
        """{topic: bool per candidate segment}: whether the topic has a record in it. The
        candidates are consecutive segments; each queue's units below the last one's end are
        read once and located with one ``searchsorted``, so deciding many segments costs one
        read of their units, not a search per segment and queue."""
        bounds = np.array([mf.file_from_offset for mf in candidates] + [candidates[-1].end_offset], np.int64)
        last_end = int(bounds[-1])
        out: dict[str, np.ndarray] = {}
        for topic, cqs in self.queues_of.items():
            mask = np.zeros(len(candidates), bool)
            for cq in cqs:

                def past_end(unit: tuple[int, int, int]) -> bool:
                    return unit[0] >= last_end and not _is_placeholder(unit)

                stop = first_unit_where(cq, past_end)
                chunks = []
                for _, view in cq.iter_units(cq.min_offset, stop):
                    real = ~((view["commitlog_offset"] == 0) & (view["size"] == PLACEHOLDER_SIZE))
                    chunks.append(view["commitlog_offset"][real].astype(np.int64))
                    del view
                if chunks:
                    phys = np.concatenate(chunks)
                    mask |= np.diff(np.searchsorted(phys, bounds, side="left")) > 0
            out[topic] = mask
        return out

    def walk(
        self, candidates: list[MappedFile], **how: Any
    ) -> tuple[list[MappedFile], Optional[tuple[MappedFile, dict[str, list[dict[str, Any]]]]]]:
        """The leading candidates every topic in them lets go, and the first one held (with what
        holds it), or None when all may go."""
        doomed: list[MappedFile] = []
        if not candidates:
            return doomed, None
        present = self.presence(candidates)
        for i, mf in enumerate(candidates):
            topics = [topic for topic, mask in present.items() if mask[i]]
            held = self.segment_holds(mf, topics, **how)
            if held:
                return doomed, (mf, held)
            doomed.append(mf)
        return doomed, None

    def report(self) -> dict[str, Any]:
        """Per topic: its policy, its oldest segment and what holds that segment; and the store's
        oldest segment with the topics that hold it (as a pass at a ``delete_when`` hour sees
        them)."""
        files = list(self.commitlog.files)
        by_start = {mf.file_from_offset: mf for mf in files}
        size = self.config.commitlog_file_size
        topics: dict[str, Any] = {}
        for topic in sorted(set(self.queues_of) | set(self.topics_table.topics)):
            entry: dict[str, Any] = {"policy": self.policy(topic).as_dict()}
            phy = self.oldest_phy(topic)
            mf = by_start.get(phy - phy % size) if phy < _MAX_LONG else None
            entry["oldest_segment"] = None if mf is None else mf.file_from_offset
            if mf is not None:
                entry["held_by"] = self.holds(topic, mf, scheduled=True)
                if mf is files[-1]:
                    entry["held_by"].append({"policy": "segment_being_written"})
            topics[topic] = entry
        oldest: Optional[dict[str, Any]] = None
        if files:
            first = files[0]
            held = self.segment_holds(first, scheduled=True)
            if first is files[-1]:
                held.setdefault("", []).append({"policy": "segment_being_written"})
            oldest = {"start": first.file_from_offset, "held_by": held}
        return {"topics": topics, "oldest_segment": oldest}


def retention_report(
    config: Any,
    commitlog: Any,
    queues: Any,
    topics_table: Any,
    offsets: Any,
    dispatcher: Any,
    *,
    dispatch: bool,
) -> dict[str, Any]:
    """:meth:`RetentionView.report` of a store at its clock's now (``MessageStore.retention_report``).

    ``dispatch``: catch the queues up first (a writable store); when that fails (a full disk) the
    report is of what was dispatched and says so under ``"dispatch_error"``.
    """
    dispatch_error = None
    if dispatch:
        try:
            dispatcher.catch_up()
        except Exception as exc:
            dispatch_error = f"{type(exc).__name__}: {exc}"
    now = config.clock() if config.clock is not None else _now_ms()
    view = RetentionView(config, commitlog, queues, topics_table, offsets, now)
    with dispatcher.lock:
        report = view.report()
    if dispatch_error is not None:
        report["dispatch_error"] = dispatch_error
    return report


class Cleaner:
    """Retention of one writable store (spec §9): see the module docstring.

    ``parts`` are the layers of a store opened for writing (:class:`~rocketstore.services.parts.StoreParts`):
    the cleaner deletes CommitLog segments, ConsumeQueue and index files, and tells the append
    core to refuse puts while the disk is full.
    ``clock()`` gives epoch milliseconds, ``disk_usage(path)`` the fraction in use (negative:
    unreadable), ``local_hour(ms)`` the local hour of an epoch-ms time.
    """

    def __init__(
        self,
        parts: StoreParts,
        *,
        clock: Optional[Callable[[], int]] = None,
        disk_usage: Optional[Callable[[str], float]] = None,
        local_hour: Optional[Callable[[int], int]] = None,
        compactor: Any = None,
    ):
        self._parts = parts
        #: the compaction logs' keeper (:class:`~rocketstore.services.compaction.Compactor`): it
        #: copies what compacted topics got before any segment goes, and compacts after
        self._compactor = compactor
        self.config = parts.config
        self._clock = clock or _now_ms
        self._disk_usage = disk_usage or _statvfs_usage
        self._local_hour = local_hour or _local_hour
        self._pass_lock = threading.Lock()  # one pass at a time
        self._check_lock = threading.Lock()  # one disk check at a time (passes, stats())
        self._space_warned = False  # "disk fills, nothing may go" logged already
        self._dispatch_failures = FailureLog(
            log, "dispatch before deleting CommitLog segments", "no segment is deleted until it succeeds"
        )
        self._compaction_failures = FailureLog(
            log, "copying into the compaction logs", "retried at the next retention pass"
        )
        self._pass_failures = FailureLog(
            log, "background retention pass", f"retried every {self.config.clean_resource_interval_ms} ms"
        )
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._queues_cleaned_below = -1  # CommitLog min offset the queues were cleaned to
        self._dispatch_error: Optional[BaseException] = None  # this pass's failed dispatch
        self._held: Optional[dict[str, Any]] = None  # this pass's first segment a policy kept
        #: True while puts are refused because the disk is above the warning level
        self.disk_full = False
        #: the usage fraction the last check read (None before the first; negative: unreadable)
        self.last_disk_usage: Optional[float] = None
        self.passes = 0
        self.deleted_segments = 0
        self.deleted_queue_files = 0
        self.deleted_index_files = 0

    # ---- the disk check ----

    def _partitions(self) -> list[str]:
        """The CommitLog directory, plus the store root when it lives on another file system."""
        paths = [self._parts.commitlog.directory]
        try:
            if os.stat(self._parts.path).st_dev != os.stat(paths[0]).st_dev:
                paths.append(self._parts.path)
        except OSError:
            pass
        return paths

    def check_disk(self) -> tuple[float, bool]:
        """Read disk usage and apply the thresholds: mark the store disk-full (puts refused) or
        disk-OK (puts accepted). Returns (usage fraction, above the forcible level)."""
        with self._check_lock:
            return self._check_disk()

    def _check_disk(self) -> tuple[float, bool]:
        cfg = self.config
        readings = [self._disk_usage(p) for p in self._partitions()]
        usage = -1.0 if any(r < 0 for r in readings) else max(readings)
        self.last_disk_usage = usage
        percent = usage * 100
        core = self._parts.commitlog.core
        if percent > cfg.disk_space_warning_level_ratio:
            if not self.disk_full:
                log.error(
                    "disk of %s is %.1f%% full, above disk_space_warning_level_ratio %s%%: "
                    "refusing puts until it is at %s%% or below (%s)",
                    self._parts.path,
                    percent,
                    cfg.disk_space_warning_level_ratio,
                    cfg.disk_space_clean_forcibly_ratio,
                    self._what_retention_frees(),
                )
            self.disk_full = True
            core.refuse_puts(
                DiskFullError(
                    errno.ENOSPC,
                    f"the disk of store {self._parts.path} is {percent:.1f}% full, above "
                    f"disk_space_warning_level_ratio {cfg.disk_space_warning_level_ratio}%: puts are "
                    f"refused until usage is back at {cfg.disk_space_clean_forcibly_ratio}% or below "
                    f"({self._what_retention_frees()}); nothing was written",
                )
            )
            return usage, True
        if percent > cfg.disk_space_clean_forcibly_ratio:
            return usage, True  # a disk-full stays until usage is back at the forcible level
        if self.disk_full and usage >= 0:
            log.warning("disk of %s is %.1f%% full again: accepting puts", self._parts.path, percent)
            self.disk_full = False
            core.refuse_puts(None)
        return usage, False

    # ---- passes ----

    def run_once(
        self, now_ms: Optional[int] = None, *, manual: bool = False, force: bool = False
    ) -> dict[str, Any]:
        """One cleaning pass at time ``now_ms`` (default: the clock). Returns what it did::

            {"trigger": "time" | "space" | "manual" | "policy" | None,  # why the CommitLog
                                              # was cleaned ("policy": a retention policy
                                              # deleted outside those triggers)
             "forced": bool,                  # segments were deleted regardless of age
             "commitlog": [start offsets of the segments deleted],
             "consumequeue_files": int, "index_files": int,   # files deleted
             "min_offset": int,               # the CommitLog's min offset afterwards
             "disk_usage": float,             # fraction in use after the pass (-1: unreadable)
             "disk_full": bool,               # puts are refused
             "dispatch_error": None | Exception,  # why no segment could go: the dispatch
                                              # that must precede a deletion failed, or the
                                              # write of the consumer offsets that let
                                              # segments go (delete_when_consumed)
             "held": None | {"start": offset, "held_by": {topic: [holds]}}}  # the first
                                              # segment a retention policy kept, and why

        ``manual`` runs the CommitLog step whatever the hour or disk (RocketMQ's manual delete);
        ``force`` also ignores the segments' age.
        """
        cfg = self.config
        now = self._clock() if now_ms is None else int(now_ms)
        with self._pass_lock:
            self.passes += 1
            self._dispatch_error = None
            self._held = None
            usage, clean_forcibly = self.check_disk()
            if manual:
                trigger = "manual"
            elif self._local_hour(now) in cfg.delete_hours:
                trigger = "time"
            elif usage < 0 or usage * 100 > cfg.disk_max_used_space_ratio or clean_forcibly:
                trigger = "space"
            else:
                trigger = None
            forced = force or (clean_forcibly and bool(cfg.delete_unexpired_when_disk_full))
            active = policies_active(cfg, self._parts.topics.table)
            deleted: list[MappedFile] = []
            if trigger or active:
                deleted = self._delete_segments(
                    now,
                    forced and bool(trigger),
                    scheduled=bool(trigger),
                    active=active,
                    override=manual and force,
                )
                if deleted and not trigger:
                    trigger = "policy"
            if trigger == "space" and not deleted:
                if not self._space_warned:  # once until a pass deletes or the disk has room
                    log.warning(
                        "disk of %s is %.1f%% full, but no CommitLog segment could be deleted (%s)",
                        self._parts.path,
                        usage * 100,
                        self._what_retention_frees(),
                    )
                self._space_warned = True
            else:
                self._space_warned = False
            cq_files, index_files = self._clean_queues()
            if self._compactor is not None:
                self._compact()
            if deleted:
                usage, _ = self.check_disk()  # puts may resume at once
            return {
                "trigger": trigger,
                "forced": bool(trigger) and forced,
                "commitlog": [mf.file_from_offset for mf in deleted],
                "consumequeue_files": cq_files,
                "index_files": index_files,
                "min_offset": self._parts.commitlog.min_offset,
                "disk_usage": usage,
                "disk_full": self.disk_full,
                "dispatch_error": self._dispatch_error,
                "held": self._held,
            }

    def _compact(self) -> None:
        """Copy what compacted topics got since the last pass, then compact their queues that
        closed a compaction log file (logged, retried at the next pass, when it fails)."""
        compactor = self._compactor
        try:
            if compactor.topics():
                self._parts.dispatcher.catch_up()
                compactor.catch_up()
                compactor.compact()
        except Exception as exc:
            self._compaction_failures.failed(exc)
        else:
            self._compaction_failures.succeeded()

    def _what_retention_frees(self) -> str:
        cfg = self.config
        if cfg.delete_unexpired_when_disk_full:
            return (
                "retention deletes the oldest segments whatever their age: "
                "delete_unexpired_when_disk_full is on"
            )
        return (
            f"retention deletes only segments older than file_reserved_time, "
            f"{cfg.file_reserved_time:g} h; delete_unexpired_when_disk_full is off"
        )

    def clean(self, force: bool = False, now_ms: Optional[int] = None) -> dict[str, Any]:
        """A manual clean (``MessageStore.clean``): passes until one deletes no segment, at most
        :data:`MANUAL_PASSES`, whatever the hour and disk. Expired segments only, unless
        ``force``: then every segment but the one being written. Returns the passes' totals in
        the shape of :meth:`run_once`."""
        total: dict[str, Any] = {}
        for _ in range(MANUAL_PASSES):
            result = self.run_once(now_ms, manual=True, force=force)
            if not total:
                total = result
            else:
                total["commitlog"] += result["commitlog"]
                total["consumequeue_files"] += result["consumequeue_files"]
                total["index_files"] += result["index_files"]
                for key in ("min_offset", "disk_usage", "disk_full", "dispatch_error", "held"):
                    total[key] = result[key]
            if not result["commitlog"]:
                break
        return total

    def _delete_segments(
        self, now: int, forced: bool, *, scheduled: bool = True, active: bool = False, override: bool = False
    ) -> list[MappedFile]:
        """Delete the leading segments that may go (§9 ``deleteExpiredFileByTime``, and the
        retention policies when ``active``). ``scheduled``: a time, space or manual pass (the
        ``file_reserved_time`` rule applies); ``override``: ``clean(force=True)``, which deletes
        unconsumed data of ``delete_when_consumed`` topics too."""
        parts, cfg = self._parts, self.config
        commitlog = parts.commitlog
        files = list(commitlog.files)
        wrote = commitlog.max_offset
        reserved_ms = cfg.file_reserved_time * HOUR_MS
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            if len(doomed) >= cfg.delete_files_batch_max or mf.end_offset > wrote:
                break  # never a segment the writer has not finished
            if not forced and not active:
                mtime = _mtime_ms(mf.path)
                if mtime is not None and now < mtime + reserved_ms:
                    break
            doomed.append(mf)
        if not doomed:
            return []
        dispatcher = parts.dispatcher
        try:
            dispatcher.catch_up()  # the queues and the index must hold all that is about to go
        except Exception as exc:
            self._dispatch_error = exc
            self._dispatch_failures.failed(exc)
            return []
        self._dispatch_failures.succeeded()
        if not self._copy_compacted():  # a compacted topic's records are copied before they go
            return []
        with dispatcher.lock:
            # Only segments whose every record is in the queues and the index: deleting one the
            # dispatcher has not passed would leave its records in no queue and give later units
            # wrong positions.
            doomed = [mf for mf in doomed if mf.end_offset <= dispatcher.offset]
            if active and doomed:
                view = self.view(now)
                doomed, held = view.walk(
                    doomed, scheduled=scheduled, forced=forced, override_consumed=override
                )
                if held is not None:
                    self._held = {"start": held[0].file_from_offset, "held_by": held[1]}
                if doomed and view.used_offsets and parts.offsets is not None:
                    # the offsets that let these segments go are on disk before they go
                    try:
                        parts.offsets.persist()
                    except OSError as exc:
                        self._dispatch_error = exc
                        log.error(
                            "writing the consumer offsets before a deletion failed (%s): nothing deleted", exc
                        )
                        return []
            if not doomed:
                return []
            try:
                deleted = commitlog.delete_first(doomed)
            except OSError:
                log.exception("deleting a CommitLog segment failed; the pass stops there")
                deleted = [mf for mf in doomed if mf.destroyed]
        for mf in deleted:
            log.info("deleted CommitLog segment %s", mf.path)
        self.deleted_segments += len(deleted)
        return deleted

    def _copy_compacted(self) -> bool:
        """Copy what compacted topics got into their compaction logs, before any segment goes;
        False (nothing may go) when that fails."""
        if self._compactor is None:
            return True
        try:
            self._compactor.catch_up()
        except Exception as exc:
            self._dispatch_error = exc
            log.error("copying into the compaction logs before a deletion failed (%s): nothing deleted", exc)
            return False
        return True

    def view(self, now: Optional[int] = None) -> RetentionView:
        """A :class:`RetentionView` of this store at ``now`` (default: the clock)."""
        parts = self._parts
        return RetentionView(
            self.config,
            parts.commitlog,
            parts.queues,
            parts.topics.table,
            parts.offsets,
            self._clock() if now is None else int(now),
        )

    def _clean_queues(self) -> tuple[int, int]:
        """Delete ConsumeQueue and index files entirely below the CommitLog's min offset and
        correct the queues' min offsets, once per growth of that offset."""
        parts = self._parts
        if not parts.commitlog.files:
            return 0, 0
        min_offset = parts.commitlog.min_offset
        if min_offset <= self._queues_cleaned_below:
            return 0, 0
        cq_files = index_files = 0
        with parts.dispatcher.lock:
            try:
                cq_files = parts.queues.delete_expired(min_offset)
                index_files = parts.index.delete_expired(min_offset)
            except OSError:
                log.exception("deleting ConsumeQueue or index files failed; retried next pass")
                return cq_files, index_files
        self._queues_cleaned_below = min_offset
        self.deleted_queue_files += cq_files
        self.deleted_index_files += index_files
        return cq_files, index_files

    # ---- the background thread ----

    def start(self) -> None:
        """Check the disk now, then run a pass every ``clean_resource_interval_ms`` on a daemon
        thread until :meth:`stop` (no thread when the interval is 0)."""
        if self._thread is not None:
            return
        self.check_disk()
        interval = self.config.clean_resource_interval_ms
        if not interval:
            return
        self._stop.clear()
        # holds the cleaner only during a pass (it holds the store weakly): a dropped store closes
        self._thread = start_weak_thread(
            self, Cleaner._tick, self._stop, "rocketstore-clean", first_wait=interval / 1000
        )

    def _tick(self) -> float:
        try:
            self.run_once()
        except Exception as exc:  # logged once, counted, retried at the next tick
            self._pass_failures.failed(exc)
        else:
            self._pass_failures.succeeded()
        return self.config.clean_resource_interval_ms / 1000

    def stop(self) -> None:
        """Stop the background thread, waiting for a pass in progress."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._compactor is not None:
            self._compactor.close()

    def stats(self) -> dict[str, Any]:
        """Counters for ``MessageStore.stats()``, with the disk checked now (``disk_usage``, and
        ``disk_full`` as that reading sets it), whether or not a background cleaner runs."""
        self.check_disk()
        return {
            "disk_usage": self.last_disk_usage,
            "disk_full": self.disk_full,
            "clean_passes": self.passes,
            "deleted_segments": self.deleted_segments,
            "deleted_queue_files": self.deleted_queue_files,
            "deleted_index_files": self.deleted_index_files,
            **({"compaction": self._compactor.stats()} if self._compactor is not None else {}),
        }
