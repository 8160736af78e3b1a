"""The schema, the constants and the read options (no pyspark needed)."""

from __future__ import annotations

import json
import os
import re
from typing import Any, Optional, overload

#: (column, Spark DDL type) in schema order.
COLUMNS = (
    ("topic", "STRING"),
    ("queueId", "INT"),
    ("queueOffset", "BIGINT"),
    ("commitLogOffset", "BIGINT"),
    ("brokerName", "STRING"),
    ("body", "BINARY"),
    ("tags", "STRING"),
    ("keys", "STRING"),
    ("properties", "MAP<STRING,STRING>"),
    ("msgId", "STRING"),
    ("flag", "INT"),
    ("sysFlag", "INT"),
    ("reconsumeTimes", "INT"),
    ("bornTimestamp", "TIMESTAMP"),
    ("storeTimestamp", "TIMESTAMP"),
    ("bornHost", "STRING"),
    ("storeHost", "STRING"),
)
_COLUMN_NAMES = tuple(name for name, _ in COLUMNS)
SCHEMA_DDL = ", ".join(f"{name} {kind}" for name, kind in COLUMNS)

#: The Kafka source's columns (``option("schema", "kafka")``): key is the KEYS property's bytes,
#: value the body, partition the queue id, offset the queue offset, timestamp the store time
#: with timestampType 1 (LogAppendTime: the broker's clock at append, as RocketMQ's store time
#: is); headers (with includeHeaders=true) every property, in stored order.
HEADERS_DDL = "ARRAY<STRUCT<key: STRING, value: BINARY>>"
KAFKA_COLUMNS = (
    ("key", "BINARY"),
    ("value", "BINARY"),
    ("topic", "STRING"),
    ("partition", "INT"),
    ("offset", "BIGINT"),
    ("timestamp", "TIMESTAMP"),
    ("timestampType", "INT"),
    ("headers", HEADERS_DDL),
)
LOG_APPEND_TIME = 1
_KAFKA_NAMES = tuple(name for name, _ in KAFKA_COLUMNS)
_ALL_KINDS = {**dict(COLUMNS), **dict(KAFKA_COLUMNS)}

EARLIEST, LATEST = -2, -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_ARROW_BATCH_ROWS = 32768
FORMAT_NAME = "rocketstore"


def schema_ddl(options) -> str:
    """The read schema the options ask for: rocketstore's columns, or the Kafka source's
    (``schema=kafka``; ``headers`` with ``includeHeaders=true``); ``includeBody=false`` drops
    ``body`` / ``value``."""
    kind = options.get("schema", "rocketstore").strip().lower()
    if kind not in ("rocketstore", "kafka"):
        raise ValueError(f"option schema must be rocketstore or kafka, not {kind!r}")
    headers = _bool_option(options, "includeHeaders", False)
    if kind == "rocketstore":
        if headers:
            raise ValueError(
                "option includeHeaders goes with schema=kafka: rocketstore's own schema has every "
                "property in its properties column"
            )
        columns: tuple[tuple[str, str], ...] = COLUMNS
    else:
        columns = tuple(c for c in KAFKA_COLUMNS if headers or c[0] != "headers")
    body = _bool_option(options, "includeBody", True)
    return ", ".join(f"{n} {k}" for n, k in columns if body or n not in ("body", "value"))


def arrow_schema(columns=_COLUMN_NAMES):
    """The pyarrow schema Spark expects for ``columns`` (types and nullability must match
    exactly: Spark checks ``Schema.equals``); every field is nullable, as Spark's are."""
    import pyarrow as pa

    header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    types = {
        HEADERS_DDL: pa.list_(pa.field("element", header)),
        "STRING": pa.string(),
        "INT": pa.int32(),
        "BIGINT": pa.int64(),
        "BINARY": pa.binary(),
        "MAP<STRING,STRING>": pa.map_(pa.string(), pa.string()),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(name, types[_ALL_KINDS[name]], nullable=True) for name in columns])


# ---------------------------------------------------------------------------------------------
# The options each role knows: anything else is refused by name (Spark hands them lowercased)

_STORE = ("path", "paths")
_READ = _STORE + (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "failOnDataLoss",
    "includeBody", "brokerName", "arrowBatchRows", "schema", "includeHeaders",
)  # fmt: skip
_ENDING = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_WRITE = _STORE + ("topic", "staging", "stagingRetentionMinutes")
KNOWN_OPTIONS = {
    "read": _READ + _ENDING + ("maxRecordsPerPartition", "minPartitions", "scan", "pushFilters"),
    "stream read": _READ + ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "groupId"),
    "write": _WRITE,
    "stream write": _WRITE + ("sinkId", "checkpointLocation", "queryName"),
}

