"""The rewrite of a timer put (rocketstore.services.timer, whose docstring says what it does):
the deliver time a put names, and :class:`TimerPuts`, the put side of the timer service."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any, Optional

from rocketstore.base._checks import java_int
from rocketstore.errors import InvalidQueueIdError, InvalidTimerError, TimerTooFarError
from rocketstore.files.configfiles import PERM_READ, PERM_WRITE
from rocketstore.message import (
    PROPERTY_DELAY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
)
from rocketstore.services.parts import StoreParts
from rocketstore.services.schedule import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC

__all__ = [
    "TIMER_TOPIC",
    "PROPERTY_TIMER_OUT_MS",
    "PROPERTY_TIMER_DEQUEUE_MS",
    "TIMER_PROPERTIES",
    "JAVA_LONG_RANGE",
    "TimerPuts",
    "check_ms",
    "deliver_ms_of",
    "is_timer_put",
    "java_long",
]

TIMER_TOPIC = "rmq_sys_wheel_timer"  # TimerMessageStore.TIMER_TOPIC
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
#: The properties that make a put a timer message (MessageConst).
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
JAVA_LONG_RANGE = (-(1 << 63), (1 << 63) - 1)


def is_timer_put(properties: Optional[Mapping[str, str]]) -> bool:
    """Whether a put with these properties is a timer message (it names a TIMER_* time)."""
    return bool(properties) and any(name in properties for name in TIMER_PROPERTIES)  # type: ignore[operator]


def java_long(text: object) -> Optional[int]:
    """``Long.parseLong``: None where Java throws."""
    if not isinstance(text, str):
        return None
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if JAVA_LONG_RANGE[0] <= value <= JAVA_LONG_RANGE[1] else None


def check_ms(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTimerError(f"{name} must be an int of milliseconds, not {type(value).__name__}")
    if not JAVA_LONG_RANGE[0] <= value <= JAVA_LONG_RANGE[1]:
        raise InvalidTimerError(f"{name} {value} does not fit a Java long")
    return value


def deliver_ms_of(
    props: dict[str, str], deliver_at_ms: Optional[int], delay_ms: Optional[int], now: int
) -> int:
    """The deliver time of a timer put at ``now``, as 5.x's ``transformTimerMessage`` reads it;
    a keyword argument is written into ``props`` as the property a 5.x client would set."""
    named = [name for name in TIMER_PROPERTIES if name in props]
    if deliver_at_ms is not None and delay_ms is not None:
        raise InvalidTimerError("give deliver_at_ms or delay_ms, not both")
    if (deliver_at_ms is not None or delay_ms is not None) and named:
        raise InvalidTimerError(f"the properties already name a timer ({named[0]})")
    if len(named) > 1:
        raise InvalidTimerError(f"a message names one timer property, not {' and '.join(named)}")
    level = java_int(props[PROPERTY_DELAY]) if PROPERTY_DELAY in props else 0
    if level is None or level > 0:
        raise InvalidTimerError("a timer message cannot also have a DELAY level")
    if deliver_at_ms is not None:
        props[PROPERTY_TIMER_DELIVER_MS] = str(check_ms("deliver_at_ms", deliver_at_ms))
    elif delay_ms is not None:
        props[PROPERTY_TIMER_DELAY_MS] = str(check_ms("delay_ms", delay_ms))
    name = next(n for n in TIMER_PROPERTIES if n in props)
    value = java_long(props[name])
    if value is None:
        raise InvalidTimerError(f"the {name} property {props[name]!r} is not a decimal long")
    if name == PROPERTY_TIMER_DELAY_SEC:
        deliver = now + value * 1000
    elif name == PROPERTY_TIMER_DELAY_MS:
        deliver = now + value
    else:
        deliver = value
    return deliver


class TimerPuts:
    """The put side of :class:`~rocketstore.services.timer.TimerService` (its base): a timer put
    rewritten into rmq_sys_wheel_timer. The service sets these attributes."""

    _parts: StoreParts
    _codec: Any
    _round_robin: dict[str, itertools.count[int]]
    _topic_ready: bool
    _next_due: Optional[int]
    _wake: threading.Event
    clock: Callable[[], int]
    max_delay_ms: int

    def rewrite(
        self,
        topic: str,
        queue_id: int,
        properties: Optional[Mapping[str, str]],
        deliver_at_ms: Optional[int],
        delay_ms: Optional[int],
    ) -> tuple[str, int, Optional[Mapping[str, str]]]:
        """``(topic, queue_id, properties)`` of a put: rewritten into rmq_sys_wheel_timer when it
        is a timer message due in the future, else returned as given (module docstring)."""
        props = dict(properties) if properties else {}
        now = self.clock()
        deliver = deliver_ms_of(props, deliver_at_ms, delay_ms, now)
        if isinstance(queue_id, bool) or not isinstance(queue_id, int):
            raise InvalidQueueIdError(f"queue id must be an int, not {type(queue_id).__name__}")
        if deliver <= now:  # due already: a plain message (as 5.x stores it)
            return topic, queue_id, props
        if deliver - now > self.max_delay_ms:
            raise TimerTooFarError(
                f"due in {deliver - now} ms, beyond timer_max_delay_sec ({self.max_delay_ms // 1000} s)"
            )
        queue_id = self._parts.topics.queue_for_put(topic, queue_id, self._round_robin)
        if not self._topic_ready:
            self._parts.topics.ensure(TIMER_TOPIC, 1, perm=PERM_READ | PERM_WRITE)
            self._topic_ready = True
        props[PROPERTY_TIMER_OUT_MS] = str(deliver)
        props[PROPERTY_REAL_TOPIC] = topic
        props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        due = self._next_due
        if (due is None or deliver < due) and not self._wake.is_set():
            self._wake.set()  # the thread sleeps until a later time: let it look again
        return TIMER_TOPIC, 0, props

    def put(
        self,
        core: Any,
        topic: str,
        body: Any,
        queue_id: int,
        flag: int,
        wait: int,
        deliver_at_ms: Optional[int],
        delay_ms: Optional[int],
    ) -> Any:
        """A timer put with no tags, keys or properties (``topic`` a user topic the caller
        checked, ``queue_id`` and ``flag`` checked ints): :meth:`rewrite`'s checks, errors and
        properties, without building a dict, then the core's put. None (nothing done, the clock
        not read) when the value is not a plain int: the general path decides."""
        if delay_ms is None:
            name, value = PROPERTY_TIMER_DELIVER_MS, deliver_at_ms
        elif deliver_at_ms is None:
            name, value = PROPERTY_TIMER_DELAY_MS, delay_ms
        else:
            raise InvalidTimerError("give deliver_at_ms or delay_ms, not both")
        if value.__class__ is not int:
            return None
        if not JAVA_LONG_RANGE[0] <= value <= JAVA_LONG_RANGE[1]:
            check_ms("deliver_at_ms" if delay_ms is None else "delay_ms", value)
        now = self.clock()
        deliver = value if delay_ms is None else now + value
        if deliver <= now:  # due already: a plain message (as 5.x stores it)
            props = self._codec.encode_properties({name: str(value)})
            return core.put(topic, body, props, queue_id, flag, 0, 0, 0, 0, None, wait)
        if deliver - now > self.max_delay_ms:
            raise TimerTooFarError(
                f"due in {deliver - now} ms, beyond timer_max_delay_sec ({self.max_delay_ms // 1000} s)"
            )
        topics = self._parts.topics
        queue_id = topics.queue_for_put(topic, queue_id, self._round_robin)
        if not self._topic_ready:
            topics.ensure(TIMER_TOPIC, 1, perm=PERM_READ | PERM_WRITE)
            self._topic_ready = True
        due = self._next_due
        if (due is None or deliver < due) and not self._wake.is_set():
            self._wake.set()  # the thread sleeps until a later time: let it look again
        # rewrite()'s properties, encoded: the timer property, TIMER_OUT_MS, REAL_TOPIC, REAL_QID
        props = self._codec.timer_properties(name, value, deliver, topic, queue_id)
        return core.put(TIMER_TOPIC, body, props, 0, flag, 0, 0, 0, 0, None, wait)
