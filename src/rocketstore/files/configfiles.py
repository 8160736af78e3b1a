"""The broker's JSON config files under ``<root>/config/``, in fastjson 1.x's dialect
(:mod:`rocketstore.files.fastjson` reads and writes it, so a Java broker reads the files back).

:class:`ConfigFile` implements the ``.bak`` protocol (persist: ``<file>.tmp``, fsync, current
file moved to ``<file>.bak``, tmp renamed over the file, directory fsynced; load: the file, else
the ``.bak`` when the file is missing, empty or unparsable). Its subclasses are the four tables:

=======================  ======================================================================
 file                     class
=======================  ======================================================================
 topics.json              :class:`TopicConfigTable`
 consumerOffset.json      :class:`ConsumerOffsetTable`
 subscriptionGroup.json   :class:`SubscriptionGroupTable`
 delayOffset.json         :class:`DelayOffsetTable`
=======================  ======================================================================

Fields a table does not know (5.x ``attributes``, ``forbiddenTable``, ``stateVersion`` …) are
kept as read and written back. Bean properties and map entries are written sorted, as fastjson's
default ``SortField`` feature does (it copies a HashMap into a TreeMap before writing).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from typing import Any, Optional, TypeVar

from rocketstore.errors import InvalidQueueIdError, StoreConfigError, StoreReadOnlyError
from rocketstore.files._files import fsync_dir, write_synced
from rocketstore.files.fastjson import _INT_KEY, _int_text, dumps_fastjson, loads_fastjson
from rocketstore.files.mapped_file import space_error
from rocketstore.message import validate_topic

__all__ = [
    "loads_fastjson",
    "dumps_fastjson",
    "ConfigFile",
    "TopicConfigTable",
    "ConsumerOffsetTable",
    "DelayOffsetTable",
    "SubscriptionGroupTable",
    "TOPIC_GROUP_SEPARATOR",
    "GROUPS_DIR",
]

log = logging.getLogger("rocketstore.files.configfiles")
_store_log = logging.getLogger("rocketstore.store")  # (the name users configure for a store's warnings)

#: The folder of a store's consumer groups (rocketstore.group): members and committed offsets.
GROUPS_DIR = "rocketstore-groups"

TOPIC_GROUP_SEPARATOR = "@"

# ---------------------------------------------------------------------------------------------
# Files with the .bak protocol


def _now_ms() -> int:
    return int(time.time() * 1000)


def _camel(name: str) -> str:
    """``retry_max_times`` → ``retryMaxTimes`` (camelCase names pass through)."""
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _bean(fields: dict) -> dict:
    """A Java bean's properties as fastjson writes them: sorted by name, nulls omitted."""
    return {k: fields[k] for k in sorted(fields) if fields[k] is not None}


def _want_dict(value, what: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StoreConfigError(f"{what} must be an object, not {type(value).__name__}")
    return value


def _want_bean(value, what: str) -> dict:
    """A Java bean's properties: an object whose keys are all names (an unquoted integer key
    cannot be a property, and could not be sorted among the names when written back)."""
    value = _want_dict(value, what)
    for key in value:
        if not isinstance(key, str):
            raise StoreConfigError(f"{what} has the key {key!r}, which is not a property name")
    return value


def _want_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, str) and _INT_KEY.fullmatch(value):
            try:
                return _int_text(value)
            except StoreConfigError as exc:
                raise StoreConfigError(f"{what}: {exc}") from None
        raise StoreConfigError(f"{what} must be an integer, not {value!r}")
    return value


