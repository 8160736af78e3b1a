"""rocketstore: an embeddable, high-throughput message store with Apache RocketMQ's on-disk format.

The CommitLog, its records, ids and flush semantics are byte-compatible with a Java RocketMQ 4.x
broker's store. Hot paths are compiled (``cext/``) with pure-Python twins of the same names;
``ROCKETSTORE_NO_EXTENSIONS=1`` forces the twins.
"""

from typing import TYPE_CHECKING, Any

from rocketstore import errors
from rocketstore._impl import DEFAULT as _DEFAULT
from rocketstore.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig, default_store_path
from rocketstore.consume import Consumer, GetMessageResult, GetMessageStatus, TagFilter
from rocketstore.errors import *  # noqa: F401,F403 - the error hierarchy is public API
from rocketstore.errors import PureBuildWarning
from rocketstore.group import GroupConsumer
from rocketstore.message import MessageExt
from rocketstore.services.pop import Received, ReceivedMessage
from rocketstore.services.transaction import PreparedMessage
from rocketstore.status import PutStatus
from rocketstore.store import MessageStore

__version__ = "0.1.0"

#: "c" when the compiled hot paths are in use, "py" for the pure-Python twins.
IMPLEMENTATION = _DEFAULT.name

if TYPE_CHECKING:  # the compiled twins have the same names and signatures (.pyi stubs)
    from rocketstore.log._store_py import BatchPutResult, Message, PutFuture, PutResult
else:
    #: the compiled twin's Message when it is built (rocketstore.message.Message otherwise):
    #: puts take either
    Message = _DEFAULT.store.Message
    PutResult = _DEFAULT.store.PutResult
    BatchPutResult = _DEFAULT.store.BatchPutResult
    PutFuture = _DEFAULT.store.PutFuture


__all__ = [
    "MessageStore",
    "StoreConfig",
    "ASYNC_FLUSH",
    "SYNC_FLUSH",
    "default_store_path",
    "Message",
    "MessageExt",
    "PutStatus",
    "GetMessageStatus",
    "Consumer",
    "GroupConsumer",
    "GetMessageResult",
    "TagFilter",
    "Received",
    "ReceivedMessage",
    "PreparedMessage",
    "PutResult",
    "BatchPutResult",
    "PutFuture",
    "IMPLEMENTATION",
    "PureBuildWarning",
    "errors",
]
__all__ += errors.__all__


#: Names that moved: the format-level functions to rocketstore.lowlevel, open_store to
#: MessageStore itself. Still reachable here, with a DeprecationWarning saying where they went.
_MOVED = {
    "crc32": "rocketstore.lowlevel.crc32",
    "java_hash": "rocketstore.lowlevel.java_hash",
    "encode_record": "rocketstore.lowlevel.encode_record",
    "decode_record": "rocketstore.lowlevel.decode_record",
    "decode_batch": "rocketstore.lowlevel.decode_batch",
    "CQ_UNIT_DTYPE": "rocketstore.lowlevel.CQ_UNIT_DTYPE",
    "open_store": "rocketstore.MessageStore (open_store(path, **options) was MessageStore(path, **options))",
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module 'rocketstore' has no attribute {name!r}")
    import warnings

    warnings.warn(f"rocketstore.{name} moved: use {_MOVED[name]}", DeprecationWarning, stacklevel=2)
    if name == "open_store":
        from rocketstore.store import open_store

        return open_store
    from rocketstore import lowlevel

    return getattr(lowlevel, name)
