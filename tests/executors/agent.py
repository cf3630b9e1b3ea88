"""A command agent for the executor tests, driven by its arguments.

Run as ``python agent.py ACTION [ARG] ACTION [ARG] ...``; actions run in order:

  print TEXT          write TEXT and a newline to stdout
  eprint TEXT         write TEXT and a newline to stderr
  raw TEXT            write TEXT to stdout with no newline
  rawbytes HEX        write the bytes HEX to stdout
  sleep SECS          sleep
  exit CODE           exit with CODE
  kill-self NAME      send itself the signal NAME (e.g. SIGSEGV)
  kill-parent         SIGKILL its parent (the sandbox launcher)
  ignore NAME         ignore the signal NAME (e.g. SIGTERM, SIGXCPU)
  on-term FILE        on SIGTERM, write "term" to FILE and exit 0
  on-usr1 TEXT        on SIGUSR1, write TEXT and a newline to stdout and exit 0
  pid FILE            append "agent PID" and "launcher PPID" lines to FILE
  grandchild FILE     fork a child that ignores SIGTERM, appends "grandchild PID" to FILE, sleeps
  escape FILE         double-fork a process in a new session, append "escaped PID" to FILE
  hide FILE           fork a child that forks a process in a new session which keeps stdout
                      open, appends "hidden PID" to FILE and sleeps (the child sleeps too)
  flood BYTES STREAM  write BYTES bytes of 1 KiB lines to stdout, stderr or both
  long-line BYTES     write one line of BYTES "x" characters to stdout
  result TEXT         write TEXT to the file named by AGENTQUEUE_RESULT_FILE
  result-big BYTES    write a JSON string of about BYTES bytes to the result file
  big-line BYTES      print a JSON string of about BYTES bytes as one stdout line
  alloc MB            allocate and touch MB mebibytes
  burn SECS           use SECS seconds of CPU
  open-files N        open /dev/null N times and keep the files open
  env                 print the environment as one JSON line
  ids                 print its pid, parent pid, process group and session as one JSON line
  task                print stdin, task.json and the working directory as one JSON line
  resume              print the checkpoint and tool results files (named by AGENTQUEUE_CHECKPOINT
                      and AGENTQUEUE_TOOL_RESULTS) and their paths as one JSON line
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _grandchild(path: str) -> None:
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _append(path, f"grandchild {os.getpid()}")
        time.sleep(60)
        os._exit(0)


def _escape(path: str) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _append(path, f"escaped {os.getpid()}")
            time.sleep(60)
            os._exit(0)
        os._exit(0)
    os.wait()


def _hide(path: str) -> None:
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            _append(path, f"hidden {os.getpid()}")
            time.sleep(60)
            os._exit(0)
        time.sleep(60)
        os._exit(0)


def _flood(size: int, stream: str) -> None:
    line = b"x" * 1023 + b"\n"
    block = line * 1024  # 1 MiB
    targets = {"stdout": [1], "stderr": [2], "both": [1, 2]}[stream]
    written = 0
    while written < size:
        for fd in targets:
            view = memoryview(block[: size - written])
            while view:
                view = view[os.write(fd, view) :]
        written += len(block)


def _burn(secs: float) -> None:
    end = time.process_time() + secs
    while time.process_time() < end:
        pass


_NO_ARGUMENT = {"kill-parent": 0, "env": 0, "task": 0, "ids": 0, "resume": 0}


def main(args: list[str]) -> None:
    kept: list[object] = []
    i = 0
    while i < len(args):
        action = args[i]
        takes = _NO_ARGUMENT.get(action, 1)
        arg = args[i + 1] if takes and i + 1 < len(args) else ""
        i += 1 + takes
        if action == "print":
            print(arg, flush=True)
        elif action == "eprint":
            print(arg, file=sys.stderr, flush=True)
        elif action == "raw":
            sys.stdout.write(arg)
            sys.stdout.flush()
        elif action == "rawbytes":
            sys.stdout.buffer.write(bytes.fromhex(arg))
            sys.stdout.flush()
        elif action == "sleep":
            time.sleep(float(arg))
        elif action == "exit":
            sys.exit(int(arg))
        elif action == "kill-self":
            os.kill(os.getpid(), getattr(signal, arg))
            time.sleep(5)
        elif action == "kill-parent":
            os.kill(os.getppid(), signal.SIGKILL)
            time.sleep(5)
        elif action == "ignore":
            signal.signal(getattr(signal, arg), signal.SIG_IGN)
        elif action == "on-term":

            def on_term(signum: int, frame: object, path: str = arg) -> None:
                _append(path, "term")
                os._exit(0)

            signal.signal(signal.SIGTERM, on_term)
        elif action == "on-usr1":

            def on_usr1(signum: int, frame: object, text: str = arg) -> None:
                os.write(1, (text + "\n").encode())
                os._exit(0)

            signal.signal(signal.SIGUSR1, on_usr1)
        elif action == "pid":
            _append(arg, f"agent {os.getpid()}\nlauncher {os.getppid()}")
        elif action == "grandchild":
            _grandchild(arg)
        elif action == "escape":
            _escape(arg)
        elif action == "hide":
            _hide(arg)
        elif action == "flood":
            _flood(int(arg), args[i])
            i += 1
        elif action == "long-line":
            sys.stdout.write("x" * int(arg) + "\n")
            sys.stdout.flush()
        elif action == "result":
            with open(os.environ["AGENTQUEUE_RESULT_FILE"], "w") as f:
                f.write(arg)
        elif action == "result-big":
            with open(os.environ["AGENTQUEUE_RESULT_FILE"], "w") as f:
                json.dump("x" * int(arg), f)
        elif action == "big-line":
            print(json.dumps("x" * int(arg)), flush=True)
        elif action == "alloc":
            block = bytearray(int(arg) * 1024 * 1024)
            block[::4096] = b"\1" * len(block[::4096])
            kept.append(block)
        elif action == "burn":
            _burn(float(arg))
        elif action == "open-files":
            kept.extend(open(os.devnull) for _ in range(int(arg)))  # noqa: SIM115
        elif action == "env":
            print(json.dumps(dict(os.environ)), flush=True)
        elif action == "ids":
            ids = {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgrp()}
            print(json.dumps({**ids, "sid": os.getsid(0)}), flush=True)
        elif action == "task":
            stdin = sys.stdin.read()
            with open(os.environ["AGENTQUEUE_TASK_FILE"]) as f:
                from_file = json.load(f)
            seen = {"stdin": json.loads(stdin), "file": from_file, "cwd": os.getcwd()}
            print(json.dumps(seen), flush=True)
        elif action == "resume":
            files = {}
            for name in ("AGENTQUEUE_CHECKPOINT", "AGENTQUEUE_TOOL_RESULTS"):
                with open(os.environ[name]) as f:
                    files[name] = {"path": os.environ[name], "content": json.load(f)}
            print(json.dumps(files), flush=True)
        else:
            sys.exit(f"agent.py: unknown action {action!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
