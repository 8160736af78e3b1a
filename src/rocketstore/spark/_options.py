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

EARLIEST, LATEST = -2, -1
DEFAULT_MAX_RECORDS_PER_PARTITION = 1_000_000
DEFAULT_ARROW_BATCH_ROWS = 32768
FORMAT_NAME = "rocketstore"


def arrow_schema(columns=_COLUMN_NAMES):
    """The pyarrow schema Spark expects for ``columns`` (types and nullability must match
    exactly: Spark checks ``Schema.equals``); every field is nullable, as Spark's are."""
    import pyarrow as pa

    types = {
        "STRING": pa.string(),
        "INT": pa.int32(),
        "BIGINT": pa.int64(),
        "BINARY": pa.binary(),
        "MAP<STRING,STRING>": pa.map_(pa.string(), pa.string()),
        "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    }
    kinds = dict(COLUMNS)
    return pa.schema([pa.field(name, types[kinds[name]], nullable=True) for name in columns])


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
    spec = json.loads(value)
    if not isinstance(spec, dict):
        raise ValueError(f'{name} must be earliest, latest or JSON {{"topic": {{"queueId": offset}}}}')
    return spec


def _resolve(spec, topic, broker, queue_id, lo, hi, many) -> Optional[int]:
    """One queue's offset from a startingOffsets/endingOffsets spec; ``lo``/``hi`` its bounds."""
    if spec == "earliest":
        return lo
    if spec == "latest":
        return hi
    per_topic = spec.get(topic)
    if per_topic is None:
        return None
    if many:
        per_topic = per_topic.get(broker, {})
    value = per_topic.get(str(queue_id))
    if value is None:
        return None
    value = int(value)
    return lo if value == EARLIEST else hi if value == LATEST else value


def _parse_timestamp_option(options, name: str) -> Optional[int]:
    value = options.get(name.lower())
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"option {name} must be milliseconds since the epoch, not {value!r}") from None
