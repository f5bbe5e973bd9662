"""A wrapper around any lakeFS port (the real adapter over HTTP): lost answers and writers slipping in.

:class:`LossyPort` loses the answer of chosen writes, runs a callback before an operation (another
writer slipping in), and counts the calls that reach the port.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_lakefence.exceptions import LakeFSUnavailableError


class LossyPort:
    """Wraps a port; :meth:`lose` makes the next call of an operation lose its answer.

    ``landed=True``: the call reaches lakeFS, then the answer is lost (a timeout after the write).
    ``landed=False``: the call never arrives. Either way the caller sees ``LakeFSUnavailableError``.

    :param inner: the wrapped port.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lose: dict[str, list[bool]] = {}
        self.calls: dict[str, int] = {}
        self.before: dict[str, Callable[[], None]] = {}

    def lose(self, operation: str, *, landed: bool, times: int = 1) -> None:
        """Lose the answer of the next ``times`` calls of ``operation``."""
        self._lose.setdefault(operation, []).extend([landed] * times)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            hook = self.before.pop(name, None)
            if hook is not None:
                hook()
            pending = self._lose.get(name)
            if not pending:
                return method(*args, **kwargs)
            landed = pending.pop(0)
            if landed:
                method(*args, **kwargs)
            raise LakeFSUnavailableError(f"lakeFS {name}: no response (lost)", status=None, operation=name)

        return call
