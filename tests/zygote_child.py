"""A child for tests/simulator/run/test_zygote.py: run as ``python -m tests.zygote_child ARG``.

It reports, as one JSON line on stdout, what a module run by ``python -m`` sees (argv, cwd,
environment, temp folder, parent, session) and what the zygote preloaded, then acts on ARG:
``exit:N`` exits with N, ``segv`` dies of SIGSEGV, ``sleep`` waits, ``echo`` copies a stdin
line to stdout, ``mark`` sets a global of a preloaded module (the next child must not see it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

import tests.zygote_preload as preloaded


def main(arg: str) -> int:
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": os.environ.get("ZT"),
                      "tmp": tempfile.gettempdir(), "ppid": os.getppid(), "pid": os.getpid(),
                      "sid": os.getsid(0), "mark": preloaded.MARK,
                      "loaded_at": preloaded.LOADED_AT}), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if arg.startswith("exit:"):
        return int(arg[5:])
    if arg == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if arg == "sleep":
        time.sleep(600)
    if arg == "echo":
        print(sys.stdin.readline().strip(), flush=True)
    if arg == "mark":
        preloaded.MARK = "changed"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
