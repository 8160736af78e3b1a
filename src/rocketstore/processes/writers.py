"""Several writer processes, one store: the process that holds the store's lock writes for all.

A store's files have one writer at a time: the process holding ``<store>/lock`` (the lock a
Java broker takes too). When another process opens the store for writing, it **joins** that
process instead of failing: it reads the store as a following reader does
(:class:`rocketstore.processes.live.Follower`) and sends every write (puts, topic changes, offsets, POP's
receive and ack, flushes) over a Unix socket (on Linux an abstract one named by the store
directory's device and inode, so no file is added to the store; elsewhere
``<store>/rocketstore-writer.sock``) to the **owner**, which runs it as its own and sends back the result or the error. So every writer
shares one append position, one set of queue offsets, one group commit (one flush covers the
durable puts of every process) and one dispatcher, exactly as in one process.

When the owner ends, one joined process takes over: a clean close hands over at once (the
owner finishes the calls it has read, then refuses more, and the joined writers send them
again to the next owner); after a crash (``kill -9``) the next owner's open recovers the store
as after any crash, so a torn record at the tail is cut. A call that was sent to an owner that
died before answering may or may not have taken effect: it raises
:class:`~rocketstore.errors.WriterGoneError` (a call that is safe to repeat is repeated).

Only processes of the same user may connect (the socket is checked with ``SO_PEERCRED`` on
Linux); they exchange pickles, as ``multiprocessing`` does, and a process that can connect can
already write the store's files.

Frames: an 8-byte little-endian length, then a pickle. A joining process says
``("hello", PROTOCOL, pid)``; the owner answers ``(True, {"pid": ..., "protocol": ...})`` once its
open has finished. A call is ``(name, args, kwargs)``; the answer ``(True, result)`` or
``(False, exception)``.
"""

from __future__ import annotations

import concurrent.futures
import errno
import logging
import os
import pickle
import socket
import stat
import struct
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

from rocketstore.errors import NotAStoreError, StoreLockedError

__all__ = [
    "SOCKET_NAME",
    "PROTOCOL",
    "WriterServer",
    "WriterClient",
    "WriterGone",
    "NoWriter",
    "RemoteFuture",
]

_log = logging.getLogger("rocketstore.processes.writers")

SOCKET_NAME = "rocketstore-writer.sock"
PROTOCOL = 1
_HEAD = struct.Struct("<Q")
#: The longest path an AF_UNIX address holds on every platform (Linux 107, macOS 103).
_MAX_ADDRESS = 100
#: How long a joined call's connection may sit idle in the pool before it is closed (s).
_IDLE_CONNECTIONS = 8


class WriterGone(Exception):
    """The owner's connection ended; ``sent``: the call may have reached it."""

    def __init__(self, sent: bool) -> None:
        super().__init__("the store's writing process is gone")
        self.sent = sent


class NoWriter(Exception):
    """No rocketstore process serves writers at the store's socket."""


def _address(root: str) -> str | bytes:
    """The socket's address. On Linux an abstract
    address named by the store directory's device and inode: no file in the store (which a
    copy of the directory would trip on, and a crash would leave behind). Elsewhere
    ``<store>/rocketstore-writer.sock``."""
    if sys.platform.startswith("linux"):
        st = os.stat(root)
        return b"\0rocketstore-writer/%x/%x" % (st.st_dev, st.st_ino)
    path = os.path.join(root, SOCKET_NAME)
    if len(os.fsencode(path)) > _MAX_ADDRESS:
        raise StoreLockedError(f"store path {root!r} is too long for a writer socket on this platform")
    return path


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(len(data)) + data


def _send(sock: socket.socket, obj: Any) -> None:
    sock.sendall(_frame(obj))


def _recv(rfile: Any) -> Any:
    head = rfile.read(_HEAD.size)
    if len(head) < _HEAD.size:
        raise EOFError
    (size,) = _HEAD.unpack(head)
    data = rfile.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def _same_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this process's user (not checkable off Linux: the socket's
    directory is the store's, whose permissions decide)."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return True
    creds = conn.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return bool(uid == os.geteuid())


