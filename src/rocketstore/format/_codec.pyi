"""Type stub of the compiled twin: the same API as the pure-Python `rocketstore.format._codec_py`
(tests/test_twin_parity.py checks that both export the same names), and the one class only the
compiled twin has: ``FastReads``, the point reads' front in one C call (the pure build's point
reads are the careful paths)."""

from typing import Any

from rocketstore.format._codec_py import *  # noqa: F403
from rocketstore.format._codec_py import __all__ as __all__

class FastReads:
    open: bool
    fast_calls: int
    careful_calls: int
    def __init__(
        self,
        store_ref: Any,
        cls: Any,
        queues: Any,
        segments: Any,
        core: Any,
        services: Any,
        dispatcher: Any,
        cap: Any,
        follower: Any = None,
        *,
        result_type: type,
        offsets: Any = None,
    ) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
