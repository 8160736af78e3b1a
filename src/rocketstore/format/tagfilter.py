"""Tag subscription expressions (``"TagA || TagB"``) and the test of a unit's tagsCode against them,
as RocketMQ's ``FilterAPI`` and broker do."""

from __future__ import annotations

from typing import Optional, Union

import numpy as np

from rocketstore.errors import InvalidMessageError
from rocketstore.format._codec_py import java_hash

__all__ = ["TagFilter", "MATCH_ALL", "as_filter"]

#: tagsCodes at or below this are ConsumeQueueExt addresses, not hashes (§2).
_EXT_ADDR_MAX = -(1 << 31) - 1

#: Java ``String.trim()`` strips every char <= U+0020, not Unicode whitespace.
_JAVA_TRIM = "".join(map(chr, range(0x21)))

_SUB_ALL = "*"


def _int32(value: int) -> int:
    """Java ``(int) value``: the low 32 bits, signed."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class TagFilter:
    """A tag subscription expression (``"TagA || TagB"``), parsed as RocketMQ's ``FilterAPI``.

    ``None``, ``""`` and ``"*"`` subscribe to everything (``match_all``). Anything else is split on
    ``"||"``; each piece is trimmed as Java's ``String.trim`` does and empty pieces are dropped,
    so ``" * "`` subscribes to the literal tag ``"*"`` and ``"||"`` to nothing at all.
    ``tags`` holds the tag strings, ``codes`` their Java hashes (int32, as the broker compares
    ``(int) tagsCode``).
    """

    __slots__ = ("expression", "match_all", "tags", "codes", "code_tuple", "_code_array")

    def __init__(self, expression: Optional[str] = None):
        if expression is not None and not isinstance(expression, str):
            raise InvalidMessageError(
                f"a tag expression must be a str or None, not {type(expression).__name__}"
            )
        self.expression = _SUB_ALL if expression in (None, "", _SUB_ALL) else expression
        self.match_all = self.expression == _SUB_ALL
        if self.match_all:
            tags: frozenset[str] = frozenset()
        else:
            pieces = (piece.strip(_JAVA_TRIM) for piece in self.expression.split("||"))
            tags = frozenset(piece for piece in pieces if piece)
        self.tags = tags
        self.codes = frozenset(java_hash(tag) for tag in tags)
        self.code_tuple = tuple(sorted(self.codes))
        self._code_array = np.array(self.code_tuple, dtype=np.int32)

    @classmethod
    def parse(cls, expression: Optional[str]) -> TagFilter:
        """The filter for a subscription expression (see the class docstring); the filters of
        the last few hundred expressions are kept, since consumers pull with the same one."""
        if cls is TagFilter and (expression is None or type(expression) is str):
            found = _PARSED.get(expression)
            if found is None:
                found = cls(expression)
                if len(_PARSED) >= 256:
                    _PARSED.clear()
                _PARSED[expression] = found
            return found
        return cls(expression)

    def matches_code(self, tags_code: int) -> bool:
        """Broker-side test of one unit's tagsCode (§4.3)."""
        if self.match_all or tags_code <= _EXT_ADDR_MAX:
            return True
        return _int32(int(tags_code)) in self.codes

    def mask(self, codes: np.ndarray) -> np.ndarray:
        """:meth:`matches_code` over an int64 array (any byte order): a bool array of its shape."""
        codes = np.asarray(codes)
        if self.match_all:
            return np.ones(codes.shape, dtype=bool)
        # astype wraps modulo 2**32, which is exactly Java's (int) narrowing
        hit = np.isin(codes.astype(np.int32), self._code_array)
        mask: np.ndarray = hit | (codes <= _EXT_ADDR_MAX)
        return mask

    def matches_tag(self, tag: Optional[str]) -> bool:
        """Client-side exact re-check of a message's real TAGS value."""
        return self.match_all or (tag is not None and tag in self.tags)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TagFilter):
            return NotImplemented
        return (self.match_all, self.tags) == (other.match_all, other.tags)

    def __hash__(self) -> int:
        return hash((self.match_all, self.tags))

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"


_PARSED: dict[Optional[str], TagFilter] = {}
#: the filter of ``None``: every message
MATCH_ALL = TagFilter()


def as_filter(tag_filter: Union[TagFilter, str, None]) -> TagFilter:
    """``tag_filter`` itself, or the filter of an expression (``None``: :data:`MATCH_ALL`)."""
    if isinstance(tag_filter, TagFilter):
        return tag_filter
    if tag_filter is None:
        return MATCH_ALL
    return TagFilter(tag_filter)
