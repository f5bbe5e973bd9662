"""The error message the publications view shows with an evidence branch comes from the run state in
lakeFS: it is written there redacted (the connection's key pair, and whatever Airflow's secrets masker
masks in the task log) and bounded, so a secret quoted by an error never reaches lakeFS."""

from __future__ import annotations

import json
import logging

import lakefs
import pytest

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.records.reporting import SilentReporter
from airflow_lakefence.core.records.run_state import MESSAGE_LIMIT
from airflow_lakefence.core.staging.evidence import Evidence
from airflow_lakefence.exceptions import PublishFenceError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_adapter.run_state_store import (
    RUN_STATE_BRANCH,
    LakeFSRunState,
    read_run_state,
    record_value,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")


def test_a_secret_quoted_by_an_error_never_reaches_the_run_state(
    seeded: tuple[lakefs.Repository, str], lakefs_conn: dict[str, str]
) -> None:
    repo, input_commit = seeded
    hook = LakeFSHook()
    secret, key_id = lakefs_conn["password"], lakefs_conn["login"]
    key = PublicationKey("lf_secret", "r1", "publish", -1)
    attempt = AttemptId(key, 1, "ti-1")
    staging = "lakefence-secret-evidence"
    repo.branch(staging).create(input_commit)
    state = LakeFSRunState(hook.client, repo.id, key, source_branch="main", fresh=True)
    evidence = Evidence(hook.client, state, repo.id, "lakefence", logging.getLogger(__name__), redact=hook.redact)
    # Another secret Airflow was asked to mask in the task log (another connection's password).
    from airflow.sdk.log import mask_secret

    other = "another-connection-s3cr3t"
    mask_secret(other)
    # An error quoting them (say, a pre-merge hook that printed its environment), longer than a record keeps.
    error = PublishFenceError(
        f"refused by a hook: LAKEFS_SECRET_ACCESS_KEY={secret} key={key_id} other={other}\n" + "x" * 2000,
        staging_branch=staging,
    )
    evidence.keep(attempt, staging, input_commit, error, SilentReporter())

    records = read_run_state(hook.client, repo.id, key)
    (entry,) = [v for k, v in records.items() if k.startswith("evidence/")]
    assert entry["error"] == "PublishFenceError" and entry["try_number"] == 1
    message = entry["message"]
    assert message.startswith("refused by a hook: LAKEFS_SECRET_ACCESS_KEY=*** key=*** other=***")
    assert len(message) == MESSAGE_LIMIT and "\n" not in message
    # Nowhere in lakeFS: not in any record of the run state (decoded), nor on the kept branch's marker.
    everything = {
        path: record_value(meta) for path, meta in hook.client.list_records(repo.id, RUN_STATE_BRANCH, "runs/").items()
    }
    marker = repo.branch(staging).get_commit()
    text = json.dumps(everything) + json.dumps(dict(marker.metadata)) + marker.message
    assert secret not in text and key_id not in text and other not in text


def test_without_a_redactor_only_the_class_is_kept(seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    hook = LakeFSHook()
    key = PublicationKey("lf_secret", "r2", "publish", -1)
    staging = "lakefence-secret-evidence-2"
    repo.branch(staging).create(input_commit)
    state = LakeFSRunState(hook.client, repo.id, key, source_branch="main", fresh=True)
    evidence = Evidence(hook.client, state, repo.id, "lakefence", logging.getLogger(__name__))
    error = PublishFenceError("anything at all", staging_branch=staging)
    evidence.keep(AttemptId(key, 1, "ti-1"), staging, input_commit, error, SilentReporter())
    (entry,) = [v for k, v in read_run_state(hook.client, repo.id, key).items() if k.startswith("evidence/")]
    assert "message" not in entry and entry["error"] == "PublishFenceError"
