"""Test controls: request counts, injected latency, scripted faults and request hooks.

The fault-injecting proxy (:class:`lakefence_testing.proxy.FaultProxy`) applies them in
front of either backend (the local server or a real lakeFS): the local server has none of its own,
only its internal counters (``stats()``), which a proxy in the same process reads from the store it
is given. They are reachable in-process (:class:`Controls`) and over HTTP under ``/_lakefence/``
of the proxy (:class:`RemoteControls` for a test in another process). The ``/_lakefence/``
endpoints need no authentication: they exist only on test proxies (and ``stats`` on the local server).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from lakefence_testing._serving import Tally

if TYPE_CHECKING:
    from lakefence_testing.lakefs_server._store import Store

When = Literal["before", "after"]


class _Stats(Protocol):
    def stats(self) -> dict[str, int]: ...

    def reset_stats(self) -> None: ...


@dataclass(frozen=True)
class Call:
    """One lakeFS API request as a fault's hook sees it.

    :param operation: swagger operationId.
    :param method: HTTP method.
    :param path: request path with its query string.
    :param status: the backend's answer (``when="after"`` only; ``None`` before forwarding).
    """

    operation: str
    method: str
    path: str
    status: int | None = None


@dataclass
class Fault:
    """A scripted failure of the ``nth`` next call to ``operation``.

    :param operation: swagger operationId (``mergeIntoBranch``, ``commit``, ...).
    :param nth: which upcoming call fails: 1 is the next one.
    :param status: answer with this HTTP status and ``{"message": "injected fault"}``.
    :param delay: sleep this many seconds first.
    :param drop: close the connection without an answer.
    :param when: ``before`` the operation runs, or ``after`` it ran and was committed
        (the client then cannot tell that its write happened).
    :param hook: called with the :class:`Call` when the fault fires, before the delay, the
        status and the drop (in-process only: the proxy's thread runs it; e.g. kill -9 lakeFS).
    :raises ValueError: on an invalid combination.
    """

    operation: str
    nth: int = 1
    status: int | None = None
    delay: float | None = None
    drop: bool = False
    when: When = "before"
    hook: Callable[[Call], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.nth < 1:
            raise ValueError("nth must be >= 1")
        if self.when not in ("before", "after"):
            raise ValueError("when must be 'before' or 'after'")
        if self.status is None and self.delay is None and not self.drop and self.hook is None:
            raise ValueError("a fault needs a status, a delay, drop or a hook")
        if self.status is not None and not 100 <= self.status <= 599:
            raise ValueError("status must be an HTTP status code")

    def to_json(self) -> dict[str, Any]:
        """The fault as JSON (without its hook)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "hook"}


class _ControlsApi:
    """What :class:`Controls` and :class:`RemoteControls` share: one way to script a fault and to reset."""

    def add_fault(
        self,
        operation: str,
        nth: int = 1,
        status: int | None = None,
        delay: float | None = None,
        drop: bool = False,
        when: When = "before",
        hook: Callable[[Call], None] | None = None,
    ) -> Fault:
        """Script a failure of the ``nth`` next call to ``operation``; see :class:`Fault`.

        :param operation: swagger operationId.
        :param nth: which upcoming call fails (1 = the next one).
        :param status: HTTP status to answer with.
        :param delay: seconds to sleep.
        :param drop: drop the connection.
        :param when: ``before`` or ``after`` the operation runs.
        :param hook: called with the :class:`Call` when the fault fires (in-process only).
        :raises ValueError: on an invalid combination.
        """
        fault = Fault(operation, nth, status, delay, drop, when, hook)
        self._add(fault)
        return fault

    def _add(self, fault: Fault) -> None:
        raise NotImplementedError

    def reset_counts(self) -> None:
        """Zero the request counts and the store's internal counters."""
        raise NotImplementedError

    def set_latency(self, seconds: float) -> None:
        """Add ``seconds`` of latency to every lakeFS API request.

        :param seconds: delay per request; 0 disables.
        """
        raise NotImplementedError

    def clear_faults(self) -> None:
        """Remove every scripted fault, fired or not."""
        raise NotImplementedError

    def reset(self) -> None:
        """Reset counts, latency and faults."""
        self.reset_counts()
        self.set_latency(0)
        self.clear_faults()


