"""An agent that tries what an attacker would, and reports what it got as its JSON result.

Run as ``python attacker.py ACTION [ARG ...]``, or without arguments to take them from the task's
payload (``{"action": ..., "args": [...]}``):

  whoami                      its uid and gid
  read PATH                   read a file (up to 64 KiB)
  list PATH                   list a directory
  write PATH                  create a file and write to it
  connect HOST PORT           open a TCP connection
  http HOST PORT              GET / over HTTP and return the body
  udp HOST PORT               send one UDP datagram
  forkbomb                    fork sleeping children until the kernel refuses
  alloc MB                    allocate and touch MB mebibytes
  fill MB                     write MB mebibytes in 1 MiB files in the working directory
  bigfile MB                  write one file of MB mebibytes
  tree TOKEN                  start children that ignore SIGTERM, all named TOKEN, and sleep
  sleep SECS                  sleep, then report
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time


def attempt(action: str, args: list[str]) -> dict[str, object]:
    if action == "whoami":
        return {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups()}
    if action == "read":
        with open(args[0], "rb") as f:
            # NUL (environ's separator) as a newline: an agent result may not hold NUL.
            return {"data": f.read(65536).decode("utf-8", "replace").replace("\0", "\n")}
    if action == "list":
        return {"entries": sorted(os.listdir(args[0]))}
    if action == "write":
        with open(args[0], "w") as f:
            f.write("written by the agent\n")
        return {"written": args[0]}
    if action == "connect":
        with socket.create_connection((args[0], int(args[1])), timeout=5):
            return {"connected": True}
    if action == "http":
        with socket.create_connection((args[0], int(args[1])), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return {"body": data.decode("utf-8", "replace").split("\r\n\r\n", 1)[-1]}
    if action == "udp":
        family = socket.AF_INET6 if ":" in args[0] else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            return {"sent": s.sendto(b"hello", (args[0], int(args[1])))}
    if action == "forkbomb":
        forked = 0
        try:
            while forked < 100_000:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                forked += 1
        except OSError as exc:
            return {"forked": forked, "error": exc.strerror}
        return {"forked": forked}
    if action == "alloc":
        block = bytearray(int(args[0]) * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        return {"allocated_mb": int(args[0])}
    if action == "fill":
        for i in range(int(args[0])):
            with open(f"fill-{i}", "wb") as f:
                f.write(b"x" * 1024 * 1024)
            time.sleep(0.01)
        return {"filled_mb": int(args[0])}
    if action == "bigfile":
        with open("big", "wb") as f:
            for _ in range(int(args[0])):
                f.write(b"x" * 1024 * 1024)
        return {"written_mb": int(args[0])}
    if action == "tree":
        for _ in range(3):
            if os.fork() == 0:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                os.execvp("sleep", [args[0], "60"])  # named TOKEN
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
        return {}
    if action == "sleep":
        time.sleep(float(args[0]))
        return {"slept": float(args[0])}
    raise SystemExit(f"unknown action {action!r}")


def main() -> None:
    if len(sys.argv) > 1:
        action, *args = sys.argv[1:]
    else:
        with open(os.environ["AGENTQUEUE_TASK_FILE"]) as f:
            payload = json.load(f)["payload"]
        action, args = payload["action"], [str(a) for a in payload.get("args", [])]
    try:
        report = {"ok": True, **attempt(action, args)}
    except OSError as exc:
        report = {"ok": False, "errno": exc.errno, "error": exc.strerror or str(exc)}
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
