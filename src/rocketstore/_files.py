"""Opening the store's small fixed files (lock, abort, checkpoint) safely.

A store directory copied carelessly, or tampered with, can hold a directory, a FIFO or a symlink
loop where one of these files belongs. Opening a FIFO for writing blocks until someone reads it,
so a plain ``open`` would hang the store; everything else would surface as a bare OSError.
"""

from __future__ import annotations

import errno
import os
import stat

from rocketstore.errors import StoreConfigError

__all__ = ["open_regular"]


def open_regular(path: str, flags: int, what: str) -> int:
    """``os.open(path, flags)`` that never blocks on a FIFO and returns only a regular file's
    descriptor (O_NONBLOCK means nothing to a regular file); anything else in ``path``'s place is a :class:`StoreConfigError` naming ``what``."""
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    except IsADirectoryError:
        raise StoreConfigError(f"{what} {path} is a directory, not a file") from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):   # a symlink loop; a FIFO no one reads
            raise StoreConfigError(f"{what} {path} is not a regular file: {exc.strerror}") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreConfigError(f"{what} {path} is not a regular file")
    return fd
