"""What other processes see and call: the live page's waits and wakes, a joined writer's
connection (serve_step), SwitchSafe, and the test seam of a shared append's publish.

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/live.pxi.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import struct
import sys
import time
from collections.abc import Iterable
from typing import Any, Optional

from rocketstore.errors import StoreClosedError

# ---- the live page (see cext/live.h and rocketstore.processes.live) ----

_LIVE_SIZE = 4096
_LIVE_SEQ, _LIVE_WAITERS, _LIVE_WROTE, _LIVE_ALWAYS_WAKE = 8, 12, 16, 40
LIVE_SLOTS, _LIVE_SLOT0, _LIVE_MAX_WAIT = 64, 64, 64  # see cext/live.h
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
#: SYS_futex by machine (Linux); elsewhere a waiter polls the word every millisecond.
_SYS_FUTEX = {
    "x86_64": 202,
    "amd64": 202,
    "aarch64": 98,
    "arm64": 98,
    "riscv64": 98,
    "ppc64le": 221,
    "s390x": 238,
}


def _find_futex() -> Any:
    number = _SYS_FUTEX.get(platform.machine().lower())
    if not sys.platform.startswith("linux") or number is None:
        return None
    try:
        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    return lambda *args: syscall(number, *args)


_futex = _find_futex()


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def live_word(page: Any) -> Any:
    if len(page) < _LIVE_SIZE:
        raise ValueError(f"a live page is {_LIVE_SIZE} bytes")
    return ctypes.c_uint32.from_buffer(page, _LIVE_SEQ)


def live_seq(page: Any) -> int:
    """The live page's sequence word."""
    return int(live_word(page).value)


#: The longest call or reply a joined writer's connection carries (bytes).
MAX_FRAME = 1 << 30


def _recv_exactly(fd: int, n: int) -> Optional[bytes]:
    parts, left = [], n
    while left:
        part = os.read(fd, left)
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def serve_step(fd: int, reply: bytes) -> Optional[bytes]:
    """The owner's side of a joined writer's connection (rocketstore.processes.writers): send ``reply`` (a
    whole frame: 8-byte little-endian length, then the payload; b"" for none), then wait for the
    next frame; its payload, or None at the end of the stream. (The compiled twin does this
    without the GIL.)"""
    view = memoryview(reply)
    while view:
        view = view[os.write(fd, view) :]
    head = _recv_exactly(fd, 8)
    if head is None:
        return None
    size = int.from_bytes(head, "little")
    if size > MAX_FRAME:
        raise ValueError(f"a frame over {MAX_FRAME} bytes")
    return _recv_exactly(fd, size)


class SwitchSafe:
    """A following store's read method (rocketstore.store puts it over the class's, as an
    instance attribute): the call, run again when the store opened again under it (a writer's
    crash recovery, a takeover), rather than failing with the closed parts it was using.
    ``store_ref`` is a weak reference to the store; ``method`` the class's function; ``fast``
    (optional) what the first try calls instead, with the arguments alone (the store's
    FastReads method, which runs the class's own when it cannot answer)."""

    __slots__ = ("_store", "_method", "_fast")

    def __init__(self, store_ref: Any, method: Any, fast: Any = None) -> None:
        self._store = store_ref
        self._method = method
        self._fast = fast

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        store = self._store()
        if store is None:
            raise StoreClosedError("the store is closed")
        switches = store._switches  # noqa: SLF001 (the store's switch state: SwitchSafe goes with the facade's roles)
        try:
            if self._fast is not None:
                return self._fast(*args, **kwargs)
            return self._method(store, *args, **kwargs)
        except Exception:
            if not store._switched_since(switches):  # noqa: SLF001 (the store's switch state: SwitchSafe goes with the facade's roles)
                raise
        return store._switch_safe(functools.partial(self._method, store, *args, **kwargs))  # noqa: SLF001 (the store's switch state: SwitchSafe goes with the facade's roles)


