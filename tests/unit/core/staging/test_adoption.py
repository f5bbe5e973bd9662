"""The adoption rule (airflow_lakefence/core/staging/adoption.py): which retry adopts an earlier try's durable
job, and why not otherwise. Pure: the job system and lakeFS are two small callables."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.records.metadata import ROLE_STAGE, LakeFenceRecord, encode_metadata
from airflow_lakefence.core.records.run_state import MemoryRunState
from airflow_lakefence.core.staging.adoption import (
    ADOPTED_BY_KEY,
    ADOPTED_FROM_KEY,
    ADOPTED_JOB_KEY,
    JobRecord,
    JobStatus,
    adopted_by_later_try,
    adoption_metadata,
    decide_adoption,
    job_records,
    latest_job_record,
    record_job,
)
from airflow_lakefence.core.staging.cleaner import evidence_metadata

KEY = PublicationKey("dag", "run", "publish")
INPUT = "i" * 64
TRY1 = AttemptId(KEY, 1, "ti-1")
TRY2 = AttemptId(KEY, 2, "ti-2")
TRY3 = AttemptId(KEY, 3, "ti-3")
RECORD1 = JobRecord(1, "ti-1", "driver-1", "lakefence-publish-x-t1-a", INPUT, 1)


def decide(
    attempt: AttemptId = TRY2,
    *,
    records: list[JobRecord] | None = None,
    stored: str | None = "driver-1",
    status: JobStatus = JobStatus.ACTIVE,
    head: CommitInfo | None = None,
    write_mode: str = "direct",
    input_commit: str = INPUT,
    asked: list[str] | None = None,
) -> Any:
    asked = [] if asked is None else asked

    def job_status(job_id: str) -> JobStatus:
        asked.append(f"status {job_id}")
        return status

    def branch_head(branch: str) -> CommitInfo | None:
        asked.append(f"head {branch}")
        return head

    return decide_adoption(
        attempt,
        write_mode=write_mode,
        input_commit=input_commit,
        records=[RECORD1] if records is None else records,
        stored_job_id=stored,
        job_status=job_status,
        branch_head=branch_head,
    )


AT_INPUT = CommitInfo(id=INPUT)


@pytest.mark.parametrize(
    ("status", "code"), [(JobStatus.ACTIVE, "adopt_running"), (JobStatus.SUCCEEDED, "adopt_finished")]
)
def test_a_running_or_finished_job_on_its_untouched_branch_is_adopted(status: JobStatus, code: str) -> None:
    decision = decide(status=status, head=AT_INPUT)
    assert decision.adopt and decision.code == code and decision.record == RECORD1
    assert "try 1" in decision.reason and "driver-1" in decision.reason


def test_a_branch_the_earlier_try_staged_on_is_adopted() -> None:
    staged = CommitInfo(
        id="c" * 64, parents=[INPUT], metadata=encode_metadata(LakeFenceRecord(TRY1, ROLE_STAGE, INPUT))
    )
    assert decide(head=staged).adopt


def test_an_adoption_is_adopted_again_by_the_next_try() -> None:
    """Try 2 adopted try 1's job and died too: try 3 adopts it, still naming try 1 as the submitter."""
    record2 = JobRecord(2, "ti-2", "driver-1", RECORD1.staging_branch, INPUT, 1)
    staged_by_2 = CommitInfo(
        id="c" * 64, parents=[INPUT], metadata=encode_metadata(LakeFenceRecord(TRY2, ROLE_STAGE, INPUT))
    )
    decision = decide(TRY3, records=[RECORD1, record2], head=staged_by_2)
    assert decision.adopt and decision.record == record2 and decision.record.submitted_by == 1
    assert adoption_metadata(record2, TRY3) == {ADOPTED_JOB_KEY: "driver-1", ADOPTED_FROM_KEY: "1", ADOPTED_BY_KEY: "3"}


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"write_mode": "workspace"}, "workspace"),
        ({"records": []}, "no_job"),
        ({"stored": None}, "job_replaced"),
        ({"stored": "driver-2"}, "job_replaced"),
        ({"input_commit": "j" * 64}, "input_differs"),
        ({"status": JobStatus.FAILED}, "job_failed"),
        ({"status": JobStatus.UNKNOWN}, "job_unknown"),
        ({"head": None}, "branch_not_the_jobs"),
    ],
)
def test_no_adoption(kwargs: dict[str, Any], code: str) -> None:
    kwargs.setdefault("head", AT_INPUT)
    decision = decide(**kwargs)
    assert not decision.adopt and decision.code == code, decision


