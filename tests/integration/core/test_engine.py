"""The publish engine on its own: no Airflow, a stand-in attempt fence, lakeFS over HTTP.

Every scenario runs against the session's lakeFS backend through the real adapter (``LakeFSClient``;
the local server or real lakeFS, per ``--lakefs-backend``). Lost answers are played by
:class:`LossyPort`, which wraps the adapter. Outcomes are asserted on the branches, commits and
objects left behind.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.engine import PUBLISH_ROUNDS, AttemptLocations, PublishEngine, PublishRequest
from airflow_lakefence.core.fences.hard import forget_checks
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import parse_staging_branch_name, staging_branch_name
from airflow_lakefence.core.publication.replacement import TEMP_SUFFIX
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.records.run_state import (
    PUBLISHED_KEY,
    MemoryRunState,
    pin_key,
    recorded_evidence,
    reported_publication,
)
from airflow_lakefence.core.staging.cleaner import evidence_metadata, evidence_of
from airflow_lakefence.exceptions import (
    InputRefError,
    JobError,
    LakeFenceError,
    LakeFSUnavailableError,
    OutputPrefixError,
    PublishBudgetError,
    PublishFenceError,
    PublishRaceError,
    StaleAttemptError,
)
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from tests.integration.lossy_port import LossyPort

KEY = PublicationKey("dag", "run-1", "publish")


def attempt(try_number: int = 1, map_index: int = -1) -> AttemptId:
    key = KEY if map_index == -1 else PublicationKey(KEY.dag_id, KEY.run_id, KEY.task_id, map_index)
    return AttemptId(key, try_number, f"ti-{try_number}" if map_index == -1 else f"ti-{try_number}-{map_index}")


@dataclass
class StandInFence:
    """The attempt fence port: current until a test says otherwise."""

    attempt: AttemptId
    reason: str | None = None
    killed: bool = False
    armed: bool = False
    checks: int = 0

    def arm(self) -> None:
        self.armed = True

    def stale_reason(self) -> str | None:
        self.checks += 1
        return self.reason

    def was_killed(self) -> bool:
        return self.killed

    def fail(self, where: str, reason: str) -> Any:
        raise StaleAttemptError(f"stale attempt {where}: {reason}")


class Reported:
    """A reporter that keeps what the engine publishes (step 12) and ignores the rest."""

    def __init__(self, results: list[Any]) -> None:
        self.results = results
        self.staging: list[str] = []

    def staging_created(self, name: str) -> None:
        self.staging.append(name)

    def supersedes(self, value: Any) -> None:
        pass

    def evidence(self, value: Any) -> None:
        pass

    def reporting(self, result: Any) -> None:
        pass

    def published(self, result: Any) -> None:
        self.results.append(result)


class World:
    """A new repository whose ``main`` holds one input commit, behind a :class:`LossyPort` over the adapter.

    :param repo: the repository (``lakefence_repo``).
    :param server: the session's lakeFS (``lakefence_server``).
    """

    def __init__(self, repo: Any, server: Any) -> None:
        self.repo, self.server = repo, server
        self.client = adapter(server)
        self.repository = repo.id
        self.port = LossyPort(self.client)
        self._tmp = Path(tempfile.mkdtemp(prefix="engine-world-"))
        self.input = self.write("main", {"in/data.txt": "input"}, "seed")

    def stage(self, branch: str, path: str, text: str) -> None:
        """What a direct-mode job does: write one object into a branch, uncommitted."""
        local = self._tmp / "blob"
        local.write_text(text)
        self.client.upload_file(self.repository, branch, path, local)

    def write(self, branch: str, files: dict[str, str], message: str = "foreign") -> str:
        for path, text in files.items():
            self.stage(branch, path, text)
        return str(self.client.commit(self.repository, branch, message, {}).id)

    def tree(self, ref: str) -> dict[str, str]:
        paths = self.client.list_objects(self.repository, ref)
        return {p: self.client.read_object(self.repository, ref, p).decode() for p in paths}

    def branches(self) -> list[str]:
        return [name for name, _ in self.client.list_branches(self.repository, "lakefence", show_hidden=True)]

    def head(self, branch: str = "main") -> Any:
        return self.client.get_commit(self.repository, branch)


def adapter(server: Any) -> LakeFSClient:
    """A new adapter (``LakeFSClient``) for the session's lakeFS."""
    return LakeFSClient(server.endpoint, server.access_key_id, server.secret_access_key)