def live_wake(page: Any) -> None:
    """Bump the live page's sequence word and wake every process waiting on it."""
    word = live_word(page)
    word.value = (word.value + 1) & 0xFFFFFFFF
    if _futex is not None:
        _futex(ctypes.byref(word), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


def _live_spin(
    page: Any,
    words: list[int],
    seen: list[int],
    page_seen: Optional[int],
    spin_us: int,
    deadline: Optional[float],
) -> bool:
    """cext/live.h's ``rs_live_spin``: look at the words (and the sequence word when
    ``page_seen`` is given) until one moved, for at most ``spin_us`` microseconds and never past
    ``deadline``; True if one moved."""
    if spin_us <= 0:
        return False
    until = time.monotonic() + spin_us / 1e6
    if deadline is not None:
        until = min(until, deadline)
    while True:
        if any(struct.unpack_from("<I", page, at)[0] != s for at, s in zip(words, seen)):
            return True
        if page_seen is not None and live_seq(page) != page_seen:
            return True
        if time.monotonic() >= until:
            return False


def live_wait(page: Any, seen: int, timeout_ms: int, spin_us: int = 0) -> bool:
    """Sleep until the live page's sequence word is no longer ``seen`` or ``timeout_ms`` passes
    (< 0: no limit); True if it changed. The pure twin cannot count itself in atomically among
    the waiters, so it sets the page's always-wake flag: writers then wake on every put.
    ``spin_us``: spin on the word up to that long before sleeping."""
    word = live_word(page)
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000.0
    if _live_spin(page, [], [], seen, spin_us, deadline):
        return True
    struct.pack_into("<I", page, _LIVE_ALWAYS_WAKE, 1)
    while word.value == seen:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        if _futex is None:
            time.sleep(0.001 if left is None else min(0.001, left))
            continue
        ts = None
        if left is not None:
            ts = _Timespec(int(left), int((left - int(left)) * 1e9))
        _futex(ctypes.byref(word), _FUTEX_WAIT, seen, None if ts is None else ctypes.byref(ts), None, 0)
    return True


def live_publish(page: Any, wrote: int, slots: Iterable[int] = ()) -> None:
    """Whole records end at ``wrote``; records of the topics of ``slots`` were put (cext/live.h's
    ``rs_live_publish_slots``)."""
    seen = struct.unpack_from("<q", page, _LIVE_WROTE)[0]
    if seen == wrote:
        return  # nothing new (a failed put, a close): no byte of the page changes
    always = struct.unpack_from("<I", page, _LIVE_ALWAYS_WAKE)[0]
    if seen < wrote:  # only ever forward (writers of several processes publish in turn)
        struct.pack_into("<q", page, _LIVE_WROTE, wrote)
    words = [(_LIVE_SLOT0 + 8 * slot, _LIVE_SLOT0 + 8 * slot + 4) for slot in sorted(slots)]
    for at, waiters_at in [*words, (_LIVE_SEQ, _LIVE_WAITERS)]:
        word = ctypes.c_uint32.from_buffer(page, at)
        word.value = (word.value + 1) & 0xFFFFFFFF
        if (always or struct.unpack_from("<I", page, waiters_at)[0]) and _futex is not None:
            _futex(ctypes.byref(word), _FUTEX_WAKE, 0x7FFFFFFF, None, None, 0)


def live_wait_words(
    page: Any, words: Any, seen: Any, page_seen: int, timeout_ms: int, spin_us: int = 0
) -> bool:
    """Sleep until one of the live page's u32 words at byte offsets ``words`` no longer holds its
    value in ``seen``, or ``timeout_ms`` passes (< 0: no limit); True if one changed. The pure
    twin sets the page's always-wake flag (it cannot count itself in atomically) and waits on the
    page's sequence word, which every put moves (``page_seen``: the caller's look at it).
    ``spin_us``: spin on the words up to that long before sleeping."""
    words, seen = list(words), list(seen)
    n = len(words)
    if n < 1 or n > _LIVE_MAX_WAIT or len(seen) != n:
        raise ValueError(f"1 to {_LIVE_MAX_WAIT} words, each with the value seen")
    for at in words:
        if at < _LIVE_SLOT0 or at > _LIVE_SIZE - 8 or at % 8:
            raise ValueError(f"{at} is not a slot word of the live page")
    deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000.0
    if _live_spin(page, words, seen, None, spin_us, deadline):
        return True
    struct.pack_into("<I", page, _LIVE_ALWAYS_WAKE, 1)
    while True:
        if any(struct.unpack_from("<I", page, at)[0] != s for at, s in zip(words, seen)):
            return True
        if live_seq(page) != page_seen:
            return True  # a put of another topic, or of one of these: the caller looks again
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        if not live_wait(page, page_seen, -1 if left is None else max(1, int(left * 1000))):
            return False


#: Tests only (_debug_publish_fault): the step of a shared append's publish after which this
#: process ends, 0 for none.
_debug_publish_step = 0

#: The steps of a shared append's publish a test can end the process after (see the compiled twin).
PUBLISH_STEPS = 6


def _debug_publish_fault(step: int) -> None:
    """Tests only: the next shared append of this process ends it (``os._exit(86)``) right after
    step ``step`` (1 .. PUBLISH_STEPS) of its publish, as a ``kill -9`` there would; 0: never."""
    global _debug_publish_step
    if not 0 <= step <= PUBLISH_STEPS:
        raise ValueError(f"step must be 0 to {PUBLISH_STEPS}, not {step}")
    _debug_publish_step = int(step)


def publish_fault(step: int) -> None:
    if _debug_publish_step == step:
        os._exit(86)


def publish_fault_armed(step: int) -> bool:
    """Whether a test asked the next shared append to end this process after ``step``."""
    return _debug_publish_step == step
