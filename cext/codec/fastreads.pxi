# FastReads: the point reads' compiled front, and plain message items.
# Part of rocketstore.format._codec: included by cext/_codec.pyx, whose imports and
# constants it uses.

# GetMessageStatus.FOUND, looked up once: an enum member read from its class costs about as
# much as the rest of a one-message pull's result (EnumType's attribute lookup)
cdef object _FOUND = _GetMessageStatus.FOUND


cdef object _pull_result(type result_type, object next_begin, object lo, object hi, object messages,
                         object units, object first):
    """``result_type(FOUND, next_begin, lo, hi, messages, units, first)`` (what the class's
    quick pull returns), its PullResult fields filled here."""
    cdef PullResult result
    result = PullResult.__new__(result_type)
    result.status = _FOUND
    result.next_begin_offset = next_begin
    result.min_offset = lo
    result.max_offset = hi
    result.messages = messages
    result._units = units
    result._queue_offsets = first
    return result


cdef enum:
    _OFFSET_KEYS_KEPT = 4096    # FastReads remembers the offset keys of this many groups at most

cdef class FastReads:
    """An open store's point reads, each one compiled call: rocketstore.store puts these bound
    methods over the class's ``read``, ``get_by_msg_id``, ``get_by_queue_offset``,
    ``query_by_key``, ``query_by_unique_key`` and ``get_message`` (a pull from a given offset,
    no tags, no wait: units, records and messages in one call, the result's slots set in
    place) while the store is open and follows no other process, and an owning store's
    ``commit_offset`` over the class's (given ``offsets``, its ConsumerOffsetTable). What a fast call
    cannot answer (None), a keyword it does not take, or a closed store runs the class's method
    (the careful path), so results and errors are the class's. See the pure twin."""
    cdef object _store          # a weak reference: the store's dict holds these methods
    cdef object _cls
    cdef object _queues, _segments, _core, _services, _dispatcher, _cap, _follower
    cdef type _result_type
    cdef object _offsets            # an owning store's ConsumerOffsetTable (else None: commits are careful)
    cdef FastRLock _offsets_lock    # its lock when that is a FastRLock
    cdef dict _offset_keys          # {group: {topic: the table's key}} of names checked here
    cdef public bint open
    # calls answered here, and calls handed to the class's method: what shows (tests, a
    # benchmark) that the compiled path is the one taken
    cdef readonly unsigned long long fast_calls, careful_calls

    def __init__(self, store_ref, cls, queues, segments, core, services, dispatcher, cap, follower=None, *,
                 result_type, offsets=None):
        if not issubclass(result_type, PullResult):
            raise TypeError(f"result_type must extend this codec's PullResult, not {result_type!r}")
        self._result_type = result_type
        self._offsets = offsets
        self._offsets_lock = None
        if offsets is not None and type(offsets.lock) is FastRLock:
            self._offsets_lock = <FastRLock>offsets.lock
        self._offset_keys = {}
        self._follower = follower
        self._store = store_ref
        self._cls = cls
        self._queues = queues
        self._segments = segments
        self._core = core
        self._services = services
        self._dispatcher = dispatcher
        self._cap = cap
        self.open = True

    cdef bint _current(self) except -1:
        """True unless this store follows a writer that opened the store since (the class's
        method opens it again): a following store's ``follow()``, run first as its methods do."""
        return self._follower is None or self._follower.follow() is True

    cdef object _owner(self):
        store = self._store()
        if store is None:
            raise _StoreClosedError("the store is closed")
        return store

    def read(self, commitlog_offset, *, zero_copy=False):
        """Read one message by CommitLog offset; see :meth:`rocketstore.MessageStore.read`."""
        if self.open and self._current() and zero_copy is False:
            msg = record_at(self._segments, self._core, commitlog_offset)
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.read(self._owner(), commitlog_offset, zero_copy=zero_copy)

    def get_by_msg_id(self, msg_id, *, zero_copy=False):
        """Read one message by its msgId; see :meth:`rocketstore.MessageStore.get_by_msg_id`."""
        if self.open and self._current() and zero_copy is False:
            msg = message_by_id(self._segments, self._core, msg_id)
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.get_by_msg_id(self._owner(), msg_id, zero_copy=zero_copy)

    def get_by_queue_offset(self, topic, queue_id, queue_offset):
        """Read one message by queue position; see
        :meth:`rocketstore.MessageStore.get_by_queue_offset`."""
        if self.open and self._current():
            msg = queue_message(self._queues, topic, queue_id, queue_offset, self._segments, self._core)
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.get_by_queue_offset(self._owner(), topic, queue_id, queue_offset)

    def query_by_key(self, topic, key, max_num=32, begin=0, end=None):
        """Messages of a topic by key; see :meth:`rocketstore.MessageStore.query_by_key`."""
        if self.open and self._current():
            hits = key_lookup(self._services, self._segments, self._core, topic, key, max_num, begin, end,
                              self._cap, self._dispatcher)
            if hits is not None:
                self.fast_calls += 1
                return hits
        self.careful_calls += 1
        return self._cls.query_by_key(self._owner(), topic, key, max_num, begin, end)

    def get_message(self, group, topic, queue_id, offset=None, max_msgs=32, tags=None, *, wait=None):
        """Pull messages of one queue; see :meth:`rocketstore.MessageStore.get_message`."""
        if (self.open and wait is None and offset is not None and tags is None and type(group) is str and group
                and self._current()):
            _queue_catch_up(self._dispatcher)
            got = queue_messages(self._queues, topic, queue_id, offset, max_msgs, self._segments, self._core)
            if got is not None:
                messages, units, lo, hi = <tuple>got
                self.fast_calls += 1
                return _pull_result(self._result_type, offset + len(<list>messages), lo, hi, messages, units,
                                    offset)
        self.careful_calls += 1
        return self._cls.get_message(self._owner(), group, topic, queue_id, offset, max_msgs, tags, wait=wait)

    cdef object _offset_key(self, object group, object topic):
        """The offsets table's key of (topic, group) when both are names the class's method takes
        as they are (a non-empty str without '@'), else None; remembered once made."""
        cdef object by_topic, key
        if type(group) is not str or type(topic) is not str:
            return None
        by_topic = self._offset_keys.get(group)
        if by_topic is not None:
            key = (<dict>by_topic).get(topic)
            if key is not None:
                return key
        if not group or not topic or "@" in <str>group or "@" in <str>topic:
            return None
        key = self._offsets.key(topic, group)
        if type(key) is not str:
            return None
        if len(self._offset_keys) >= _OFFSET_KEYS_KEPT:
            self._offset_keys.clear()
        if by_topic is None:
            by_topic = self._offset_keys[group] = {}
        (<dict>by_topic)[topic] = key
        return key

    def commit_offset(self, group, topic, queue_id, offset):
        """Record ``offset`` as ``group``'s next offset to consume in (topic, queue_id); see
        :meth:`rocketstore.MessageStore.commit_offset`."""
        cdef int64_t qid = 0, at = 0
        cdef FastRLock lock = self._offsets_lock
        cdef object key, table, offsets, previous
        cdef bint done = False
        if (self.open and self._offsets is not None and _plain_int(queue_id, 0, &qid) and qid <= INT32_MAX
                and _plain_int(offset, 0, &at)):
            key = self._offset_key(group, topic)
            if key is not None:
                self.fast_calls += 1
                if lock is not None:
                    # the common case as ConsumerOffsetTable.commit_key does it: a queue the table
                    # has, moving forward
                    lock.take(True)
                    try:
                        table = self._offsets.table
                        if type(table) is dict:
                            offsets = (<dict>table).get(key)
                            if type(offsets) is dict:
                                previous = (<dict>offsets).get(queue_id)
                                if type(previous) is int and previous <= offset:
                                    (<dict>offsets)[queue_id] = offset
                                    self._offsets.dirty = True
                                    done = True
                    finally:
                        lock.give()
                if not done:
                    self._offsets.commit_key(key, queue_id, offset)  # new, or a move back: logged
                return None
        self.careful_calls += 1
        return self._cls.commit_offset(self._owner(), group, topic, queue_id, offset)

    def query_by_unique_key(self, topic, unique_key):
        """A message by its UNIQ_KEY; see :meth:`rocketstore.MessageStore.query_by_unique_key`."""
        if self.open and self._current():
            msg = unique_lookup(self._services, self._segments, self._core, topic, unique_key, self._cap,
                                self._dispatcher, _now_ms())
            if msg is not None:
                self.fast_calls += 1
                return msg
        self.careful_calls += 1
        return self._cls.query_by_unique_key(self._owner(), topic, unique_key)


