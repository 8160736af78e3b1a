"""The append core's construction arguments, checked in one place for both twins of CommitLogCore
(``rocketstore.log._store`` and its pure twin): a core is made once per open, so the check is
Python, written once."""

from __future__ import annotations

__all__ = ["check_core_args"]


def check_core_args(file_size: int, store_host: bytes, born_host: bytes, uniq_prefix: bytes) -> None:
    """Raise ValueError unless the hosts are 4 (IPv4) or 16 (IPv6) address bytes, the UNIQ_KEY
    prefix is 10 or 22 bytes and a segment at least 4096 bytes (the compiled core copies the
    hosts and the prefix into buffers of those sizes)."""
    if len(store_host) not in (4, 16) or len(born_host) not in (4, 16):
        raise ValueError("hosts must be 4 (IPv4) or 16 (IPv6) address bytes")
    if len(uniq_prefix) not in (10, 22):
        raise ValueError("uniq_prefix must be 10 or 22 bytes (ip + pid + loader hash)")
    if file_size < 4096:
        raise ValueError("file_size must be at least 4096 bytes")
