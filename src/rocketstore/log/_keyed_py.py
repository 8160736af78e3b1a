"""A put's TAGS, KEYS and plain properties encoded straight from its arguments, and the plain
Messages put_plain_messages reads.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/message.pxi.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any, Optional, TypeGuard

from rocketstore.message import SPECIAL_PROPERTIES, Message


def body_crc(body: Any) -> int:
    """A record's BODYCRC: the CRC32 of its body, as a positive int32 (0 for an empty body)."""
    return zlib.crc32(body) & 0x7FFFFFFF if len(body) else 0


#: The longest encoded properties a record holds (a signed short).
MAX_PROPERTIES_LENGTH = 32767


def _plain_text(value: object) -> Optional[bytes]:
    """The UTF-8 of an exact, non-empty str without a separator (0x01, 0x02), else None."""
    if type(value) is not str or not value or "\x01" in value or "\x02" in value:
        return None
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the general path raises for it
        return None


def keyed_properties(tags: Any, keys: Any, properties: Any = None) -> Optional[bytes]:
    """A plain ``properties`` dict's items, then TAGS and KEYS, encoded as
    ``put_properties(tags, keys, properties)`` encodes them (``b""`` for none), or None when one
    is not the plain shape (an exact, non-empty str without 0x01 or 0x02 that UTF-8 can encode;
    keys also a non-empty list or tuple of such; properties an exact dict of such, no name in
    SPECIAL_PROPERTIES) or the result exceeds 32767 bytes: the general path then encodes or
    refuses them."""
    out = b""
    if properties is not None:
        if type(properties) is not dict:
            return None
        parts = []
        for name, value in properties.items():
            name_text = _plain_text(name)  # an exact str first: hashing it runs no user code
            if name_text is None or name in SPECIAL_PROPERTIES:
                return None
            value_text = _plain_text(value)
            if value_text is None:
                return None
            parts.append(name_text + b"\x01" + value_text + b"\x02")
        out = b"".join(parts)
    if tags is not None:
        text = _plain_text(tags)
        if text is None:
            return None
        out += b"TAGS\x01" + text + b"\x02"
    if keys is not None:
        if type(keys) in (list, tuple):
            texts = [_plain_text(k) for k in keys]
            if not texts or None in texts:
                return None
            text = b" ".join(texts)  # type: ignore[arg-type]  # no None: checked
        else:
            text = _plain_text(keys)
            if text is None:
                return None
        out += b"KEYS\x01" + text + b"\x02"
    return out if len(out) <= MAX_PROPERTIES_LENGTH else None


def plain_int(value: object, lo: int, hi: int) -> bool:
    return type(value) is int and lo <= value <= hi


def _reads_as_message(m: object) -> TypeGuard[Message]:
    """Whether put_plain_messages reads ``m``, by its exact type: this twin's Message,
    or the compiled twin's when that module is loaded (a store of this implementation in a
    compiled build is handed rocketstore.Message, the compiled type). Looked up, not imported:
    this module is the pure twin, and may be all there is."""
    t = type(m)
    if t is Message:
        return True
    compiled = sys.modules.get("rocketstore.log._store")
    return compiled is not None and t is getattr(compiled, "Message", None)


def plain_item(m: object, user_topics: Any) -> Optional[tuple[Any, ...]]:
    """put_many's item of a plain Message (see CommitLogCore.put_plain_messages), else None."""
    if not _reads_as_message(m):
        return None
    try:
        topic, body, qid, flag, born = m.topic, m.body, m.queue_id, m.flag, m.born_timestamp
        if not (
            type(topic) is str
            and topic in user_topics
            and type(body) is bytes
            and plain_int(qid, -1, INT32_MAX)
            and plain_int(flag, INT32_MIN, INT32_MAX)
            and plain_int(born, INT64_MIN, INT64_MAX)
            and plain_int(m.sys_flag, 0, 0)
            and plain_int(m.reconsume_times, 0, 0)
        ):
            return None
        props = keyed_properties(m.tags, m.keys, m.properties)
    except AttributeError:  # a slot left unset
        return None
    if props is None:
        return None
    return (topic, body, props, qid, flag, born, 0, 0, None)


INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
