"""Adoption: a retry that waits for an earlier try's durable job instead of running it again.

A durable job (Spark's standalone driver, YARN application, Kubernetes driver pod) outlives the
Airflow process that submitted it. When that process dies, the next try may *adopt* the job and its
staging branch: wait for the job (through the job system's own reconnect) and publish its output,
once, through the unchanged fences (docs/protocol.md, "Adoption").

This module is the rule, with nothing around it: the job records the tries leave in the run state
(:class:`JobRecord`, one per try that submitted or adopted a job, written once) and
:func:`decide_adoption`, which says whether this try adopts and why, from facts the adapters read
(the job's status, the staging branch's HEAD). The earlier try is provably gone because this try is
running: Airflow archived the earlier try's task-instance id when it started this one, so the
earlier process, if it still runs, fails every attempt fence from then on and never publishes.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.ports import CommitInfo
from airflow_lakefence.core.records.metadata import METADATA_PREFIX, ROLE_STAGE, decode_metadata
from airflow_lakefence.core.records.run_state import RunStatePort
from airflow_lakefence.core.staging.cleaner import evidence_of

__all__ = [
    "ADOPTED_BY_KEY",
    "ADOPTED_FROM_KEY",
    "ADOPTED_JOB_KEY",
    "JOB_KEY",
    "AdoptionDecision",
    "DurableJobPort",
    "JobRecord",
    "JobStatus",
    "adopted_by_later_try",
    "adoption_metadata",
    "decide_adoption",
    "job_records",
    "latest_job_record",
    "record_job",
]

#: The run-state records of durable jobs: ``job/<try number>``, one per try that submitted or adopted one.
JOB_KEY = "job"
#: Commit metadata of an adopted job's publication: the job, the try that submitted it, the try that published.
ADOPTED_JOB_KEY = METADATA_PREFIX + "adopted_job"
ADOPTED_FROM_KEY = METADATA_PREFIX + "adopted_from_try"
ADOPTED_BY_KEY = METADATA_PREFIX + "adopted_by_try"


class JobStatus(enum.Enum):
    """A durable job's state as the job system reports it, reduced to what adoption needs."""

    ACTIVE = "active"  # submitted or running (or relaunching): a reconnect waits for it
    SUCCEEDED = "succeeded"  # finished cleanly: its output is complete
    FAILED = "failed"  # any other terminal state (failed, killed, error, gone)
    UNKNOWN = "unknown"  # the job system could not be asked