def plain_message_items(messages, user_topics, message_types=None):
    """The core's put items of a put_messages batch's plain messages (see rocketstore.format._record_py)."""
    cdef list items = [], slow = []
    cdef Py_ssize_t i = 0
    cdef object qid, flag, born, tags, keys
    cdef object message_type = _message_mod.Message, other_type = _message_mod.Message
    if message_types is not None:
        message_type, other_type = (tuple(message_types) * 2)[:2]
    for m in messages:
        if type(m) is message_type or type(m) is other_type:
            topic = m.topic
            body = m.body
            qid = m.queue_id
            flag = m.flag
            born = m.born_timestamp
            if (type(topic) is str and topic in user_topics and m.properties is None and type(body) is bytes
                    and type(qid) is int and -1 <= qid <= INT32_MAX
                    and type(flag) is int and INT32_MIN <= flag <= INT32_MAX
                    and type(born) is int and INT64_MIN <= born <= INT64_MAX
                    and m.sys_flag == 0 and m.reconsume_times == 0):
                tags = m.tags
                keys = m.keys
                if tags is None and keys is None:
                    items.append((topic, body, b"", qid, flag, born, 0, 0, None))
                else:
                    props, unique_key, _wait = put_properties(tags, keys, None)
                    items.append((topic, body, props, qid, flag, born, 0, 0, unique_key))
                i += 1
                continue
        items.append(None)
        slow.append(i)
        i += 1
    return items, slow
