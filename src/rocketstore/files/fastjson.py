"""fastjson 1.x's JSON dialect, which a RocketMQ broker's config files are written in.

fastjson is not strict JSON: a ``Map<Integer, …>`` is written with unquoted integer keys
(``{0:250,1:250}``), and files are pretty-printed with tabs. :func:`loads_fastjson` is a small
tokenizing parser that reads both quoted and unquoted keys (an unquoted integer key becomes a
Python ``int``; text inside strings is never touched), and :func:`dumps_fastjson` writes exactly
fastjson's pretty layout, ``int`` keys unquoted, so a Java broker reads the files back.
"""

from __future__ import annotations

import json.decoder
import math
import re
from typing import Any, NoReturn

from rocketstore.errors import StoreConfigError

__all__ = ["loads_fastjson", "dumps_fastjson"]

# ---------------------------------------------------------------------------------------------
# Lenient reader

_WS = re.compile(r"[ \t\n\r\f\v\ufeff]*")
_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?")
_INT_KEY = re.compile(r"-?\d+")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_LITERALS = {"true": True, "false": False, "null": None}
_MAX_DEPTH = 512
_scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]  # public since 2.6, not in typeshed


def _int_text(text: str) -> int:
    """``int(text)`` of a decimal the grammar matched; Python refuses more than 4300 digits
    (``sys.get_int_max_str_digits``) with a bare ValueError: that is bad config, not a crash."""
    try:
        return int(text)
    except ValueError:
        raise StoreConfigError(f"integer of {len(text)} digits is out of range") from None


def loads_fastjson(text: str) -> Any:
    """Parse fastjson output: JSON plus unquoted keys (integers become ``int``, identifiers
    ``str``), any whitespace, trailing commas. Raises :class:`StoreConfigError` on bad input.
    """
    if isinstance(text, (bytes, bytearray, memoryview)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StoreConfigError(f"config text is not UTF-8: {exc}") from None
    if not isinstance(text, str):
        raise StoreConfigError(f"config text must be str or bytes, not {type(text).__name__}")
    parser = _Parser(text)
    try:
        value = parser.value(0)
        parser.skip_ws()
    except RecursionError:
        raise StoreConfigError("config text is nested too deeply") from None
    if parser.pos != len(text):
        parser.fail("trailing text after the value")
    return value


class _Parser:
    __slots__ = ("text", "pos")

    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> NoReturn:
        line = self.text.count("\n", 0, self.pos) + 1
        raise StoreConfigError(f"bad fastjson at line {line}, offset {self.pos}: {what}")

    def skip_ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]  # \s* always matches

    def string(self) -> str:
        try:
            value, self.pos = _scanstring(self.text, self.pos + 1, False)
        except ValueError as exc:
            self.fail(f"bad string ({exc})")
        return value

    def value(self, depth: int) -> Any:
        self.skip_ws()
        text, pos = self.text, self.pos
        if pos >= len(text):
            self.fail("unexpected end of text")
        ch = text[pos]
        if ch == "{":
            return self.obj(depth + 1)
        if ch == "[":
            return self.array(depth + 1)
        if ch == '"':
            return self.string()
        m = _NUMBER.match(text, pos)
        if m:
            self.pos = m.end()
            if m.group(1) is None and m.group(2) is None:
                try:
                    return _int_text(m.group())
                except StoreConfigError as exc:
                    self.fail(str(exc))
            number = float(m.group())
            if not math.isfinite(number):  # 1e999: no double holds it, and it cannot be written back
                self.fail(f"number {m.group()[:20]!r} is out of range")
            return number
        m = _IDENT.match(text, pos)
        if m and m.group() in _LITERALS:
            self.pos = m.end()
            return _LITERALS[m.group()]
        self.fail(f"unexpected {ch!r}")

    def key(self) -> Any:
        text, pos = self.text, self.pos
        ch = text[pos] if pos < len(text) else ""
        if ch == '"':
            return self.string()
        m = _INT_KEY.match(text, pos)
        if m:
            self.pos = m.end()
            try:
                return _int_text(m.group())
            except StoreConfigError as exc:
                self.fail(str(exc))
        m = _IDENT.match(text, pos)
        if m:
            self.pos = m.end()
            return m.group()
        self.fail(f"expected a key, found {ch!r}" if ch else "expected a key, found the end")

    def obj(self, depth: int) -> dict:
        if depth > _MAX_DEPTH:
            self.fail("nested too deeply")
        self.pos += 1
        result: dict = {}
        text = self.text
        while True:
            self.skip_ws()
            if self.pos < len(text) and text[self.pos] == "}":
                self.pos += 1
                return result
            key = self.key()
            self.skip_ws()
            if self.pos >= len(text) or text[self.pos] != ":":
                self.fail("expected ':' after a key")
            self.pos += 1
            result[key] = self.value(depth)
            self.skip_ws()
            if self.pos < len(text) and text[self.pos] == ",":
                self.pos += 1
            elif self.pos < len(text) and text[self.pos] == "}":
                self.pos += 1
                return result
            else:
                self.fail("expected ',' or '}'")

    def array(self, depth: int) -> list:
        if depth > _MAX_DEPTH:
            self.fail("nested too deeply")
        self.pos += 1
        result: list = []
        text = self.text
        while True:
            self.skip_ws()
            if self.pos < len(text) and text[self.pos] == "]":
                self.pos += 1
                return result
            result.append(self.value(depth))
            self.skip_ws()
            if self.pos < len(text) and text[self.pos] == ",":
                self.pos += 1
            elif self.pos < len(text) and text[self.pos] == "]":
                self.pos += 1
                return result
            else:
                self.fail("expected ',' or ']'")