def _read_regular_file(path: str) -> bytes:
    """The bytes of ``path``; StoreConfigError if it is not a regular file (a directory, or a FIFO,
    whose open would block until a writer appears)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise StoreConfigError(f"{path} is a directory, not a config file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StoreConfigError(f"{path} is a symbolic link loop, not a config file") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreConfigError(f"{path} is not a regular file")
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


_C = TypeVar("_C", bound="ConfigFile")


class ConfigFile:
    """A JSON config file with RocketMQ's ``.bak`` fallback (spec §10, persist protocol).

    Subclasses define :attr:`FILE_NAME`, :meth:`reset` (the empty state), :meth:`decode`
    (parsed JSON → state; must check everything before changing anything) and :meth:`encode`
    (state → JSON object). Construction touches no file: call :meth:`load` (or use :meth:`open`).
    """

    FILE_NAME = ""

    def __init__(self, path, *, read_only: bool = False, lock: Any = None):
        """``lock``: the reentrant lock to guard the table with (default a ``threading.RLock``;
        the store gives its consumer offsets the codec's FastRLock, which every POP ack takes)."""
        self.path = os.fspath(path)
        self.read_only = bool(read_only)
        self.dirty = False
        #: the file the state came from (``path``, ``path + ".bak"``) or None (defaults)
        self.loaded_from: Optional[str] = None
        self._lock = threading.RLock() if lock is None else lock
        self._primary_ok = False
        self._extra: dict = {}
        self.reset()

    @property
    def lock(self) -> Any:
        """The reentrant lock that guards the table (the compiled POP ack takes it too)."""
        return self._lock

    @property
    def bak_path(self) -> str:
        return self.path + ".bak"

    @classmethod
    def open(cls: type[_C], path: str, *args: Any, **kwargs: Any) -> _C:
        """Construct (same arguments as the class) and :meth:`load`."""
        table = cls(path, *args, **kwargs)
        table.load()
        return table

    @classmethod
    def in_store(cls: type[_C], root: str | os.PathLike[str], *args: Any, **kwargs: Any) -> _C:
        """Open ``<root>/config/<FILE_NAME>``."""
        return cls.open(os.path.join(os.fspath(root), "config", cls.FILE_NAME), *args, **kwargs)

    # -- subclass hooks ---------------------------------------------------------------------
    def reset(self) -> None:
        """Set the empty state (no file yet)."""
        self._extra = {}

    def decode(self, data: Any) -> None:
        raise NotImplementedError

    def encode(self) -> dict:
        raise NotImplementedError

    def _split_extra(self, data: Any, known: tuple) -> tuple[dict, dict]:
        """(the known top-level properties, the others) of a parsed file."""
        data = _want_bean(data, f"{self.FILE_NAME}")
        return ({k: data.get(k) for k in known}, {k: v for k, v in data.items() if k not in known})

    # -- text -------------------------------------------------------------------------------
    def to_json(self, pretty: bool = True) -> str:
        """The file's text as fastjson would write it."""
        with self._lock:
            return dumps_fastjson(self.encode(), pretty=pretty)

    def from_json(self, text: str) -> None:
        """Replace the state with the parsed ``text`` (no file involved)."""
        with self._lock:
            self.decode(loads_fastjson(text))

    # -- load -------------------------------------------------------------------------------
    def _try(self, path: str):
        """('ok', parsed) | ('missing', None) | ('empty', None) | ('bad', error)."""
        try:
            raw = _read_regular_file(path)
        except FileNotFoundError:
            return "missing", None
        except StoreConfigError as exc:
            return "bad", exc
        try:
            text = raw.decode("utf-8")
            if not text.strip():
                return "empty", None
            return "ok", loads_fastjson(text)
        except (StoreConfigError, UnicodeDecodeError) as exc:
            return "bad", exc

    def load(self) -> bool:
        """Read the file, else its ``.bak`` (file missing, empty or unparsable).

        Returns True if a file was read, False if neither exists (empty state). Raises
        :class:`StoreConfigError` when a file exists but neither it nor the ``.bak`` can be read:
        rather than start empty and lose the table (RocketMQ refuses to start too).
        """
        with self._lock:
            state, value = self._try(self.path)
            if state == "ok":
                try:
                    self.decode(value)
                except StoreConfigError as exc:
                    state, value = "bad", exc
                else:
                    self._primary_ok, self.loaded_from, self.dirty = True, self.path, False
                    return True
            self._primary_ok = False
            bak_state, bak_value = self._try(self.bak_path)
            if bak_state == "ok":
                try:
                    self.decode(bak_value)
                except StoreConfigError as exc:
                    bak_state, bak_value = "bad", exc
                else:
                    log.warning("%s is %s; loaded %s", self.path, state, self.bak_path)
                    self.loaded_from, self.dirty = self.bak_path, False
                    return True
            if state == "bad" or bak_state == "bad":
                problems = []
                if state == "bad":
                    problems.append(f"{self.path}: {value}")
                if bak_state == "bad":
                    problems.append(f"{self.bak_path}: {bak_value}")
                raise StoreConfigError("unreadable config file: " + "; ".join(problems))
            self.reset()
            self.loaded_from, self.dirty = None, False
            return False

    # -- persist ----------------------------------------------------------------------------
    def persist(self, force: bool = False) -> bool:
        """Write the file if it changed (or ``force``); True if written.

        ``<file>.tmp`` is written and fsynced, the current file (if it is readable) becomes
        ``<file>.bak``, the tmp file is renamed over ``<file>`` and the directory fsynced. At
        every instant either the file or its ``.bak`` holds a complete table.
        """
        with self._lock:
            if self.read_only:
                raise StoreReadOnlyError(f"{self.path} was opened read-only")
            if not (self.dirty or force):
                return False
            data = self.to_json().encode("utf-8")
            directory = os.path.dirname(self.path) or "."
            if os.path.isdir(self.path) and not os.path.islink(self.path):
                raise StoreConfigError(f"{self.path} is a directory: the config file cannot replace it")
            os.makedirs(directory, exist_ok=True)
            tmp = self.path + ".tmp"
            try:
                write_synced(tmp, data)
            except OSError as exc:
                raise space_error(
                    exc.errno,
                    f"writing {os.path.basename(self.path)} failed, the file on disk is unchanged",
                    self.path,
                ) from exc
            try:
                # A garbage current file must not replace a good .bak.
                if os.path.exists(self.path) and (self._primary_ok or self._try(self.path)[0] == "ok"):
                    os.replace(self.path, self.bak_path)
                os.replace(tmp, self.path)
                fsync_dir(directory)
            except OSError as exc:  # the file or its .bak holds a complete table, as ever
                raise space_error(
                    exc.errno, f"replacing {os.path.basename(self.path)} failed", self.path
                ) from exc
            self._primary_ok, self.dirty = True, False
            return True


class _VersionedTable(ConfigFile):
    """A table with a ``dataVersion`` bean: counter + timestamp, bumped on every change."""

    def reset(self) -> None:
        super().reset()
        self.data_version = {"counter": 0, "timestamp": _now_ms()}

    def _decode_version(self, value) -> dict:
        version = dict(_want_bean(value, "dataVersion"))
        version["counter"] = _want_int(version.get("counter", 0), "dataVersion.counter")
        version["timestamp"] = _want_int(version.get("timestamp", 0), "dataVersion.timestamp")
        return version

    @property
    def counter(self) -> int:
        return self.data_version["counter"]

    def next_version(self) -> None:
        """``DataVersion.nextVersion``: counter + 1, timestamp = now; marks the table dirty."""
        self.data_version["counter"] += 1
        self.data_version["timestamp"] = _now_ms()
        self.dirty = True


# -- topics.json -------------------------------------------------------------------------------

PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 8, 4, 2, 1
DEFAULT_PERM = PERM_READ | PERM_WRITE
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")
#: The most queues a topic may have. Java sets no bound, but the append path keeps a table of
#: next queue offsets per topic sized by this count: a garbage ``-3`` or ``2147483647`` in
#: topics.json must be refused at load, not become a negative index or a 16 GiB allocation.
MAX_QUEUE_NUMS = 1 << 16
_QUEUE_FIELDS = ("readQueueNums", "writeQueueNums")


def _check_topic(topic) -> str:
    return validate_topic(topic)


class TopicConfigTable(_VersionedTable):
    """``topics.json``: ``dataVersion`` + ``topicConfigTable`` {topic: TopicConfig}."""

    FILE_NAME = "topics.json"

    def __init__(self, path, default_queues: int = 16, read_only: bool = False):
        # same positional signature as store._TopicTable; call load() (or use open()) to read
        self.default_queues = default_queues
        super().__init__(path, read_only=read_only)

    def reset(self) -> None:
        super().reset()
        self._topics: dict[str, dict] = {}

    def decode(self, data) -> None:
        known, extra = self._split_extra(data, ("dataVersion", "topicConfigTable"))
        version = self._decode_version(known["dataVersion"])
        topics = {}
        for name, entry in _want_dict(known["topicConfigTable"], "topicConfigTable").items():
            entry = dict(_want_bean(entry, f"topic {name!r}"))
            for field in ("readQueueNums", "writeQueueNums", "perm", "topicSysFlag"):
                if field in entry:
                    entry[field] = _want_int(entry[field], f"topic {name!r} {field}")
            for field in _QUEUE_FIELDS:
                if field in entry and not 0 <= entry[field] <= MAX_QUEUE_NUMS:
                    raise StoreConfigError(
                        f"topic {name!r} {field} {entry[field]} is not in 0 .. {MAX_QUEUE_NUMS}"
                    )
            entry.setdefault("topicName", str(name))
            topics[str(name)] = entry
        self.data_version, self._topics, self._extra = version, topics, extra

    def encode(self) -> dict:
        return _bean(
            {
                **self._extra,
                "dataVersion": _bean(self.data_version),
                "topicConfigTable": {name: _bean(self._topics[name]) for name in sorted(self._topics)},
            }
        )

    @property
    def topics(self) -> dict[str, dict]:
        """The live {topic: config} map; read it, change it through :meth:`create`/:meth:`delete`."""
        return self._topics

    def get(self, topic: str) -> Optional[dict]:
        """A copy of the topic's config, or None."""
        entry = self._topics.get(topic)
        return dict(entry) if entry is not None else None

    def queues(self, topic: str) -> int:
        """The topic's write queue count (0 if the topic is unknown)."""
        entry = self._topics.get(topic)
        if entry is None:
            return 0
        return int(entry.get("writeQueueNums") or entry.get("readQueueNums") or self.default_queues)

    def create(
        self,
        topic: str,
        queues: Optional[int] = None,
        *,
        read_queue_nums: Optional[int] = None,
        write_queue_nums: Optional[int] = None,
        perm: int = DEFAULT_PERM,
        topic_filter_type: str = "SINGLE_TAG",
        topic_sys_flag: int = 0,
        order: bool = False,
    ) -> dict:
        """Add or replace a topic (``updateTopicConfig``); bumps the data version."""
        _check_topic(topic)
        default = self.default_queues if queues is None else queues
        read = default if read_queue_nums is None else read_queue_nums
        write = default if write_queue_nums is None else write_queue_nums
        for what, value, limit in (
            ("queue count", read, MAX_QUEUE_NUMS),
            ("queue count", write, MAX_QUEUE_NUMS),
            ("topicSysFlag", topic_sys_flag, 0x7FFFFFFF),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
                raise StoreConfigError(f"{what} {value!r} is not an int in 0 .. {limit}")
        if isinstance(perm, bool) or not isinstance(perm, int) or not 0 <= perm <= 15:
            raise StoreConfigError(f"perm {perm!r} is not a 4-bit int")
        if topic_filter_type not in TOPIC_FILTER_TYPES:
            raise StoreConfigError(
                f"topicFilterType {topic_filter_type!r} is not one of {TOPIC_FILTER_TYPES}"
            )
        with self._lock:
            entry = dict(self._topics.get(topic) or {})
            entry.update(
                order=bool(order),
                perm=perm,
                readQueueNums=read,
                topicFilterType=topic_filter_type,
                topicName=topic,
                topicSysFlag=topic_sys_flag,
                writeQueueNums=write,
            )
            self._topics[topic] = entry
            self.next_version()
            return dict(entry)

    def attributes(self, topic: str) -> dict[str, str]:
        """A copy of the topic's 5.x ``attributes`` map ({} when it has none or is unknown)."""
        entry = self._topics.get(topic)
        attrs = entry.get("attributes") if entry is not None else None
        return {str(k): str(v) for k, v in attrs.items()} if isinstance(attrs, dict) else {}

    def update_attributes(self, topic: str, changes: dict[str, Optional[str]]) -> dict[str, str]:
        """Set (a str value) or remove (None) keys of an existing topic's ``attributes`` map, as
        5.x's ``+key`` / ``-key`` alterations do; bumps the data version. Returns the new map."""
        with self._lock:
            entry = self._topics.get(topic)
            if entry is None:
                raise StoreConfigError(f"unknown topic {topic!r}")
            attrs = self.attributes(topic)
            for key, value in changes.items():
                if value is None:
                    attrs.pop(key, None)
                else:
                    attrs[key] = value
            entry = dict(entry)
            entry["attributes"] = dict(sorted(attrs.items()))
            self._topics[topic] = entry
            self.next_version()
            return dict(attrs)

    def delete(self, topic: str) -> bool:
        """Remove a topic; True if it existed."""
        with self._lock:
            if self._topics.pop(topic, None) is None:
                return False
            self.next_version()
            return True

    def __contains__(self, topic) -> bool:
        return topic in self._topics

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._topics))

    def __len__(self) -> int:
        return len(self._topics)


