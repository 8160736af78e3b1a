"""Child process of the crash tests (tests/test_store_crash.py): durable puts until killed.

    python tests/crash_child.py STORE_PATH IMPLEMENTATION MODE SEED [SEGMENT_SIZE]

MODE is ``single`` (``put(..., durable=True)``), ``batch`` (``put_batch(..., durable=True)``) or
``pipelined`` (``put_pipelined(...).result()``). After each put is acknowledged as flushed, one
line ``ACK <msg_id> <body as hex>`` is written to stdout and stdout is flushed, so every line the
parent reads names a message the store promised to keep. The parent ends this process with SIGKILL.
"""

import random
import sys

from rocketstore import MessageStore, PutStatus
from rocketstore.errors import FlushTimeoutError


def main(argv):
    path, implementation, mode, seed = argv[1], argv[2], argv[3], int(argv[4])
    segment = int(argv[5]) if len(argv) > 5 else 64 * 1024
    rng = random.Random(seed)
    store = MessageStore(
        path, implementation=implementation, commitlog_file_size=segment, store_host="10.0.0.7"
    )
    out = sys.stdout
    out.write("READY\n")
    out.flush()
    n = 0
    while True:
        try:
            if mode == "single":
                body = b"%08d:" % n + rng.randbytes(rng.randrange(0, 3000))
                r = store.put("CrashTopic", body, tags="crash", durable=True)
                acked = [(r, body)]
            elif mode == "pipelined":
                body = b"%08d:" % n + rng.randbytes(rng.randrange(0, 3000))
                r = store.put_pipelined("CrashTopic", body).result()
                acked = [(r, body)]
            elif mode == "batch":
                bodies = [
                    b"%08d:" % (n + k) + rng.randbytes(rng.randrange(0, 1500))
                    for k in range(rng.randrange(1, 40))
                ]
                b = store.put_batch("CrashTopic", bodies, durable=True)
                acked = (
                    [(b[k], body) for k, body in enumerate(bodies)] if b.status is PutStatus.PUT_OK else []
                )
            else:
                raise SystemExit(f"unknown mode {mode!r}")
        except FlushTimeoutError:  # stored, but not promised durable
            acked = []
        n += max(1, len(acked))
        lines = []
        for r, body in acked:
            if r.status is not PutStatus.PUT_OK:  # stored, but not promised durable
                continue
            lines.append(f"ACK {r.msg_id} {body.hex()}\n")
        out.write("".join(lines))
        out.flush()


if __name__ == "__main__":
    main(sys.argv)
