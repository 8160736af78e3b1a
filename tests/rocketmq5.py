"""The stores Apache RocketMQ 5.3.3 wrote (tests/data/rocketmq-5.3.3/): unpacking one, its
manifest, and the check that every record the manifest lists is found the ways a reader looks
for it."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import pathlib
import tarfile
from typing import Any

DATA = pathlib.Path(__file__).parent / "data" / "rocketmq-5.3.3"
STORES = ("v5-basic", "v5-crashed", "v5-v2-long-topic", "v5-batchcq", "v5-timer", "v5-compaction")


def unpack(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    """The store ``name`` extracted under ``tmp_path``: its root directory."""
    with tarfile.open(DATA / f"{name}.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    return tmp_path / name


@functools.cache
def manifest(name: str) -> dict[str, Any]:
    """What RocketMQ's harness recorded of the store: every record, queue unit and file."""
    with open(DATA / f"{name}.manifest.json", encoding="utf-8") as f:
        return json.load(f)


#: What every writable open rewrites: the checkpoint records where its clean stop left the files.
REWRITTEN = frozenset({"checkpoint"})


def changed_files(root: pathlib.Path, name: str) -> list[str]:
    """The files of RocketMQ's listed in the manifest whose bytes are no longer its bytes (the
    checkpoint, which every writable open rewrites at its stop, aside)."""
    changed = []
    for entry in manifest(name)["files"]:
        if entry["path"] in REWRITTEN:
            continue
        path = root / entry["path"]
        if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            changed.append(entry["path"])
    return changed


def body(entry: dict[str, Any]) -> bytes:
    return base64.b64decode(entry["body_b64"])


def keys(entry: dict[str, Any]) -> list[str]:
    return (entry.get("keys") or "").split()


def check_records(store: Any, name: str) -> int:
    """Every record of the manifest read back by CommitLog offset, offsetMsgId, UNIQ_KEY, each
    key and its queue position (an inner batch's messages each at their own); returns how many
    messages were checked."""
    checked = 0
    queue_types = {q["topic"]: q["type"] for q in manifest(name).get("queues", ())}
    by_uniq: dict[tuple[str, str], set[int]] = {}  # an ordinary batch's messages share one
    for rec in manifest(name)["records"]:
        by_uniq.setdefault((rec["topic"], rec.get("uniq_key")), set()).add(rec["commitlog_offset"])
    for rec in manifest(name)["records"]:
        offset, topic = rec["commitlog_offset"], rec["topic"]
        got = store.read(offset)
        assert (got.topic, got.queue_id, bytes(got.stored_body)) == (topic, rec["queue_id"], body(rec)), (
            offset
        )
        # a compressed body (RocketMQ's own ZLIB, LZ4 and ZSTD codecs) reads back inflated
        assert got.body == base64.b64decode(rec.get("body_decompressed_b64", rec["body_b64"])), offset
        assert dict(got.properties) == rec["properties"], offset
        assert store.get_by_msg_id(rec["msg_id"]).commitlog_offset == offset
        if rec.get("uniq_key"):
            found = store.query_by_unique_key(topic, rec["uniq_key"]).commitlog_offset
            assert found in by_uniq[(topic, rec["uniq_key"])], offset
        for key in keys(rec):
            assert offset in [m.commitlog_offset for m in store.query_by_key(topic, key, 64)], key
        inner = rec.get("inner_messages")
        if inner is not None and queue_types.get(topic) == "BatchCQ":
            for i, one in enumerate(inner):
                pos = rec["queue_offset"] + i
                got = store.get_by_queue_offset(topic, rec["queue_id"], pos)
                assert (got.topic, got.queue_id, got.queue_offset) == (topic, rec["queue_id"], pos)
                assert (got.body, dict(got.properties)) == (body(one), one["properties"]), pos
                checked += 1
        elif rec["sys_flag"] & 0xC not in (0x4, 0x8):  # a prepared or rolled back half has no unit
            got = store.get_by_queue_offset(topic, rec["queue_id"], rec["queue_offset"])
            assert got.commitlog_offset == offset, (topic, rec["queue_offset"])
            checked += 1
    return checked
