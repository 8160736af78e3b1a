# The compiled Message, and a put's TAGS, KEYS and plain properties encoded straight from its
# arguments (no Python per message).
# Part of rocketstore.log._store: included by cext/_store.pyx, whose imports and
# constants it uses.

#: the pure twin's Message, which put_plain_messages takes too (read by attribute)
cdef object _PLAIN_MESSAGE = _message_mod.Message


cdef int _unset_field(Message m, str name) except -1:
    raise AttributeError(f"'Message' object has no attribute '{name}'")


# A Message (exactly this class) whose fields are all None, str, bytes or int can be part of no
# reference cycle: it is left out of the cyclic GC, as CPython leaves out tuples and dicts of such
# values, so that building a batch of messages does not run collections over them (about 120 ns a
# message with the GC on, measured). A field set to anything else tracks it again.
cdef inline bint _atomic(object v) noexcept:
    return v is None or PyUnicode_CheckExact(v) or PyBytes_CheckExact(v) or PyLong_CheckExact(v)


cdef inline void _track_unless_atomic(Message m, object value) noexcept:
    if not _atomic(value) and not PyObject_GC_IsTracked(m):
        PyObject_GC_Track(m)


@cython.embedsignature(False)       # the docstring's first line is the signature inspect reads
cdef class Message:
    """Message(topic, body, tags=None, keys=None, properties=None, flag=0, queue_id=-1, \
born_timestamp=0, reconsume_times=0, sys_flag=0)
--

A message to store: topic, body, and optional tags, keys, properties, flag, queue.

    The compiled twin of :class:`rocketstore.message.Message` (``rocketstore.Message`` in the
    compiled build): the same arguments and defaults, fields (a deleted one reads as an
    AttributeError until set again), repr and pickling, and every put takes either. Its fields
    are C members, which put_plain_messages reads without a lookup."""
    cdef object _topic, _body, _tags, _keys, _properties, _flag, _queue_id
    cdef object _born_timestamp, _reconsume_times, _sys_flag
    cdef uint16_t _unset        # a bit per field deleted (in the order of __init__'s arguments)

    def __init__(self, topic, body, tags=None, keys=None, properties=None, flag=0, queue_id=-1,
                 born_timestamp=0, reconsume_times=0, sys_flag=0):
        self._topic = topic
        self._body = body
        self._tags = tags
        self._keys = keys
        self._properties = properties
        self._flag = flag
        self._queue_id = queue_id
        self._born_timestamp = born_timestamp
        self._reconsume_times = reconsume_times
        self._sys_flag = sys_flag
        self._unset = 0
        if (type(self) is Message and _atomic(topic) and _atomic(body) and _atomic(tags) and _atomic(keys)
                and _atomic(properties) and _atomic(flag) and _atomic(queue_id) and _atomic(born_timestamp)
                and _atomic(reconsume_times) and _atomic(sys_flag)):
            if PyObject_GC_IsTracked(self):
                PyObject_GC_UnTrack(self)
        elif not PyObject_GC_IsTracked(self):
            PyObject_GC_Track(self)

    @property
    def topic(self):
        if self._unset & 1:
            _unset_field(self, "topic")
        return self._topic

    @topic.setter
    def topic(self, value):
        self._topic = value
        self._unset &= ~1
        _track_unless_atomic(self, value)

    @topic.deleter
    def topic(self):
        if self._unset & 1:
            _unset_field(self, "topic")
        self._topic = None
        self._unset |= 1

    @property
    def body(self):
        if self._unset & 2:
            _unset_field(self, "body")
        return self._body

    @body.setter
    def body(self, value):
        self._body = value
        self._unset &= ~2
        _track_unless_atomic(self, value)

    @body.deleter
    def body(self):
        if self._unset & 2:
            _unset_field(self, "body")
        self._body = None
        self._unset |= 2

    @property
    def tags(self):
        if self._unset & 4:
            _unset_field(self, "tags")
        return self._tags

    @tags.setter
    def tags(self, value):
        self._tags = value
        self._unset &= ~4
        _track_unless_atomic(self, value)

    @tags.deleter
    def tags(self):
        if self._unset & 4:
            _unset_field(self, "tags")
        self._tags = None
        self._unset |= 4

    @property
    def keys(self):
        if self._unset & 8:
            _unset_field(self, "keys")
        return self._keys

    @keys.setter
    def keys(self, value):
        self._keys = value
        self._unset &= ~8
        _track_unless_atomic(self, value)

    @keys.deleter
    def keys(self):
        if self._unset & 8:
            _unset_field(self, "keys")
        self._keys = None
        self._unset |= 8

    @property
    def properties(self):
        if self._unset & 16:
            _unset_field(self, "properties")
        return self._properties

    @properties.setter
    def properties(self, value):
        self._properties = value
        self._unset &= ~16
        _track_unless_atomic(self, value)

    @properties.deleter
    def properties(self):
        if self._unset & 16:
            _unset_field(self, "properties")
        self._properties = None
        self._unset |= 16

    @property
    def flag(self):
        if self._unset & 32:
            _unset_field(self, "flag")
        return self._flag

    @flag.setter
    def flag(self, value):
        self._flag = value
        self._unset &= ~32
        _track_unless_atomic(self, value)

    @flag.deleter
    def flag(self):
        if self._unset & 32:
            _unset_field(self, "flag")
        self._flag = None
        self._unset |= 32

    @property
    def queue_id(self):
        if self._unset & 64:
            _unset_field(self, "queue_id")
        return self._queue_id

    @queue_id.setter
    def queue_id(self, value):
        self._queue_id = value
        self._unset &= ~64
        _track_unless_atomic(self, value)

    @queue_id.deleter
    def queue_id(self):
        if self._unset & 64:
            _unset_field(self, "queue_id")
        self._queue_id = None
        self._unset |= 64

    @property
    def born_timestamp(self):
        if self._unset & 128:
            _unset_field(self, "born_timestamp")
        return self._born_timestamp

    @born_timestamp.setter
    def born_timestamp(self, value):
        self._born_timestamp = value
        self._unset &= ~128
        _track_unless_atomic(self, value)

    @born_timestamp.deleter
    def born_timestamp(self):
        if self._unset & 128:
            _unset_field(self, "born_timestamp")
        self._born_timestamp = None
        self._unset |= 128

    @property
    def reconsume_times(self):
        if self._unset & 256:
            _unset_field(self, "reconsume_times")
        return self._reconsume_times

    @reconsume_times.setter
    def reconsume_times(self, value):
        self._reconsume_times = value
        self._unset &= ~256
        _track_unless_atomic(self, value)

    @reconsume_times.deleter
    def reconsume_times(self):
        if self._unset & 256:
            _unset_field(self, "reconsume_times")
        self._reconsume_times = None
        self._unset |= 256

    @property
    def sys_flag(self):
        if self._unset & 512:
            _unset_field(self, "sys_flag")
        return self._sys_flag

    @sys_flag.setter
    def sys_flag(self, value):
        self._sys_flag = value
        self._unset &= ~512
        _track_unless_atomic(self, value)

    @sys_flag.deleter
    def sys_flag(self):
        if self._unset & 512:
            _unset_field(self, "sys_flag")
        self._sys_flag = None
        self._unset |= 512

    def __repr__(self):
        return (f"Message(topic={self.topic!r}, body={bytes(self.body[:32])!r}"
                f"{'...' if len(self.body) > 32 else ''}, tags={self.tags!r}, keys={self.keys!r})")

    def __reduce__(self):
        return (Message, (self.topic, self.body, self.tags, self.keys, self.properties, self.flag, self.queue_id,
                          self.born_timestamp, self.reconsume_times, self.sys_flag))