@pytest.fixture
def world(lakefence_repo: Any, lakefence_server: Any) -> Iterator[World]:
    yield World(lakefence_repo, lakefence_server)
    failpoints.disarm_all()


@dataclass
class Run:
    world: World
    try_number: int = 1
    write_mode: str = "workspace"
    files: dict[str, str] = field(default_factory=lambda: {"out/a.txt": "A"})
    prefixes: tuple[str, ...] | None = None
    deadline: float | None = None
    budget: float | None = None
    input_ref: str | None = None
    allow_empty: bool = False
    read_only: bool = False
    map_index: int = -1
    run_state: MemoryRunState | None = None
    replace_by_merge: bool = False
    seen: list[AttemptLocations] = field(default_factory=list)
    reported: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.fence = StandInFence(attempt(self.try_number, self.map_index))

    def job(self, locations: AttemptLocations) -> None:
        self.seen.append(locations)
        for path, text in self.files.items():
            if locations.workspace is not None:
                target = locations.workspace / path
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            elif locations.staging_branch is not None:
                self.world.stage(locations.staging_branch, path, text)

    def request(self, **more: Any) -> PublishRequest:
        """The run's request into ``main``; ``more`` adds fields."""
        return PublishRequest(
            repository=self.world.repository,
            target_branch="main",
            input_ref=self.input_ref or self.world.input,
            write_mode=self.write_mode,
            read_only=self.read_only,
            output_prefixes=self.prefixes,
            allow_empty_workspace=self.allow_empty,
            publish_budget=self.budget,
            deadline=self.deadline,
            replace_by_merge=self.replace_by_merge,
            **more,
        )

    def engine(self) -> PublishEngine:
        request = self.request()
        return PublishEngine(self.world.port, self.fence, request, clock=lambda: 100.0, run_state=self.run_state)

    def __call__(self) -> Any:
        return self.engine().run(self.job, Reported(self.reported))


class Crash(BaseException):
    """The worker dying: no ``except Exception`` catches it."""


def crash() -> None:
    raise Crash


def test_merge_publishes_exactly_the_output_on_top_of_the_input(world: World) -> None:
    run = Run(world, files={"out/a.txt": "A", "out/b/c.txt": "CC"})
    result = run()
    head = world.head()
    assert (result.decision, result.output_ref, result.input_ref) == ("merge", head.id, world.input)
    assert head.parents == (world.input, result.staged_commit)
    record = decode_metadata(head.metadata)
    assert record is not None and record.role == "publish" and record.attempt == attempt(1)
    assert record.staged_commit == result.staged_commit
    assert world.tree("main") == {"in/data.txt": "input", "out/a.txt": "A", "out/b/c.txt": "CC"}
    assert (result.files, result.bytes) == (2, 3)
    assert run.reported == [result]
    assert world.branches() == []
    assert run.fence.armed and run.fence.checks == 3  # before stage, before publish, before reporting


def test_a_branch_name_input_is_resolved_once_to_a_commit(world: World) -> None:
    run = Run(world, input_ref="main")
    result = run()
    assert result.input_ref == world.input == run.seen[0].input_commit
    assert world.head().parents[0] == world.input


def test_nothing_changed_is_a_noop(world: World) -> None:
    result = Run(world, files={"in/data.txt": "input"})()
    assert (result.decision, result.output_ref, result.staged_commit) == ("noop", world.input, world.input)
    assert world.head().id == world.input
    assert world.branches() == []


