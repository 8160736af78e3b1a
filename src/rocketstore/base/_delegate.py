"""A method of one object that is another's: the store's calls that its parts answer."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["delegated"]


def delegated(method: Callable[..., Any], part_of: Callable[[Any], Any], *, with_store: bool = False) -> Any:
    """A method whose call ``obj.name(...)`` is ``method(part_of(obj), ...)``: the part's method,
    with its signature and documentation (one place for them: the part's). ``with_store``: the
    part's method takes the object it works for after its own (``method(part, obj, ...)``); the
    signature shown leaves that parameter out."""
    if with_store:

        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            return method(part_of(self), self, *args, **kwargs)

        signature = inspect.signature(method)
        part, _obj, *params = signature.parameters.values()
        del call.__wrapped__  # (the signature is the one below, not the part's)
        call.__signature__ = signature.replace(parameters=[part, *params])  # type: ignore[attr-defined]
        return call

    @functools.wraps(method)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return method(part_of(self), *args, **kwargs)

    return forward
