"""Store options, with RocketMQ's defaults (MessageStoreConfig) where RocketMQ has one."""

from __future__ import annotations

import dataclasses
import difflib
import os
import socket
import warnings
from collections.abc import Callable, Mapping
from typing import Any, Optional

from rocketstore.errors import StoreConfigError, UnknownOptionError
from rocketstore.message import is_valid_topic

__all__ = ["StoreConfig", "ASYNC_FLUSH", "SYNC_FLUSH", "default_store_path", "local_ipv4"]

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

GiB = 1 << 30
MiB = 1 << 20


def default_store_path() -> str:
    """``$ROCKETSTORE_HOME``, else ``~/store`` (RocketMQ's ``storePathRootDir``)."""
    return os.environ.get("ROCKETSTORE_HOME") or os.path.join(os.path.expanduser("~"), "store")


def _interface_ipv4s() -> list[str]:
    """IPv4 addresses of this machine's network interfaces (Linux ioctl; empty elsewhere)."""
    import fcntl
    import struct

    found: list[str] = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (OSError, AttributeError):
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                req = struct.pack("256s", name.encode()[:15])
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])  # SIOCGIFADDR
            except OSError:
                continue
            found.append(addr)
    return found


def local_ipv4() -> str:
    """This machine's IPv4 address, as RocketMQ picks one: the first non-loopback interface
    address, else what the host name resolves to, else 127.0.0.1. No packet is sent."""
    for addr in _interface_ipv4s():
        if not addr.startswith("127."):
            return addr
    try:
        addr = socket.gethostbyname(socket.gethostname())
        socket.inet_pton(socket.AF_INET, addr)
        return addr
    except OSError:
        return "127.0.0.1"


_DELAY_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s ... 2h") as milliseconds per level (level 1 first)."""
    if not isinstance(text, str):
        raise StoreConfigError("message_delay_level must be a str like '1s 5s 10s 1m 2h'")
    levels = []
    for token in text.split():
        unit = _DELAY_UNITS.get(token[-1:])
        if unit is None or not token[:-1].isdigit():
            raise StoreConfigError(f"bad delay level {token!r}: a number and one of s, m, h, d")
        levels.append(int(token[:-1]) * unit)
    if not 1 <= len(levels) <= 64:
        raise StoreConfigError("message_delay_level needs 1 to 64 levels")
    return tuple(levels)


def parse_delete_when(text: str) -> tuple[int, ...]:
    """``deleteWhen`` ("04", "01;13") as the local hours it names; "" names none."""
    if not isinstance(text, str):
        raise StoreConfigError("delete_when must be a str of ';'-separated hours like '04'")
    hours = []
    for token in text.split(";"):
        token = token.strip()
        if not token:
            continue
        if not (token.isascii() and token.isdigit()) or not 0 <= int(token) <= 23:
            raise StoreConfigError(f"bad hour {token!r} in delete_when: hours are 0 to 23")
        hours.append(int(token))
    return tuple(sorted(set(hours)))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: What each annotation of StoreConfig takes, for the message of a wrong type: (test, words).
_TAKES: dict[str, tuple[Callable[[object], bool], str]] = {
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an int"),
    "float": (_is_number, "a number (int or float)"),
    "bool": (lambda v: isinstance(v, bool), "a bool (True or False)"),
    "str": (lambda v: isinstance(v, str), "a str"),
}


def _check_option_types(config: StoreConfig) -> None:
    """StoreConfigError naming the option, what it got and what it takes, for the first option
    of the wrong type (``commitlog_file_size="1G"``), before any check compares values."""
    for field in dataclasses.fields(config):
        annotation = str(field.type)
        optional = annotation.startswith("Optional[") and annotation.endswith("]")
        kind = annotation[len("Optional[") : -1] if optional else annotation
        if kind not in _TAKES:
            continue
        value = getattr(config, field.name)
        test, words = _TAKES[kind]
        if (optional and value is None) or test(value):
            continue
        raise StoreConfigError(
            f"option {field.name} takes {words}{' or None' if optional else ''}, "
            f"not {type(value).__name__} {value!r}"
        )