def test_an_abandoned_publication_is_replaced_by_the_next_try(world: World) -> None:
    failpoints.arm("after_verify", crash)
    with pytest.raises(Crash):
        Run(world, files={"out/try1.txt": "1"})()
    abandoned = world.head()
    assert decode_metadata(abandoned.metadata).attempt == attempt(1)  # type: ignore[union-attr]
    failpoints.disarm_all()
    result = Run(world, try_number=2, files={"out/try2.txt": "2"})()
    head = world.head()
    assert (result.decision, result.output_ref) == ("replace", head.id)
    assert head.id == result.staged_commit and head.parents == (world.input,)
    assert world.tree("main") == {"in/data.txt": "input", "out/try2.txt": "2"}


def test_an_abandoned_publication_is_undone_when_the_retry_changes_nothing(world: World) -> None:
    failpoints.arm("after_verify", crash)
    with pytest.raises(Crash):
        Run(world, files={"out/try1.txt": "1"})()
    failpoints.disarm_all()
    result = Run(world, try_number=2, files={}, allow_empty=True)()
    assert (result.decision, result.output_ref) == ("relocate", world.input)
    assert world.head().id == world.input


def test_a_foreign_commit_before_the_job_fails_before_running_it(world: World) -> None:
    foreign = world.write("main", {"other.txt": "x"})
    run = Run(world)
    with pytest.raises(PublishFenceError, match="before the job"):
        run()
    assert run.seen == []
    assert world.head().id == foreign
    assert world.branches() == []
    assert world.port.calls.get("create_branch", 0) == 0  # refused before any write


@pytest.mark.parametrize("given", ["commit", "branch", "pinned"])
def test_an_input_the_target_is_not_built_on_is_refused_before_any_write(world: World, given: str) -> None:
    """A commit of another branch, while the target never moved: no publication can ever build on it."""
    world.port.inner.create_branch(world.repository, "other", "main")
    elsewhere = world.write("other", {"other.txt": "x"}, "another branch")
    state = MemoryRunState()
    if given == "pinned":  # an earlier try pinned it: the same answer, from the pin (read by a retry)
        state.create(pin_key("other"), {"ref": "other", "commit": elsewhere})
    try_number = 2 if given == "pinned" else 1
    run = Run(world, input_ref=elsewhere if given == "commit" else "other", run_state=state, try_number=try_number)
    with pytest.raises(InputRefError) as info:
        run()
    message = str(info.value)
    assert f"is not on the history of 'main' (HEAD {world.input})" in message
    assert "nothing was written" in message and "What to do:" in message
    assert "reset the target by hand" not in message
    assert run.seen == [] and run.reported == []
    assert world.head().id == world.input
    assert world.branches() == []
    assert world.port.calls.get("create_branch", 0) == 0
    # Extra reads only on this refusal: one merge base, and resolving a branch name first.
    assert world.port.calls.get("merge_base") == 1
    assert world.port.calls.get("get_commit") == (2 if given == "branch" else 1)


def test_an_unknown_commit_id_is_refused_before_any_write(world: World) -> None:
    run = Run(world, input_ref="0" * 64)
    with pytest.raises(InputRefError, match="not found in repository"):
        run()
    assert run.seen == [] and world.branches() == [] and world.port.calls.get("create_branch", 0) == 0


def test_an_input_the_target_is_built_on_costs_no_extra_read(world: World) -> None:
    """HEAD is the input (by id, or by the target's own name): no resolution, no merge base."""
    calls = []
    for input_ref in (world.input, "main"):
        forget_checks()  # each run as a new worker process: the default hard_fence="auto" reads the fence once
        world.port.calls.clear()
        result = Run(world, input_ref=input_ref, files={}, allow_empty=True)()
        assert (result.decision, result.input_ref) == ("noop", world.input)
        calls.append(dict(world.port.calls))
    # The target's HEAD (step 1), the staging branch's HEAD ("no changes"), the publish fence's read.
    assert calls[0] == calls[1] and calls[0]["get_commit"] == 3 and "merge_base" not in calls[0]