class WriterServer:
    """The owner's side: accepts joining writers and runs their calls through ``handler(name,
    args, kwargs)`` once :meth:`ready` was called. Binds at once (so a process that finds the
    lock taken knows a rocketstore writer holds it), before the owner's open has finished."""

    def __init__(
        self,
        root: str,
        handler: Callable[[str, tuple[Any, ...], dict[str, Any]], Any],
        step: Callable[[int, bytes], Optional[bytes]],
    ) -> None:
        self._handler = handler
        self._step = step  # the implementation's serve_step: send a reply, read the next call
        self._ready = threading.Event()
        self._closing = threading.Event()
        self._mutex = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread] = {}
        self.root = root
        address = _address(root)
        self.path = address if isinstance(address, str) else None
        self._listener = self._bind(address)
        self._thread = threading.Thread(target=self._accept, name="rocketstore-writers", daemon=True)
        self._thread.start()

    def _bind(self, address: str | bytes) -> socket.socket:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                listener.bind(address)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise
                if isinstance(address, bytes):  # abstract: a live socket, not ours
                    raise NotAStoreError(
                        f"a process that does not hold the lock of store {self.root} serves its writers"
                    ) from None
                self._remove_stale(address)
                listener.bind(address)
            listener.listen(64)
        except BaseException:
            listener.close()
            raise
        return listener

    def _remove_stale(self, address: str) -> None:
        """The socket a crashed owner left (we hold the lock, so nobody of ours listens there):
        removed. Anything else with that name is not ours and is left as it is."""
        st = os.lstat(address)
        if not stat.S_ISSOCK(st.st_mode):
            raise NotAStoreError(f"{self.path} is not rocketstore's writer socket: it is left as it is")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(address)
        except OSError:
            os.unlink(address)  # nobody listens: a crashed owner's
            return
        finally:
            probe.close()
        raise NotAStoreError(
            f"a process that does not hold the lock of store {self.root} listens at {address}"
        )

    @property
    def connections(self) -> int:
        """Connections of joined writers now (a joined process has one per concurrent call)."""
        return len(self._conns)

    def ready(self) -> None:
        """The owner's open finished: answer the joined writers."""
        self._ready.set()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            thread = threading.Thread(
                target=self._serve, args=(conn,), name="rocketstore-writer", daemon=True
            )
            with self._mutex:  # started under the mutex: close() never joins an unstarted thread
                if self._closing.is_set():
                    conn.close()
                    return
                self._conns[conn] = thread
                thread.start()

    def _serve(self, conn: socket.socket) -> None:
        step, fd = self._step, conn.fileno()
        try:
            if not _same_user(conn):
                return
            first = step(fd, b"")
            if first is None:
                return
            try:
                hello = pickle.loads(first)
            except Exception:
                return  # not a rocketstore writer
            while not self._ready.wait(0.05):
                if self._closing.is_set():
                    return
            if not (isinstance(hello, tuple) and len(hello) == 3 and hello[0] == "hello"):
                return
            reply = _frame((True, {"pid": os.getpid(), "protocol": PROTOCOL}))
            while True:
                data = step(fd, reply)
                if data is None:
                    return
                try:
                    request = pickle.loads(data)
                except Exception as exc:  # a frame that does not unpickle
                    reply = _frame((False, TypeError(f"a writer call that cannot be read: {exc}")))
                    continue
                reply = self._run(request)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            pass  # the joined writer went away, or sent what is not a call
        finally:
            with self._mutex:
                self._conns.pop(conn, None)
            conn.close()

    def _run(self, request: Any) -> bytes:
        """The reply frame of one call: ``(True, result)`` or ``(False, error)``."""
        try:
            name, args, kwargs = request
            result = self._handler(name, tuple(args), dict(kwargs))
        except BaseException as exc:  # the caller's error, raised in its process
            if not isinstance(exc, Exception):
                raise
            return _frame((False, _picklable(exc)))
        try:
            return _frame((True, result))
        except Exception as exc:
            return _frame((False, TypeError(f"{name}() returned what cannot be sent back: {exc}")))

    def forget_in_child(self) -> None:
        """In a child forked from the owner: the child's copies of the listening socket and of
        the joined writers' connections are closed (not shut down: the parent's stay as they
        are), or they would keep the socket's address bound, and the joined writers from seeing
        the owner gone, after the parent ended. Its threads are the parent's: none runs here."""
        for sock in [self._listener, *self._conns]:
            try:
                os.close(sock.detach())
            except OSError:
                pass
        self._conns = {}

    def close(self, timeout: float = 30.0) -> None:
        """Stop serving: each connection's call in progress (or already sent) is answered, then
        further calls are refused (the joined writers send them to the next owner)."""
        with self._mutex:
            if self._closing.is_set():
                return
            self._closing.set()
            conns = dict(self._conns)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        if self.path is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RD)  # what was sent is still read; more cannot be
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for thread in conns.values():
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread is not threading.current_thread():
            self._thread.join(max(0.0, deadline - time.monotonic()))


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