@dataclasses.dataclass
class StoreConfig:
    """Options of a :class:`rocketstore.MessageStore`; keyword arguments of its constructor."""

    #: CommitLog segment size (``mappedFileSizeCommitLog``, 1 GiB). Fixed for a store's lifetime.
    commitlog_file_size: int = GiB
    #: Largest record accepted (``maxMessageSize``, 4 MiB), whole record as in RocketMQ 4.x.
    max_message_size: int = 4 * MiB
    #: ``ASYNC_FLUSH`` (durable within ``flush_interval_ms``, or when a put asks for it) or
    #: ``SYNC_FLUSH`` (every put waits for group commit unless its ``WAIT`` property is "false").
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_ms: int = 500
    flush_least_pages: int = 4
    flush_thorough_interval_ms: int = 10_000
    #: How long a durable put waits before raising FlushTimeoutError (the message stays stored).
    sync_flush_timeout_ms: int = 5000
    #: Bytes of segment space kept pre-faulted ahead of the writer by a background thread.
    prefault_bytes: int = 32 * MiB
    #: Queues of a topic created on first put (a producer's ``defaultTopicQueueNums``).
    default_queues: int = 4
    #: Store host written into records and offsetMsgIds (None: this machine's IPv4 address).
    store_host: Optional[str] = None
    store_port: int = 10911
    #: Born host of messages put through this store (None: the store host).
    born_host: Optional[str] = None
    born_port: int = 0
    #: Units per ConsumeQueue file (``mappedFileSizeConsumeQueue`` / 20: 300,000 = 6,000,000 bytes).
    consume_queue_units: int = 300_000
    #: Units per BatchConsumeQueue file, for the files rocketstore starts (5.x's
    #: ``mapperFileSizeBatchConsumeQueue`` / 46: 300,000 = 13,800,000 bytes); a queue's existing
    #: files keep their size.
    batch_queue_units: int = 300_000
    #: Hash slots and items per index file (``maxHashSlotNum``, ``maxIndexNum``): 420 MB files.
    index_slots: int = 5_000_000
    index_count: int = 20_000_000
    #: Delay levels (``messageDelayLevel``): the ConsumeQueue tagsCode of a delayed message is
    #: its deliver time (§2), computed from this table.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    #: How often a background thread dispatches new records into the ConsumeQueues and the
    #: index when no query does it first (ms; 0: only queries and close dispatch).
    dispatch_interval_ms: int = 10
    #: Dispatch the common case (records appended in order at the end of known queues, keys
    #: into the last index file) in one compiled pass per range of records (see
    #: docs/guide/fused-dispatch.md); False sends every record through the general path. The files
    #: are the same byte for byte either way; the pure-Python build always takes the general path.
    fused_dispatch: bool = True
    #: A call that waits for puts (``get_message(wait=)``, ``Consumer.poll(timeout=)``) first
    #: spins on the live page's words for up to this many microseconds, then sleeps (0: sleeps at
    #: once). Opt-in for latency-critical readers: a put during the spin is seen within a
    #: microsecond, and the reader's code is still in the CPU's caches, which roughly halves the
    #: put-to-receive time between processes; the price is a core kept busy while it spins
    #: (docs/guide/processes.md). At most 1,000,000 (one second).
    wait_spin_us: int = 0
    #: How often that thread makes the ConsumeQueues and the index durable and records in the
    #: checkpoint the CommitLog offset they are complete to (``confirmPhyOffset``, §6): recovery
    #: after a crash re-reads only from there (ms; 0: only at close).
    checkpoint_interval_ms: int = 1000
    #: Retention (spec §9). A CommitLog segment whose file mtime is older than this many hours
    #: is expired (``fileReservedTime``, 72); expired segments are deleted at the ``delete_when``
    #: hours, or at any hour when the disk is above ``disk_max_used_space_ratio``.
    file_reserved_time: float = 72
    #: Local hours of the day at which expired segments are deleted, ``;``-separated
    #: (``deleteWhen``, "04"; "" never on schedule).
    delete_when: str = "04"
    #: Percent of the CommitLog partition in use above which expired segments are deleted at
    #: any hour (``diskMaxUsedSpaceRatio``, 75).
    disk_max_used_space_ratio: float = 75
    #: Percent of the CommitLog partition in use above which segments are deleted regardless of
    #: age, oldest first, but only with ``delete_unexpired_when_disk_full`` (RocketMQ's
    #: ``diskSpaceCleanForciblyRatio``, 85). After a disk-full, puts are accepted again once usage
    #: is back at or below this level.
    disk_space_clean_forcibly_ratio: float = 85
    #: Percent in use above which the store is marked disk-full: puts are refused (they raise
    #: ``PutRefusedDiskFullError``, SERVICE_NOT_AVAILABLE, a ``DiskFullError``) (``diskSpaceWarningLevelRatio``, 90).
    disk_space_warning_level_ratio: float = 90
    #: Whether a disk above ``disk_space_clean_forcibly_ratio`` may delete segments younger than
    #: ``file_reserved_time`` (acknowledged messages of any age) to make room. Off by default:
    #: whatever filled the disk, a library must not throw away young data; puts are refused
    #: instead. True is RocketMQ's broker behaviour (``cleanFileForciblyEnable``, default true there).
    delete_unexpired_when_disk_full: Optional[bool] = None
    #: Deprecated name of ``delete_unexpired_when_disk_full`` (RocketMQ's ``cleanFileForciblyEnable``);
    #: accepted with a DeprecationWarning and moved there (then None).
    clean_file_forcibly_enable: Optional[bool] = None
    #: How often the cleaner checks the disk and deletes (``cleanResourceInterval``, 10 s; 0: no
    #: background cleaner, only ``MessageStore.clean()``).
    clean_resource_interval_ms: int = 10_000
    #: At most this many CommitLog segments are deleted per pass (``deleteFileBatchMax``, 10).
    delete_files_batch_max: int = 10
    #: Retention policies (``rocketstore.services.retention``, docs/guide/retention.md). Each can be set
    #: per topic too (``MessageStore.set_topic_retention``, kept as topic attributes in
    #: ``topics.json``). ``retention_ms``: age in ms after which a segment may go at any pass
    #: (None: RocketMQ's rule, ``file_reserved_time`` at the ``delete_when`` hours; 0: any age).
    retention_ms: Optional[int] = None
    #: Cap on the CommitLog's bytes: while the store holds more, its oldest segments go whatever
    #: their age (None: no cap). Never deletes unconsumed data of a ``delete_when_consumed`` topic.
    retention_bytes: Optional[int] = None
    #: Default cap on the bytes of each topic's records (None: no cap; a topic's own
    #: ``retention.bytes`` attribute overrides it).
    topic_retention_bytes: Optional[int] = None
    #: Default of every user topic's ``delete_when_consumed`` (system topics: their own
    #: attribute only): a segment holding records of the topic goes only once every group with
    #: an offset for the topic has consumed past them, whatever the age and size rules say.
    delete_when_consumed: bool = False
    #: Compacted topics (``set_topic_retention(topic, cleanup_policy="compaction")``): the size
    #: of a compaction log file (``compactionMappedFileSize``, 100 MiB; rounded to a whole number
    #: of queue files, at least 5) and of a compaction queue file (``compactionCqMappedFileSize``,
    #: 10 MiB; rounded down to 46-byte units). A store that has compaction files keeps theirs.
    compaction_file_size: int = 100 * MiB
    compaction_queue_file_size: int = 10 * MiB
    #: How often the delay service looks for delayed messages that are due (ms; RocketMQ's
    #: 100 ms). 0: no background thread; :meth:`MessageStore.deliver_delayed` delivers.
    schedule_interval_ms: int = 100
    #: Timer messages (``put(deliver_at_ms=)`` / ``delay_ms=``, RocketMQ 5.x's wheel timer;
    #: rocketstore.services.timer): the furthest ahead a message may be due, in seconds
    #: (``timerMaxDelaySec``, 3 days). Further raises ``TimerTooFarError`` and writes nothing.
    timer_max_delay_sec: int = 3 * 24 * 3600
    #: How often the timer service looks for new timer messages when none is due sooner (ms). It
    #: also wakes at the next due time and when a put is due before it. 0: no background
    #: thread; :meth:`MessageStore.deliver_timers` delivers.
    timer_interval_ms: int = 10
    #: Append RocketMQ 5.2+'s CRC32 property to every record written (``enabledAppendPropCRC``,
    #: spec §1.6): ``__CRC32#`` with a CRC of the whole record but its last 20 bytes, which
    #: every CRC-checking read and ``verify()`` check wherever it is present. 20 bytes more per
    #: record; off by default (docs/guide/guarantees.md: what it costs, what goes undetected
    #: without it).
    append_prop_crc: bool = False
    #: The clock of the delay service and of POP's invisible times (``receive``): a callable
    #: returning epoch milliseconds (None: the system clock). Tests inject one to deliver hours
    #: of delays, or let invisible times run out, without waiting.
    clock: Optional[Callable[[], int]] = None
    #: The cluster name in POP's revive topic, ``rmq_sys_REVIVE_LOG_<broker_cluster_name>``
    #: (``brokerClusterName``, "DefaultCluster"), where receive and ack keep their records.
    broker_cluster_name: str = "DefaultCluster"
    #: How often, at most, POP's state is snapshotted into ``config/rocketstorePop.json`` while
    #: receive and ack run (ms; 0: only at close). An open replays the revive log after it.
    pop_snapshot_interval_ms: int = 10_000
    #: Whether a writable open of a store that another process writes **joins** it (its puts
    #: and other writes run in that process, ``rocketstore.processes.writers``, and it takes over writing
    #: when that process ends) rather than raising ``StoreLockedError``. The process that writes
    #: keeps its own options; a joining process's write options are not used.
    shared_writers: bool = True
    #: Whether the puts of joined writers (``put`` and ``put_batch``) append in their own
    #: process under one cross-process lock, as LMDB's writers do (``rocketstore.log.sharedappend``;
    #: Linux), rather than run in the writing process. The writing process's option decides.
    shared_append: bool = True
    #: How long a joining writer waits for the writing process to finish opening (recovering)
    #: the store before ``StoreLockedError`` (s).
    writer_wait_s: float = 300.0
    #: Whether an open raises this process's soft limit of open files to its hard limit, as
    #: the JVM does for a Java broker (``-XX:+MaxFDLimit``). A store keeps a descriptor or two
    #: per CommitLog segment and per ConsumeQueue and index file, so a few hundred queues
    #: outgrow the common soft limit of 1,024. It is only ever raised, never lowered.
    raise_open_files_limit: bool = True

    def __post_init__(self) -> None:  # noqa: C901 (one check per option, each with its own message)
        _check_option_types(self)
        if self.commitlog_file_size < 4096 or self.commitlog_file_size % 4096:
            raise StoreConfigError("commitlog_file_size must be a positive multiple of 4096")
        if self.commitlog_file_size > (1 << 62):
            raise StoreConfigError("commitlog_file_size is too large")
        if not 91 < self.max_message_size < (1 << 31):
            raise StoreConfigError("max_message_size must be between 92 and 2**31 - 1")
        if self.flush_disk_type not in (ASYNC_FLUSH, SYNC_FLUSH):
            raise StoreConfigError(f"flush_disk_type must be {ASYNC_FLUSH!r} or {SYNC_FLUSH!r}")
        for name in ("flush_interval_ms", "flush_thorough_interval_ms", "sync_flush_timeout_ms"):
            if getattr(self, name) <= 0:
                raise StoreConfigError(f"{name} must be positive")
        if self.flush_least_pages < 0 or self.prefault_bytes < 0:
            raise StoreConfigError("flush_least_pages and prefault_bytes must not be negative")
        if not 1 <= self.default_queues <= 1024:
            raise StoreConfigError("default_queues must be between 1 and 1024")
        for name in ("store_port", "born_port"):
            if not 0 <= getattr(self, name) <= 0xFFFF:
                raise StoreConfigError(f"{name} must be a TCP port number")
        for name in ("consume_queue_units", "batch_queue_units"):
            units = getattr(self, name)
            if isinstance(units, bool) or not isinstance(units, int) or not 1 <= units <= (1 << 26):
                raise StoreConfigError(f"{name} must be an int between 1 and 2**26")
        if not 1 <= self.index_slots <= 0x7FFFFFFF or not 2 <= self.index_count <= 0x7FFFFFFF:
            raise StoreConfigError("index_slots must be in 1..2**31-1 and index_count in 2..2**31-1")
        if self.dispatch_interval_ms < 0 or self.checkpoint_interval_ms < 0:
            raise StoreConfigError("dispatch_interval_ms and checkpoint_interval_ms must not be negative")
        if not 0 <= self.wait_spin_us <= 1_000_000:
            raise StoreConfigError("wait_spin_us must be between 0 and 1,000,000 (one second)")
        if not isinstance(self.fused_dispatch, bool):
            raise StoreConfigError(f"fused_dispatch must be a bool, not {self.fused_dispatch!r}")
        self.delay_levels_ms = parse_delay_levels(self.message_delay_level)
        self._check_retention()
        if (
            isinstance(self.schedule_interval_ms, bool)
            or not isinstance(self.schedule_interval_ms, int)
            or self.schedule_interval_ms < 0
        ):
            raise StoreConfigError("schedule_interval_ms must be an int, 0 or more")
        for name in ("timer_max_delay_sec", "timer_interval_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < (1 << 40):
                raise StoreConfigError(f"{name} must be an int, 0 or more")
        if not isinstance(self.append_prop_crc, bool):
            raise StoreConfigError("append_prop_crc must be a bool")
        if self.clock is not None and not callable(self.clock):
            raise StoreConfigError("clock must be a callable returning epoch milliseconds")
        if (
            not isinstance(self.broker_cluster_name, str)
            or not self.broker_cluster_name
            or not is_valid_topic("rmq_sys_REVIVE_LOG_" + self.broker_cluster_name)
        ):
            raise StoreConfigError("broker_cluster_name must make a topic name: [%|a-zA-Z0-9_-]")
        if (
            isinstance(self.pop_snapshot_interval_ms, bool)
            or not isinstance(self.pop_snapshot_interval_ms, int)
            or self.pop_snapshot_interval_ms < 0
        ):
            raise StoreConfigError("pop_snapshot_interval_ms must be an int, 0 or more")
        if not isinstance(self.shared_writers, bool):
            raise StoreConfigError("shared_writers must be a bool")
        if not isinstance(self.shared_append, bool):
            raise StoreConfigError("shared_append must be a bool")
        if not isinstance(self.raise_open_files_limit, bool):
            raise StoreConfigError("raise_open_files_limit must be a bool")
        if not _is_number(self.writer_wait_s) or not 0 <= self.writer_wait_s <= 1e6:
            raise StoreConfigError("writer_wait_s must be a number of seconds, 0 to 1e6")
        if self.store_host is None:
            self.store_host = local_ipv4()
        if self.born_host is None:
            self.born_host = self.store_host

    def _check_retention(self) -> None:
        if not _is_number(self.file_reserved_time) or not 0 <= self.file_reserved_time < 1e9:
            raise StoreConfigError("file_reserved_time must be a number of hours, 0 or more")
        self.delete_hours = parse_delete_when(self.delete_when)
        for name in (
            "disk_max_used_space_ratio",
            "disk_space_clean_forcibly_ratio",
            "disk_space_warning_level_ratio",
        ):
            value = getattr(self, name)
            if not _is_number(value) or not 0 < value <= 100:
                raise StoreConfigError(f"{name} must be a percentage in (0, 100]")
        if self.disk_space_clean_forcibly_ratio > self.disk_space_warning_level_ratio:
            raise StoreConfigError(
                "disk_space_clean_forcibly_ratio must not exceed disk_space_warning_level_ratio"
            )
        self._check_delete_unexpired()
        if (
            isinstance(self.clean_resource_interval_ms, bool)
            or not isinstance(self.clean_resource_interval_ms, int)
            or self.clean_resource_interval_ms < 0
        ):
            raise StoreConfigError("clean_resource_interval_ms must be an int, 0 or more")
        if (
            isinstance(self.delete_files_batch_max, bool)
            or not isinstance(self.delete_files_batch_max, int)
            or self.delete_files_batch_max < 1
        ):
            raise StoreConfigError("delete_files_batch_max must be a positive int")

        for name in ("retention_ms", "retention_bytes", "topic_retention_bytes"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63
            ):
                raise StoreConfigError(f"{name} must be None or an int in 0 .. 2**63-1")
        if not isinstance(self.delete_when_consumed, bool):
            raise StoreConfigError("delete_when_consumed must be a bool")
        for name, low in (("compaction_queue_file_size", 16 * 46), ("compaction_file_size", 4096)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 1 << 30:
                raise StoreConfigError(f"{name} must be an int in {low} .. 2**30")

    def _check_delete_unexpired(self) -> None:
        """Validate ``delete_unexpired_when_disk_full`` (default False) and fold the deprecated
        ``clean_file_forcibly_enable`` into it."""
        new, old = self.delete_unexpired_when_disk_full, self.clean_file_forcibly_enable
        for name, value in (("delete_unexpired_when_disk_full", new), ("clean_file_forcibly_enable", old)):
            if value is not None and not isinstance(value, bool):
                raise StoreConfigError(f"{name} must be a bool")
        if old is not None:
            if new is not None and new != old:
                raise StoreConfigError(
                    "clean_file_forcibly_enable (deprecated) and "
                    "delete_unexpired_when_disk_full disagree: give only the latter"
                )
            warnings.warn(
                "clean_file_forcibly_enable is deprecated: use delete_unexpired_when_disk_full",
                DeprecationWarning,
                stacklevel=5,
            )
            new, self.clean_file_forcibly_enable = old, None
        self.delete_unexpired_when_disk_full = bool(new)


def config_from_options(options: Mapping[str, Any]) -> StoreConfig:
    """``StoreConfig(**options)``; a name it does not have is an UnknownOptionError that names
    it and the options whose names are near it."""
    known = [field.name for field in dataclasses.fields(StoreConfig)]
    for name in options:
        if name not in known:
            near = difflib.get_close_matches(name, known, n=3)
            hint = f"; did you mean {' or '.join(map(repr, near))}?" if near else ""
            raise UnknownOptionError(
                f"unknown store option {name!r}{hint} (the options are StoreConfig's fields)"
            )
    return StoreConfig(**options)
