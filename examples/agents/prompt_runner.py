"""Run a coding agent's command line on the task's prompt, and answer a result the queue takes.

    prompt_runner.py [--stdin] COMMAND [ARG ...]

The worker renders the task's prompt template (``[prompts]``) into a file and names it in
``AGENTQUEUE_PROMPT``. In the ARGs, ``{prompt}`` becomes that file's path and ``{prompt_text}``
its text; with ``--stdin`` the text is also the command's standard input. The command runs in
the attempt's working directory; what it prints goes to stderr, so it is kept with the task's
logs, and the result is one JSON line: ``{"exit_code": N, "output_tail": "..."}`` (the last
2,000 characters of its output).

Exit 0 when the command succeeded; 75 (the queue retries) when it was killed by a signal or
itself exited 75; 1 otherwise, or when no prompt was given (no ``[prompts]`` template applies
to the task)."""

import json
import os
import subprocess
import sys

TAIL_CHARS = 2000
RETRY = 75


def main(argv: list[str]) -> int:
    use_stdin = bool(argv) and argv[0] == "--stdin"
    command = argv[1:] if use_stdin else argv
    path = os.environ.get("AGENTQUEUE_PROMPT")
    if not command:
        print("usage: prompt_runner.py [--stdin] COMMAND [ARG ...]", file=sys.stderr)
        return 1
    if not path:
        print("no prompt: configure [prompts.<task type>] or [prompts.default]", file=sys.stderr)
        return 1
    with open(path, encoding="utf-8") as f:
        text = f.read()
    words = [w.replace("{prompt_text}", text).replace("{prompt}", path) for w in command]
    done = subprocess.run(
        words,
        input=text if use_stdin else None,
        stdin=None if use_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    sys.stderr.write(done.stdout)
    print(json.dumps({"exit_code": done.returncode, "output_tail": done.stdout[-TAIL_CHARS:]}))
    if done.returncode == 0:
        return 0
    return RETRY if done.returncode < 0 or done.returncode == RETRY else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