# -- consumerOffset.json -----------------------------------------------------------------------


def _check_name(name, what: str) -> str:
    if not isinstance(name, str) or not name or TOPIC_GROUP_SEPARATOR in name:
        raise StoreConfigError(f"{what} {name!r} must be a non-empty str without '@'")
    return name


def _check_qid(queue_id) -> int:
    if isinstance(queue_id, bool) or not isinstance(queue_id, int) or queue_id < 0:
        raise InvalidQueueIdError(f"queue id must be a non-negative int, not {queue_id!r}")
    return queue_id


def _check_offset(offset) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 1 << 63:
        raise StoreConfigError(f"offset {offset!r} is not an int in 0 .. 2**63-1")
    return offset


def _int_map(value, what: str) -> dict[int, int]:
    """A ``Map<Integer, Long>`` as read (int or digit-string keys), sorted by key."""
    table = {}
    for key, offset in _want_dict(value, what).items():
        table[_want_int(key, f"{what} key")] = _want_int(offset, f"{what}[{key!r}]")
    return dict(sorted(table.items()))


class ConsumerOffsetTable(ConfigFile):
    """``consumerOffset.json``: ``offsetTable`` {"topic@group": {queueId: next offset to consume}}.

    5.x's derived ``groupTopicMap`` is dropped on load (it is derived, and ignored by brokers);
    other extra properties are kept.
    """

    FILE_NAME = "consumerOffset.json"

    def reset(self) -> None:
        super().reset()
        #: {"topic@group": {queue id: next offset}}: public, as the compiled commit and ack
        #: paths (FastReads.commit_offset, PopAcker) update it in place under the table's lock
        self.table: dict[str, dict[int, int]] = {}

    def decode(self, data) -> None:
        known, extra = self._split_extra(data, ("offsetTable",))
        extra.pop("groupTopicMap", None)
        table = {}
        for key, offsets in _want_dict(known["offsetTable"], "offsetTable").items():
            if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
                raise StoreConfigError(f"offsetTable key {key!r} is not 'topic@group'")
            table[key] = _int_map(offsets, f"offsetTable[{key!r}]")
        self.table, self._extra = table, extra

    def encode(self) -> dict:
        return _bean(
            {
                **self._extra,
                "offsetTable": {k: dict(sorted(self.table[k].items())) for k in sorted(self.table)},
            }
        )

    @staticmethod
    def key(topic: str, group: str) -> str:
        return topic + TOPIC_GROUP_SEPARATOR + group

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """``commitOffset``: the group's next offset to consume in (topic, queue_id)."""
        key = self.key(_check_name(topic, "topic"), _check_name(group, "group"))
        _check_qid(queue_id)
        _check_offset(offset)
        with self._lock:
            offsets = self.table.setdefault(key, {})
            previous = offsets.get(queue_id)
            if previous is not None and offset < previous:
                log.warning("offset of %s queue %d moves back from %d to %d", key, queue_id, previous, offset)
            offsets[queue_id] = offset
            self.dirty = True

    def commit_key(self, key: str, queue_id: int, offset: int) -> None:
        """:meth:`commit` under a ``key(topic, group)`` whose names and queue id were checked
        by an earlier :meth:`commit` (POP commits on every acknowledgement)."""
        with self._lock:
            offsets = self.table.setdefault(key, {})
            previous = offsets.get(queue_id)
            if previous is not None and offset < previous:
                log.warning("offset of %s queue %d moves back from %d to %d", key, queue_id, previous, offset)
            offsets[queue_id] = offset
            self.dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """``queryOffset``: the committed offset, -1 if none."""
        offsets = self.table.get(self.key(topic, group))
        if offsets is None:
            return -1
        return offsets.get(queue_id, -1)

    def query_all(self, group: str, topic: str) -> dict[int, int]:
        """{queue id: offset} of the group in the topic (a copy; empty if none)."""
        return dict(self.table.get(self.key(topic, group)) or {})

    def remove(self, group: str, topic: Optional[str] = None, queue_id: Optional[int] = None) -> bool:
        """Forget a group's offsets: everywhere, in one topic, or of one queue. True if any."""
        with self._lock:
            removed = False
            for key in list(self.table):
                parts = key.split(TOPIC_GROUP_SEPARATOR)
                if len(parts) < 2 or parts[1] != group or (topic is not None and parts[0] != topic):
                    continue
                if queue_id is None:
                    del self.table[key]
                    removed = True
                elif self.table[key].pop(queue_id, None) is not None:
                    removed = True
                    if not self.table[key]:
                        del self.table[key]
            self.dirty |= removed
            return removed

    def groups(self, topic: Optional[str] = None) -> list[str]:
        """Groups with offsets (in ``topic``, if given)."""
        found = []
        for key in list(self.table):
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if topic is None or parts[0] == topic:
                found.append(parts[1])
        return sorted(set(found))

    def topics(self, group: Optional[str] = None) -> list[str]:
        """Topics with offsets (of ``group``, if given)."""
        found = []
        for key in list(self.table):
            parts = key.split(TOPIC_GROUP_SEPARATOR)
            if group is None or parts[1] == group:
                found.append(parts[0])
        return sorted(set(found))

    def items(self) -> Iterator[tuple[str, dict[int, int]]]:
        """("topic@group", {queue id: offset}) pairs (copies)."""
        return iter([(k, dict(v)) for k, v in list(self.table.items())])

    def __len__(self) -> int:
        return len(self.table)

    def import_group_offsets(self, root: str | os.PathLike[str]) -> None:
        """Copy the offsets that the consumer groups of the store at ``root`` committed
        (rocketstore.group: ``<root>/rocketstore-groups/<group>.offsets.json``) into this table:
        ``consumerOffset.json`` then holds them as a broker's does. A file it cannot read is
        left out (logged)."""
        directory = os.path.join(os.fspath(root), GROUPS_DIR)
        try:
            names = sorted(n for n in os.listdir(directory) if n.endswith(".offsets.json") and "@" not in n)
        except (FileNotFoundError, NotADirectoryError):
            return
        for name in names:
            try:
                table = ConsumerOffsetTable.open(os.path.join(directory, name), read_only=True)
            except StoreConfigError:
                _store_log.warning("group offsets %s are unreadable: not copied", name)
                continue
            for key, offsets in table.items():
                topic, _, group = key.partition("@")
                for queue_id, offset in offsets.items():
                    if self.query(group, topic, queue_id) != offset:
                        self.commit(group, topic, queue_id, offset)


