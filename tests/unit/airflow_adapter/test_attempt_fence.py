"""The attempt fence's answers, over a stand-in for the Task SDK's two calls.

The stand-in keeps the real contract: task_state_store addressed by ti id (an archived id reads
back as the default), get_task_states answering {run_id: {task_id: state}}.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_lakefence.airflow_adapter.attempt_fence import TOKEN_KEY, AttemptFence, attempt_from_context
from airflow_lakefence.airflow_adapter.task_instances import task_state
from airflow_lakefence.core.names.keys import PublicationKey
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
    assert fence.stale_reason() is None
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
        (lambda s: setattr(s, "state", None), "'none'"),
        (lambda s: setattr(s, "fail", ConnectionError("api down")), "could not be read"),
        (lambda s: s.values.clear(), "no longer live"),
    ],
)
def test_stale_reasons(server: FakeServer, change: Any, reason: str) -> None:
    fence = make_fence(server)
    change(server)
    stale = fence.stale_reason()
    assert stale is not None and reason in stale
    with pytest.raises(StaleAttemptError, match="before publish") as info:
        fence.fail("before publish", stale)
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


class RecordingEvent:
    """Stands in for the kill event: records how long ``fail`` was willing to wait."""

    def __init__(self, killed: bool = False) -> None:
        self.waits: list[float] = []
        self._killed = killed

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return self._killed

    def is_set(self) -> bool:
        return self._killed

    def set(self) -> None:
        self._killed = True


@pytest.mark.parametrize("grace", [0.0, 2.5, 15.0])
def test_fail_waits_for_the_kill_at_most_the_grace_period(server: FakeServer, grace: float) -> None:
    fence = make_fence(server, grace=grace)
    fence.killed = RecordingEvent()  # type: ignore[assignment]
    with pytest.raises(StaleAttemptError, match="before stage: state"):
        fence.fail("before stage", "state")
    assert fence.killed.waits == [grace]  # type: ignore[attr-defined]


def test_negative_grace_period_waits_not_at_all(server: FakeServer) -> None:
    fence = make_fence(server, grace=-1)
    fence.killed = RecordingEvent(killed=True)  # type: ignore[assignment]
    assert fence.was_killed()
    with pytest.raises(StaleAttemptError):
        fence.fail("before stage", "on_kill was received")
    assert fence.killed.waits == [0.0]  # type: ignore[attr-defined]


class StatesTI:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: Any = None

    def get_task_states(self, **kwargs: Any) -> Any:
        self.asked = kwargs
        return self.answer


@pytest.mark.parametrize(
    ("answer", "key", "expected", "map_index"),
    [
        ({"r": {"t": "running"}}, PublicationKey("d", "r", "t"), "running", None),
        ({"r": {"t_3": "failed"}}, PublicationKey("d", "r", "t", 3), "failed", 3),
        ({"r": {"t": "running"}}, PublicationKey("d", "r", "t", 3), None, 3),
        ({"r": {"t": None}}, PublicationKey("d", "r", "t"), "none", None),
        ({}, PublicationKey("d", "r", "t"), None, None),
    ],
)
def test_task_state_is_one_call_and_names_mapped_instances(
    answer: Any, key: PublicationKey, expected: str | None, map_index: int | None
) -> None:
    ti = StatesTI(answer)
    assert task_state(ti, key) == expected
    assert ti.asked == {"dag_id": "d", "task_ids": ["t"], "run_ids": ["r"], "map_index": map_index}


# -- Airflow 3.0 to 3.2: the token in the task's own XCom ---------------------------------------


class FakeXComTI(FakeTI):
    """A Task SDK task instance of 3.0 to 3.2: no task_state_store; XComs by publication key."""

    def xcom_push(self, key: str, value: Any) -> None:
        self.server.calls += 1
        self.server.values[("xcom", key)] = value


def make_xcom_fence(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> AttemptFence:
    from airflow_lakefence.airflow_adapter import task_instances

    def read(name: str, key: PublicationKey) -> Any:
        server.calls += 1
        if server.fail:
            raise server.fail
        return server.values.get(("xcom", name))

    monkeypatch.setattr(task_instances.TaskSdkView, "_xcom", staticmethod(read))
    fence = AttemptFence({"ti": FakeXComTI(server)}, grace_period=0)
    fence.arm()
    return fence


def test_xcom_token_current_attempt_passes_with_two_calls(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    fence = make_xcom_fence(server, monkeypatch)
    server.calls = 0
    assert fence.stale_reason() is None and server.calls == 2


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        # A newer try started running: it cleared the task's XComs, then pushed its own token.
        (lambda s: s.values.pop(("xcom", "lakefence_attempt_token")), "no longer live"),
        (lambda s: s.values.__setitem__(("xcom", "lakefence_attempt_token"), "newer"), "no longer live"),
        (lambda s: setattr(s, "state", "restarting"), "'restarting'"),
        (lambda s: setattr(s, "state", "success"), "'success'"),
        (lambda s: setattr(s, "fail", ConnectionError("api down")), "could not be read"),
    ],
)
def test_xcom_token_stale_reasons(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch, change: Any, reason: str
) -> None:
    fence = make_xcom_fence(server, monkeypatch)
    change(server)
    stale = fence.stale_reason()
    assert stale is not None and reason in stale


# -- Airflow 2.11: the task instance's row ------------------------------------------------------


class FakeRow:
    def __init__(self) -> None:
        self.row: tuple[Any, ...] | None = ("running", 1, 7, "host", 42)
        self.fail: Exception | None = None


@pytest.fixture
def row(monkeypatch: pytest.MonkeyPatch) -> FakeRow:
    from airflow_lakefence.airflow_adapter import task_instances

    fake = FakeRow()

    def read(self: Any) -> tuple[Any, ...] | None:
        if fake.fail:
            raise fake.fail
        return fake.row

    monkeypatch.setattr(task_instances.TaskInstanceRowLiveness, "_row", read)
    return fake


class FakeAirflow2TI:
    """Airflow 2's TaskInstance: no id, no get_task_states."""

    dag_id, run_id, task_id, map_index, try_number = "d", "r", "t", -1, 1
    job_id, hostname, pid = 7, "host", 42


def test_row_fence_names_the_attempt_without_an_id() -> None:
    attempt = attempt_from_context({"ti": FakeAirflow2TI()})
    assert (attempt.try_number, attempt.ti_id) == (1, "af2:1:7:host:42")


@pytest.mark.parametrize(
    ("row_after", "reason"),
    [
        (("failed", 1, 7, "host", 42), "state is 'failed'"),  # marked failed
        (("none", 1, 7, "host", 42), "state is 'none'"),  # cleared
        (("running", 2, 8, "host", 43), "try_number 1 -> 2"),  # a newer try runs: the zombie is stale
        (None, "row is gone"),
    ],
)
def test_row_fence_stale_reasons(row: FakeRow, row_after: Any, reason: str) -> None:
    fence = AttemptFence({"ti": FakeAirflow2TI()}, grace_period=0)
    fence.arm()
    assert fence.stale_reason() is None
    row.row = row_after
    stale = fence.stale_reason()
    assert stale is not None and reason in stale


def test_row_fence_fails_closed(row: FakeRow) -> None:
    fence = AttemptFence({"ti": FakeAirflow2TI()}, grace_period=0)
    fence.arm()
    row.fail = RuntimeError("database down")
    assert "could not be read" in (fence.stale_reason() or "")
    row.row = ("success", 1, 7, "host", 42)
    row.fail = None
    with pytest.raises(StaleAttemptError):
        AttemptFence({"ti": FakeAirflow2TI()}, grace_period=0).arm()
