"""The store's small files: opening them safely, and replacing them whole.

A store directory copied carelessly, or tampered with, can hold a directory, a FIFO or a symlink
loop where one of these files belongs. Opening a FIFO for writing blocks until someone reads it,
so a plain ``open`` would hang the store; everything else would surface as a bare OSError.
"""

from __future__ import annotations

import errno
import os
import stat

from rocketstore.errors import StoreConfigError

__all__ = ["open_regular", "replace_file", "fsync_dir"]


def open_regular(path: str, flags: int, what: str) -> int:
    """``os.open(path, flags)`` that never blocks on a FIFO and returns only a regular file's
    descriptor (O_NONBLOCK means nothing to a regular file); anything else in ``path``'s place is a :class:`StoreConfigError` naming ``what``."""
    try:
        fd = os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    except IsADirectoryError:
        raise StoreConfigError(f"{what} {path} is a directory, not a file") from None
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling symlink: O_CREAT would not create its target
            raise StoreConfigError(f"{what} {path} is a symlink to nothing, not a file") from None
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):  # a symlink loop; a FIFO no one reads
            raise StoreConfigError(f"{what} {path} is not a regular file: {exc.strerror}") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise StoreConfigError(f"{what} {path} is not a regular file")
    return fd


def raise_open_files_limit() -> None:
    """Raise the process's soft limit of open files to its hard limit (the JVM's MaxFDLimit);
    where the hard limit is unlimited, as far as the system takes. Never lowers it."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft == hard:
        return
    # an unlimited hard limit is not a soft limit every system takes (macOS: OPEN_MAX)
    for want in (hard,) if hard != resource.RLIM_INFINITY else (1 << 20, 10_240):
        if want <= soft:
            return
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return
        except (ValueError, OSError):
            continue


def fsync_dir(directory: str) -> None:
    """fsync a directory, so a rename in it survives a power cut."""
    fd = os.open(directory or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path: str, data: bytes) -> None:
    """Create or truncate ``path``, write ``data`` and fsync it. On failure (a full disk, say)
    the partial file is removed, since it helps nobody and holds space, and the error raised."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise


def replace_file(path: str, data: bytes) -> None:
    """Give ``path`` the content ``data`` all at once: a temporary file beside it, fsynced,
    renamed over it, and the directory fsynced. A crash leaves the old file or the new one."""
    tmp = path + ".tmp"
    write_synced(tmp, data)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))
