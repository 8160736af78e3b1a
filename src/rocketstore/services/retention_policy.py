"""Retention policies (docs/guide/retention.md): what a topic's attributes and the store's
options let a retention pass delete, segment by segment (:class:`RetentionView`), and the
report of what holds each topic's oldest segment (:func:`retention_report`). The passes
themselves are rocketstore.services.retention's :class:`~rocketstore.services.retention.Cleaner`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from rocketstore.base._clock import now_ms as _now_ms
from rocketstore.errors import CorruptRecordError, MessageNotFoundError, StoreConfigError
from rocketstore.files.mapped_file import MappedFile
from rocketstore.format.units import PLACEHOLDER_SIZE
from rocketstore.message import is_system_topic
from rocketstore.queues.compaction import CLEANUP_POLICY, COMPACTION, DELETE
from rocketstore.queues.innerbatch import inner_count
from rocketstore.queues.unitfiles import first_unit_where

__all__ = [
    "ATTR_DELETE_WHEN_CONSUMED",
    "ATTR_RESERVE_TIME",
    "ATTR_RETENTION_BYTES",
    "ATTR_RETENTION_MS",
    "HOUR_MS",
    "RETENTION_ATTRIBUTES",
    "UNCHANGED",
    "RetentionView",
    "TopicPolicy",
    "policies_active",
    "retention_attribute_changes",
    "retention_report",
    "mtime_ms",
    "topic_policy",
]

HOUR_MS = 3_600_000


def mtime_ms(path: str) -> Optional[int]:
    """A file's mtime in epoch ms (RocketMQ ages segments by it); None once it is gone."""
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
        mtime: Callable[[str], Optional[int]] = mtime_ms,
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
        if msg.topic != cq.topic or msg.queue_id != cq.queue_id:
            return -1
        if msg.queue_offset != queue_offset and not (  # an inner batch record holds several
            msg.queue_offset < queue_offset < msg.queue_offset + inner_count(msg)
        ):
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
