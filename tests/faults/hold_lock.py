"""Hold a SQLite file's write lock: ``python hold_lock.py PATH SECONDS``.

Opens the file with sqlite3, ``BEGIN IMMEDIATE``, prints ``locked <monotonic>``, holds the lock
for SECONDS, commits, prints ``released <monotonic>``. Another process holding a write
transaction is what agentqueue's processes must wait out.
"""

from __future__ import annotations

import sqlite3
import sys
import time


def main(path: str, secs: float) -> None:
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    conn.execute("BEGIN IMMEDIATE")
    print(f"locked {time.monotonic():.6f}", flush=True)
    time.sleep(secs)
    conn.execute("COMMIT")
    print(f"released {time.monotonic():.6f}", flush=True)
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