class _Connection:
    __slots__ = ("sock", "rfile")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.rfile = sock.makefile("rb", buffering=1 << 16)

    def close(self) -> None:
        self.rfile.close()
        self.sock.close()


class WriterClient:
    """A joined writer's side: calls run by the owner, one connection per concurrent call."""

    def __init__(self, root: str, deadline: float) -> None:
        self.root = root
        self._mutex = threading.Lock()
        self._idle: list[_Connection] = []
        self._closed = False
        self._executor: Optional[concurrent.futures.ThreadPoolExecutor] = None
        first = self._connect(deadline)
        self._idle.append(first)

    def _connect(self, deadline: Optional[float] = None) -> _Connection:
        """A new connection, greeted; NoWriter when nobody serves the socket, WriterGone when
        the owner went away while it answered."""
        address = _address(self.root)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                sock.connect(address)
            except (FileNotFoundError, ConnectionRefusedError) as exc:
                raise NoWriter(str(exc)) from None
            conn = _Connection(sock)
            try:
                _send(sock, ("hello", PROTOCOL, os.getpid()))
                if deadline is not None:
                    sock.settimeout(max(0.001, deadline - time.monotonic()))
                ok, hello = _recv(conn.rfile)
                sock.settimeout(None)
            except TimeoutError:
                raise StoreLockedError(
                    f"store {self.root}: its writing process did not finish opening in time"
                ) from None
            except (OSError, EOFError):
                raise WriterGone(sent=False) from None
            if not ok or hello.get("protocol") != PROTOCOL:
                raise StoreLockedError(f"store {self.root} is written by a rocketstore of another protocol")
            self.owner_pid: int = hello["pid"]
            return conn
        except BaseException:
            sock.close()
            raise

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Run ``name(*args, **kwargs)`` in the owner: its result, or raise its error."""
        data = pickle.dumps((name, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        with self._mutex:
            if self._closed:
                raise WriterGone(sent=False)
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            try:
                conn = self._connect()
            except NoWriter:
                raise WriterGone(sent=False) from None
        try:
            conn.sock.sendall(_HEAD.pack(len(data)) + data)
        except OSError:
            conn.close()
            raise WriterGone(sent=False) from None
        try:
            ok, value = _recv(conn.rfile)
        except (OSError, EOFError):
            conn.close()
            raise WriterGone(sent=True) from None
        with self._mutex:
            if self._closed or len(self._idle) >= _IDLE_CONNECTIONS:
                conn.close()
            else:
                self._idle.append(conn)
        if ok:
            return value
        raise value

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """``fn`` on one of a few threads of this client (a joined writer's pipelined puts)."""
        with self._mutex:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    4, thread_name_prefix="rocketstore-join"
                )
            return self._executor.submit(fn)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
            executor, self._executor = self._executor, None
        for conn in idle:
            conn.close()
        if executor is not None:
            executor.shutdown(wait=False)


class RemoteFuture:
    """A joined writer's :class:`~rocketstore.PutFuture`: the owner's durable put, run on a
    client thread; ``result``, ``done``, ``exception``, ``add_done_callback`` and ``await``."""

    __slots__ = ("_future",)

    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self._future = future

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: Optional[float] = None) -> Any:
        try:
            return self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError("the put is not flushed yet") from None

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        return self._future.exception(timeout)

    def add_done_callback(self, fn: Callable[[RemoteFuture], object]) -> None:
        self._future.add_done_callback(lambda _f: fn(self))

    def __await__(self) -> Any:
        import asyncio

        return asyncio.wrap_future(self._future).__await__()
