"""Pure-Python twin of ``rocketstore.log._store``: the CommitLog append path and its flush thread.

Same public names and behaviour as the compiled module (see cext/_store.pyx), built on
``struct.pack_into`` into the segment's ``mmap`` and a ``threading.Thread`` that fdatasyncs.

This module gathers the twin's names from its parts, one a concern, as the compiled twin
includes cext/store/*.pxi: ``_keyed_py`` (a put's tags, keys and plain properties encoded from
its arguments), ``_live_py`` (the live page, a joined writer's connection, SwitchSafe, the
publish's test seam), ``_results_py`` (PutResult, BatchPutResult, PutFuture), ``_flusher_py``
(the flush thread), ``_core_py`` (CommitLogCore: segments, one record's append, put, the flush
waits, close), with its topics (``_topics_py``), the shared append table (``_shared_py``) and the
batch puts (``_batches_py``) as functions of it, and ``_putfront_py`` (PutFront).
"""

from __future__ import annotations

from rocketstore.log._core_py import POPULATE_WRITE, WAIT_BLOCK, WAIT_FUTURE, WAIT_NONE, CommitLogCore
from rocketstore.log._flusher_py import DEBUG_HOOKS, _debug_fail_syncs
from rocketstore.log._keyed_py import keyed_properties
from rocketstore.log._live_py import (
    MAX_FRAME,
    PUBLISH_STEPS,
    SwitchSafe,
    _debug_publish_fault,
    live_seq,
    live_wait,
    live_wait_words,
    live_wake,
    serve_step,
)
from rocketstore.log._putfront_py import PutFront
from rocketstore.log._results_py import BatchPutResult, PutFuture, PutResult, _put_result
from rocketstore.message import SPECIAL_PROPERTIES, Message

__all__ = [
    "Message",
    "CommitLogCore",
    "PutResult",
    "BatchPutResult",
    "PutFuture",
    "WAIT_NONE",
    "WAIT_BLOCK",
    "WAIT_FUTURE",
    "live_wait",
    "live_wait_words",
    "live_wake",
    "live_seq",
    "serve_step",
    "MAX_FRAME",
    "SwitchSafe",
    "keyed_properties",
    "PutFront",
]

# Importable here as from the compiled twin (tests, the pickling of a PutResult).
_ = (
    POPULATE_WRITE,
    DEBUG_HOOKS,
    PUBLISH_STEPS,
    SPECIAL_PROPERTIES,
    _debug_fail_syncs,
    _debug_publish_fault,
    _put_result,
)