class Controls(_ControlsApi):
    """In-process test controls of one server or proxy.

    :param store: where server-internal counters come from (the local server's store); ``None``
        in front of a real lakeFS, whose internals are not observable.
    """

    def __init__(self, store: Store | _Stats | None = None) -> None:
        self._lock = threading.Lock()
        self._counts = Tally()
        self._latency = 0.0
        # Each pending fault with the number of calls to its operation still to come before it fires.
        self._faults: list[tuple[Fault, int]] = []
        self._store = store

    def counts(self) -> dict[str, int]:
        """Return the number of requests per operationId since the last reset."""
        return self._counts.snapshot()

    def reset_counts(self) -> None:
        """Zero the request counts and the store's internal counters."""
        self._counts.clear()
        if self._store is not None:
            self._store.reset_stats()

    def stats(self) -> dict[str, int]:
        """Return server-internal counters (``commit_reads``, ``tree_rows_read``)."""
        return {} if self._store is None else self._store.stats()

    def latency(self) -> float:
        """Return the latency added to every lakeFS API request, in seconds."""
        with self._lock:
            return self._latency

    def set_latency(self, seconds: float) -> None:
        """Add ``seconds`` of latency to every lakeFS API request.

        :param seconds: delay per request; 0 disables.
        :raises ValueError: if negative.
        """
        if seconds < 0:
            raise ValueError("latency must not be negative")
        with self._lock:
            self._latency = float(seconds)

    def _add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append((fault, fault.nth))

    def clear_faults(self) -> None:
        """Remove every scripted fault, fired or not."""
        with self._lock:
            self._faults.clear()

    def faults(self) -> list[Fault]:
        """Return the faults that have not fired yet."""
        with self._lock:
            return [fault for fault, _ in self._faults]

    def record_call(self, operation: str) -> list[Fault]:
        """Count one call to ``operation`` and return (and disarm) the faults it triggers.

        :param operation: swagger operationId.
        """
        fired: list[Fault] = []
        pending: list[tuple[Fault, int]] = []
        with self._lock:
            self._counts.add(operation)
            for fault, remaining in self._faults:
                if fault.operation == operation:
                    remaining -= 1
                    if remaining == 0:
                        fired.append(fault)
                        continue
                pending.append((fault, remaining))
            self._faults = pending
        return fired


class RemoteControls(_ControlsApi):
    """The test controls of a proxy in another process, over ``/_lakefence/``.

    :param url: the proxy's URL (``http://127.0.0.1:PORT``, without ``/api/v1``); a local server's
        own URL serves ``stats()`` only.
    :param timeout: seconds per control request.
    """

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(
            f"{self.url}/_lakefence/{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            payload = response.read()
        return json.loads(payload) if payload else None

    def counts(self) -> dict[str, int]:
        """Return the number of requests per operationId since the last reset."""
        result: dict[str, int] = self._call("GET", "counts")
        return result

    def reset_counts(self) -> None:
        """Zero the request counts and the store's internal counters."""
        self._call("DELETE", "counts")

    def stats(self) -> dict[str, int]:
        """Return server-internal counters."""
        result: dict[str, int] = self._call("GET", "stats")
        return result

    def latency(self) -> float:
        """Return the latency added to every lakeFS API request, in seconds."""
        return float(self._call("GET", "latency")["seconds"])

    def set_latency(self, seconds: float) -> None:
        """Add ``seconds`` of latency to every lakeFS API request.

        :param seconds: delay per request; 0 disables.
        """
        self._call("PUT", "latency", {"seconds": seconds})

    def _add(self, fault: Fault) -> None:
        if fault.hook is not None:
            raise ValueError("a fault's hook runs in the proxy's process: RemoteControls cannot send one")
        self._call("POST", "faults", fault.to_json())

    def clear_faults(self) -> None:
        """Remove every scripted fault."""
        self._call("DELETE", "faults")

    def faults(self) -> list[Fault]:
        """Return the faults that have not fired yet."""
        return [Fault(**item) for item in self._call("GET", "faults")]