def test_a_retry_removes_the_temporary_branch_of_a_killed_merge_only_replacement(world: World) -> None:
    failpoints.arm("after_verify", crash)
    with pytest.raises(Crash):
        Run(world, files={"out/try1.txt": "1"})()  # try 1 publishes and dies: an abandoned publication
    failpoints.disarm_all()

    def killed_inside_the_replacement() -> None:
        # Killed (no clean-up runs): the temporary branch's deletion dies too.
        world.port.before["delete_branch"] = crash
        raise Crash

    world.port.before["revert"] = killed_inside_the_replacement
    with pytest.raises(Crash):
        Run(world, try_number=2, files={"out/try2.txt": "2"}, replace_by_merge=True)()
    left = world.branches()
    temporary = [name for name in left if name.endswith(TEMP_SUFFIX)]
    assert len(temporary) == 1 and parse_staging_branch_name(temporary[0].removesuffix(TEMP_SUFFIX))
    result = Run(world, try_number=3, files={"out/try3.txt": "3"}, replace_by_merge=True)()
    assert result.decision == "replace"
    assert world.tree("main") == {"in/data.txt": "input", "out/try3.txt": "3"}
    assert world.branches() == []  # try 2's staging branch and its temporary branch are gone


def test_a_foreign_commit_during_the_job_fails_closed_and_keeps_evidence(world: World) -> None:
    run = Run(world)
    failpoints.arm("after_job", lambda: world.write("main", {"other.txt": "x"}))
    with pytest.raises(PublishFenceError) as info:
        run()
    assert type(info.value) is PublishFenceError
    assert world.branches() == [info.value.staging_branch]
    marker = world.head(info.value.staging_branch)
    assert marker.metadata["lakefence.evidence"] == "PublishFenceError"
    assert world.tree(info.value.staging_branch)["out/a.txt"] == "A"
    assert decode_metadata(world.head().metadata) is None  # the foreign commit is untouched


@pytest.mark.parametrize(("point", "where"), [("after_job", "before stage"), ("after_stage", "before publish")])
def test_a_stale_attempt_publishes_nothing(world: World, point: str, where: str) -> None:
    run = Run(world)
    failpoints.arm(point, lambda: setattr(run.fence, "reason", "cleared"))
    with pytest.raises(StaleAttemptError, match=where):
        run()
    assert world.head().id == world.input
    assert world.branches() == []
    assert world.port.calls.get("merge", 0) == 0


class ArchivedRunState:
    """A run state that does not answer (its store is down): every call fails."""

    def get(self, key: str) -> Any:
        raise LakeFenceError(f"could not read run-state record {key!r}: lakeFS unavailable")

    def items(self, prefix: str) -> dict[str, Any]:
        raise LakeFenceError(f"could not list run-state records {prefix!r}: lakeFS unavailable")

    def create(self, key: str, value: Any) -> Any:
        raise LakeFenceError(f"could not write run-state record {key!r}: lakeFS unavailable")


@pytest.mark.parametrize("stale", [True, False])
def test_a_run_state_failure_of_a_cleared_try_is_staleness(world: World, stale: bool) -> None:
    run = Run(world, input_ref="main")  # a branch name: its pin is written (a commit id pins itself)
    run.fence.reason = "cleared" if stale else None
    engine = run.engine()
    engine.run_state = ArchivedRunState()
    with pytest.raises(LakeFenceError) as info:
        engine.run(run.job, Reported(run.reported))
    # Cleared: StaleAttemptError (nothing ran); still current: the store's own failure, fail closed.
    assert isinstance(info.value, StaleAttemptError) is stale
    assert run.seen == [] and world.head().id == world.input and world.branches() == []


class ClearedAtReport(MemoryRunState):
    """A run state whose try is cleared right after its last fence check, and whose write of the
    reported publication fails (race sweep seed 52, hard fence)."""

    def __init__(self, run: Run, clear: bool) -> None:
        super().__init__()
        self.run, self.clear = run, clear

    def create(self, key: str, value: Any) -> Any:
        if key.startswith(PUBLISHED_KEY + "/"):
            if self.clear:
                self.run.fence.reason = "cleared"
            raise LakeFenceError(f"could not write run-state record {key!r}: lakeFS unavailable")
        return super().create(key, value)