# -- delayOffset.json --------------------------------------------------------------------------


class DelayOffsetTable(ConfigFile):
    """``delayOffset.json``: ``offsetTable`` {delay level: next offset in SCHEDULE_TOPIC_XXXX
    queue level-1}."""

    FILE_NAME = "delayOffset.json"

    def reset(self) -> None:
        super().reset()
        self._table: dict[int, int] = {}

    def decode(self, data) -> None:
        known, extra = self._split_extra(data, ("offsetTable",))
        self._table, self._extra = _int_map(known["offsetTable"], "offsetTable"), extra

    def encode(self) -> dict:
        return _bean({**self._extra, "offsetTable": dict(sorted(self._table.items()))})

    def get(self, level: int) -> int:
        """The level's next offset (0 if none yet, as ScheduleMessageService)."""
        return self._table.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        if isinstance(level, bool) or not isinstance(level, int) or level < 1:
            raise StoreConfigError(f"delay level {level!r} is not a positive int")
        _check_offset(offset)
        with self._lock:
            self._table[level] = offset
            self.dirty = True

    def items(self) -> Iterator[tuple[int, int]]:
        return iter(list(self._table.items()))

    def as_dict(self) -> dict[int, int]:
        return dict(self._table)

    def __len__(self) -> int:
        return len(self._table)


