"""The pure parts of a run branch (airflow_lakefence/core/publication/run_branches.py): its name, the record, and
the one decision about a branch of that name found already there."""

from __future__ import annotations

import pytest

from airflow_lakefence.core.names.staging_names import MAX_BRANCH_NAME_LENGTH, is_valid_branch_name
from airflow_lakefence.core.publication.run_branches import (
    PROVIDER_DAG_ID_KEY,
    PROVIDER_RUN_ID_KEY,
    RunBranchRecord,
    first_foreign,
    judge_existing,
    run_branch_name,
    run_hash,
)
from airflow_lakefence.exceptions import InvalidInputError, RunBranchError

pytestmark = pytest.mark.run_branch

INPUT, A, B = "i" * 64, "a" * 64, "b" * 64


@pytest.mark.parametrize(
    "rendered",
    ["run-etl-manual__2026-01-01T00:00:00+00:00", "été/ünïcode run", "x" * 400, "-leading", "__"],
)
def test_a_name_is_valid_bounded_and_ends_with_the_runs_hash(rendered: str) -> None:
    name = run_branch_name(rendered, "etl", "manual__1", 3)
    assert is_valid_branch_name(name) and len(name) <= MAX_BRANCH_NAME_LENGTH
    assert name.endswith("-" + run_hash("etl", "manual__1", 3))
    assert name == run_branch_name(rendered, "etl", "manual__1", 3)  # the same for every try


def test_runs_and_map_indexes_never_share_a_name() -> None:
    names = {run_branch_name("run", "etl", run, index) for run in ("r1", "r2") for index in (-1, 0, 1)}
    assert len(names) == 6


@pytest.mark.parametrize("rendered", ["", "   ", "---", None])
def test_a_template_rendering_to_nothing_is_refused(rendered: object) -> None:
    with pytest.raises(InvalidInputError, match="run_branch"):
        run_branch_name(rendered, "etl", "r1")  # type: ignore[arg-type]


def test_the_record_round_trips_and_ignores_anything_else() -> None:
    record = RunBranchRecord("run-x-1", INPUT, "repo")
    assert RunBranchRecord.of(record.to_dict()) == record
    assert RunBranchRecord.of(None) is None
    assert RunBranchRecord.of({"branch": "b", "input_commit": INPUT}) is None


def ours(run_id: str = "r1") -> dict[str, str]:
    return {"lakefence.dag_id": "etl", "lakefence.run_id": run_id}


def test_first_foreign_walks_to_the_input_through_the_runs_commits() -> None:
    provider = {PROVIDER_DAG_ID_KEY: "etl", PROVIDER_RUN_ID_KEY: "r1"}
    assert first_foreign([(A, ours()), (B, provider), (INPUT, {})], INPUT, "etl", "r1") is None
    assert first_foreign([(A, ours()), (B, ours("r2")), (INPUT, {})], INPUT, "etl", "r1") == B
    assert first_foreign([(A, {}), (INPUT, {})], INPUT, "etl", "r1") == A
    assert first_foreign([(A, ours())], INPUT, "etl", "r1") == INPUT  # never reaches the input


def test_a_branch_at_the_input_is_used_as_it_is_whoever_made_it() -> None:
    assert "used as it is" in judge_existing("b", INPUT, INPUT, recorded=False, foreign=None)


def test_a_recorded_branch_holding_only_the_runs_writes_is_the_runs() -> None:
    assert "holds its writes" in judge_existing("b", A, INPUT, recorded=True, foreign=None)


@pytest.mark.parametrize(
    ("recorded", "foreign", "why"),
    [
        (False, None, "never recorded making it"),
        (True, B, f"its commit {B} was not written by this run"),
        (True, INPUT, "does not lead to the run's input"),
    ],
)
def test_anything_else_fails_closed_saying_what_to_do(recorded: bool, foreign: str | None, why: str) -> None:
    with pytest.raises(RunBranchError) as caught:
        judge_existing("b", A, INPUT, recorded=recorded, foreign=foreign)
    message = str(caught.value)
    assert why in message and f"not at the run's input {INPUT}" in message and "What to do" in message


@pytest.mark.parametrize(
    "template",
    [
        "run-etl-manual__2026",
        "lakefence-run-etl",  # under the staging prefix
        "lakefence-publish-0123456789abcdef-t1-abcdef12",  # a staging branch's very shape, as the stem
        "lakefence-publish-0123456789abcdef-t1-abcdef12-mo",  # a temporary branch's shape
    ],
)
def test_the_staging_cleaner_never_takes_a_run_branch_for_a_staging_branch(template: str) -> None:
    from airflow_lakefence.core.staging.cleaner import inspect_branch

    name = run_branch_name(template, "etl", "manual__1")
    assert inspect_branch(name, "c" * 64, {}, "lakefence") is None