@pytest.mark.parametrize("stale", [True, False])
def test_a_try_cleared_after_publishing_whose_report_is_refused_is_stale(world: World, stale: bool) -> None:
    run = Run(world)
    engine = run.engine()
    engine.run_state = ClearedAtReport(run, clear=stale)
    with pytest.raises(LakeFenceError) as info:
        engine.run(run.job, Reported(run.reported))
    # Cleared: a StaleAttemptError (its publication is the next try's to replace); still current:
    # the store's own failure. Either way nothing is reported.
    assert isinstance(info.value, StaleAttemptError) is stale, info.value
    assert run.reported == []
    assert list(world.head().parents[:1]) == [world.input]  # published, once: the next try replaces it


def test_a_lost_staging_branch_creation_that_landed_is_recognised(world: World) -> None:
    world.port.lose("create_branch", landed=True)
    result = Run(world)()
    assert result.decision == "merge"
    assert world.port.calls["create_branch"] == 1


def test_a_lost_staging_commit_that_landed_is_recognised_by_its_record(world: World) -> None:
    world.port.lose("commit", landed=True)
    result = Run(world)()
    assert result.decision == "merge" and world.port.calls["commit"] == 1
    staged = world.head(result.staged_commit)
    assert decode_metadata(staged.metadata).role == "stage"  # type: ignore[union-attr]


def test_a_lost_merge_that_landed_is_not_merged_again(world: World) -> None:
    world.port.lose("merge", landed=True)
    result = Run(world)()
    head = world.head()
    assert (result.decision, result.output_ref) == ("idempotent", head.id)
    assert head.parents[0] == world.input
    assert world.port.calls["merge"] == 1


def test_a_lost_answer_to_the_merges_verification_is_asked_again(world: World) -> None:
    """The verifying read travels beside the report's writes; losing its answer twice still ends
    with the merge verified and reported (three rounds, as a publish round has)."""
    world.port.before["merge"] = lambda: world.port.lose("get_commit", landed=True, times=PUBLISH_ROUNDS - 1)
    result = Run(world)()
    head = world.head()
    assert (result.decision, result.output_ref) == ("merge", head.id)
    assert head.parents[0] == world.input
    assert world.port.calls["merge"] == 1


def test_a_merge_whose_verification_never_gets_an_answer_is_not_reported(world: World) -> None:
    world.port.before["merge"] = lambda: world.port.lose("get_commit", landed=True, times=PUBLISH_ROUNDS)
    run = Run(world)
    with pytest.raises(LakeFSUnavailableError, match="merge verification"):
        run()
    assert world.head().parents[0] == world.input  # merged; the next try finds it (abandoned) and replaces it
    assert run.reported == []


def test_a_lost_merge_that_never_arrived_is_decided_again(world: World) -> None:
    world.port.lose("merge", landed=False)
    result = Run(world)()
    assert result.decision == "merge" and world.port.calls["merge"] == 2
    assert world.head().id == result.output_ref


def test_answers_lost_every_round_fail_without_publishing(world: World) -> None:
    world.port.lose("merge", landed=False, times=PUBLISH_ROUNDS)
    with pytest.raises(LakeFSUnavailableError, match="could not be confirmed"):
        Run(world)()
    assert world.head().id == world.input


def test_a_writer_slipping_in_before_the_merge_is_detected(world: World) -> None:
    """The merge's verification travels beside the record and the staging branch's delete: a race it
    finds still ends with the evidence kept (the branch made again at the staged commit, marked),
    nothing reported, and the record already written voided by the try's evidence entry."""
    racer: list[str] = []
    world.port.before["merge"] = lambda: racer.append(world.write("main", {"racer.txt": "r"}))
    run = Run(world, run_state=MemoryRunState())
    with pytest.raises(PublishRaceError, match="first parent") as info:
        run()
    staging = info.value.staging_branch
    assert world.branches() == [staging]
    merge = world.head()
    assert merge.parents[0] == racer[0]  # the publish landed on the racer's commit: reported, not undone
    marker = world.head(staging)
    assert evidence_of(marker.metadata) and list(marker.parents) == [merge.parents[1]]  # on the staged commit
    assert run.reported == []  # no output ref was ever named
    assert run.run_state is not None and reported_publication(run.run_state) is None
    assert [e.error for e in recorded_evidence(run.run_state).values()] == ["PublishRaceError"]


