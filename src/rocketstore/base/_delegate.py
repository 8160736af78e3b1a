"""A method of one object that is another's: the store's calls that its parts answer."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["delegated"]


def delegated(method: Callable[..., Any], part_of: Callable[[Any], Any], *, with_store: bool = False) -> Any:
    """A method whose call ``obj.name(...)`` is ``part_of(obj).<method's name>(...)``: the part's
    method (looked up on the part, as a call of it would), with its signature and documentation
    (one place for them: the part's). ``with_store``: the part's method takes the object it
    works for first (``part.method(obj, ...)``); the signature shown leaves that parameter out."""
    name = method.__name__
    if with_store:

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(part_of(self), name)(self, *args, **kwargs)

        signature = inspect.signature(method)
        part, _obj, *params = signature.parameters.values()
        del call.__wrapped__  # (the signature is the one below, not the part's)
        call.__signature__ = signature.replace(parameters=[part, *params])  # type: ignore[attr-defined]
        return call

    @functools.wraps(method)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(part_of(self), name)(*args, **kwargs)

    return forward
