"""The fenced publish protocol (docs/protocol.md, steps 1 to 12) as one flow.

:meth:`PublishEngine.run` reads as the protocol's steps; each concern lives in its own module:

* :mod:`~airflow_lakefence.core.request`: the request and step 1 (validation, the target's HEAD,
  the input commit the target is built on);
* :mod:`~airflow_lakefence.core.fences.attempt`: the attempt fence (steps 6, 8), lost answers, the budget (9);
* :mod:`~airflow_lakefence.core.staging.evidence`: earlier tries' branches (3) and evidence kept on failure;
* :mod:`~airflow_lakefence.core.staging.stage`: the staging branch, the job and its output (3 to 7);
* :mod:`~airflow_lakefence.core.publication.publisher`: the publish fence, acting and verifying (10, 11);
* :mod:`~airflow_lakefence.core.records.reporting`: the result and the reporter told of it (12).

The engine talks to lakeFS through :class:`~airflow_lakefence.core.ports.LakeFSPort` and to the
scheduler through :class:`~airflow_lakefence.core.ports.AttemptFencePort`; it imports neither
Airflow nor lakeFS.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from airflow_lakefence import failpoints
from airflow_lakefence.core.advice import fail_closed_message
from airflow_lakefence.core.fences.attempt import PUBLISH_ROUNDS, AttemptGuard, in_background
from airflow_lakefence.core.fences.publish import Action, FenceDecision, HeadState, decide_publish
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.ports import AttemptFencePort, CommitInfo, LakeFSPort
from airflow_lakefence.core.publication.publisher import Publisher, PublishStrategy, supersedes
from airflow_lakefence.core.publication.staged import StagedOutput
from airflow_lakefence.core.records.metadata import output_prefixes_metadata
from airflow_lakefence.core.records.reporting import DECISION_READ_ONLY, Log, PublishResult, Reporter, SilentReporter
from airflow_lakefence.core.records.run_state import (
    MemoryRunState,
    RunStatePort,
    pin_input,
    pinned_input,
    record_publication,
)
from airflow_lakefence.core.request import (
    HARD_FENCE_MODES,
    OUTPUT_MODES,
    WRITE_MODES,
    PublishRequest,
    check_input,
    normalise_prefixes,
    read_target_head,
    resolve_input,
    seconds,
)
from airflow_lakefence.core.staging.adoption import (
    AdoptionDecision,
    DurableJobPort,
    JobRecord,
    JobStatus,
    adopted_by_later_try,
    adoption_metadata,
    decide_adoption,
    job_records,
    record_job,
)
from airflow_lakefence.core.staging.evidence import MARKER_TRIES, Evidence
from airflow_lakefence.core.staging.stage import StagingArea, Workspace
from airflow_lakefence.exceptions import (
    JobError,
    LakeFenceError,
    LakeFSNotFoundError,
    PublishFenceError,
    StaleAttemptError,
)

__all__ = [
    "DECISION_READ_ONLY",
    "HARD_FENCE_MODES",
    "MARKER_TRIES",
    "OUTPUT_MODES",
    "PUBLISH_ROUNDS",
    "WRITE_MODES",
    "AttemptLocations",
    "Job",
    "Log",
    "PublishEngine",
    "PublishRequest",
    "PublishResult",
    "Reporter",
    "decide_publish",
    "normalise_prefixes",
    "seconds",
]


Job = Callable[[AttemptLocations], None]


@dataclass(frozen=True)
class Published:
    """What steps 10 and 11 did, as step 12 reports it.

    :param decision: the publish fence's decision.
    :param output_ref: the commit the task reports.
    :param input_ref: the input commit.
    :param staged_commit: the staged commit.
    :param target_head: the target's HEAD read in step 1.
    :param superseded: the successful publication this attempt replaced, if any.
    :param verifying: step 11's check, when still in flight (it raises on a race): nothing names
        the output ref before it passed.
    """

    decision: FenceDecision
    output_ref: str
    input_ref: str
    staged_commit: str
    target_head: str
    superseded: dict[str, Any] | None
    verifying: Future[None] | None = None


class PublishEngine:
    """One fenced publish attempt.

    :param lakefs: the lakeFS port.
    :param fence: the attempt fence port.
    :param request: what to do.
    :param log: where to log; a module logger when ``None``.
    :param job_name: how messages name the job (e.g. ``Spark job``).
    :param job_error: the exception class a failed job is reported as.
    :param clock: the monotonic clock (the budget check compares it with ``request.deadline``).
    :param run_state: what the tries of one run share (the input pin, the reported publication, the
        evidence list): Airflow's ``task_state_store``; in memory when ``None`` (no pin across tries).
    :param redact: masks secrets in a text; given, a fail-closed error's message is kept with its
        evidence entry in the run state (redacted, bounded), else only its class.
    :raises InvalidInputError: if the request is invalid.
    """

    def __init__(
        self,
        lakefs: LakeFSPort,
        fence: AttemptFencePort,
        request: PublishRequest,
        *,
        log: Log | None = None,
        job_name: str = "job",
        job_error: type[JobError] = JobError,
        clock: Callable[[], float] = time.monotonic,
        run_state: RunStatePort | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.lakefs = lakefs
        self.redact = redact
        self.attempt_fence = fence
        self.request = request.validated()
        self.log: Log = log or logging.getLogger(__name__)
        self.job_name = job_name
        self.job_error = job_error
        self.clock = clock
        self.run_state: RunStatePort = run_state if run_state is not None else MemoryRunState()
        self._job_id: str | None = None  # the durable job this try submitted or adopted

    def run(self, job: Job, reporter: Reporter | None = None, durable: DurableJobPort | None = None) -> PublishResult:
        """Run the attempt (steps 1 to 12).

        :param job: the job, given the attempt's locations; it writes the workspace or the staging branch.
        :param reporter: told the superseded publication, the staging branch, the evidence branches and
            the outcome as they happen (see :class:`~airflow_lakefence.core.records.reporting.Reporter`).
        :param durable: the adapter's durable jobs, when its job outlives its process: then a retry may
            adopt an earlier try's job (docs/protocol.md, "Adoption").
        :return: the outcome.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        req, tell = self.request, reporter or SilentReporter()
        if req.read_only:
            return self._run_read_only(job, tell)
        guard, area, publisher, evidence = self._parts()
        attempt, staging, target_head, pinned = self._arm(guard)  # steps 1 and 2
        input_commit = check_input(self.lakefs, req, target_head, attempt, pinned)  # step 1: the input
        superseded = self._check_before_job(target_head, input_commit, attempt, tell)  # step 1: the target
        area.list_replaced(input_commit)  # step 1: no Delta table under a replaced prefix (read once)
        adoption = self._decide_adoption(durable, guard, attempt, staging, input_commit)
        adopted = adoption is not None and adoption.adopt
        if adopted:
            assert adoption is not None and adoption.record is not None and durable is not None
            staging = self._adopt(adoption.record, attempt, guard, area, publisher)
            durable.adopt(adoption.record)
        evidence.remove_earlier_branches(attempt, staging)  # step 3 (an adopted branch is this try's now)
        if durable is not None:
            guard.keep = self._keeper(durable, attempt, staging)
        # The pin and the hard fence's check need nothing from the staging branch, nor it from them:
        # all three are sent side by side (one round trip), and the job starts only once all landed.
        pinning = in_background(self._pin, pinned, input_commit)
        checking = in_background(publisher.check_hard_fence, input_commit, target_head)
        try:
            if not adopted:
                area.create(staging, input_commit)
                if durable is not None:
                    durable.submit_fresh(self._submission_recorder(attempt, staging, input_commit))
        except BaseException:
            _settle(pinning, checking)
            raise
        strategy: PublishStrategy | None = None
        staged: CommitInfo | None = None
        try:
            with guard.run_state_may_be_archived("before the job", staging):
                pinning.result()
            tell.staging_created(staging)
            hard_fence = checking.result()
            failpoints.hit("after_staging_branch")
            self._log_attempt(attempt, input_commit, pinned is not None, staging, target_head.commit_id)
            workspace = self._job_and_output(job, area, attempt, staging, input_commit)  # steps 4-6
            hard_fence = publisher.note_written(hard_fence, (name for name, _ in workspace.files))
            strategy = publisher.strategy(target_head, superseded, hard_fence)  # branch-wide or scoped
            # Step 10's read of the target, where it cannot depend on the staged commit, travels
            # beside step 7's commit; the decision still waits for step 8.
            strategy.read_ahead(attempt, input_commit)
            with guard.staging_may_vanish("while staging", staging):
                staged = area.stage(attempt, staging, input_commit)  # step 7
                tables = area.check_tables(staging, input_commit, staged)  # step 7: Delta tables
            failpoints.hit("after_stage")
            guard.ensure_current("before publish", staging)  # step 8
            failpoints.hit("after_fence_2")
            guard.ensure_publish_budget()  # step 9
            record = publisher.record(attempt, input_commit, staged)
            decision, output_ref = strategy.publish(StagedOutput(attempt, staging, input_commit, staged, record))
            failpoints.hit("after_verify")
            published = Published(
                decision,
                output_ref,
                input_commit,
                staged.id,
                target_head.commit_id,
                superseded,
                strategy.verification(),
            )
            result = self._report(guard, evidence, tell, attempt, staging, published, workspace, tables)  # step 12
            failpoints.hit("after_xcom")
            return result
        except PublishFenceError as exc:
            if exc.staging_branch == staging:  # the fail-closed attempt's output is the evidence
                # A race found by the verification beside the report's writes: S was deleted beside
                # it, and is made again at the staged commit (which the merge keeps reachable).
                restore = staged.id if staged is not None and guard.deleted(staging) else None
                evidence.keep(attempt, staging, input_commit, exc, tell, restore_from=restore)
            raise
        finally:
            if not evidence.kept(staging):
                guard.delete_quietly(staging)  # step 12: delete S
            if strategy is not None:  # a read or check still in flight when an error cut the attempt short
                strategy.settle()

    def _pin(self, pinned: str | None, input_commit: str) -> None:
        """Step 1: pin the input for every later try of the run, unless an earlier try pinned it."""
        if pinned is None:
            pin_input(self.run_state, self.request.input_ref, input_commit)

    def _decide_adoption(
        self, durable: DurableJobPort | None, guard: AttemptGuard, attempt: AttemptId, staging: str, input_commit: str
    ) -> AdoptionDecision | None:
        """Adoption: does this try wait for an earlier try's durable job instead of running a new one?"""
        if durable is None or attempt.try_number <= 1:  # a first try has no earlier job to adopt
            return None
        repo = self.request.repository

        def head(branch: str) -> CommitInfo | None:
            try:
                return self.lakefs.get_commit(repo, branch)
            except LakeFSNotFoundError:
                return None

        with guard.run_state_may_be_archived("before the job", staging):
            records = job_records(self.run_state)
        decision = decide_adoption(
            attempt,
            write_mode=self.request.write_mode,
            input_commit=input_commit,
            records=records,
            stored_job_id=durable.stored_job_id(),
            job_status=durable.job_status,
            branch_head=head,
        )
        self.log.info("lakefence adoption: %s (%s)", decision.reason, decision.code)
        return decision

    def _adopt(
        self, record: JobRecord, attempt: AttemptId, guard: AttemptGuard, area: StagingArea, publisher: Publisher
    ) -> str:
        """Take over an earlier try's job and staging branch; return the branch.

        The adoption is recorded (write-once, as this try's job record) before anything is waited
        for: the earlier process, should it still run, then neither deletes the branch nor kills
        the job, and the next try knows whose job it is. The commits this try writes say who
        submitted the job and who publishes it.
        """
        staging = record.staging_branch
        guard.ensure_current("before adopting", staging)  # the earlier try is gone only while this one is current
        adopted = JobRecord(
            attempt.try_number, attempt.ti_id, record.job_id, staging, record.input_commit, record.submitted_by
        )
        with guard.run_state_may_be_archived("before the job", staging):
            stored = record_job(self.run_state, adopted)
        if stored != adopted:
            raise StaleAttemptError(f"another try recorded job {stored} for try {attempt.try_number}")
        metadata = {**(self.request.commit_metadata or {}), **adoption_metadata(record, attempt)}
        self.request = dataclasses.replace(self.request, commit_metadata=metadata)
        area.request = publisher.request = self.request
        self._job_id = record.job_id
        return staging

    def _submission_recorder(self, attempt: AttemptId, staging: str, input_commit: str) -> Callable[[str], None]:
        """What the adapter calls with a new job's id, before waiting for it: this try's job record."""

        def submitted(job_id: str) -> None:
            record = JobRecord(attempt.try_number, attempt.ti_id, job_id, staging, input_commit, attempt.try_number)
            self._job_id = job_id
            try:
                record_job(self.run_state, record)
            except LakeFenceError as exc:  # the job runs on; a retry just cannot adopt it
                self.log.warning("Could not record job %s in the run state: %s (no retry adopts it)", job_id, exc)

        return submitted

    def _keeper(self, durable: DurableJobPort, attempt: AttemptId, staging: str) -> Callable[[str], bool]:
        """Whether a failing or stale attempt keeps its staging branch for its durable job.

        Kept when a later try adopted it (it is that try's now), or when this try is still current
        and its job still runs or succeeded (the try failed, not the job: the next try may adopt
        both). A run state that cannot be read keeps it too (the cleaner deletes a leftover; a
        deleted branch under an adopter would cost its job).
        """

        def keep(branch: str) -> bool:
            if branch != staging:
                return False
            try:
                reread = getattr(self.run_state, "reloaded", None)
                later = adopted_by_later_try(reread() if reread else self.run_state, attempt, branch)
            except LakeFenceError as exc:
                self.log.warning("Keeping staging branch %s: the run state could not be read (%s)", branch, exc)
                return True
            if later is not None:
                self.log.info("Keeping staging branch %s: try %d adopted it", branch, later.try_number)
                return True
            job_id = self._job_id
            if job_id is None or self.attempt_fence.stale_reason() is not None:
                return False
            if durable.job_status(job_id) in (JobStatus.ACTIVE, JobStatus.SUCCEEDED):
                self.log.info(
                    "Keeping staging branch %s: job %s outlives this try (for a retry to adopt)", branch, job_id
                )
                return True
            return False

        return keep

    def _arm(self, guard: AttemptGuard) -> tuple[AttemptId, str, HeadState, str | None]:
        """Steps 1 and 2: read the target while arming the attempt fence; the input an earlier try pinned."""
        req = self.request
        reading = in_background(read_target_head, self.lakefs, req)  # step 1: repository and target exist
        try:
            self.attempt_fence.arm()  # step 2: an Airflow write, not a lakeFS one: done while the target is read
        finally:
            target_head = reading.result()  # a bad target is what this attempt reports first
        attempt = self.attempt_fence.attempt
        staging = staging_branch_name(attempt, req.staging_prefix)
        pinned = None
        if attempt.try_number > 1:  # try numbers only grow: a first try has no earlier try's pin to read
            with guard.run_state_may_be_archived("before the job", staging):
                pinned = pinned_input(self.run_state, req.input_ref)  # the input is resolved once per run
        return attempt, staging, target_head, pinned

    def _check_before_job(
        self, target_head: HeadState, input_commit: str, attempt: AttemptId, tell: Reporter
    ) -> dict[str, Any] | None:
        """Step 1: may this attempt build on the target at all? Return the publication it supersedes, if any.

        :raises PublishFenceError: before the job (branch-wide mode), nothing written.
        """
        req = self.request
        early = decide_publish(target_head, input_commit, attempt, True, input_commit)
        # The scoped fence builds on an input the target moved past (the scope decides at publish time).
        if early.action is Action.FAIL_CLOSED and req.scope is None:
            message = fail_closed_message(
                early.code, target_head, input_commit, attempt, req.target_branch, before_job=True
            )
            raise PublishFenceError(f"before the job, nothing was run: {message}")
        superseded = supersedes(self.run_state, target_head, early)
        if superseded is not None:
            tell.supersedes(superseded)
        return superseded

    def _report(
        self,
        guard: AttemptGuard,
        evidence: Evidence,
        tell: Reporter,
        attempt: AttemptId,
        staging: str,
        published: Published,
        workspace: Workspace,
        tables: Sequence[Any],
    ) -> PublishResult:
        """Step 12: record the publication, report it, delete S (while reporting)."""
        decision, superseded, verifying = published.decision, published.superseded, published.verifying
        # A try cleared after publishing must not overwrite the new try's XCom: its publication
        # is an abandoned one, which the new try replaces. A race the verification found is the
        # graver news, and is what such a try reports.
        try:
            guard.ensure_current("before reporting", staging)
        except BaseException:
            _verified(verifying)
            raise
        replaced = superseded is not None and decision.action in (Action.REPLACE, Action.RELOCATE)
        # Step 12's two lakeFS writes go side by side, and beside step 11's verifying read when that
        # is still in flight: the run-state record of what this try reports (for a later try of the
        # run) and the delete of S: one round trip. The report's details (requests to the API
        # server) are told once the verification passed, while the writes may be in flight; the
        # output ref, which says that a try stands behind the publication (the abandoned-
        # publication monitor reads it), waits for the record: a try whose record failed ends failed
        # without ever naming its publication, which the next try then replaces as abandoned. A
        # verification that fails leaves a record its try's evidence entry voids (the decisions
        # never rest on it: a raced merge's first parent is not the input).
        recording = in_background(
            record_publication,
            self.run_state,
            published.output_ref,
            attempt.try_number,
            decision.action.value,
            decision.replaces,
        )
        deleting = guard.delete_in_background(staging)
        try:
            _verified(verifying)
            evidence.report(tell)  # earlier tries' evidence this try spared, marked or not
            result = PublishResult(
                output_ref=published.output_ref,
                decision=decision.action.value,
                input_ref=published.input_ref,
                staged_commit=published.staged_commit,
                staging_branch=staging,
                reason=_superseding_reason(superseded, decision.action) if replaced else decision.reason,
                target_head=published.target_head,
                files=len(workspace.files),
                bytes=workspace.size,
                supersedes=superseded if replaced else None,
                delta_versions={t.root: t.published_version for t in tables},
            )
            tell.reporting(result)  # while the record and the delete are in flight
            with guard.run_state_may_be_archived("before reporting", staging):  # cleared since the check above
                recording.result()
            tell.published(result)  # step 12, recorded; S may still be being deleted
        except BaseException:
            _settle(recording, deleting)
            raise
        deleting.result()
        return result

    def _parts(self) -> tuple[AttemptGuard, StagingArea, Publisher, Evidence]:
        """The attempt's collaborators, one per concern (built per run: they hold the attempt's state)."""
        req = self.request
        guard = AttemptGuard(
            self.lakefs, self.attempt_fence, req.repository, self.log, self.clock, req.publish_budget, req.deadline
        )
        area = StagingArea(
            self.lakefs, req, guard, self.attempt_fence, self.log, self.clock, self.job_name, self.job_error
        )
        publisher = Publisher(self.lakefs, req, guard, self.log, self.job_name)
        evidence = Evidence(
            self.lakefs,
            self.run_state,
            req.repository,
            req.staging_prefix,
            self.log,
            output_prefixes_metadata(req.scope.output_prefixes if req.scope is not None else ()),
            self.redact,
        )
        return guard, area, publisher, evidence

    def _job_and_output(
        self, job: Job, area: StagingArea, attempt: AttemptId, staging: str, input_commit: str
    ) -> Workspace:
        """Steps 4 to 6, and the output checks of step 7: run the job, collect and check its output,
        pass the first attempt fence, upload it, keep each output prefix to this attempt's output."""
        req, guard = self.request, area.guard
        with area.workspace_dir(staging) as directory:  # step 4
            locations = AttemptLocations(
                req.repository, req.target_branch, input_commit, staging, directory, req.write_mode
            )
            with guard.staging_may_vanish(f"after the {self.job_name} failed", staging):
                area.run_job(job, locations)
            failpoints.hit("after_job")
            workspace = None if directory is None else area.collect(directory)  # step 5
            guard.ensure_current("before stage", staging)  # step 6
            failpoints.hit("after_fence_1")
            if workspace is not None:
                with guard.staging_may_vanish("while uploading", staging):
                    area.upload(staging, workspace)
            area.check_prefixes(staging, workspace)
            with guard.staging_may_vanish("while replacing the output prefixes", staging):
                area.drop_unwritten(staging, input_commit, workspace)
        return workspace or Workspace()

    def _log_attempt(self, attempt: AttemptId, input_commit: str, pinned: bool, staging: str, head: str) -> None:
        self.log.info(
            "lakefence attempt: try %d of %s; input %s = commit %s (%s); staging branch %s; target %s at %s",
            attempt.try_number,
            attempt.key,
            self.request.input_ref,
            input_commit,
            "pinned by an earlier try" if pinned else "pinned now",
            staging,
            self.request.target_branch,
            head,
        )

    def _run_read_only(self, job: Job, reporter: Reporter) -> PublishResult:
        """A read-only attempt: the input resolved, the job run; nothing written (not even a pin: with
        no publication there is nothing a moved input could stack on)."""
        req = self.request
        input_commit = resolve_input(self.lakefs, req)
        _guard, area, _publisher, _evidence = self._parts()
        with area.workspace_dir(None) as directory:
            locations = AttemptLocations(req.repository, req.target_branch, input_commit, None, directory, "read_only")
            area.run_job(job, locations)
        result = PublishResult(input_commit, DECISION_READ_ONLY, input_commit, None, None, "read-only attempt")
        reporter.published(result)
        return result


def _settle(*futures: Future[Any]) -> None:
    """Wait for background calls whose outcome no longer matters (an error is being raised already)."""
    for future in futures:
        try:
            future.result()
        except BaseException:  # the error already raised is the one reported
            pass


def _verified(verifying: Future[None] | None) -> None:
    """Wait for step 11's check still in flight, if any; raise what it found.

    :raises PublishRaceError: when another writer raced the publish.
    """
    if verifying is not None:
        verifying.result()


def _superseding_reason(superseded: dict[str, object] | None, action: Action) -> str:
    assert superseded is not None
    return (
        f"supersedes the successful publication {superseded['output_ref']} of try {superseded['try_number']} "
        f"(the task instance was cleared): {action.value}"
    )