def test_refusals_read_no_more_than_they_need() -> None:
    asked: list[str] = []
    assert decide(stored="driver-2", asked=asked).code == "job_replaced" and asked == []
    assert decide(status=JobStatus.FAILED, asked=asked).code == "job_failed" and asked == ["status driver-1"]


def test_a_later_record_is_never_adopted_and_only_earlier_tries_count() -> None:
    later = JobRecord(3, "ti-3", "driver-3", "b3", INPUT, 3)
    assert decide(TRY2, records=[later], stored="driver-3", head=AT_INPUT).code == "no_job"
    own = JobRecord(2, "ti-2", "driver-1", "b2", INPUT, 2)
    assert decide(AttemptId(KEY, 3, "ti-2"), records=[own], head=AT_INPUT).code == "own_record"


@pytest.mark.parametrize(
    "head",
    [
        # a foreign commit on the branch
        CommitInfo(id="f" * 64, parents=[INPUT], metadata={"author": "someone"}),
        # the branch reset elsewhere
        CommitInfo(id="e" * 64, parents=["d" * 64]),
        # a stage commit of another key's attempt
        CommitInfo(
            id="c" * 64,
            parents=[INPUT],
            metadata=encode_metadata(
                LakeFenceRecord(AttemptId(PublicationKey("dag", "run", "other"), 1, "ti-1"), ROLE_STAGE, INPUT)
            ),
        ),
        # a stage commit of a try outside the job's chain
        CommitInfo(
            id="c" * 64,
            parents=[INPUT],
            metadata=encode_metadata(LakeFenceRecord(AttemptId(KEY, 1, "ti-x"), ROLE_STAGE, INPUT)),
        ),
        # the evidence marker of a failed try
        CommitInfo(id="m" * 64, parents=[INPUT], metadata=evidence_metadata(TRY1, INPUT, "PublishFenceError")),
    ],
)
def test_a_branch_that_is_not_the_jobs_as_it_left_it_is_not_adopted(head: CommitInfo) -> None:
    decision = decide(head=head)
    assert not decision.adopt and decision.code == "branch_not_the_jobs", decision


def test_job_records_in_the_run_state() -> None:
    state = MemoryRunState()
    assert record_job(state, RECORD1) == RECORD1
    # written once: a second writer for the same try reads the first one back
    assert record_job(state, JobRecord(1, "ti-other", "driver-9", "b", INPUT, 1)) == RECORD1
    adopted = JobRecord(2, "ti-2", "driver-1", RECORD1.staging_branch, INPUT, 1)
    record_job(state, adopted)
    state.create("job/garbage", {"try_number": "x"})
    assert job_records(state) == [RECORD1, adopted]
    assert latest_job_record(state, 2) == RECORD1 and latest_job_record(state, 3) == adopted
    assert adopted_by_later_try(state, TRY1, RECORD1.staging_branch) == adopted
    assert adopted_by_later_try(state, TRY2, RECORD1.staging_branch) is None
    assert adopted_by_later_try(state, TRY1, "another-branch") is None
    assert JobRecord.from_json(adopted.to_json()) == adopted and adopted.adopted and not RECORD1.adopted
    assert JobRecord.from_json({**RECORD1.to_json(), "submitted_by": 5}) is None
