"""LakeFSHook, LakeFSResolveRefOperator and the operator's argument checks."""

from __future__ import annotations

import json
import urllib.parse
from datetime import timedelta
from typing import Any

import lakefs
import pytest

from airflow_lakefence.exceptions import InputRefError, InvalidInputError, LakeFSAuthError, PublishBudgetError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.operators import FencedSparkPublishOperator, LakeFSResolveRefOperator
from tests.integration.helpers import SPARK_TASK, commit_files

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")


def test_hook_reads_the_connection(lakefs_conn: dict[str, str], lakefence_repo: lakefs.Repository) -> None:
    hook = LakeFSHook()
    assert hook.endpoint == lakefs_conn["host"].removesuffix("/api/v1")
    assert hook.settings["verify_ssl"] is True
    assert hook.client.get_commit(lakefence_repo.id, "main").id == lakefence_repo.branch("main").get_commit().id
    assert hook.test_connection()[0] is True
    assert lakefs_conn["password"] not in repr(hook.client)


def test_hook_uri_connection_and_bad_credentials(
    lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch, lakefence_repo: lakefs.Repository
) -> None:
    host = lakefs_conn["host"].removeprefix("http://").removesuffix("/api/v1")
    secret = urllib.parse.quote(lakefs_conn["password"], safe="")
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_URI", f"lakefs://{lakefs_conn['login']}:{secret}@{host}")
    assert LakeFSHook("lakefs_uri").client.get_commit(lakefence_repo.id, "main").id
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_BAD", json.dumps({**lakefs_conn, "password": "wrong"}))
    bad = LakeFSHook("lakefs_bad")
    with pytest.raises(LakeFSAuthError) as info:
        bad.client.get_commit(lakefence_repo.id, "main")
    assert info.value.status == 401 and "wrong" not in str(info.value)
    ok, message = bad.test_connection()
    assert not ok and "401" in message


@pytest.mark.parametrize(
    "conn",
    [
        {"conn_type": "lakefs", "login": "a", "password": "b"},
        {"conn_type": "lakefs", "host": "http://x", "password": "b"},
        {"conn_type": "lakefs", "host": "http://x", "login": "a"},
        {"conn_type": "lakefs", "host": "http://x", "login": "a", "password": "b", "extra": {"verify_ssl": "maybe"}},
    ],
)
def test_malformed_connections(conn: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_MALFORMED", json.dumps(conn))
    with pytest.raises(InvalidInputError):
        LakeFSHook("lakefs_malformed").client  # noqa: B018


def test_missing_connection() -> None:
    with pytest.raises(InvalidInputError, match="not defined"):
        LakeFSHook("no_such_conn").client  # noqa: B018


def test_resolve_ref_operator(lakefence_repo: lakefs.Repository) -> None:
    first = commit_files(lakefence_repo, "main", {"a": "1"}, "one")
    second = commit_files(lakefence_repo, "main", {"b": "2"}, "two")
    for ref, expected in [("main", second), ("main~1", first), (first, first)]:
        assert LakeFSResolveRefOperator(task_id="r", repository=lakefence_repo.id, ref=ref).execute({}) == expected
    with pytest.raises(InputRefError):
        LakeFSResolveRefOperator(task_id="r", repository=lakefence_repo.id, ref="nope").execute({})


BASE: dict[str, Any] = SPARK_TASK


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"write_mode": "s3"}, InvalidInputError),
        ({"read_only": True, "output_prefixes": ["a/"]}, InvalidInputError),
        ({"read_only": True, "commit_message": "m"}, InvalidInputError),
        ({"publish_budget": -1}, InvalidInputError),
        ({"publish_budget": timedelta(minutes=5), "execution_timeout": timedelta(minutes=5)}, PublishBudgetError),
        ({"staging_branch_prefix": "bad prefix"}, InvalidInputError),
        ({"staging_branch_prefix": ""}, InvalidInputError),
    ],
)
def test_arguments_that_can_never_work_fail_at_parse_time(kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        FencedSparkPublishOperator(**{**BASE, **kwargs})


def test_durable_follows_the_provider() -> None:
    """The provider's default (True on Airflow 3.3, always off below), and False when asked."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    assert FencedSparkPublishOperator(**BASE).durable is SparkSubmitOperator(task_id="plain").durable
    assert FencedSparkPublishOperator(**BASE, durable=False).durable is False