@pytest.mark.parametrize("write_mode", ["workspace", "direct"])
def test_output_outside_the_declared_prefixes_fails_closed(world: World, write_mode: str) -> None:
    run = Run(world, write_mode=write_mode, files={"t/ok.txt": "1", "other/bad.txt": "2"}, prefixes=("t",))
    with pytest.raises(OutputPrefixError, match="other/"):
        run()
    assert world.head().id == world.input
    # What the job wrote is kept as evidence in both modes (workspace mode uploads it).
    assert (world.port.calls.get("upload_tree", 0) > 0) == (write_mode == "workspace")
    assert len(world.branches()) == 1


def test_direct_mode_publishes_what_the_job_wrote(world: World) -> None:
    result = Run(world, write_mode="direct", files={"t/p.txt": "1"}, prefixes=("t/",))()
    assert result.decision == "merge"
    assert world.tree("main")["t/p.txt"] == "1"


def test_the_publish_budget_refuses_a_late_publish(world: World) -> None:
    with pytest.raises(PublishBudgetError):
        Run(world, deadline=105.0, budget=10.0)()  # the stand-in clock says 100: 5 s remain
    assert world.head().id == world.input
    assert world.branches() == []


def test_a_failed_job_is_a_job_error_and_a_killed_one_is_stale(world: World) -> None:
    def failing(_locations: AttemptLocations) -> None:
        raise RuntimeError("boom")

    run = Run(world)
    with pytest.raises(JobError, match="boom"):
        run.engine().run(failing)
    run = Run(world)
    run.fence.killed = True
    with pytest.raises(StaleAttemptError, match="killed"):
        run.engine().run(failing)
    assert world.branches() == []


def test_read_only_reads_the_input_and_writes_nothing(world: World) -> None:
    run = Run(world, read_only=True, input_ref="main")
    result = run()
    assert (result.decision, result.output_ref, result.staging_branch) == ("read_only", world.input, None)
    assert set(world.port.calls) == {"get_commit"}
    assert run.seen[0].write_mode == "read_only" and run.seen[0].staging_branch is None


def test_an_unknown_input_is_a_clear_error_and_nothing_is_written(world: World) -> None:
    with pytest.raises(InputRefError):
        Run(world, input_ref="f" * 64)()
    assert world.branches() == [] and world.head().id == world.input


def test_a_retry_removes_earlier_staging_branches_but_keeps_evidence(world: World) -> None:
    inner, repo = world.port.inner, world.repository
    leftover = staging_branch_name(attempt(1))  # try 1 crashed: no finally ran
    inner.create_branch(repo, leftover, world.input, hidden=True)
    evidence = staging_branch_name(AttemptId(KEY, 2, "ti-2"))  # try 2 failed closed
    inner.create_branch(repo, evidence, world.input, hidden=True)
    inner.commit(
        repo, evidence, "evidence", evidence_metadata(attempt(2), world.input, "PublishFenceError"), allow_empty=True
    )
    result = Run(world, try_number=3)()
    assert result.decision == "merge"
    assert world.branches() == [evidence]


def test_the_first_try_does_not_list_branches(world: World) -> None:
    Run(world)()
    assert world.port.calls.get("list_branches", 0) == 0


class RecordingLog:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, /, *args: Any) -> None:
        self.lines.append(msg % args)

    def warning(self, msg: str, /, *args: Any) -> None:
        self.lines.append(msg % args)


