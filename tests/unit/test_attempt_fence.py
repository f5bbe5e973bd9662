"""The attempt fence's answers, over a stand-in for the Task SDK's two calls.

The stand-in keeps the real contract: task_state_store addressed by ti id (an archived id reads
back as the default), get_task_states answering {run_id: {task_id: state}}.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from airflow_lakefence.attempt import TOKEN_KEY, AttemptFence, attempt_from_context
from airflow_lakefence.exceptions import StaleAttemptError


class FakeServer:
    def __init__(self) -> None:
        self.live_ids = {"ti-1"}
        self.values: dict[tuple[str, str], Any] = {}
        self.state = "running"
        self.fail: Exception | None = None
        self.calls = 0


class FakeStore:
    def __init__(self, server: FakeServer, ti_id: str) -> None:
        self.server, self.ti_id = server, ti_id

    def set(self, key: str, value: Any) -> None:
        self.server.calls += 1
        if self.server.fail:
            raise self.server.fail
        self.server.values[(self.ti_id, key)] = value

    def get(self, key: str, default: Any = None) -> Any:
        self.server.calls += 1
        if self.server.fail:
            raise self.server.fail
        if self.ti_id not in self.server.live_ids:
            return default
        return self.server.values.get((self.ti_id, key), default)


class FakeTI:
    dag_id, run_id, task_id, map_index, try_number, id = "d", "r", "t", -1, 1, "ti-1"

    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def get_task_states(self, **kwargs: Any) -> dict[str, dict[str, str]]:
        self.server.calls += 1
        assert kwargs == {"dag_id": "d", "task_ids": ["t"], "run_ids": ["r"], "map_index": None}
        return {"r": {"t": self.server.state}}


@pytest.fixture
def server() -> FakeServer:
    return FakeServer()


def make_fence(server: FakeServer, grace: float = 0.0) -> AttemptFence:
    ti = FakeTI(server)
    fence = AttemptFence({"ti": ti, "task_state_store": FakeStore(server, ti.id)}, grace_period=grace)
    fence.arm()
    return fence


def test_current_attempt_passes_with_two_calls(server: FakeServer) -> None:
    fence = make_fence(server)
    server.calls = 0
    fence.check("before stage")
    assert server.calls == 2
    assert server.values[("ti-1", TOKEN_KEY)]


def test_attempt_identity() -> None:
    attempt = attempt_from_context({"ti": FakeTI(FakeServer())})
    assert (attempt.key.dag_id, attempt.key.run_id, attempt.key.task_id, attempt.key.map_index) == ("d", "r", "t", -1)
    assert (attempt.try_number, attempt.ti_id) == (1, "ti-1")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s.live_ids.clear(), "no longer live"),
        (lambda s: setattr(s, "state", "failed"), "'failed'"),
        (lambda s: setattr(s, "state", "success"), "'success'"),
        (lambda s: setattr(s, "state", "up_for_retry"), "'up_for_retry'"),
        (lambda s: setattr(s, "state", None), "None"),
        (lambda s: setattr(s, "fail", ConnectionError("api down")), "could not be read"),
        (lambda s: s.values.clear(), "no longer live"),
    ],
)
def test_stale_reasons(server: FakeServer, change: Any, reason: str) -> None:
    fence = make_fence(server)
    change(server)
    with pytest.raises(StaleAttemptError, match="before publish") as info:
        fence.check("before publish")
    assert reason in str(info.value)


def test_on_kill_is_stale_without_asking(server: FakeServer) -> None:
    fence = make_fence(server)
    fence.killed.set()
    server.calls = 0
    assert fence.stale_reason() == "on_kill was received"
    assert server.calls == 0


def test_unarmed_or_unavailable_store_fails_closed(server: FakeServer) -> None:
    ti = FakeTI(server)
    fence = AttemptFence({"ti": ti, "task_state_store": FakeStore(server, ti.id)}, grace_period=0)
    assert fence.stale_reason() == "the attempt fence was never armed"
    with pytest.raises(StaleAttemptError):
        AttemptFence({"ti": ti}, grace_period=0).arm()
    server.fail = RuntimeError("boom")
    with pytest.raises(StaleAttemptError):
        AttemptFence({"ti": ti, "task_state_store": FakeStore(server, ti.id)}, grace_period=0).arm()


def test_staleness_waits_for_the_kill_but_no_longer(server: FakeServer) -> None:
    fence = make_fence(server, grace=5.0)
    server.state = "failed"
    threading.Timer(0.2, fence.killed.set).start()
    started = time.monotonic()
    with pytest.raises(StaleAttemptError):
        fence.check("before stage")
    assert 0.1 < time.monotonic() - started < 4.0  # woken by the kill, not the full grace period


def test_staleness_raises_after_the_grace_period(server: FakeServer) -> None:
    fence = make_fence(server, grace=0.3)
    server.state = "failed"
    started = time.monotonic()
    with pytest.raises(StaleAttemptError):
        fence.check("before stage")
    assert time.monotonic() - started >= 0.3