#: Options of Spark's Kafka source and sink that name a Kafka client's work: a store has none.
_KAFKA_ONLY = {
    "kafka.group.id": "a Kafka consumer group; a streaming read records its progress under option groupId",
    "groupidprefix": "a Kafka consumer group id prefix; a streaming read records its progress under option groupId",
    "kafkaconsumer.polltimeoutms": "a Kafka consumer's poll timeout; rocketstore reads the files",
    "fetchoffset.numretries": "Kafka offset fetch retries; rocketstore reads offsets from the files",
    "fetchoffset.retryintervalms": "Kafka offset fetch retries; rocketstore reads offsets from the files",
}


def check_options(options, role: str) -> None:
    """Refuse, by name, every option ``role`` has no use for, listing the ones it knows."""
    known = KNOWN_OPTIONS[role]
    lowered = {k.lower() for k in known}
    for name in sorted(options):
        key = name.lower()
        if key in lowered:
            continue
        if key in _KAFKA_ONLY:
            why = _KAFKA_ONLY[key]
        elif key.startswith("kafka."):
            why = (
                f"a Kafka client setting ({name[6:]}); rocketstore reads store files and has no Kafka client"
            )
        else:
            why = "not an option of the rocketstore data source"
            others = [r for r, names in KNOWN_OPTIONS.items() if key in {k.lower() for k in names}]
            if others:
                why = f"an option for {' and '.join(others)}, not {role}"
        raise ValueError(
            f"rocketstore {role}: option {name!r} is {why}. Known options (any case): {', '.join(known)}"
        )


def _bool_option(options, name: str, default: bool) -> bool:
    value = options.get(name.lower())
    if value is None:
        return default
    if value.strip().lower() in ("true", "1", "yes"):
        return True
    if value.strip().lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, not {value!r}")


@overload
def _int_option(options: Any, name: str, default: int) -> int: ...
@overload
def _int_option(options: Any, name: str, default: None) -> Optional[int]: ...
def _int_option(options: Any, name: str, default: Optional[int]) -> Optional[int]:
    value = options.get(name.lower())
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, not {value!r}") from None
    if number <= 0:
        raise ValueError(f"option {name} must be positive, not {number}")
    return number


