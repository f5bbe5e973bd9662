"""The fenced publish protocol (docs/protocol.md, steps 1 to 12) as one flow.

:class:`PublishEngine` runs one attempt: validate, arm the attempt fence, create the staging branch
from the input, run the job (a callback the adapter passes in: a Spark application, a Python
function...), stage, publish through the decision table of :mod:`airflow_lakefence.core.fence`,
verify and report. It talks to lakeFS through :class:`~airflow_lakefence.core.ports.LakeFSPort`
and to the scheduler through :class:`~airflow_lakefence.core.ports.AttemptFencePort`; it imports
neither Airflow nor lakeFS.

A lakeFS write whose answer is lost is never repeated blindly: :meth:`PublishEngine._settle` is the
one place that re-reads the state and decides again (staging branch creation, staging commit,
publish).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol, TypeVar

from airflow_lakefence import failpoints
from airflow_lakefence.core.advice import WHAT_TO_DO, fail_closed_message
from airflow_lakefence.core.cleanup import evidence_metadata, evidence_of
from airflow_lakefence.core.fence import Action, FenceDecision, HeadState, decide_publish
from airflow_lakefence.core.hardfence import ACTION_PATH, check_ref, expected_head_metadata
from airflow_lakefence.core.keys import AttemptId, PublicationKey
from airflow_lakefence.core.locations import AttemptLocations as AttemptLocations  # re-exported: its old home
from airflow_lakefence.core.merge_only import replace_by_merge, temp_branch_name
from airflow_lakefence.core.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    check_user_metadata,
    decode_metadata,
    encode_metadata,
)
from airflow_lakefence.core.metadata import (
    LakeFenceRecord as LakefenceRecord,
)
from airflow_lakefence.core.naming import (
    is_valid_branch_name,
    parse_staging_branch_name,
    staging_branch_name,
    staging_branch_prefix,
    validate_staging_prefix,
)
from airflow_lakefence.core.ports import AttemptFencePort, CommitInfo, LakeFSPort
from airflow_lakefence.core.run_state import (
    MemoryRunState,
    RecordedEvidence,
    RunStatePort,
    pin_input,
    record_evidence,
    record_publication,
    recorded_evidence,
    reported_publication,
)
from airflow_lakefence.exceptions import (
    HardFenceMissingError,
    HardFenceRaceError,
    InputRefError,
    InvalidInputError,
    JobError,
    LakeFenceError,
    LakeFSBadRequestError,
    LakeFSBranchProtectedError,
    LakeFSConflictError,
    LakeFSHardFenceRejectedError,
    LakeFSHookRejectedError,
    LakeFSNotFoundError,
    LakeFSPreconditionFailedError,
    LakeFSUnavailableError,
    MergeHookRejectedError,
    OutputPrefixError,
    PublishBudgetError,
    PublishFenceError,
    PublishRaceError,
    StaleAttemptError,
    WorkspaceError,
)

T = TypeVar("T")

WRITE_MODES = ("direct", "workspace")
#: ``replace``: after publishing, each declared output prefix holds exactly this attempt's output;
#: ``upsert``: the attempt's files are added to (or overwrite) what the input held there.
OUTPUT_MODES = ("replace", "upsert")
#: ``hard_fence`` modes: never rely on it, rely on it when the input carries it, or refuse to run without it.
HARD_FENCE_MODES = ("off", "auto", "require")
DECISION_READ_ONLY = "read_only"
#: A write whose answer was lost is re-evaluated against fresh state, never repeated blindly: a
#: publish may need three rounds (refused with 503, then answered "no changes" because the first
#: request landed late, then recognised as this attempt's own publication).
PUBLISH_ROUNDS = 3
#: Tries of the evidence marker commit.
MARKER_TRIES = 3

_REPOSITORY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
_REF_RE = re.compile(r"^[^\s\x00-\x1f]{1,1024}$")
_PROGRESS_STEPS = 10


def seconds(value: timedelta | float | None, name: str) -> float | None:
    """A duration in seconds.

    :param value: a ``timedelta``, a number of seconds or ``None``.
    :param name: the argument's name, for the message.
    :raises InvalidInputError: if it is negative.
    """
    if value is None:
        return None
    result = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if result < 0:
        raise InvalidInputError(f"{name} must not be negative, got {result}")
    return result


def normalise_prefixes(prefixes: Sequence[str] | None) -> tuple[str, ...]:
    """Output prefixes as ``("a/b/", ...)``.

    :param prefixes: the declared prefixes, ``None`` for none.
    :raises InvalidInputError: for a string instead of a list, or an empty prefix.
    """
    if prefixes is None:
        return ()
    if isinstance(prefixes, str):
        raise InvalidInputError("output_prefixes must be a list of path prefixes, not a string")
    result = []
    for prefix in prefixes:
        if not isinstance(prefix, str) or not prefix.strip("/"):
            raise InvalidInputError(f"output prefix {prefix!r} must be a non-empty path")
        result.append(prefix.strip("/") + "/")
    return tuple(result)


@dataclass(frozen=True)
class PublishRequest:
    """What one attempt is asked to do (the adapter's rendered arguments).

    :param repository: the lakeFS repository.
    :param target_branch: the branch to publish into.
    :param input_ref: the commit (or branch, tag) the job reads and builds on.
    :param write_mode: ``workspace`` (a local directory the engine uploads) or ``direct`` (the job
        writes into the staging branch itself).
    :param read_only: run the job against the input and write nothing.
    :param output_prefixes: if non-empty, every changed path must lie under one of them.
    :param output_mode: ``replace`` (default): objects under the declared prefixes that the job did not
        write are deleted in the staging branch, so each prefix holds exactly this attempt's output;
        ``upsert``: they are kept.
    :param commit_message: the staging and merge commit message; a default names the attempt.
    :param commit_metadata: extra commit metadata (``lakefence.*`` keys are reserved).
    :param staging_prefix: the first part of staging branch names.
    :param workspace_dir: the parent of the per-attempt workspace; a temporary directory if ``None``.
    :param workspace_check: called with the workspace after the job; raising rejects the output.
    :param allow_empty_workspace: accept a job that wrote no file.
    :param publish_budget: seconds the publish needs; refused when less remains before ``deadline``.
    :param deadline: the ``time.monotonic()`` at which the task will be killed, if any.
    :param hard_fence: ``off`` (the soft fence only), ``auto`` (rely on the hard fence when the input
        commit carries it: one extra read before the job) or ``require`` (fail before the job when it
        does not); docs/hard-fence.md.
    :param replace_by_merge: replace or relocate an abandoned publication by merges instead of a hard
        reset (done anyway when the target is protected).
    """

    repository: str
    target_branch: str
    input_ref: str
    write_mode: str = "workspace"
    read_only: bool = False
    output_prefixes: Sequence[str] | None = None
    output_mode: str = "replace"
    commit_message: str | None = None
    commit_metadata: Mapping[str, str] | None = None
    staging_prefix: str = "lakefence"
    workspace_dir: str | None = None
    workspace_check: Callable[[Path], None] | None = None
    allow_empty_workspace: bool = False
    publish_budget: float | None = None
    deadline: float | None = None
    hard_fence: str = "off"
    replace_by_merge: bool = False

    def validated(self) -> PublishRequest:
        """Step 1: check every value before any write; return the request with normalised prefixes.

        :raises InvalidInputError: (or :class:`InputRefError`) naming the bad value.
        """
        if not isinstance(self.repository, str) or not _REPOSITORY_RE.fullmatch(self.repository):
            raise InvalidInputError(f"repository {self.repository!r} is not a valid lakeFS repository name")
        if not isinstance(self.target_branch, str) or not is_valid_branch_name(self.target_branch):
            raise InvalidInputError(f"target_branch {self.target_branch!r} is not a valid lakeFS branch name")
        if not isinstance(self.input_ref, str) or not _REF_RE.fullmatch(self.input_ref):
            raise InputRefError(f"input_ref {self.input_ref!r} is not a ref (a commit id, branch or tag)")
        if self.write_mode not in WRITE_MODES:
            raise InvalidInputError(f"write_mode must be one of {WRITE_MODES}, got {self.write_mode!r}")
        if self.output_mode not in OUTPUT_MODES:
            raise InvalidInputError(f"output_mode must be one of {OUTPUT_MODES}, got {self.output_mode!r}")
        if self.hard_fence not in HARD_FENCE_MODES:
            raise InvalidInputError(f"hard_fence must be one of {HARD_FENCE_MODES}, got {self.hard_fence!r}")
        try:
            metadata = check_user_metadata(self.commit_metadata)
            validate_staging_prefix(self.staging_prefix)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        return dataclasses.replace(
            self, output_prefixes=normalise_prefixes(self.output_prefixes), commit_metadata=metadata
        )


@dataclass(frozen=True)
class PublishResult:
    """The outcome of one attempt (what the adapter reports).

    :param output_ref: the commit the task reports (published, or the input when nothing was).
    :param decision: the fence's action (``merge``, ``noop``, ``replace``...) or ``read_only``.
    :param input_ref: the resolved input commit.
    :param staged_commit: the staged commit, ``None`` when read-only.
    :param staging_branch: the attempt's staging branch, ``None`` when read-only.
    :param reason: the fence's explanation.
    :param target_head: the target's HEAD when the attempt started.
    :param files: files uploaded from the workspace.
    :param bytes: bytes uploaded from the workspace.
    :param supersedes: the successful publication of an earlier try this attempt replaced (a
        deliberate clear): ``{"output_ref", "try_number"}``, else ``None``.
    """

    output_ref: str
    decision: str
    input_ref: str
    staged_commit: str | None
    staging_branch: str | None
    reason: str = ""
    target_head: str | None = None
    files: int = 0
    bytes: int = 0
    supersedes: Mapping[str, Any] | None = None

    def summary(self) -> str:
        """One log line saying what the attempt did."""
        uploaded = f"; {self.files} files, {self.bytes} bytes uploaded" if self.files else ""
        return (
            f"lakefence {self.decision}: output ref {self.output_ref} (input {self.input_ref}, staged commit "
            f"{self.staged_commit}, staging branch {self.staging_branch}){uploaded}"
        )


Job = Callable[[AttemptLocations], None]


class Log(Protocol):
    """Where the engine logs (a ``logging.Logger``, Airflow's task logger...)."""

    def info(self, msg: str, /, *args: Any) -> Any:
        """Log at INFO."""
        ...

    def warning(self, msg: str, /, *args: Any) -> Any:
        """Log at WARNING."""
        ...


@dataclass
class _Workspace:
    files: list[tuple[str, Path]] = field(default_factory=list)
    size: int = 0


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
    ) -> None:
        self.lakefs = lakefs
        self.fence = fence
        self.request = request.validated()
        self.prefixes = tuple(self.request.output_prefixes or ())
        self.log: Log = log or logging.getLogger(__name__)
        self.job_name = job_name
        self.job_error = job_error
        self.clock = clock
        self.run_state: RunStatePort = run_state if run_state is not None else MemoryRunState()
        self._deleted: set[str] = set()
        # The run's evidence branches as this try knows them ({branch: error class}), from the run
        # state; ``None`` when it could not be read (then never reported: the cleaner would take a
        # partial list for the whole).
        self._evidence: dict[str, str] | None = {}
        # Whether lakeFS runs the hard fence on this attempt's merges (the input commit carries it),
        # and whether the staged commit still carries it unchanged (then the merge needs no verify).
        self._hard_fence = False
        self._hard_fence_intact = False

    # -- the protocol ------------------------------------------------------------------------

    def run(
        self,
        job: Job,
        *,
        on_staging: Callable[[str], None] | None = None,
        report: Callable[[PublishResult], None] | None = None,
        on_supersedes: Callable[[Mapping[str, Any]], None] | None = None,
        on_evidence: Callable[[Mapping[str, str]], None] | None = None,
    ) -> PublishResult:
        """Run the attempt (steps 1 to 12).

        :param job: the job, given the attempt's locations; it writes the workspace or the staging branch.
        :param on_staging: told the staging branch's name as soon as it exists.
        :param report: step 12, called after the last fence check and before the staging branch is
            deleted (the adapter pushes XCom and emits events here).
        :param on_supersedes: told, before the job, the successful publication this attempt will
            replace (a deliberate clear), so monitoring does not call it abandoned.
        :param on_evidence: told the run's evidence branches (``{branch: error class}``, marked or
            not) by a try that keeps one (fail-closed) and by a try that succeeds, right before
            ``report``: the cleaner keeps a branch whose marker could not be written when the
            succeeding try names it here.
        :return: the outcome.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        req = self.request
        if req.read_only:
            return self._run_read_only(job, report)
        client, repo, fence = self.lakefs, req.repository, self.fence
        target_head = self._target_head()  # step 1: repository and target exist
        fence.arm()  # step 2
        attempt = fence.attempt
        staging = staging_branch_name(attempt, req.staging_prefix)
        # The input is resolved once per run (creating the staging branch resolves it): every later
        # try of the run uses the same commit.
        with self._stale_if_cleared("before the job", staging):
            input_commit, pinned = pin_input(
                self.run_state, req.input_ref, lambda ref: self._create_staging(staging, ref)
            )
        if pinned:
            self._create_staging(staging, input_commit)
        early = decide_publish(target_head, input_commit, attempt, True, input_commit)
        if early.action is Action.FAIL_CLOSED:
            # The staging branch holds nothing yet and is named nowhere: drop it, keep nothing.
            self._delete_quietly(staging)
            raise PublishFenceError(
                "before the job, nothing was run: "
                + fail_closed_message(target_head, input_commit, attempt, req.target_branch, before_job=True)
            )
        supersedes = self._supersedes(target_head, early)
        if supersedes is not None and on_supersedes is not None:
            on_supersedes(supersedes)
        self._remove_earlier_staging(attempt, staging)  # step 3
        if on_staging is not None:
            on_staging(staging)
        keep_staging = False
        try:
            self._check_hard_fence(input_commit)
            failpoints.hit("after_staging_branch")
            self.log.info(
                "lakefence attempt: try %d of %s; input %s = commit %s (%s); staging branch %s; target %s at %s",
                attempt.try_number,
                attempt.key,
                req.input_ref,
                input_commit,
                "pinned by an earlier try" if pinned else "pinned now",
                staging,
                req.target_branch,
                target_head.commit_id,
            )
            workspace = _Workspace()
            with self._workspace_dir(staging) as directory:  # step 4
                locations = AttemptLocations(repo, req.target_branch, input_commit, staging, directory, req.write_mode)
                with self._stale_first(f"after the {self.job_name} failed", staging):
                    self._run_job(job, locations)
                failpoints.hit("after_job")
                if directory is not None:
                    workspace = self._collect_workspace(directory)  # step 5
                    self._hard_fence_intact = self._hard_fence_intact and not any(
                        name.startswith(ACTION_PATH.split("/")[0] + "/") for name, _ in workspace.files
                    )
                self._check_fence("before stage", staging)  # step 6
                failpoints.hit("after_fence_1")
                if directory is not None:
                    with self._stale_first("while uploading", staging):
                        self._upload(staging, workspace)
                    outside = [
                        name for name, _ in workspace.files if self.prefixes and not name.startswith(self.prefixes)
                    ]
                    if outside:
                        keep_staging = True  # what the job wrote is the evidence
                        raise OutputPrefixError(
                            f"the job wrote outside output_prefixes {list(self.prefixes)}: {outside[:10]}; nothing "
                            f"published, the output is kept in staging branch {staging!r}. {WHAT_TO_DO} fix the "
                            "job's output paths or declare the prefix, then clear the task.",
                            staging_branch=staging,
                        )
                elif self.prefixes:
                    with self._stale_first("while checking the output", staging):
                        outside = client.paths_outside(repo, staging, self.prefixes)
                    if outside:
                        keep_staging = True
                        raise OutputPrefixError(
                            f"the job wrote outside output_prefixes {list(self.prefixes)}: {outside}; nothing "
                            f"published, the output is kept in staging branch {staging!r}. {WHAT_TO_DO} fix the "
                            "job's output paths or declare the prefix, then clear the task.",
                            staging_branch=staging,
                        )
                if self.prefixes and req.output_mode == "replace":
                    with self._stale_first("while replacing the output prefixes", staging):
                        self._drop_unwritten(staging, input_commit, workspace if directory is not None else None)
            with self._stale_first("while staging", staging):
                staged = self._stage(attempt, staging, input_commit)  # step 7
            failpoints.hit("after_stage")
            self._check_fence("before publish", staging)  # step 8
            failpoints.hit("after_fence_2")
            self._check_budget()  # step 9
            try:
                decision, output_ref = self._publish(  # steps 10, 11
                    attempt, staging, input_commit, staged, target_head, supersedes
                )
            except PublishFenceError:
                keep_staging = True
                raise
            failpoints.hit("after_verify")
            # A try cleared after publishing must not overwrite the new try's XCom: its publication
            # is an abandoned one, which the new try replaces.
            self._check_fence("before reporting", staging)
            reason = decision.reason
            if supersedes is not None and decision.action in (Action.REPLACE, Action.RELOCATE):
                reason = (
                    f"supersedes the successful publication {supersedes['output_ref']} of try "
                    f"{supersedes['try_number']} (the task instance was cleared): {decision.action.value}"
                )
            else:
                supersedes = None
            with self._stale_if_cleared("before reporting", staging):  # cleared since the check above
                record_publication(self.run_state, output_ref, attempt.try_number, decision.action.value)
            if self._evidence is not None and on_evidence is not None:
                # Earlier tries' evidence this try spared, marked or not (the cleaner's list).
                on_evidence(dict(self._evidence))
            result = PublishResult(
                output_ref=output_ref,
                decision=decision.action.value,
                input_ref=input_commit,
                staged_commit=staged.id,
                staging_branch=staging,
                reason=reason,
                target_head=target_head.commit_id,
                files=len(workspace.files),
                bytes=workspace.size,
                supersedes=supersedes,
            )
            if report is not None:
                report(result)  # step 12
            failpoints.hit("after_xcom")
            return result
        except PublishFenceError as exc:
            if keep_staging:
                self._keep_as_evidence(attempt, staging, input_commit, exc, on_evidence)
            raise
        finally:
            if not keep_staging:
                self._delete_quietly(staging)

    def _run_read_only(self, job: Job, report: Callable[[PublishResult], None] | None) -> PublishResult:
        req = self.request
        input_commit, _ = pin_input(self.run_state, req.input_ref, lambda _ref: self._resolve_input())
        with self._workspace_dir(None) as directory:
            self._run_job(
                job, AttemptLocations(req.repository, req.target_branch, input_commit, None, directory, "read_only")
            )
        result = PublishResult(input_commit, DECISION_READ_ONLY, input_commit, None, None, "read-only attempt")
        if report is not None:
            report(result)
        return result

    # -- lost answers --------------------------------------------------------------------------

    def _settle(
        self,
        operation: str,
        write: Callable[[bool], T],
        reread: Callable[[LakeFSUnavailableError], T | None],
    ) -> T:
        """Do a lakeFS write whose answer may be lost, deciding from fresh state instead of repeating it.

        :param operation: names the write in logs and errors.
        :param write: does the write (given whether an earlier round's answer was lost) and returns
            its outcome; it may read and decide again first.
        :param reread: after a lost answer, the outcome if the state proves the write landed, else
            ``None`` to run another round; it may raise when the state rules out both.
        :raises LakeFSUnavailableError: when no round's outcome could be confirmed.
        """
        last: LakeFSUnavailableError | None = None
        for _ in range(PUBLISH_ROUNDS):
            try:
                return write(last is not None)
            except LakeFSUnavailableError as exc:
                last = exc
                self.log.warning("lakeFS %s: outcome unknown (%s); re-reading the state", operation, exc)
                landed = reread(exc)
                if landed is not None:
                    return landed
        assert last is not None
        raise LakeFSUnavailableError(
            f"lakeFS {operation} could not be confirmed: {last}",
            status=last.status,
            operation=last.operation or operation,
        ) from last

    # -- steps 1 and 3 ---------------------------------------------------------------------------

    def _resolve_input(self) -> str:
        req = self.request
        try:
            return self.lakefs.get_commit(req.repository, req.input_ref).id
        except LakeFSNotFoundError as exc:
            raise InputRefError(f"input_ref {req.input_ref!r} not found in repository {req.repository!r}") from exc

    def _target_head(self) -> HeadState:
        req = self.request
        try:
            return HeadState.of(self.lakefs.get_commit(req.repository, req.target_branch))
        except LakeFSNotFoundError as exc:
            raise InvalidInputError(
                f"target branch {req.target_branch!r} or repository {req.repository!r} not found"
            ) from exc

    def _create_staging(self, staging: str, input_commit: str) -> str:
        """Create the staging branch from the pinned input commit; return its commit.

        The branch name is unique to the attempt, so the branch itself tells whether a creation
        whose answer was lost landed, and from which commit.
        """
        client, req = self.lakefs, self.request

        def create(answer_lost: bool) -> str:
            try:
                return client.create_branch(req.repository, staging, input_commit, hidden=True)
            except LakeFSNotFoundError as exc:
                raise InputRefError(f"input_ref {req.input_ref!r} not found in repository {req.repository!r}") from exc
            except LakeFSConflictError:
                if not answer_lost:
                    raise
                return client.get_commit(req.repository, staging).id

        def landed(_exc: LakeFSUnavailableError) -> str | None:
            try:
                return client.get_commit(req.repository, staging).id
            except LakeFSNotFoundError:
                return None

        try:
            return self._settle("create_branch", create, landed)
        except LakeFSUnavailableError:
            self._delete_quietly(staging)  # in case a creation lands late
            raise

    def _remove_earlier_staging(self, attempt: AttemptId, staging: str) -> None:
        """Delete the staging branches of *earlier, dead* tries of this key; never fail for it.

        Only lower try numbers are touched (a newer try's branch is never ours to delete); evidence,
        marked on lakeFS or recorded in the run state (its marker could not be written), is kept and
        re-marked when unmarked.
        """
        # Try numbers only grow, so a first try has no predecessor to clean up: skip the listing.
        if attempt.try_number <= 1:
            return
        client, repo, prefix = self.lakefs, self.request.repository, self.request.staging_prefix
        try:
            recorded = recorded_evidence(self.run_state)
        except LakeFenceError as exc:
            # Without the evidence list no earlier branch is provably a leftover: leave them all.
            self._evidence = None
            self.log.warning("Could not read the run's evidence list: %s (earlier tries' branches left)", exc)
            return
        self._evidence = {name: entry.error for name, entry in recorded.items()}
        try:
            branches = client.list_branches(repo, staging_branch_prefix(attempt.key, prefix), show_hidden=True)
        except LakeFenceError as exc:
            self.log.warning("Could not list earlier tries' staging branches: %s (the cleaner will)", exc)
            return
        for name, _commit in branches:
            info = parse_staging_branch_name(name, prefix)
            if name == staging or info is None or info.try_number >= attempt.try_number:
                continue
            try:
                head = client.get_commit(repo, name)
                if evidence_of(head.metadata):
                    self.log.info("Keeping staging branch %s of an earlier try: evidence", name)
                    continue
                if name in recorded:
                    self.log.info("Keeping staging branch %s of an earlier try: evidence (re-marking it)", name)
                    kept_by = self._kept_by(recorded[name], head, attempt.key)
                    if kept_by is None:
                        self.log.warning("Staging branch %s: which attempt kept it is unknown; left unmarked", name)
                    elif not self._mark(kept_by[0], name, kept_by[1], recorded[name].error):
                        self.log.warning("Could not re-mark staging branch %s as evidence; left unmarked", name)
                    continue
                client.delete_branch(repo, name)
                self.log.info("Removed staging branch %s of an earlier try", name)
            except LakeFenceError as exc:
                self.log.warning("Could not clean up staging branch %s: %s (the cleaner will)", name, exc)

    def _kept_by(self, entry: RecordedEvidence, head: CommitInfo, key: PublicationKey) -> tuple[AttemptId, str] | None:
        """The attempt that kept an evidence branch, and its input commit.

        From the run state's entry (it names the attempt, which the branch name must match), else
        from the branch HEAD's record when that is the branch's own ``stage`` commit; never from any
        other record on HEAD: a branch kept before staging still points at its input commit, which
        may be another attempt's publication.
        """
        prefix = self.request.staging_prefix
        record = decode_metadata(head.metadata)
        own = record if record is not None and staging_branch_name(record.attempt, prefix) == entry.branch else None
        attempt = entry.attempt(key)
        if attempt is not None and staging_branch_name(attempt, prefix) == entry.branch:
            input_ref = entry.input_ref or (own.input_ref if own is not None else None)
            if input_ref:
                return attempt, input_ref
        return None if own is None else (own.attempt, own.input_ref)

    def _supersedes(self, head: HeadState, early: FenceDecision) -> dict[str, Any] | None:
        """The successful publication this attempt is about to replace, if HEAD is one.

        An earlier try of this run that reported HEAD as its output and was cleared afterwards (a
        deliberate re-run) is *superseded*, not abandoned.
        """
        if early.action not in (Action.REPLACE, Action.RELOCATE):
            return None
        reported = reported_publication(self.run_state)
        if reported is None or reported["output_ref"] != head.commit_id:
            return None
        return {"output_ref": head.commit_id, "try_number": reported.get("try_number")}

    # -- steps 4 and 5: the job and its workspace -------------------------------------------------

    def _run_job(self, job: Job, locations: AttemptLocations) -> None:
        try:
            job(locations)
        except LakeFenceError:
            raise
        except Exception as exc:
            if self.fence.was_killed():
                raise StaleAttemptError(f"the {self.job_name} was killed (on_kill): nothing is staged") from exc
            raise self.job_error(f"{self.job_name[:1].upper()}{self.job_name[1:]} failed: {exc}") from exc

    @contextmanager
    def _workspace_dir(self, staging: str | None) -> Iterator[Path | None]:
        if self.request.write_mode != "workspace":
            yield None
            return
        parent = self.request.workspace_dir
        if parent:
            Path(parent).mkdir(parents=True, exist_ok=True)
        # One directory per attempt, so no earlier try's files can leak into this one.
        path = Path(tempfile.mkdtemp(prefix=f"{staging or 'read-only'}-", dir=parent or None))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _collect_workspace(self, directory: Path) -> _Workspace:
        req = self.request
        if req.workspace_check is not None:
            try:
                req.workspace_check(directory)
            except Exception as exc:
                raise WorkspaceError(f"workspace check rejected the output: {exc}") from exc
        files = sorted(
            (path.relative_to(directory).as_posix(), path) for path in directory.rglob("*") if path.is_file()
        )
        if not files and not req.allow_empty_workspace:
            raise WorkspaceError(
                "the job wrote no file into the workspace (set allow_empty_workspace=True to accept that)"
            )
        return _Workspace(files, sum(path.stat().st_size for _, path in files))

    def _upload(self, staging: str, workspace: _Workspace) -> None:
        files = workspace.files
        if not files:
            return
        total, step = len(files), max(1, len(files) // _PROGRESS_STEPS)
        started = self.clock()

        def progress(offset: int) -> Callable[[int, int], None]:
            def tell(done: int, _part: int) -> None:
                if (offset + done) % step == 0 and offset + done < total:
                    self.log.info("Uploading into %s: %d of %d files", staging, offset + done, total)

            return tell

        half = total // 2
        repo = self.request.repository
        count = self.lakefs.upload_tree(repo, staging, files[:half], progress=progress(0))
        failpoints.hit("mid_upload")
        count += self.lakefs.upload_tree(repo, staging, files[half:], progress=progress(half))
        self.log.info(
            "Uploaded %d files (%d bytes) into staging branch %s in %.1fs",
            count,
            workspace.size,
            staging,
            self.clock() - started,
        )

    # -- steps 6 and 8: the attempt fence ---------------------------------------------------------

    @contextmanager
    def _stale_first(self, where: str, staging: str) -> Iterator[None]:
        """Report a failure on the staging branch as staleness when the attempt is stale.

        A newer try deletes the staging branches of earlier tries, so a stale attempt's job, upload
        or commit fails on its vanished branch: that is a StaleAttemptError, not a lakeFS error.
        """
        try:
            yield
        except (JobError, LakeFSNotFoundError):
            self._check_fence(where, staging)
            raise

    @contextmanager
    def _stale_if_cleared(self, where: str, staging: str) -> Iterator[None]:
        """Run-state calls of a try that may have been cleared meanwhile.

        A cleared try loses its run state (the server archived its task-instance id, so the store
        refuses it): a failure is then staleness, raised as :class:`StaleAttemptError`, not a failure
        of the store.
        """
        try:
            yield
        except LakeFenceError:
            self._check_fence(where, staging)
            raise

    def _check_fence(self, where: str, staging: str) -> None:
        reason = self.fence.stale_reason()
        if reason is None:
            return
        # A stale attempt's own staging branch is worthless: drop it before waiting for the kill.
        self._delete_quietly(staging)
        self.fence.fail(where, reason)

    def _check_budget(self) -> None:
        req = self.request
        if req.publish_budget is None or req.deadline is None:
            return
        remaining = req.deadline - self.clock()
        if remaining < req.publish_budget:
            raise PublishBudgetError(
                f"{remaining:.1f}s of execution_timeout remain, less than publish_budget "
                f"{req.publish_budget:.1f}s: not publishing"
            )

    def _drop_unwritten(self, staging: str, input_commit: str, workspace: _Workspace | None) -> None:
        """``output_mode="replace"``: delete, in the staging branch, every object under a declared
        prefix that the input held and this attempt did not write, so the prefix ends up holding
        exactly this attempt's output (what a Spark ``overwrite`` means).

        Written means: a workspace file (workspace mode), or a path the job changed on the staging
        branch, committed or not (direct mode; a Spark overwrite through S3A has already removed the
        old objects, which then count as changed).
        """
        client, repo = self.lakefs, self.request.repository
        stale: list[str] = []
        for prefix in self.prefixes:
            existing = client.list_objects(repo, input_commit, prefix)
            if not existing:
                continue
            if workspace is not None:
                written = {name for name, _ in workspace.files}
            else:
                written = {c.path for c in client.diff_uncommitted(repo, staging, prefix=prefix)}
                written |= {c.path for c in client.diff_refs(repo, input_commit, staging, prefix=prefix, limit=10**9)}
            stale.extend(path for path in existing if path not in written)
        if stale:
            client.delete_objects(repo, staging, stale)
            self.log.info(
                "Removed %d objects of the input under %s that this attempt did not write",
                len(stale),
                list(self.prefixes),
            )

    # -- step 7: stage ----------------------------------------------------------------------------

    def _message(self, role: str, attempt: AttemptId) -> str:
        return self.request.commit_message or f"lakefence: {role} {attempt.key.task_id} try {attempt.try_number}"

    def _stage(self, attempt: AttemptId, staging: str, input_commit: str) -> CommitInfo:
        client, repo = self.lakefs, self.request.repository
        record = LakefenceRecord(attempt, ROLE_STAGE, input_commit)
        metadata = {**(self.request.commit_metadata or {}), **encode_metadata(record)}

        message = self._message(ROLE_STAGE, attempt)

        def commit(_answer_lost: bool) -> CommitInfo:
            staged = client.commit(repo, staging, message, metadata)
            if staged is not None:
                return staged
            # "No changes" does not mean C = I: the staged commit is the one carrying this attempt's
            # record on the staging branch's HEAD (an earlier call landed late), and a direct-mode
            # job may have committed its output itself.
            head = client.get_commit(repo, staging)
            if decode_metadata(head.metadata) == record:
                return head
            if head.id != input_commit:
                return client.commit(repo, staging, message, metadata, allow_empty=True) or head
            return CommitInfo(id=input_commit)  # nothing changed: C = I

        def landed(_exc: LakeFSUnavailableError) -> CommitInfo | None:
            head = client.get_commit(repo, staging)
            return head if decode_metadata(head.metadata) == record else None

        return self._settle("commit", commit, landed)

    # -- steps 10 and 11: publish fence, act, verify ----------------------------------------------

    def _publish(
        self,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        staged: CommitInfo,
        early_head: HeadState,
        supersedes: Mapping[str, Any] | None = None,
    ) -> tuple[FenceDecision, str]:
        changed = staged.id != input_commit
        metadata = {
            **(self.request.commit_metadata or {}),
            **encode_metadata(LakefenceRecord(attempt, ROLE_PUBLISH, input_commit, staged.id)),
        }

        def act_on(head: HeadState, decision: FenceDecision) -> tuple[FenceDecision, str]:
            if decision.action is Action.FAIL_CLOSED:
                # The job ran: only the publication is refused (its output stays as evidence).
                message = fail_closed_message(
                    head,
                    input_commit,
                    attempt,
                    self.request.target_branch,
                    before_job=False,
                    job_name=self.job_name,
                    kept_in=staging,
                )
                decision = dataclasses.replace(decision, reason=message)
            elif (
                decision.action in (Action.REPLACE, Action.RELOCATE)
                and supersedes is not None
                and supersedes["output_ref"] == head.commit_id
            ):
                # A successful try's publication, cleared on purpose: superseded, not abandoned.
                nothing = " and this try changed nothing" if decision.action is Action.RELOCATE else ""
                decision = dataclasses.replace(
                    decision,
                    reason=f"target HEAD {head.commit_id} is the superseded publication of try "
                    f"{supersedes['try_number']} (it succeeded; the task instance was cleared){nothing}",
                )
            failpoints.hit("after_publish_read")
            self.log.info("Publish fence: %s (%s)", decision.action.value, decision.reason)
            return decision, self._act(decision, attempt, staging, input_commit, staged.id, metadata, head)

        def publish_round(answer_lost: bool) -> tuple[FenceDecision, str]:
            if answer_lost:
                # The try may have been cleared while the answer was lost: never write for a stale try.
                self._check_fence("before another publish round", staging)
            # Every round reads the target afresh: a write that landed although its answer was lost
            # shows up as this attempt's own publication (the idempotent row). With the hard fence a
            # merge acts at once on the head read before the job, and the target is read only when
            # lakeFS refuses it (the head moved: e.g. an earlier try's publication to replace).
            refused: PublishRaceError | None = None
            if self._hard_fence and not answer_lost:
                decision = decide_publish(early_head, input_commit, attempt, changed, staged.id)
                optimistic = decision.action is Action.MERGE or (
                    decision.action not in (Action.NOOP, Action.FAIL_CLOSED) and self.request.replace_by_merge
                )
                if optimistic:
                    try:
                        return act_on(early_head, decision)
                    except PublishRaceError as exc:
                        # Refused by the fence, or a conflict with what moved the head: nothing landed.
                        if not isinstance(exc, HardFenceRaceError) and not isinstance(
                            exc.__cause__, LakeFSConflictError
                        ):
                            raise
                        self.log.info("%s: reading the target to decide again", exc)
                        refused = exc
            head = self._target_head()
            decision = decide_publish(head, input_commit, attempt, changed, staged.id)
            if refused is not None and decision.action is Action.FAIL_CLOSED:
                # The fence lost the race to a writer the table cannot explain: say both.
                raise HardFenceRaceError(f"{refused}; now: {decision.reason}", staging_branch=staging) from refused
            return act_on(head, decision)

        return self._settle("publish", publish_round, lambda _exc: None)

    def _act(
        self,
        decision: FenceDecision,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        staged: str,
        metadata: Mapping[str, str],
        head: HeadState,
    ) -> str:
        client, repo, target = self.lakefs, self.request.repository, self.request.target_branch
        # Every lakefence merge names the head it expects: the hard fence's compare-and-swap.
        metadata = {**metadata, **expected_head_metadata(head.commit_id)}
        if decision.action is Action.FAIL_CLOSED:
            raise PublishFenceError(decision.reason, staging_branch=staging)
        if decision.action is Action.MERGE:
            try:
                merge_ref = client.merge(repo, staged, target, self._message(ROLE_PUBLISH, attempt), metadata)
            except LakeFSHookRejectedError as exc:
                raise self._hook_rejection(exc, head, staging) from exc
            except LakeFSConflictError as exc:
                raise PublishRaceError(
                    f"merge into {target!r} conflicted: another writer raced the publish", staging_branch=staging
                ) from exc
            except LakeFSPreconditionFailedError as exc:
                # A 412 on a merge is a failed pre-merge hook whose message did not say so.
                raise MergeHookRejectedError(
                    f"a pre-merge hook rejected the publication into {target!r} (action run unknown): {exc}. "
                    f"Nothing merged; staging branch {staging!r} kept. {WHAT_TO_DO} read the repository's action "
                    "runs (lakectl actions runs list), fix what the hook rejects, then clear the task.",
                    staging_branch=staging,
                ) from exc
            except LakeFSBadRequestError as exc:
                text = str(exc).lower()
                if "no changes" in text:
                    # The staged commit is already in the target: an earlier request landed late. Its
                    # outcome is re-read in the next round (the idempotent row), never merged again.
                    raise LakeFSUnavailableError(
                        f"merge answered 'no changes': {exc}", status=exc.status, operation="merge"
                    ) from exc
                if "dirty" in text:
                    raise PublishRaceError(
                        f"{target!r} has uncommitted changes: another writer is active on it; nothing merged. "
                        f"{WHAT_TO_DO} find the writer (one writer per target), then clear the task.",
                        staging_branch=staging,
                    ) from exc
                raise PublishFenceError(
                    f"lakeFS refused the merge into {target!r}: {exc}. Nothing merged; staging branch "
                    f"{staging!r} kept. {WHAT_TO_DO} read lakeFS's reason above, fix it, then clear the task.",
                    staging_branch=staging,
                ) from exc
            failpoints.hit("after_publish_action")
            if self._hard_fence_intact:
                return merge_ref  # lakeFS checked the first parent before the branch moved
            merged = client.get_commit(repo, merge_ref)
            if merged.parents[:1] != (input_commit,):
                raise PublishRaceError(
                    f"merge commit {merge_ref} has first parent {merged.parents[:1]}, not the input "
                    f"{input_commit}: another writer raced the publish; {target!r} left as is",
                    staging_branch=staging,
                )
            return merge_ref
        if decision.action in (Action.REPLACE, Action.RELOCATE):
            assert decision.output_ref is not None
            if self.request.replace_by_merge:
                return self._replace_by_merge(attempt, staging, input_commit, staged, metadata, head)
            try:
                client.hard_reset(repo, target, decision.output_ref)
            except LakeFSBranchProtectedError:
                self.log.info("%r is protected (no hard reset): replacing by merges", target)
                return self._replace_by_merge(attempt, staging, input_commit, staged, metadata, head)
            failpoints.hit("after_publish_action")
            now = HeadState.of(client.get_commit(repo, target))
            # A commit whose first parent is what was set came after the reset: not a race.
            if decision.output_ref not in (now.commit_id, now.first_parent):
                raise PublishRaceError(
                    f"after resetting {target!r} to {decision.output_ref} its HEAD is {now.commit_id}: another "
                    "writer raced the publish; left as is",
                    staging_branch=staging,
                )
            return decision.output_ref
        if decision.action is Action.IDEMPOTENT:
            # A previous round's write landed although its answer was lost.
            assert decision.output_ref is not None
            return decision.output_ref
        return input_commit  # NOOP

    # -- the hard fence and merge-only replacement (docs/hard-fence.md) ----------------------------

    def _check_hard_fence(self, input_commit: str) -> None:
        """Before the job: does lakeFS run the hard fence on merges built on the input? (0 or 1 call)."""
        mode = self.request.hard_fence
        if mode == "off":
            return
        check = check_ref(self.lakefs, self.request.repository, input_commit)
        if not check.enforced and mode == "require":
            raise HardFenceMissingError(f"hard_fence='require': {check.message}")
        self._hard_fence = self._hard_fence_intact = check.enforced
        # A direct-mode job may rewrite the action file in the staged commit unless output_prefixes
        # keep it out: then the merge is still verified after acting.
        actions_dir = ACTION_PATH.split("/")[0] + "/"
        unguarded = not self.prefixes or any(p.startswith(actions_dir) for p in self.prefixes)
        if self.request.write_mode == "direct" and unguarded:
            self._hard_fence_intact = False
        self.log.info("Hard fence: %s", check.message)

    def _hook_rejection(self, exc: LakeFSHookRejectedError, head: HeadState, staging: str) -> PublishFenceError:
        target = self.request.target_branch
        if isinstance(exc, LakeFSHardFenceRejectedError):
            return HardFenceRaceError(
                f"lakeFS's hard fence refused the merge into {target!r}: it moved to {exc.found_head} since the "
                f"fence read {head.commit_id}; nothing published, {target!r} left as the other writer left it "
                f"(action run {exc.run_id})",
                staging_branch=staging,
            )
        return MergeHookRejectedError(
            f"a pre-merge hook of the repository rejected the publication into {target!r} (action run "
            f"{exc.run_id}): {exc}. Nothing merged; staging branch {staging!r} kept. {WHAT_TO_DO} read the hook "
            f"run (lakectl actions runs describe lakefs://{self.request.repository} {exc.run_id}), fix what it "
            "rejects, then clear the task.",
            staging_branch=staging,
        )

    def _replace_by_merge(
        self,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        staged: str,
        metadata: Mapping[str, str],
        head: HeadState,
    ) -> str:
        repo, target = self.request.repository, self.request.target_branch
        try:
            outcome = replace_by_merge(
                self.lakefs,
                repository=repo,
                target=target,
                head=head,
                input_commit=input_commit,
                staged_commit=staged,
                temp_branch=temp_branch_name(staging),
                message=self._message(ROLE_PUBLISH, attempt),
                metadata=metadata,
            )
        except LakeFSHookRejectedError as exc:
            raise self._hook_rejection(exc, head, staging) from exc
        failpoints.hit("after_publish_action")
        if outcome.calls and not self._hard_fence_intact:
            merged = self.lakefs.get_commit(repo, outcome.output_ref)
            if merged.parents[:1] != (head.commit_id,):
                raise PublishRaceError(
                    f"merge commit {outcome.output_ref} has first parent {merged.parents[:1]}, not the replaced "
                    f"publication {head.commit_id}: another writer raced the publish; {target!r} left as is",
                    staging_branch=staging,
                )
        return outcome.output_ref

    # -- evidence and clean-up --------------------------------------------------------------------

    def _keep_as_evidence(
        self,
        attempt: AttemptId,
        staging: str,
        input_commit: str,
        exc: PublishFenceError,
        on_evidence: Callable[[Mapping[str, str]], None] | None,
    ) -> None:
        """Record the kept branch in the run state (with the attempt that kept it) and in XCom, then
        mark it on lakeFS.

        A later try finds it through either record and never deletes it (and re-marks it as this
        attempt); the cleaner keeps a branch that may be unmarked evidence unless its task instance
        succeeded without naming it.
        """
        error = type(exc).__name__
        try:
            kept = record_evidence(self.run_state, staging, error, attempt, input_commit)
            self._evidence = {name: entry.error for name, entry in kept.items()}
        except LakeFenceError as err:
            self.log.warning("Could not record staging branch %s as evidence in the run state: %s", staging, err)
            if self._evidence is not None:
                self._evidence[staging] = error
        if self._evidence is not None and on_evidence is not None:
            try:
                on_evidence(dict(self._evidence))
            except Exception as err:  # the fail-closed error is what this try reports
                self.log.warning("Could not report the run's evidence branches: %s", err)
        if not self._mark(attempt, staging, input_commit, error):
            self.log.warning(
                "Could not mark staging branch %s as evidence after %d tries; it is kept unmarked",
                staging,
                MARKER_TRIES,
            )

    def _mark(self, attempt: AttemptId, staging: str, input_commit: str, error: str) -> bool:
        # A marker commit on the kept branch tells retries and the cleaner it is evidence, not a
        # crash leftover; it names the error class only (a message could quote anything).
        metadata = evidence_metadata(attempt, input_commit, error)
        repo = self.request.repository
        for _ in range(MARKER_TRIES):
            try:
                self.lakefs.commit(repo, staging, f"lakefence: evidence of {error}", metadata, allow_empty=True)
                return True
            except LakeFenceError as err:
                self.log.warning("Marking staging branch %s as evidence failed: %s", staging, err)
                try:  # a lost answer may hide a marker that landed
                    if evidence_of(self.lakefs.get_commit(repo, staging).metadata):
                        return True
                except LakeFenceError:
                    pass
        return False

    def _delete_quietly(self, staging: str) -> None:
        if staging in self._deleted:
            return
        self._deleted.add(staging)
        try:
            self.lakefs.delete_branch(self.request.repository, staging)
        except LakeFenceError as exc:
            self.log.warning("Could not delete staging branch %s: %s (the cleaner will)", staging, exc)
