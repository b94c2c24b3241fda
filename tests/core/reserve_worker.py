"""One process of the concurrent-reservation test: N threads, one connection each,
reserve hops for distinct bot messages of one room at the same moment.

``python -m tests.core.reserve_worker URL ROOM INSTANCE FIRST N MAX_HOPS GO_FILE``
prints ``ready`` once every connection is open, waits for GO_FILE, then prints
the number of reservations the store admitted.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from nanoslack.store import Store


def main(argv: list[str]) -> int:
    url, room, instance, first, n, max_hops, go_file = argv
    stores = [Store.open(url) for _ in range(int(n))]
    print("ready", flush=True)
    go = Path(go_file)
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.005)
    admitted: list[int] = []

    def reserve(i: int, store: Store) -> None:
        hop = store.hops.reserve(
            room=room,
            instance=instance,
            ts=f"1700000000.{int(first) + i:06d}",
            bot_id="B0ELI",
            max_hops=int(max_hops),
            scope="room",
        )
        if hop is not None:
            admitted.append(hop)

    threads = [threading.Thread(target=reserve, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    print(len(admitted), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
