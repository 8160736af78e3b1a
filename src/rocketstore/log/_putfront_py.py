"""Puts at the engine's speed: MessageStore.put's common shapes in one call (PutFront).

Part of the pure-Python twin of ``rocketstore.log._store``, gathered by
:mod:`rocketstore.log._store_py`; the compiled twin's is cext/store/putfront.pxi.
"""

from __future__ import annotations

from typing import Any

from rocketstore.errors import StoreClosedError
from rocketstore.log._core_py import WAIT_FUTURE, CommitLogCore
from rocketstore.log._keyed_py import INT32_MAX, INT32_MIN, plain_int


def keys_plain(keys: Any) -> bool:
    """Whether ``keys`` are plainly present, as a compacted topic's put needs them: an exact str
    whose first character is printable ASCII (not blank). Any other keys are the careful path's
    to check."""
    return type(keys) is str and keys != "" and "!" <= keys[0] <= "~"


class PutFront:
    """A writing store's ``put`` (rocketstore.store installs ``PutFront(...).put`` as the
    store's ``put``): the common shapes, ``put(topic, body)`` and ``put(topic, body, tags=...,
    keys=..., properties={...})`` of a topic already checked, go straight into the core, also of
    a compacted topic already checked (in ``keyed``) when the call's keys are plainly there
    (:func:`keys_plain`); every other call (another shape, bad input, a closed core, keys the
    careful path checks) is ``general(store, ...)``, which is
    :meth:`rocketstore.MessageStore.put` itself. ``put_pipelined`` is the same for the store's
    ``put_pipelined`` (``general_pipelined``), a future in place of the result. The compiled
    twin does the same in one C call."""

    __slots__ = ("_core", "_user_topics", "_keyed", "_store_ref", "_general", "_general_pipelined")

    def __init__(
        self,
        core: CommitLogCore,
        user_topics: set[str],
        keyed: set[str],
        store_ref: Any,
        general: Any,
        general_pipelined: Any,
    ) -> None:
        if not isinstance(core, CommitLogCore) or type(user_topics) is not set or type(keyed) is not set:
            raise TypeError("PutFront needs a CommitLogCore and two sets")
        self._core, self._user_topics, self._keyed, self._store_ref = core, user_topics, keyed, store_ref
        self._general, self._general_pipelined = general, general_pipelined

    def put(
        self,
        topic: Any,
        body: Any = None,
        *,
        tags: Any = None,
        keys: Any = None,
        properties: Any = None,
        queue_id: Any = -1,
        flag: Any = 0,
        durable: Any = None,
        delay_level: Any = None,
        deliver_at_ms: Any = None,
        delay_ms: Any = None,
        compress: Any = None,
    ) -> Any:
        """Store one message; see :meth:`rocketstore.MessageStore.put`."""
        if (
            compress is None
            and delay_level is None
            and deliver_at_ms is None
            and delay_ms is None
            and (durable is None or durable is True or durable is False)
        ):
            wait = -1 if durable is None else (1 if durable else 0)
            done = self._one_call(topic, body, tags, keys, properties, queue_id, flag, wait)
            if done is not None:
                return done
        return self._general(
            self._store(),
            topic,
            body,
            tags=tags,
            keys=keys,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            durable=durable,
            delay_level=delay_level,
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
            compress=compress,
        )

    def _store(self) -> Any:
        """The store this front puts for (the general path's first argument), while it lives."""
        store = self._store_ref()
        if store is None:
            raise StoreClosedError("the store is closed")
        return store

    def _one_call(
        self,
        topic: Any,
        body: Any,
        tags: Any,
        keys: Any,
        properties: Any,
        queue_id: Any,
        flag: Any,
        wait: int,
    ) -> Any:
        """The shapes the core stores in one call (a known user topic, plain ints, tags, keys and
        plain properties), with the core's ``wait``; None, having done nothing, for any other."""
        core = self._core
        if (
            type(topic) is str
            and body is not None
            and not core._closed  # noqa: SLF001 (the front's own core: the raw flag, as the compiled front reads it)
            and (topic in self._user_topics or (keys_plain(keys) and topic in self._keyed))
            and plain_int(queue_id, -1, INT32_MAX)
            and plain_int(flag, INT32_MIN, INT32_MAX)
        ):
            if tags is None and keys is None and properties is None:
                return core.put(topic, body, None, queue_id, flag, 0, 0, 0, 0, None, wait)
            return core.put_keyed(topic, body, tags, keys, queue_id, flag, wait, properties)
        return None

    def put_pipelined(
        self,
        topic: Any,
        body: Any = None,
        *,
        tags: Any = None,
        keys: Any = None,
        properties: Any = None,
        queue_id: Any = -1,
        flag: Any = 0,
        delay_level: Any = None,
        deliver_at_ms: Any = None,
        delay_ms: Any = None,
    ) -> Any:
        """Store one message durably without blocking; see
        :meth:`rocketstore.MessageStore.put_pipelined`. The shapes :meth:`put` takes in one call
        do here too, with a future; every other call is ``general_pipelined(store, ...)``."""
        if delay_level is None and deliver_at_ms is None and delay_ms is None:
            done = self._one_call(topic, body, tags, keys, properties, queue_id, flag, WAIT_FUTURE)
            if done is not None:
                return done
        return self._general_pipelined(
            self._store(),
            topic,
            body,
            tags=tags,
            keys=keys,
            properties=properties,
            queue_id=queue_id,
            flag=flag,
            delay_level=delay_level,
            deliver_at_ms=deliver_at_ms,
            delay_ms=delay_ms,
        )
