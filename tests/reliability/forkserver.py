"""A fork server for attempt processes: import Airflow once, fork one process per attempt.

Importing Airflow and the Spark provider costs seconds of CPU per process; a race needs its
processes to start within milliseconds of each other. This server imports everything once, then
forks a child per request (as Airflow's own supervisor forks the task process): each attempt is a
separate OS process with its own memory, connections and exit code, and a crash (``os._exit`` at a
failpoint) kills only that child.

Protocol (JSON lines): the client writes ``{"id", "target": "driver"|"foreign", "spec", "log",
"env"}``; the server answers ``{"id", "pid"}`` when the child runs and ``{"pid", "code"}`` when
it exits (``code`` as :func:`os.waitstatus_to_exitcode` gives it: negative for a signal).
EOF on stdin: wait for the remaining children and exit.
"""

from __future__ import annotations

import json
import os
import select
import sys
import traceback
from typing import Any


def _child(request: dict[str, Any]) -> int:
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    with open(request["spec"]) as spec_file:
        spec = json.load(spec_file)
    if request["target"] == "driver":
        from tests.reliability import driver

        return driver.run(spec)
    from tests.reliability import foreign_writer

    foreign_writer.run(spec)
    return 0


def _reap(out: Any) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        out.write(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


def main() -> None:
    """Serve fork requests from stdin until EOF."""
    from tests.reliability import driver, foreign_writer  # noqa: F401 - the expensive imports, once

    driver.preload()
    out = sys.stdout
    stdin = sys.stdin.buffer
    pending = b""
    eof = False
    while not eof:
        ready, _, _ = select.select([stdin], [], [], 0.02)
        if ready:
            chunk = os.read(stdin.fileno(), 65536)
            eof = not chunk
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                out.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    code = 2
                    try:
                        code = _child(request)
                    except BaseException:
                        traceback.print_exc()
                    finally:
                        sys.stdout.flush()
                        sys.stderr.flush()
                        os._exit(code)
                out.write(json.dumps({"id": request["id"], "pid": pid}) + "\n")
                out.flush()
        _reap(out)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        out.write(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
