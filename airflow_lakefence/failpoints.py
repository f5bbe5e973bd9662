"""Named injection points at the protocol's step boundaries, for reliability tests.

Production code calls :func:`hit` at each boundary; it does nothing unless a test armed that point,
either in-process with :func:`arm` (a callback, e.g. one that clears the task instance) or across
processes with the ``LAKEFENCE_FAILPOINTS`` environment variable: a comma-separated list of
``name=exit`` (terminate the process at once with ``os._exit``, which no ``except`` or ``finally``
can intercept: a crash) or ``name=sleep:SECONDS``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

ENV_VAR = "LAKEFENCE_FAILPOINTS"
CRASH_EXIT_CODE = 86

#: Every boundary of the fenced publish, in protocol order. ``after_verify`` follows the publish's
#: action; a merge's verifying read may still be in flight there (it travels beside the report's
#: writes): ``after_publish_action`` is the last point with no lakeFS call in flight.
POINTS = (
    "after_staging_branch",
    "after_job",
    "after_fence_1",
    "mid_upload",
    "after_stage",
    "after_fence_2",
    "after_publish_read",
    "after_publish_action",
    "after_verify",
    "after_xcom",
)

#: Points of the durable path only: ``mid_job`` is reached while the adapter waits for a durable job
#: (after the provider stored its id), so the crash-window and race tiers, which run non-durable jobs,
#: leave it out; the durable tier crashes there.
DURABLE_POINTS = ("mid_job",)

_lock = threading.Lock()
_callbacks: dict[str, Callable[[], None]] = {}


def arm(name: str, callback: Callable[[], None]) -> None:
    """Run ``callback`` when the protocol reaches ``name`` (in this process).

    :param name: one of :data:`POINTS` or :data:`DURABLE_POINTS`.
    :param callback: what to do there; it may raise.
    :raises ValueError: for an unknown point.
    """
    if name not in POINTS + DURABLE_POINTS:
        raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(POINTS + DURABLE_POINTS)}")
    with _lock:
        _callbacks[name] = callback


def disarm_all() -> None:
    """Remove every in-process callback."""
    with _lock:
        _callbacks.clear()


def hit(name: str) -> None:
    """Mark that the protocol reached ``name``; act if a test armed it.

    :param name: one of :data:`POINTS` or :data:`DURABLE_POINTS`.
    """
    with _lock:
        callback = _callbacks.get(name)
    if callback is not None:
        callback()
    spec = os.environ.get(ENV_VAR)
    if not spec:
        return
    for item in spec.split(","):
        point, _, action = item.strip().partition("=")
        if point != name:
            continue
        if action == "exit":
            os._exit(CRASH_EXIT_CODE)
        if action.startswith("sleep:"):
            time.sleep(float(action.split(":", 1)[1]))
