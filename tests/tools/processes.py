"""What the test servers started as subprocesses share: a context manager and a bounded log tail."""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType
from typing import Self


class Started:
    """``with server:`` starts it (``start()`` returns the server) and stops it on the way out."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def read_log_tail(path: Path, *, since: int = 0, max_bytes: int = 20_000) -> str:
    """Return a server log from byte ``since`` on, at most its last ``max_bytes`` bytes ("" if absent).

    :param path: the log file.
    :param since: offset to start from.
    :param max_bytes: bound on the text returned.
    """
    try:
        with open(path, "rb") as fd:
            size = fd.seek(0, os.SEEK_END)
            fd.seek(max(since, size - max_bytes))
            return fd.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return ""
