"""The one place that chooses between the compiled hot paths and their pure-Python twins.

``ROCKETSTORE_NO_EXTENSIONS=1`` forces the pure-Python twins.
``ROCKETSTORE_REQUIRE_EXTENSIONS=1`` turns a missing compiled module into an ImportError.

Each implementation is an :class:`Implementation`: a named bundle of the twin modules
(``crc32``, ``codec``, ``scan``, ``store``, ``index``), so a store, or a test, can be pinned to one of them.
"""

from __future__ import annotations

import importlib
import warnings
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rocketstore.message import Message

__all__ = [
    "Implementation",
    "PURE",
    "COMPILED",
    "DEFAULT",
    "MESSAGE_TYPES",
    "NO_EXTENSIONS",
    "REQUIRE_EXTENSIONS",
    "FALLBACK_REASON",
    "describe",
]


from rocketstore.format._hotstate import NO_EXTENSIONS, REQUIRE_EXTENSIONS

_TWINS = ("crc32", "codec", "scan", "store", "index")


class Implementation:
    """The twin modules of one implementation: ``.crc32``, ``.codec``, ``.scan``, ``.store``, ``.index``."""

    __slots__ = ("name", "compiled") + _TWINS

    # The twins' API is their pure modules' (the compiled ones match it: tests/test_twin_parity.py);
    # typed Any here because which module fills each place is decided at run time.
    crc32: Any
    codec: Any
    scan: Any
    store: Any
    index: Any

    def __init__(self, name: str, compiled: bool, modules: dict[str, ModuleType]) -> None:
        self.name = name
        self.compiled = compiled
        self.crc32 = modules["crc32"]
        self.codec = modules["codec"]
        self.scan = modules["scan"]
        self.store = modules["store"]
        self.index = modules["index"]

    def __repr__(self) -> str:
        return f"<rocketstore implementation {self.name!r}>"


#: The layer folder of each twin pair.
_PACKAGE = {"crc32": "format", "codec": "format", "scan": "format", "store": "log", "index": "queues"}


def _load(suffix: str) -> dict[str, ModuleType]:
    return {twin: importlib.import_module(f"rocketstore.{_PACKAGE[twin]}._{twin}{suffix}") for twin in _TWINS}


PURE = Implementation("py", False, _load("_py"))

COMPILED: Implementation | None
IMPORT_ERROR: ImportError | None = None
if NO_EXTENSIONS:
    COMPILED = None
else:
    try:
        COMPILED = Implementation("c", True, _load(""))
    except ImportError as exc:  # pragma: no cover - depends on the build
        if REQUIRE_EXTENSIONS:
            raise ImportError(
                "ROCKETSTORE_REQUIRE_EXTENSIONS=1 but the compiled modules did not import: " + str(exc)
            ) from exc
        COMPILED = None
        IMPORT_ERROR = exc

#: Why the default is the pure build although nobody asked for it ("" when it is not).
FALLBACK_REASON = "" if IMPORT_ERROR is None else f"the compiled modules did not import ({IMPORT_ERROR})"
if FALLBACK_REASON:
    from rocketstore.errors import PureBuildWarning

    warnings.warn(
        f"rocketstore runs its pure-Python build, 10-25x slower: {FALLBACK_REASON}. Install a C compiler "
        "and reinstall rocketstore (docs/index.md, Install), or set ROCKETSTORE_NO_EXTENSIONS=1 to choose "
        "the pure build and silence this warning.",
        PureBuildWarning,
        stacklevel=2,
    )

DEFAULT: Implementation = COMPILED if COMPILED is not None else PURE

#: Every Message class a put takes: the pure twin's (rocketstore.message.Message) and, when it is
#: built, the compiled twin's (rocketstore.Message then). They are alike in fields, arguments,
#: repr and pickling; check a message with ``isinstance(m, MESSAGE_TYPES)``.
MESSAGE_TYPES: tuple[type[Message], ...] = (PURE.store.Message,) + (
    () if COMPILED is None else (COMPILED.store.Message,)
)


def describe(name: str) -> str:
    """``name`` ("c" or "py") with what a user should know about it, for the CLI's lines."""
    if name == "c":
        return "c implementation"
    if name == DEFAULT.name and FALLBACK_REASON:
        return "py implementation: the slow fallback, " + FALLBACK_REASON
    return "py implementation"


def get(name: str | None = None) -> Implementation:
    """The implementation named ``"c"`` or ``"py"`` (``None``: the default)."""
    if name is None:
        return DEFAULT
    if name == "py":
        return PURE
    if name == "c":
        if COMPILED is None:
            raise ImportError(
                "rocketstore's compiled modules are not available"
                + (f": {IMPORT_ERROR}" if IMPORT_ERROR else "")
            )
        return COMPILED
    raise ValueError(f"unknown implementation {name!r} (expected 'c' or 'py')")
