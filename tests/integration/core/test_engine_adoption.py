"""Adoption in the publish engine: a retry adopts an earlier try's durable job and staging branch.

No Airflow and no Spark: the job system is :class:`JobSystem` (its jobs outlive the tries, as a
standalone driver outlives the worker that submitted it), each try's port onto it is
:class:`Durable`; lakeFS is the session's backend over HTTP. Outcomes are asserted on the target's
commits and objects, the branches left and the jobs the job system ran.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.engine import AttemptLocations, PublishEngine
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.records.run_state import MemoryRunState
from airflow_lakefence.core.staging.adoption import (
    ADOPTED_BY_KEY,
    ADOPTED_FROM_KEY,
    ADOPTED_JOB_KEY,
    JobRecord,
    JobStatus,
    job_records,
)
from airflow_lakefence.exceptions import JobError, StaleAttemptError
from tests.integration.core.test_engine import Crash, Reported, Run, World

OUTPUT = {"out/a.txt": "A"}


@dataclass
class JobSystem:
    """Durable jobs by id: each writes its output into its staging branch when it finishes."""

    world: World
    status: dict[str, JobStatus] = field(default_factory=dict)
    branch: dict[str, str] = field(default_factory=dict)
    stored: str | None = None  # the provider's task_state_store entry (one per task, shared by tries)
    fail_next: bool = False

    def submit(self, branch: str) -> str:
        job_id = f"driver-{len(self.status) + 1}"
        self.status[job_id], self.branch[job_id] = JobStatus.ACTIVE, branch
        return job_id

    def finish(self, job_id: str) -> None:
        if self.status[job_id] is JobStatus.ACTIVE:
            if self.fail_next:
                self.fail_next = False
                self.status[job_id] = JobStatus.FAILED
                return
            for path, text in OUTPUT.items():
                self.world.stage(self.branch[job_id], path, f"{text} by {job_id}")
            self.status[job_id] = JobStatus.SUCCEEDED


@dataclass
class Durable:
    """One try's durable-job port, and its job callable (the provider's submit-or-reconnect and wait)."""

    jobs: JobSystem
    adopting: str | None = None
    submitted: Callable[[str], None] | None = None
    before_wait: Callable[[str], None] | None = None  # the worker dying, or a try pausing

    def stored_job_id(self) -> str | None:
        return self.jobs.stored

    def job_status(self, job_id: str) -> JobStatus:
        return self.jobs.status.get(job_id, JobStatus.UNKNOWN)

    def adopt(self, record: JobRecord) -> None:
        self.adopting, self.submitted = record.job_id, None

    def submit_fresh(self, submitted: Callable[[str], None]) -> None:
        self.jobs.stored, self.adopting, self.submitted = None, None, submitted

    def job(self, locations: AttemptLocations) -> None:
        if self.adopting is not None:
            job_id = self.adopting
            if self.jobs.status[job_id] is JobStatus.FAILED:
                raise RuntimeError("the adopted job failed")
        else:
            assert locations.staging_branch is not None
            job_id = self.jobs.submit(locations.staging_branch)
            assert self.submitted is not None
            self.submitted(job_id)
            self.jobs.stored = job_id
        if self.before_wait is not None:
            self.before_wait(job_id)
        self.jobs.finish(job_id)
        if self.jobs.status[job_id] is not JobStatus.SUCCEEDED:
            raise RuntimeError(f"driver {job_id} exited with status FAILED")


class Try(Run):
    """One try of the durable task, sharing the run state and the job system with the others."""

    def __init__(self, world: World, try_number: int, state: MemoryRunState, jobs: JobSystem) -> None:
        super().__init__(world, try_number=try_number, write_mode="direct", prefixes=("out/",), run_state=state)
        self.durable = Durable(jobs)

    def __call__(self) -> Any:
        engine = PublishEngine(
            self.world.port, self.fence, self.request(), clock=lambda: 100.0, run_state=self.run_state
        )
        return engine.run(self.durable.job, Reported(self.reported), durable=self.durable)


def die(_job_id: str) -> None:
    raise Crash


@pytest.fixture
def run(lakefence_repo: Any, lakefence_server: Any) -> Iterator[tuple[World, MemoryRunState, JobSystem]]:
    world = World(lakefence_repo, lakefence_server)
    yield world, MemoryRunState(), JobSystem(world)
    failpoints.disarm_all()


def test_a_retry_adopts_the_job_of_a_try_killed_mid_job_and_publishes_it_once(run: Any) -> None:
    world, state, jobs = run
    first = Try(world, 1, state, jobs)
    first.durable.before_wait = die
    with pytest.raises(Crash):
        first()
    (record1,) = job_records(state)
    assert jobs.status == {"driver-1": JobStatus.ACTIVE}
    assert world.branches() == [record1.staging_branch]  # kept: its job outlives the dead try

    result = Try(world, 2, state, jobs)()
    assert jobs.status == {"driver-1": JobStatus.SUCCEEDED}  # one job: reconnected, not resubmitted
    head = world.head()
    assert result.decision == "merge" and head.id == result.output_ref
    assert world.tree("main") == {"in/data.txt": "input", "out/a.txt": "A by driver-1"}
    assert head.metadata[ADOPTED_JOB_KEY] == "driver-1"
    assert (head.metadata[ADOPTED_FROM_KEY], head.metadata[ADOPTED_BY_KEY]) == ("1", "2")
    record = decode_metadata(head.metadata)
    assert record is not None and record.attempt.try_number == 2  # the adopter publishes, under its own name
    assert [(r.try_number, r.job_id, r.submitted_by) for r in job_records(state)] == [
        (1, "driver-1", 1),
        (2, "driver-1", 1),
    ]
    assert result.staging_branch == record1.staging_branch
    assert world.branches() == []


def test_a_job_that_finished_before_the_retry_is_published_without_running_again(run: Any) -> None:
    world, state, jobs = run
    first = Try(world, 1, state, jobs)

    def finish_then_die(job_id: str) -> None:
        jobs.finish(job_id)
        raise Crash

    first.durable.before_wait = finish_then_die
    with pytest.raises(Crash):
        first()
    second = Try(world, 2, state, jobs)
    result = second()
    assert list(jobs.status) == ["driver-1"] and result.decision == "merge"
    assert world.tree("main")["out/a.txt"] == "A by driver-1"
    assert world.head().metadata[ADOPTED_FROM_KEY] == "1"


def test_a_failed_job_is_run_again_not_adopted(run: Any) -> None:
    world, state, jobs = run
    jobs.fail_next = True
    with pytest.raises(JobError):
        Try(world, 1, state, jobs)()
    assert world.branches() == []  # a failed job's branch is dropped, as without adoption
    result = Try(world, 2, state, jobs)()
    assert jobs.status == {"driver-1": JobStatus.FAILED, "driver-2": JobStatus.SUCCEEDED}
    assert world.tree("main")["out/a.txt"] == "A by driver-2"
    head = world.head()
    assert ADOPTED_JOB_KEY not in head.metadata and result.decision == "merge"


def test_a_branch_with_a_foreign_commit_is_not_adopted(run: Any) -> None:
    world, state, jobs = run
    first = Try(world, 1, state, jobs)
    first.durable.before_wait = die
    with pytest.raises(Crash):
        first()
    (record1,) = job_records(state)
    world.write(record1.staging_branch, {"out/x.txt": "someone else"})
    Try(world, 2, state, jobs)()
    assert list(jobs.status) == ["driver-1", "driver-2"]  # a new job
    assert world.tree("main") == {"in/data.txt": "input", "out/a.txt": "A by driver-2"}
    assert ADOPTED_JOB_KEY not in world.head().metadata


def test_a_zombie_that_comes_back_after_the_adoption_fails_closed_and_leaves_the_branch(run: Any) -> None:
    """Try 1 is not dead, only paused (a stalled worker): try 2 adopts its job; try 1 then wakes up,
    finds itself stale at the attempt fence, publishes nothing and does not delete the adopted branch."""
    world, state, jobs = run
    first = Try(world, 1, state, jobs)
    paused, resume = threading.Event(), threading.Event()

    def pause(_job_id: str) -> None:
        paused.set()
        resume.wait(30)

    first.durable.before_wait = pause
    outcome: list[BaseException] = []

    def zombie() -> None:
        try:
            first()
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=zombie)
    thread.start()
    assert paused.wait(30)
    first.fence.reason = "the task-instance id was archived (a newer try runs)"  # what try 2's start does

    second = Try(world, 2, state, jobs)

    def let_the_zombie_run(_job_id: str) -> None:
        resume.set()
        thread.join(30)  # the zombie finishes its job, checks its fence, gives up

    second.durable.before_wait = let_the_zombie_run
    result = second()
    assert len(outcome) == 1 and isinstance(outcome[0], StaleAttemptError), outcome
    assert first.reported == []  # the zombie reported (and published) nothing
    assert result.decision == "merge" and list(jobs.status) == ["driver-1"]
    head = world.head()
    assert head.parents[0] == world.input and head.metadata[ADOPTED_BY_KEY] == "2"
    assert world.tree("main")["out/a.txt"] == "A by driver-1"
    assert world.branches() == []


def test_without_a_durable_port_every_try_runs_its_own_job(run: Any) -> None:
    world, state, _jobs = run
    first = Run(world, write_mode="direct", prefixes=("out/",), run_state=state)
    first.job = lambda locations: (_ for _ in ()).throw(Crash())  # type: ignore[method-assign]
    with pytest.raises(Crash):
        first()
    assert world.branches() == []  # no durable job: nothing outlives the try
    Run(world, try_number=2, write_mode="direct", prefixes=("out/",), run_state=state)()
    assert job_records(state) == [] and ADOPTED_JOB_KEY not in world.head().metadata
