"""rocketstore: an embeddable, high-throughput message store with Apache RocketMQ's on-disk format.

The CommitLog, its records, ids and flush semantics are byte-compatible with a Java RocketMQ 4.x
broker's store. Hot paths are compiled (``cext/``) with pure-Python twins of the same names;
``ROCKETSTORE_NO_EXTENSIONS=1`` forces the twins.
"""

from typing import TYPE_CHECKING

from rocketstore import errors
from rocketstore._impl import DEFAULT as _DEFAULT
from rocketstore.config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig, default_store_path
from rocketstore.consume import Consumer, GetMessageResult, GetMessageStatus, TagFilter
from rocketstore.consumequeue import CQ_UNIT_DTYPE
from rocketstore.errors import *  # noqa: F401,F403 - the error hierarchy is public API
from rocketstore.errors import PureBuildWarning
from rocketstore.group import GroupConsumer
from rocketstore.message import MessageExt
from rocketstore.pop import Received, ReceivedMessage
from rocketstore.status import PutStatus
from rocketstore.store import MessageStore, open_store

__version__ = "0.1.0"

#: "c" when the compiled hot paths are in use, "py" for the pure-Python twins.
IMPLEMENTATION = _DEFAULT.name

if TYPE_CHECKING:  # the compiled twins have the same names and signatures (.pyi stubs)
    from rocketstore._store_py import BatchPutResult, Message, PutFuture, PutResult
else:
    #: the compiled twin's Message when it is built (rocketstore.message.Message otherwise):
    #: puts take either
    Message = _DEFAULT.store.Message
    PutResult = _DEFAULT.store.PutResult
    BatchPutResult = _DEFAULT.store.BatchPutResult
    PutFuture = _DEFAULT.store.PutFuture

crc32 = _DEFAULT.crc32.crc32
java_hash = _DEFAULT.codec.java_hash
encode_record = _DEFAULT.codec.encode_record
decode_record = _DEFAULT.codec.decode_record
decode_batch = _DEFAULT.codec.decode_batch

__all__ = [
    "MessageStore",
    "open_store",
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
    "CQ_UNIT_DTYPE",
    "PutResult",
    "BatchPutResult",
    "PutFuture",
    "IMPLEMENTATION",
    "PureBuildWarning",
    "crc32",
    "java_hash",
    "encode_record",
    "decode_record",
    "decode_batch",
    "errors",
]
__all__ += errors.__all__
