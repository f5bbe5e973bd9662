"""Triggers: serialization round trips, and the polling loop over a stubbed probe."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_lakefence.exceptions import InputRefError
from airflow_lakefence.triggers import AbandonedPublicationTrigger, LakeFSCommitTrigger, LakeFSFileTrigger
from airflow_lakefence.triggers.lakefs import LakeFSPollingTrigger

TRIGGERS: list[LakeFSPollingTrigger] = [
    AbandonedPublicationTrigger(
        repository="repo",
        branch="main",
        condition="settled",
        publisher_dag_id="dag",
        publisher_task_id="publish",
        staging_branch_prefix="lf",
        ignore_repairs_underway=True,
        lakefs_conn_id="lakefs_x",
        poke_interval=2.5,
        deadline=1_900_000_000.5,
    ),
    AbandonedPublicationTrigger(repository="repo", branch="main", condition="detect", lakefs_conn_id="c"),
    AbandonedPublicationTrigger(
        repository="repo", branch="main", condition="detect", output_prefixes=["t/date=1/"], lakefs_conn_id="c"
    ),
    LakeFSCommitTrigger(repository="repo", branch="main", since_ref="abc", prefix="t/", lakefs_conn_id="c"),
    LakeFSCommitTrigger(repository="repo", branch="main", since_ref="abc", lakefs_conn_id="c", deadline=5.0),
    LakeFSFileTrigger(repository="repo", ref="main", path="a/b.txt", lakefs_conn_id="c", poke_interval=1),
    LakeFSFileTrigger(repository="repo", ref="v1", prefix="a/", lakefs_conn_id="c"),
]


@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda t: type(t).__name__)
def test_serialization_round_trip(trigger: LakeFSPollingTrigger) -> None:
    from airflow.sdk._shared.module_loading import import_string

    classpath, kwargs = trigger.serialize()
    assert json.loads(json.dumps(kwargs)) == kwargs  # JSON-serializable as is
    rebuilt = import_string(classpath)(**kwargs)
    assert type(rebuilt) is type(trigger)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert "client" not in vars(rebuilt)  # no I/O, no client before the first probe


def test_serialization_through_airflow_serde() -> None:
    from airflow.sdk.serde import deserialize, serialize

    for trigger in TRIGGERS:
        kwargs = trigger.serialize()[1]
        assert deserialize(serialize(kwargs)) == kwargs


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (AbandonedPublicationTrigger, {"repository": "r", "branch": "b", "condition": "x"}, "condition"),
        (LakeFSFileTrigger, {"repository": "r", "ref": "b"}, "exactly one"),
        (LakeFSFileTrigger, {"repository": "r", "ref": "b", "path": "p", "prefix": "q"}, "exactly one"),
    ],
)
def test_bad_arguments(cls: type, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cls(lakefs_conn_id="c", **kwargs)


class _Scripted(LakeFSCommitTrigger):
    """A commit trigger whose probe answers from a script (the lakeFS side is tested elsewhere)."""

    script: Iterator[Any]
    calls = 0

    def probe(self) -> tuple[bool, Any]:
        self.calls += 1
        item = next(self.script)
        if isinstance(item, BaseException):
            raise item
        return item is not None, item


def run(trigger: LakeFSPollingTrigger) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(collect())


def scripted(script: list[Any], **kwargs: Any) -> _Scripted:
    trigger = _Scripted(repository="r", branch="b", since_ref="s", lakefs_conn_id="c", poke_interval=0.01, **kwargs)
    trigger.script = iter(script)
    return trigger


def test_polls_until_done() -> None:
    trigger = scripted([None, None, "c3"])
    assert run(trigger) == [{"status": "success", "value": "c3"}]
    assert trigger.calls == 3


def test_error_ends_with_an_error_event() -> None:
    trigger = scripted([None, InputRefError("ref 'x' not found")])
    assert run(trigger) == [{"status": "error", "error": "InputRefError", "message": "ref 'x' not found"}]


def test_deadline_ends_with_a_timeout_event() -> None:
    trigger = scripted([None] * 100, deadline=0.0)
    events = run(trigger)
    assert [e["status"] for e in events] == ["timeout"] and trigger.calls == 1


def test_sensor_resumes_from_events() -> None:
    from airflow.sdk.exceptions import AirflowSensorTimeout

    from airflow_lakefence.exceptions import LakeFenceError, LakeFSNotFoundError
    from airflow_lakefence.sensors import LakeFSCommitSensor

    sensor = LakeFSCommitSensor(task_id="s", repository="r", branch="b", since_ref="x", deferrable=True)
    assert sensor.execute_complete({}, {"status": "success", "value": "c1"}) == "c1"
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute_complete({}, {"status": "timeout", "message": "late"})
    with pytest.raises(InputRefError, match="not found"):
        sensor.execute_complete({}, {"status": "error", "error": "InputRefError", "message": "not found"})
    with pytest.raises(LakeFSNotFoundError):
        sensor.execute_complete({}, {"status": "error", "error": "LakeFSNotFoundError", "message": "gone"})
    with pytest.raises(LakeFenceError, match="KeyError"):
        sensor.execute_complete({}, {"status": "error", "error": "KeyError", "message": "k"})
    with pytest.raises(LakeFenceError, match="without an event"):
        sensor.execute_complete({}, None)


def test_sensor_builds_its_trigger_from_its_arguments() -> None:
    from airflow_lakefence.sensors import AbandonedPublicationSensor, LakeFSFileSensor

    sensor = AbandonedPublicationSensor(
        task_id="s", repository="r", branch="main", condition="settled", publisher_dag_id="d", poke_interval=7
    )
    classpath, kwargs = sensor.trigger(deadline=123.0).serialize()
    assert classpath == "airflow_lakefence.triggers.lakefs.AbandonedPublicationTrigger"
    assert (
        kwargs["condition"] == "settled" and kwargs["publisher_dag_id"] == "d" and kwargs["publisher_task_id"] is None
    )
    assert kwargs["poke_interval"] == 7.0 and kwargs["deadline"] == 123.0
    file_kwargs = LakeFSFileSensor(task_id="f", repository="r", ref="main", prefix="p/").trigger(1.0).serialize()[1]
    assert file_kwargs["prefix"] == "p/" and file_kwargs["path"] is None


def test_scoped_sensor_hands_its_normalised_write_set_to_its_trigger() -> None:
    from airflow_lakefence.sensors import AbandonedPublicationSensor

    sensor = AbandonedPublicationSensor(
        task_id="s", repository="r", branch="main", output_prefixes=["tables/t/date=1", "tables/u/"]
    )
    kwargs = sensor.trigger(deadline=1.0).serialize()[1]
    assert kwargs["output_prefixes"] == ["tables/t/date=1/", "tables/u/"]
    assert AbandonedPublicationSensor(task_id="s", repository="r", branch="main").trigger(1.0).serialize()[1][
        "output_prefixes"
    ] is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"condition": "wait"},
        {"staging_branch_prefix": "bad prefix"},
        {"output_prefixes": ["t/", "t/date=1/"]},
        {"output_prefixes": ["s3://bucket/t/"]},
        {"output_prefixes": "t/"},
    ],
)
def test_abandoned_sensor_rejects_bad_arguments(kwargs: dict[str, Any]) -> None:
    from airflow_lakefence.exceptions import InvalidInputError
    from airflow_lakefence.sensors import AbandonedPublicationSensor

    with pytest.raises(InvalidInputError):
        AbandonedPublicationSensor(task_id="s", repository="r", branch="main", **kwargs)


def test_file_sensor_needs_exactly_one_target() -> None:
    from airflow_lakefence.exceptions import InvalidInputError
    from airflow_lakefence.sensors import LakeFSFileSensor

    with pytest.raises(InvalidInputError):
        LakeFSFileSensor(task_id="f", repository="r", ref="main")
