"""Acknowledgement per message: RocketMQ 5.x POP consumption (receive, ack, change invisible time).

The modules: :mod:`.service` (``PopService``: the state, the receive and the ack paths),
:mod:`.records` (the revive log's topic and records), :mod:`.snapshot` (``PopState``, the
snapshot file), :mod:`.received` (``Received``, ``ReceivedMessage``, and ``Receiver``, a
writable store's ``receive``).

A consumer group *receives* messages of a topic; each comes with a **receipt handle** and stays
invisible to the rest of the group for ``invisible_time_ms``. :meth:`PopService.ack` finishes
one; :meth:`PopService.change_invisible_time` moves its deadline; a message not acknowledged by
its deadline comes back (to any receiver of the group) with its reconsume times raised by one,
and one whose next delivery would pass ``max_reconsume_times`` goes to ``%DLQ%<group>`` instead.

**State, as RocketMQ 5.x keeps it: records in a system topic.** Every change is first written as
a message into ``rmq_sys_REVIVE_LOG_<broker_cluster_name>`` queue 0 (5.x's revive topic), then
applied in memory, under one lock, so the in-memory state is always the fold of that log:

=====  ==================================================================================
tag    body (JSON; 5.x's ``PopCheckPoint`` / ``BatchAckMsg`` field names where they exist)
=====  ==================================================================================
 ck    a checkpoint: ``c`` group, ``t`` topic, ``q`` queue id, ``pt`` pop time, ``it``
       invisible time (the messages are due back at ``pt + it``), ``so`` first queue offset,
       ``n`` how many, ``d`` each message's offset minus ``so`` (left out for the run
       ``so .. so + n - 1``); rocketstore's: ``rt`` each message's delivery number (0 first,
       +1 per redelivery; left out when all are 0), ``nx`` the lane's next queue offset
       after this receive, ``b`` the lane's lowest un-acked offset (its start, when new).
       A ``ck`` with ``n`` 0 only moves ``nx`` past units with no message (placeholders,
       records deleted before anyone received them).
 bAck  acknowledgements: ``c``, ``t``, ``q``, ``aol`` (5.x's ackOffsetList) the queue
       offsets finished, or ``so`` and ``n`` for a run of them; rocketstore's ``r``: why,
       when not a consumer's ack (``dlq``: sent to the DLQ; ``gone``: the message was
       deleted by retention before it came back).
=====  ==================================================================================

A ``change_invisible_time`` is a one-message ``ck`` with the same delivery number (5.x writes an
ack and a new checkpoint). The records are ordinary CommitLog records, so they are exactly as
durable as any put (``flush_disk_type``; the CommitLog's recovery after a crash), and a Java
broker opens the directory as it opens any other topic.

**One ack, one call.** The single ack is written once, :meth:`PopService.ack_handle`: the
handle is checked as :meth:`PopService._parse` and :meth:`PopService._current` check it, the
``bAck`` record of its one offset is appended through the CommitLog core's ``put`` and applied to
the lane (a ``PopLane`` twin) and the group's committed offset (:meth:`PopService._finish`),
under the service's lock, before it returns; then the periodic snapshot is looked at. Nothing is
buffered. :meth:`PopService.ack` is the implementation's ``PopAcker.ack``: the compiled one does
the common case (a plain handle of a known lane, still under that delivery) in one call with no
Python frame, and hands everything else, and every 64th ack (the snapshot check), to
``ack_handle`` before writing anything; the pure one hands everything to it.

**One receive step.** The common receive of one queue (its lane exists, none of its messages is
due back, no tag filter, and the codec's one-call pull ``queue_messages`` hands out every
message asked for, with no gap) is :meth:`PopService.receive_run`: the same checkpoint record as
:meth:`PopService._receive_lane` writes (the codec's ``checkpoint_run``), applied as
:meth:`PopService._apply_ck` applies it (the lane's ``take_run``). Anything else (a new lane,
messages due back, dead letters, a filter, a short pull, placeholders) goes the general way; the
step writes nothing when it steps aside. A writable store's ``receive`` is a :class:`Receiver`,
which sends the common shape straight to :meth:`PopService.receive_common`.

**Snapshot.** Replaying the whole log at every open would grow without bound, so the state is
also written, crash-safely (:class:`~rocketstore.files.configfiles.ConfigFile`'s ``.bak`` protocol), to
``config/rocketstorePop.json`` with the revive queue offset it covers (``reviveOffset``): on
close, and during use at most every ``pop_snapshot_interval_ms``. The CommitLog is flushed
first, so the snapshot never covers records a power cut could take back. An open loads the
snapshot and replays the records after ``reviveOffset``. The revive queue offset covered is
also committed for 5.x's ``CID_RMQ_SYS_REVIVE_GROUP`` in ``consumerOffset.json``, which each
snapshot writes too.

**The group's consumer offset** in ``consumerOffset.json`` (:class:`ConsumerOffsetTable`) is kept
at the lowest queue offset not yet acknowledged (or dead-lettered) in each queue: everything
below it is finished, so a retention policy that deletes what is consumed may read it there.

Where rocketstore differs from RocketMQ 5.x, on purpose:

* A message that comes back is delivered again **from its original queue position**; 5.x's
  revive service copies it into ``%RETRY%<group>`` (a new record, reconsume times + 1) and moves
  the consumer offset past it at pop time. Here nothing is copied, the delivery number is kept
  in the checkpoints, the reconsume times a receiver sees is the record's plus that number,
  and the consumer offset stays at the lowest un-acked message (what retention needs).
* The checkpoint is written when the messages are handed out (5.x buffers it in memory for a
  while, ``PopBufferMergeService``), and a ``change_invisible_time`` keeps the handle valid.
* One revive queue (5.x: ``reviveQueueNum``, 8), and no revive thread: what is due back is
  found when a receive looks (a heap of deadlines per queue), not by a timer.
* A receipt handle is ``"<group> <topic> <queue id> <queue offset> <delivery number>"`` (5.x's
  ``ExtraInfoUtil`` string holds the checkpoint's revive offset, pop time, broker name ...).
* A dead letter's reconsume times is the last delivery's plus one (4.x's ``send_back``), and a
  crash between the dead letter's put and its ``bAck`` record puts it into the DLQ once more
  when it comes back after the reopen (at most one duplicate per crash).

**Across processes.** The state lives in the memory of the process that has the store open for
writing (the store's lock admits one). As the state is a fold of the revive log, a multi-process
store can share it by taking one cross-process lock around each call, catching up on the revive
log records written by others since its last look (:meth:`PopService._replay`), then deciding and
appending as here.
"""

from __future__ import annotations

from rocketstore.services.pop.received import (
    MAX_INVISIBLE_TIME_MS,
    MAX_RECEIVE_BATCH,
    Received,
    ReceivedMessage,
    Receiver,
)
from rocketstore.services.pop.records import (
    BATCH_ACK_TAG,
    CK_TAG,
    REVIVE_GROUP,
    REVIVE_TOPIC_PREFIX,
    revive_topic,
)
from rocketstore.services.pop.service import PopService, QuickPull
from rocketstore.services.pop.snapshot import PopState

__all__ = [
    "REVIVE_TOPIC_PREFIX",
    "REVIVE_GROUP",
    "CK_TAG",
    "BATCH_ACK_TAG",
    "MAX_RECEIVE_BATCH",
    "MAX_INVISIBLE_TIME_MS",
    "ReceivedMessage",
    "Received",
    "PopService",
    "PopState",
    "QuickPull",
    "Receiver",
    "revive_topic",
]