@dataclass(frozen=True)
class JobRecord:
    """One try's durable job, as the run state keeps it (written once, before the job is waited for).

    :param try_number: the try that wrote the record (it submitted or adopted the job).
    :param ti_id: that try's task-instance id.
    :param job_id: the job system's id (driver id, application id, ``namespace:pod``).
    :param staging_branch: the branch the job writes into.
    :param input_commit: the input commit the staging branch was created from.
    :param submitted_by: the try that submitted the job (``try_number`` itself unless adopted).
    """

    try_number: int
    ti_id: str
    job_id: str
    staging_branch: str
    input_commit: str
    submitted_by: int

    @property
    def adopted(self) -> bool:
        """Whether this record is an adoption (the job was submitted by an earlier try)."""
        return self.submitted_by != self.try_number

    def to_json(self) -> dict[str, Any]:
        """The record's JSON value."""
        return {
            "try_number": self.try_number,
            "ti_id": self.ti_id,
            "job_id": self.job_id,
            "staging_branch": self.staging_branch,
            "input_commit": self.input_commit,
            "submitted_by": self.submitted_by,
        }

    @classmethod
    def from_json(cls, value: Any) -> JobRecord | None:
        """The record of a stored value, ``None`` for anything malformed (never adopted).

        :param value: the stored value.
        """
        if not isinstance(value, dict):
            return None
        try:
            record = cls(
                int(value["try_number"]),
                str(value["ti_id"]),
                str(value["job_id"]),
                str(value["staging_branch"]),
                str(value["input_commit"]),
                int(value["submitted_by"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return record if 1 <= record.submitted_by <= record.try_number else None

    def attempt(self, key: PublicationKey) -> AttemptId:
        """The attempt that wrote the record.

        :param key: the publication key.
        """
        return AttemptId(key, self.try_number, self.ti_id)


def job_key(try_number: int) -> str:
    """The run-state key of one try's job record.

    :param try_number: the try.
    """
    return f"{JOB_KEY}/{try_number:08d}"


def record_job(state: RunStatePort, record: JobRecord) -> JobRecord | None:
    """Write this try's job record (once); return what is stored, ``None`` if it is unreadable.

    :param state: the run state.
    :param record: the record.
    :raises LakeFenceError: when the run state cannot be written.
    """
    return JobRecord.from_json(state.create(job_key(record.try_number), record.to_json()))


def job_records(state: RunStatePort) -> list[JobRecord]:
    """Every well-formed job record of the run, by try number.

    :param state: the run state.
    :raises LakeFenceError: when the run state cannot be read.
    """
    records = (JobRecord.from_json(value) for value in state.items(f"{JOB_KEY}/").values())
    return sorted((r for r in records if r is not None), key=lambda r: r.try_number)


def latest_job_record(state: RunStatePort, before_try: int) -> JobRecord | None:
    """The job record of the latest try before ``before_try`` that left one.

    :param state: the run state.
    :param before_try: this try's number.
    :raises LakeFenceError: when the run state cannot be read.
    """
    earlier = [r for r in job_records(state) if r.try_number < before_try]
    return earlier[-1] if earlier else None


def adopted_by_later_try(state: RunStatePort, attempt: AttemptId, branch: str) -> JobRecord | None:
    """The record of a later try that adopted ``branch`` (this attempt's staging branch), if any.

    A stale try asks this before it deletes its staging branch or kills its job: once a later try
    adopted them they are that try's, not this one's to drop.

    :param state: the run state.
    :param attempt: the asking (stale) attempt.
    :param branch: its staging branch.
    :raises LakeFenceError: when the run state cannot be read.
    """
    for record in job_records(state):
        if record.try_number > attempt.try_number and record.staging_branch == branch:
            return record
    return None


def adoption_metadata(record: JobRecord, adopter: AttemptId) -> dict[str, str]:
    """Commit metadata saying which try submitted the adopted job and which one publishes it.

    :param record: the adopted job's record (of the try adopted from).
    :param adopter: the adopting attempt.
    """
    return {
        ADOPTED_JOB_KEY: record.job_id,
        ADOPTED_FROM_KEY: str(record.submitted_by),
        ADOPTED_BY_KEY: str(adopter.try_number),
    }


@dataclass(frozen=True)
class AdoptionDecision:
    """Whether this try adopts an earlier try's job, and why.

    :param adopt: adopt (wait for the job, publish its staging branch) or run a new job.
    :param code: a stable name of the rule that decided.
    :param reason: the decision in words (logged).
    :param record: the earlier try's job record, when there is one.
    """

    adopt: bool
    code: str
    reason: str
    record: JobRecord | None = None


def _no(code: str, reason: str, record: JobRecord | None = None) -> AdoptionDecision:
    return AdoptionDecision(False, code, reason, record)


def _branch_verdict(
    head: CommitInfo | None, record: JobRecord, key: PublicationKey, chain: set[tuple[int, str]]
) -> str | None:
    """Why the staging branch is not the job's as it was left, ``None`` when it is.

    The branch is the job's when its HEAD is the input commit it was created from (the job's writes
    are uncommitted), or the ``stage`` commit on that input of a try of this job's chain (a try that
    staged and died before publishing). Anything else (an evidence marker, a commit the protocol
    cannot attribute, a branch reset elsewhere) is not adopted.
    """
    if head is None:
        return "the staging branch is gone"
    if evidence_of(head.metadata):
        return "the staging branch is evidence of a failed try"
    if head.id == record.input_commit:
        return None
    found = decode_metadata(head.metadata)
    if (
        found is not None
        and found.role == ROLE_STAGE
        and found.attempt.key == key
        and (found.attempt.try_number, found.attempt.ti_id) in chain
        and found.input_ref == record.input_commit
        and tuple(head.parents[:1]) == (record.input_commit,)
    ):
        return None
    return f"the staging branch moved: its HEAD {head.id} is neither the input nor the job's own stage commit"


def decide_adoption(
    attempt: AttemptId,
    *,
    write_mode: str,
    input_commit: str,
    records: list[JobRecord],
    stored_job_id: str | None,
    job_status: Callable[[str], JobStatus],
    branch_head: Callable[[str], CommitInfo | None],
) -> AdoptionDecision:
    """Decide whether ``attempt`` adopts the job of the latest earlier try that left one.

    Adopted only when all hold: the write mode is ``direct`` (a workspace died with its worker); the
    earlier record is a try of this run before this one (an earlier try is fenced once this one
    runs); the job system's stored id is that record's job (no later submission replaced it); the
    record's input is this try's input; the job is active or succeeded; its staging branch is as
    the job left it. Facts are read lazily, in that order, so a refusal costs no further call.

    :param attempt: this try.
    :param write_mode: the request's write mode.
    :param input_commit: this try's input commit (the run's pin).
    :param records: the run's job records (:func:`job_records`).
    :param stored_job_id: the id the job system's durable store holds for the task, if any.
    :param job_status: asks the job system for a job's status.
    :param branch_head: reads a branch's HEAD, ``None`` when the branch does not exist.
    """
    if write_mode != "direct":
        return _no("workspace", "the job wrote a local workspace, which died with the earlier try's worker")
    earlier = [r for r in records if r.try_number < attempt.try_number]
    if not earlier:
        return _no("no_job", "no earlier try of this run left a durable job")
    record = earlier[-1]
    if record.ti_id == attempt.ti_id:
        return _no("own_record", "the latest job record is this try's own", record)
    if stored_job_id != record.job_id:
        return _no(
            "job_replaced",
            f"the job system's stored job {stored_job_id!r} is not try {record.try_number}'s job {record.job_id!r}",
            record,
        )
    if record.input_commit != input_commit:
        return _no(
            "input_differs",
            f"try {record.try_number}'s job read input {record.input_commit}, this try's input is {input_commit}",
            record,
        )
    status = job_status(record.job_id)
    if status is JobStatus.FAILED:
        return _no("job_failed", f"job {record.job_id} of try {record.submitted_by} failed: a new job runs", record)
    if status is JobStatus.UNKNOWN:
        return _no("job_unknown", f"the status of job {record.job_id} could not be read: a new job runs", record)
    chain = {(r.try_number, r.ti_id) for r in earlier if r.job_id == record.job_id}
    why_not = _branch_verdict(branch_head(record.staging_branch), record, attempt.key, chain)
    if why_not is not None:
        return _no("branch_not_the_jobs", f"{why_not}: a new job runs", record)
    state = "running" if status is JobStatus.ACTIVE else "finished"
    return AdoptionDecision(
        True,
        "adopt_running" if status is JobStatus.ACTIVE else "adopt_finished",
        f"adopting job {record.job_id} of try {record.submitted_by} ({state}) and its staging branch "
        f"{record.staging_branch}: try {record.try_number} is gone",
        record,
    )


class DurableJobPort(Protocol):
    """What an adapter whose jobs outlive its process offers the engine (the Spark adapter does).

    The engine decides; the adapter reconnects (through the job system's own machinery) or submits.
    """

    def stored_job_id(self) -> str | None:
        """The job id the job system's durable store holds for this task, if any."""
        ...

    def job_status(self, job_id: str) -> JobStatus:
        """The job's status; :attr:`JobStatus.UNKNOWN` when it cannot be read (never raises)."""
        ...

    def adopt(self, record: JobRecord) -> None:
        """Make the next job run reconnect to ``record``'s job, and never submit a new one."""
        ...

    def submit_fresh(self, submitted: Callable[[str], None]) -> None:
        """Make the next job run submit a new job; call ``submitted(job_id)`` once the job system's
        durable store holds the id, before the job is waited for."""
        ...