_DURATION = re.compile(r"(\d+)\s*(ms|s|m|min|h|d)?")
_DURATION_S = {None: 0.001, "ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def _duration_option(options, name: str, default: str) -> float:
    """Seconds from a duration as Spark writes them: ``500ms``, ``30s``, ``15m``, ``1h``, ``2d``,
    a bare number of milliseconds."""
    value = options.get(name.lower(), default).strip().lower()
    match = _DURATION.fullmatch(value)
    if match is None:
        raise ValueError(f"option {name} must be a duration such as 30s, 15m or 500ms, not {value!r}")
    return int(match.group(1)) * _DURATION_S[match.group(2)]


def _store_paths(options) -> list[str]:
    if options.get("paths"):
        raw = options["paths"]
        paths = json.loads(raw) if raw.lstrip().startswith("[") else raw.split(",")
    elif options.get("path"):
        paths = [options["path"]]
    else:
        raise ValueError("rocketstore needs a store path: load(path), load([paths]) or option paths")
    paths = [os.path.abspath(p.strip()) for p in paths if p.strip()]
    if not paths:
        raise ValueError("rocketstore needs at least one store path")
    return paths


def _broker_name(root: str, options, many: bool) -> str:
    if options.get("brokername") and not many:
        return options["brokername"]
    return os.path.basename(root.rstrip(os.sep)) or root


def _select_topics(options, topics) -> dict:
    """{topic: queue ids or None (all)} the options select among ``topics``."""
    chosen = [k for k in ("subscribe", "subscribepattern", "assign") if options.get(k)]
    if len(chosen) > 1:
        raise ValueError("give only one of subscribe, subscribePattern and assign")
    if not chosen:
        return {t: None for t in topics}
    kind, value = chosen[0], options[chosen[0]]
    if kind == "subscribe":
        return {t.strip(): None for t in value.split(",") if t.strip()}
    if kind == "subscribepattern":
        pattern = re.compile(value)
        return {t: None for t in topics if pattern.fullmatch(t)}
    assign = json.loads(value)
    if not isinstance(assign, dict):
        raise ValueError('assign must be JSON like {"TopicA": [0, 1]}')
    return {t: {int(q) for q in ids} for t, ids in assign.items()}


def _offset_spec(options, name: str, default: str):
    value = options.get(name.lower(), default).strip()
    if value in ("earliest", "latest"):
        return value
    return _json_spec(name, value, "offset", EARLIEST)


def _json_spec(name: str, value: str, what: str, least: int) -> dict:
    """``{"topic": {"queueId": n}}`` (or ``{"topic": {"broker": {"queueId": n}}}``), each n an
    integer of at least ``least``: checked whole here, so a typo fails the query by name."""
    usage = f'{name} must be JSON {{"topic": {{"queueId": {what}}}}}'
    try:
        spec = json.loads(value)
    except ValueError:
        raise ValueError(f"{usage}, not {value!r}") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{usage}, not {value!r}")

    def check(level, path):
        if not isinstance(level, dict):
            raise ValueError(f"{usage}: {'.'.join(path)} is {level!r}")
        for key, item in level.items():
            if isinstance(item, dict) and len(path) < 2:
                check(item, path + [key])
                continue
            if isinstance(item, bool) or not isinstance(item, int) or item < least:
                hint = " (-2: earliest, -1: latest)" if least == EARLIEST else ""
                raise ValueError(
                    f"{name}: {'.'.join(path + [key])} is {item!r}; each {what} must be an "
                    f"integer of at least {least}{hint}"
                )

    for topic, level in spec.items():
        check(level, [topic])
    return spec


def _timestamp_spec(options, name: str) -> Optional[dict]:
    """``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``: per queue, ms since the epoch."""
    value = options.get(name.lower())
    if value is None:
        return None
    return _json_spec(name, value.strip(), "timestamp", 0)


def _lookup(spec: dict, topic, broker, queue_id, many) -> Optional[int]:
    per_topic = spec.get(topic)
    if per_topic is None:
        return None
    if many:
        per_topic = per_topic.get(broker, {})
    value = per_topic.get(str(queue_id))
    return None if value is None else int(value)


class Bounds:
    """A query's start or end per queue, by Kafka's precedence: ``startingTimestamp`` (one time
    for every queue) over ``startingOffsetsByTimestamp`` (per queue) over ``startingOffsets``;
    likewise for the ending options. A queue none of them names: its earliest (start) or latest
    (end) offset."""

    def __init__(self, options, end: bool, default: str):
        prefix = "ending" if end else "starting"
        self.end = end
        self.offsets = _offset_spec(options, f"{prefix}Offsets", default)
        self.by_time = _timestamp_spec(options, f"{prefix}OffsetsByTimestamp")
        self.time = _parse_timestamp_option(options, f"{prefix}Timestamp")
        strategy = options.get("startingoffsetsbytimestampstrategy", "latest").strip().lower()
        if strategy not in ("error", "latest"):
            raise ValueError(
                f"option startingOffsetsByTimestampStrategy must be error or latest, not {strategy!r}"
            )
        self.strict = strategy == "error" and not end

    def of(self, store, topic, broker, queue_id, lo, hi, many) -> int:
        """The queue's offset (``lo``/``hi`` its bounds); ``store`` answers times."""
        stamp = self.time
        if stamp is None and self.by_time is not None:
            stamp = _lookup(self.by_time, topic, broker, queue_id, many)
        if stamp is not None:
            offset = store.queue_offset_of_time(topic, queue_id, stamp)
            if offset >= hi and self.strict:
                raise ValueError(
                    f"{topic}-{queue_id} on {broker}: no message stored at or after {stamp} "
                    "(startingOffsetsByTimestampStrategy=error; latest starts such queues at "
                    "their latest offset)"
                )
            return offset
        value = _resolve(self.offsets, topic, broker, queue_id, lo, hi, many)
        if value is None:
            return hi if self.end else lo
        return value


def _resolve(spec, topic, broker, queue_id, lo, hi, many) -> Optional[int]:
    """One queue's offset from a startingOffsets/endingOffsets spec; ``lo``/``hi`` its bounds."""
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    value = _lookup(spec, topic, broker, queue_id, many)
    if value is None:
        return None
    return lo if value == EARLIEST else hi if value == LATEST else value


def _parse_timestamp_option(options, name: str) -> Optional[int]:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        stamp = int(value)
    except ValueError:
        raise ValueError(f"option {name} must be milliseconds since the epoch, not {value!r}") from None
    if stamp < 0:
        raise ValueError(f"option {name} must be milliseconds since the epoch, not {value!r}")
    return stamp
