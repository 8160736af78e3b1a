"""Background threads and callbacks that hold their owner only weakly.

A store dropped without ``close()`` must be collected and closed (``MessageStore.__del__``):
nothing a running thread holds may lead back to it. A thread started here holds its owner
weakly except while a tick runs; a callback made by :func:`weak_method` holds its object weakly.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Optional, TypeVar

_O = TypeVar("_O")

__all__ = ["start_weak_thread", "weak_method", "weak_proxy"]


def start_weak_thread(
    owner: _O,
    tick: Callable[[_O], Optional[float]],
    stop: threading.Event,
    name: str,
    first_wait: float = 0.0,
) -> threading.Thread:
    """Start a daemon thread calling ``tick(owner)`` until ``stop`` is set, ``owner`` is gone,
    or ``tick`` returns None; ``tick`` returns the seconds to wait before the next call."""
    thread = threading.Thread(
        target=_loop, args=(weakref.ref(owner), tick, stop, first_wait), name=name, daemon=True
    )
    thread.start()
    return thread


def _loop(
    ref: Callable[[], Any],
    tick: Callable[[Any], Optional[float]],
    stop: threading.Event,
    wait: Optional[float],
) -> None:
    while not stop.wait(wait):
        owner = ref()
        if owner is None:
            return
        wait = tick(owner)
        del owner
        if wait is None:
            return


def weak_method(
    method: Callable[..., Any],
    dead: Optional[Callable[[], object]] = None,
) -> Callable[..., Any]:
    """A callable running the bound ``method`` while its object lives; afterwards it returns
    ``dead()`` (None when not given)."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        if bound is None:
            return dead() if dead is not None else None
        return bound(*args, **kwargs)

    return call


def weak_proxy(obj: _O) -> _O:
    """A weak proxy of ``obj`` (for a part of a store that refers back to it: no reference
    cycle, so a dropped store is closed at once), or ``obj`` itself if it cannot be weakly
    referenced."""
    try:
        proxy: _O = weakref.proxy(obj)  # stands in for obj
        return proxy
    except TypeError:
        return obj