# -- subscriptionGroup.json --------------------------------------------------------------------

#: 4.3's SubscriptionGroupConfig defaults (groupName added per group).
SUBSCRIPTION_GROUP_DEFAULTS = {
    "brokerId": 0,
    "consumeBroadcastEnable": True,
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "notifyConsumerIdsChangedEnable": True,
    "retryMaxTimes": 16,
    "retryQueueNums": 1,
    "whichBrokerWhenConsumeSlowly": 1,
}


class SubscriptionGroupTable(_VersionedTable):
    """``subscriptionGroup.json``: ``dataVersion`` + ``subscriptionGroupTable`` {group: config}."""

    FILE_NAME = "subscriptionGroup.json"

    def reset(self) -> None:
        super().reset()
        self._groups: dict[str, dict] = {}

    def decode(self, data) -> None:
        known, extra = self._split_extra(data, ("dataVersion", "subscriptionGroupTable"))
        version = self._decode_version(known["dataVersion"])
        groups = {}
        for name, entry in _want_dict(known["subscriptionGroupTable"], "subscriptionGroupTable").items():
            entry = dict(_want_bean(entry, f"group {name!r}"))
            for field in ("brokerId", "retryMaxTimes", "retryQueueNums", "whichBrokerWhenConsumeSlowly"):
                if field in entry:
                    entry[field] = _want_int(entry[field], f"group {name!r} {field}")
            entry.setdefault("groupName", str(name))
            groups[str(name)] = entry
        self.data_version, self._groups, self._extra = version, groups, extra

    def encode(self) -> dict:
        return _bean(
            {
                **self._extra,
                "dataVersion": _bean(self.data_version),
                "subscriptionGroupTable": {n: _bean(self._groups[n]) for n in sorted(self._groups)},
            }
        )

    def get(self, group: str) -> Optional[dict]:
        """A copy of the group's config, or None."""
        entry = self._groups.get(group)
        return dict(entry) if entry is not None else None

    def create(self, group: str, **fields) -> dict:
        """Add or update a group; ``fields`` by Java or snake_case name (``retry_max_times=3``)."""
        _check_name(group, "group")
        updates = {_camel(k): v for k, v in fields.items()}
        for field in ("brokerId", "retryMaxTimes", "retryQueueNums", "whichBrokerWhenConsumeSlowly"):
            value = updates.get(field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise StoreConfigError(f"{field} must be an int, not {value!r}")
        with self._lock:
            entry = dict(self._groups.get(group) or {**SUBSCRIPTION_GROUP_DEFAULTS, "groupName": group})
            entry.update(updates)
            entry["groupName"] = group
            self._groups[group] = entry
            self.next_version()
            return dict(entry)

    def find_or_create(self, group: str) -> dict:
        """The group's config, created with the defaults if missing (autoCreateSubscriptionGroup)."""
        with self._lock:
            entry = self._groups.get(group)
            return dict(entry) if entry is not None else self.create(group)

    def delete(self, group: str) -> bool:
        with self._lock:
            if self._groups.pop(group, None) is None:
                return False
            self.next_version()
            return True

    def retry_max_times(self, group: str) -> int:
        """The group's ``retryMaxTimes`` (16 when unknown)."""
        entry = self._groups.get(group) or {}
        return int(entry.get("retryMaxTimes", SUBSCRIPTION_GROUP_DEFAULTS["retryMaxTimes"]))

    def __contains__(self, group) -> bool:
        return group in self._groups

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._groups))

    def __len__(self) -> int:
        return len(self._groups)
