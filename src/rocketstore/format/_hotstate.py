"""The hot-state classes the segment, queue and index managers extend (``MappedState``,
``SegmentTable``, ``QueueState``, ``QueueTable``, ``DispatchState``, ``IndexState``,
``IndexFileState``, ``PullResult``): the compiled codec's, whose one-call reads read their
fields in C, unless the compiled modules are not in use (``ROCKETSTORE_NO_EXTENSIONS=1``, or
not built); then the pure twins' (rocketstore.format._codec_py). Either twin's kernels read either
class: the pure ones read the fields as attributes.

Chosen here, not through rocketstore._impl, which imports modules that import the managers.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

__all__ = [
    "NO_EXTENSIONS",
    "REQUIRE_EXTENSIONS",
    "MappedState",
    "SegmentTable",
    "QueueState",
    "QueueTable",
    "DispatchState",
    "IndexState",
    "IndexFileState",
    "PullResult",
]


def env_flag(name: str) -> bool:
    """Whether environment variable ``name`` is set to something other than "", 0, false, no."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


NO_EXTENSIONS = env_flag("ROCKETSTORE_NO_EXTENSIONS")
REQUIRE_EXTENSIONS = env_flag("ROCKETSTORE_REQUIRE_EXTENSIONS")

if TYPE_CHECKING or NO_EXTENSIONS:
    from rocketstore.format._lookups_py import (
        DispatchState,
        IndexFileState,
        IndexState,
        MappedState,
        PullResult,
        QueueState,
        QueueTable,
        SegmentTable,
    )
else:
    try:
        from rocketstore.format._codec import (
            DispatchState,
            IndexFileState,
            IndexState,
            MappedState,
            PullResult,
            QueueState,
            QueueTable,
            SegmentTable,
        )
    except ImportError:  # pragma: no cover - depends on the build (rocketstore._impl says why)
        if REQUIRE_EXTENSIONS:
            raise
        from rocketstore.format._lookups_py import (
            DispatchState,
            IndexFileState,
            IndexState,
            MappedState,
            PullResult,
            QueueState,
            QueueTable,
            SegmentTable,
        )