# ---------------------------------------------------------------------------------------------
# Writer

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\ud800-\udfff]')


def _escape_char(m: re.Match) -> str:
    ch = m.group()
    return _ESCAPES.get(ch) or f"\\u{ord(ch):04x}"


def _quote(s: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, s) + '"'


def dumps_fastjson(obj: Any, *, pretty: bool = True) -> str:
    """Serialize like fastjson's ``toJSONString(obj, prettyFormat)``.

    Pretty (fastjson's ``PrettyFormat``): tab indentation, no space after ``:``, no trailing
    newline; each ``str``-keyed entry starts a new line while ``int`` keys (a Java
    ``Map<Integer, …>``) are written unquoted on the same line, as in ``{0:250,1:249\\n\\t}``;
    the closing brace of a non-empty map goes on its own line; lists of two or more items put
    one item per line. Null map values are skipped (fastjson omits them). Map entries are written
    in dict order: fastjson sorts them (``SortField``), so the tables pass sorted dicts. Keys
    other than ``str``/``int`` raise :class:`StoreConfigError`. Non-ASCII text is written as is
    (UTF-8 when saved); lone surrogates are ``\\u`` escaped.
    """
    out: list[str] = []
    _write(obj, out, 0, pretty)
    return "".join(out)


def _write(obj: Any, out: list, depth: int, pretty: bool) -> None:  # noqa: C901 (one branch per JSON type, as fastjson's serializer)
    if depth > _MAX_DEPTH:
        raise StoreConfigError("value is nested too deeply to write")
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(str(int(obj)))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise StoreConfigError(f"{obj!r} has no JSON form")
        out.append(repr(obj))
    elif isinstance(obj, str):
        out.append(_quote(obj))
    elif isinstance(obj, dict):
        # MapSerializer: a str key starts a new line, an int key does not; null values are
        # skipped; the closing brace goes on its own line whenever the map is not empty.
        if not obj:
            out.append("{}")
            return
        out.append("{")
        first = True
        for key, value in obj.items():
            if value is None:
                continue
            if not first:
                out.append(",")
            first = False
            if isinstance(key, str):
                if pretty:
                    out.append("\n" + "\t" * (depth + 1))
                out.append(_quote(key))
            elif isinstance(key, int) and not isinstance(key, bool):
                out.append(str(int(key)))
            else:
                raise StoreConfigError(f"map key {key!r} is neither str nor int")
            out.append(":")
            _write(value, out, depth + 1, pretty)
        if pretty:
            out.append("\n" + "\t" * depth)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        # ListSerializer: one item per line only when there are two or more
        if not obj:
            out.append("[]")
            return
        if len(obj) == 1 or not pretty:
            out.append("[")
            for i, value in enumerate(obj):
                if i:
                    out.append(",")
                _write(value, out, depth, pretty)
            out.append("]")
            return
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            out.append("\n" + "\t" * (depth + 1))
            _write(value, out, depth + 1, pretty)
        out.append("\n" + "\t" * depth + "]")
    else:
        raise StoreConfigError(f"cannot write a {type(obj).__name__} as JSON")