def test_the_attempt_is_logged_before_the_job_and_summed_up_after(world: World) -> None:
    log = RecordingLog()
    run = Run(world, files={f"out/part-{n:03d}.txt": "xy" for n in range(40)})
    logged_before_job: list[str] = []
    engine = run.engine()
    engine.log = log

    def job(locations: AttemptLocations) -> None:
        logged_before_job.extend(log.lines)
        run.job(locations)

    result = engine.run(job)
    (attempt_line,) = [line for line in logged_before_job if line.startswith("lakefence attempt")]
    for fact in (world.input, result.staging_branch, "main", "try 1"):
        assert str(fact) in attempt_line
    progress = [line for line in log.lines if line.startswith("Uploading into")]
    assert 3 <= len(progress) <= 10 and "of 40 files" in progress[0]  # progress, not a line per file
    assert any(line.startswith("Uploaded 40 files (80 bytes)") for line in log.lines)
    summary = result.summary()
    for fact in ("merge", result.output_ref, result.staged_commit, world.input, "40 files, 80 bytes"):
        assert str(fact) in summary


@pytest.mark.parametrize("first_try", ["succeeded", "died"])
def test_the_fence_log_tells_a_superseded_publication_from_an_abandoned_one(world: World, first_try: str) -> None:
    state = MemoryRunState()  # the run state both tries share (Airflow's task_state_store)
    if first_try == "died":
        failpoints.arm("after_verify", crash)  # before the try records its publication
        with pytest.raises(Crash):
            Run(world, run_state=state, files={"out/try1.txt": "1"})()
        failpoints.disarm_all()
    else:
        Run(world, run_state=state, files={"out/try1.txt": "1"})()
    first = world.head().id
    log = RecordingLog()
    run = Run(world, try_number=2, run_state=state, files={"out/try2.txt": "2"})
    engine = run.engine()
    engine.log = log
    result = engine.run(run.job)
    assert result.decision == "replace" and world.head().id == result.output_ref != first
    (line,) = [line for line in log.lines if line.startswith("Publish fence:")]
    if first_try == "succeeded":
        assert line == (
            f"Publish fence: replace (target HEAD {first} is the superseded publication of try 1 (it succeeded; "
            "the task instance was cleared))"
        )
        assert result.supersedes == {"output_ref": first, "try_number": 1}
        assert result.reason.startswith(f"supersedes the successful publication {first} of try 1")
    else:
        assert line == f"Publish fence: replace (target HEAD {first} is an abandoned publication of try 1)"
        assert result.supersedes is None


def test_a_mapped_instance_refused_before_its_job_says_nothing_ran(world: World) -> None:
    published = Run(world, map_index=0, files={"out/m0.txt": "0"})()
    second = Run(world, map_index=1, files={"out/m1.txt": "1"})
    with pytest.raises(PublishFenceError) as info:
        second()
    message = str(info.value)
    assert message.startswith("before the job, nothing was run: ")
    assert "another mapped instance of this task" in message and "map index 0" in message
    assert "Nothing was run." in message and "What to do:" in message
    assert second.seen == [] and info.value.staging_branch is None  # the job never ran, nothing kept
    assert world.head().id == published.output_ref and world.branches() == []


def test_a_mapped_instance_refused_at_publish_time_says_its_job_ran(world: World) -> None:
    """Two mapped instances at once: both pass the check before the job, the second to publish is
    refused by the publish fence, after its job ran."""
    other = Run(world, map_index=1, files={"out/m1.txt": "1"})
    run = Run(world, map_index=0, files={"out/m0.txt": "0"})
    others: list[Any] = []

    def job(locations: AttemptLocations) -> None:
        others.append(other())  # map index 1 publishes while map index 0's job runs
        run.job(locations)

    with pytest.raises(PublishFenceError) as info:
        run.engine().run(job)
    message, kept = str(info.value), info.value.staging_branch
    assert type(info.value) is PublishFenceError and kept is not None
    assert "another mapped instance of this task" in message and "map index 1" in message
    assert "nothing was run" not in message.lower() and "What to do:" in message
    assert f"The job ran; nothing was published, its output is kept in staging branch {kept!r}." in message
    assert len(run.seen) == 1 and others[0].decision == "merge"
    assert world.head().id == others[0].output_ref  # map index 1's publication is untouched
    assert world.branches() == [kept] and world.tree(kept)["out/m0.txt"] == "0"