cdef inline Py_ssize_t _plain_text(object s, const char **out):
    """The UTF-8 length of ``s`` (its bytes at ``*out``) when it is an exact, non-empty str
    without a separator (0x01, 0x02) that UTF-8 can encode; else -1 (the general path decides)."""
    cdef Py_ssize_t n
    cdef const char *p
    if not PyUnicode_CheckExact(s):
        return -1
    p = PyUnicode_AsUTF8AndSize(s, &n)
    if p == NULL:           # a lone surrogate: the general path raises for it
        PyErr_Clear()
        return -1
    if n == 0 or memchr(p, 1, n) != NULL or memchr(p, 2, n) != NULL:
        return -1
    out[0] = p
    return n


cdef Py_ssize_t _keyed_length(object tags, object keys):
    """The length of TAGS and KEYS encoded as rocketstore.format._record_py.put_properties encodes them
    (tags a plain str; keys a plain str or a non-empty list or tuple of plain str), or -1 when
    either is another shape, or too long: then the general path encodes (or refuses) them."""
    cdef Py_ssize_t total = 0, n, i, count
    cdef const char *p
    if tags is not None:
        n = _plain_text(tags, &p)
        if n < 0:
            return -1
        total += 6 + n              # "TAGS" 0x01 value 0x02
    if keys is not None:
        if PyUnicode_CheckExact(keys):
            n = _plain_text(keys, &p)
            if n < 0:
                return -1
            total += 6 + n
        elif PyList_CheckExact(keys) or PyTuple_CheckExact(keys):
            count = len(keys)
            if count == 0:
                return -1
            total += 6 + count - 1  # the spaces between keys
            for i in range(count):
                n = _plain_text(keys[i], &p)
                if n < 0:
                    return -1
                total += n
        else:
            return -1
    return total if total <= RS_MAX_PROPERTIES_LENGTH else -1


cdef inline uint8_t *_put_text(uint8_t *out, object s) noexcept:
    cdef Py_ssize_t n
    cdef const char *p = PyUnicode_AsUTF8AndSize(s, &n)   # checked by _keyed_length
    memcpy(out, p, n)
    return out + n


cdef Py_ssize_t _keyed_write(object tags, object keys, uint8_t *out):
    """Encode what _keyed_length measured (and accepted) into ``out``; returns its length."""
    cdef uint8_t *at = out
    cdef Py_ssize_t i
    if tags is not None:
        memcpy(at, b"TAGS\x01", 5)
        at = _put_text(at + 5, tags)
        at[0] = 2
        at += 1
    if keys is not None:
        memcpy(at, b"KEYS\x01", 5)
        at += 5
        if PyUnicode_CheckExact(keys):
            at = _put_text(at, keys)
        else:
            for i in range(len(keys)):
                if i:
                    at[0] = 0x20
                    at += 1
                at = _put_text(at, keys[i])
        at[0] = 2
        at += 1
    return at - out


#: Property names a put gives a meaning (rocketstore.message.SPECIAL_PROPERTIES): a properties
#: dict holding one takes the general path.
SPECIAL_PROPERTIES = _message_mod.SPECIAL_PROPERTIES
cdef frozenset _SPECIAL_PROPERTIES = SPECIAL_PROPERTIES


cdef Py_ssize_t _props_length(object tags, object keys, object properties):
    """The length of ``properties``, then TAGS and KEYS, encoded as put_properties encodes them:
    ``properties`` None, or an exact dict whose names and values are plain text (as
    :func:`_plain_text`) and whose names are not SPECIAL_PROPERTIES; tags and keys as
    :func:`_keyed_length`. -1 for any other shape or over 32767 bytes (the general path then
    encodes or refuses them). Runs no Python code: the dict cannot change under it."""
    cdef Py_ssize_t total = _keyed_length(tags, keys), n, pos = 0
    cdef PyObject *name
    cdef PyObject *value
    cdef const char *p
    if total < 0 or properties is None:
        return total
    if not PyDict_CheckExact(properties):
        return -1
    while PyDict_Next(properties, &pos, &name, &value):
        n = _plain_text(<object>name, &p)     # an exact str first: hashing it runs no Python code
        if n < 0 or PySet_Contains(_SPECIAL_PROPERTIES, <object>name):
            return -1
        total += n + 2
        n = _plain_text(<object>value, &p)
        if n < 0:
            return -1
        total += n
    return total if total <= RS_MAX_PROPERTIES_LENGTH else -1


cdef Py_ssize_t _props_write(object tags, object keys, object properties, uint8_t *out):
    """Encode what _props_length measured (and accepted) into ``out``, in put_properties' order:
    the dict's items, then TAGS, then KEYS. Returns its length."""
    cdef uint8_t *at = out
    cdef Py_ssize_t pos = 0
    cdef PyObject *name
    cdef PyObject *value
    if properties is not None:
        while PyDict_Next(properties, &pos, &name, &value):
            at = _put_text(at, <object>name)
            at[0] = 1
            at = _put_text(at + 1, <object>value)
            at[0] = 2
            at += 1
    return (at - out) + _keyed_write(tags, keys, at)


def keyed_properties(tags, keys, properties=None):
    """A plain ``properties`` dict's items, then TAGS and KEYS, encoded as
    ``put_properties(tags, keys, properties)`` encodes them (``b""`` for none), or None when one
    is not the plain shape (an exact, non-empty str without 0x01 or 0x02 that UTF-8 can encode;
    keys also a non-empty list or tuple of such; properties an exact dict of such, no name in
    SPECIAL_PROPERTIES) or the result exceeds 32767 bytes: the general path then encodes or
    refuses them."""
    cdef Py_ssize_t n = _props_length(tags, keys, properties)
    if n < 0:
        return None
    out = PyBytes_FromStringAndSize(NULL, n)
    _props_write(tags, keys, properties, <uint8_t *>PyBytes_AS_STRING(out))
    return out


cdef object _MINUS_ONE = -1
cdef object _ZERO = 0


cdef inline bint _int_in(object v, int64_t lo, int64_t hi, int64_t *out):
    """Whether ``v`` is an exact int within lo..hi (its value in ``*out``)."""
    cdef int overflow = 0
    cdef long long x
    # put's defaults (queue_id=-1, flag=0) are these objects: no conversion call for them
    if v is _MINUS_ONE or v is _ZERO:
        x = -1 if v is _MINUS_ONE else 0
        out[0] = x
        return lo <= x <= hi
    if not PyLong_CheckExact(v):
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or x < lo or x > hi:
        return False
    out[0] = x
    return True
