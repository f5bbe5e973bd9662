"""From the input commit to the staged commit: steps 3 to 7 on the attempt's staging branch.

:class:`StagingArea` creates the staging branch from the pinned input (a creation whose answer was
lost is settled by reading the branch), runs the job in a fresh workspace, uploads it, checks that
every changed path lies under the declared output prefixes (keeping the output as evidence when
not), makes each prefix hold exactly this attempt's output (``output_mode="replace"``) and commits
the staging branch with the attempt's record.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_lakefence import failpoints
from airflow_lakefence.core.advice import WHAT_TO_DO
from airflow_lakefence.core.fences.attempt import AttemptGuard
from airflow_lakefence.core.names.keys import AttemptId
from airflow_lakefence.core.ports import AttemptFencePort, CommitInfo, LakeFSPort
from airflow_lakefence.core.records.metadata import (
    ROLE_STAGE,
    LakeFenceRecord,
    decode_metadata,
    encode_metadata,
    output_prefixes_metadata,
)
from airflow_lakefence.core.records.reporting import Log
from airflow_lakefence.core.request import PublishRequest
from airflow_lakefence.core.staging.delta_tables import DeltaTableChange, check_staged_tables, refuse_undeclared_tables
from airflow_lakefence.exceptions import (
    InputRefError,
    JobError,
    LakeFenceError,
    LakeFSConflictError,
    LakeFSNotFoundError,
    LakeFSUnavailableError,
    OutputPrefixError,
    StaleAttemptError,
    WorkspaceError,
)

_PROGRESS_STEPS = 10


@dataclass
class Workspace:
    """The files a workspace-mode job wrote: ``(object path, local file)`` and their total size."""

    files: list[tuple[str, Path]] = field(default_factory=list)
    size: int = 0


@dataclass
class StagingArea:
    """Steps 3 to 7 of one attempt.

    :param lakefs: the lakeFS port.
    :param request: the validated request.
    :param guard: the attempt's guard (lost answers, staleness).
    :param attempt_fence: the attempt fence (was the job killed?).
    :param log: where to log.
    :param clock: the monotonic clock (upload timing).
    :param job_name: how messages name the job.
    :param job_error: the exception class a failed job is reported as.
    """

    lakefs: LakeFSPort
    request: PublishRequest
    guard: AttemptGuard
    attempt_fence: AttemptFencePort
    log: Log
    clock: Callable[[], float]
    job_name: str
    job_error: type[JobError]
    # The input's objects under each replaced prefix (the input commit never changes: listed once).
    _replaced: dict[str, list[str]] | None = field(default=None, init=False)

    # -- step 3 -------------------------------------------------------------------------------

    def create(self, staging: str, input_commit: str) -> str:
        """Create the staging branch from the input commit; return its commit.

        The branch name is unique to the attempt, so the branch itself tells whether a creation
        whose answer was lost landed, and from which commit.

        :param staging: the staging branch.
        :param input_commit: the input commit.
        :raises InputRefError: if the input is unknown to lakeFS.
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
            return self.guard.write_once("create_branch", create, landed)
        except LakeFSUnavailableError:
            self.guard.delete_quietly(staging)  # in case a creation lands late
            raise

    # -- steps 4 and 5: the job and its workspace -------------------------------------------------

    def run_job(self, job: Callable[[Any], None], locations: Any) -> None:
        """Step 4: run the job; its failure is a ``job_error``, or staleness when it was killed.

        :param job: the job.
        :param locations: what the job is given.
        """
        try:
            job(locations)
        except LakeFenceError:
            raise
        except Exception as exc:
            if self.attempt_fence.was_killed():
                raise StaleAttemptError(f"the {self.job_name} was killed (on_kill): nothing is staged") from exc
            raise self.job_error(f"{self.job_name[:1].upper()}{self.job_name[1:]} failed: {exc}") from exc

    @contextmanager
    def workspace_dir(self, staging: str | None) -> Iterator[Path | None]:
        """The attempt's fresh workspace directory (workspace mode), removed afterwards; else ``None``.

        :param staging: names the directory.
        """
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

    def collect(self, directory: Path) -> Workspace:
        """Step 5: run the DAG author's workspace check and list the files.

        :param directory: the workspace.
        :raises WorkspaceError: when the check rejects it, or it is empty and that is not allowed.
        """
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
        return Workspace(files, sum(path.stat().st_size for _, path in files))

    def upload(self, staging: str, workspace: Workspace) -> None:
        """Upload the workspace into the staging branch, in two halves, logging progress.

        :param staging: the staging branch.
        :param workspace: what to upload.
        """
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

    def list_replaced(self, input_commit: str) -> dict[str, list[str]]:
        """``output_mode="replace"``: the input's objects under each declared prefix, listed once
        before the job, and a Delta table among them refused before any write.

        :param input_commit: the input commit.
        :raises DeltaOutputModeError: when a replaced prefix holds a Delta table at the input.
        """
        if self._replaced is None:
            prefixes = self.request.prefixes if self.request.output_mode == "replace" else ()
            repo = self.request.repository
            self._replaced = {prefix: self.lakefs.list_objects(repo, input_commit, prefix) for prefix in prefixes}
            refuse_undeclared_tables(self._replaced)
        return self._replaced

    def check_prefixes(self, staging: str, workspace: Workspace | None) -> None:
        """The **(+)** of step 7: every changed path lies under the declared output prefixes.

        :param staging: the staging branch.
        :param workspace: the uploaded workspace, ``None`` in direct mode (then lakeFS is asked).
        :raises OutputPrefixError: naming the paths outside; the output is kept as evidence.
        """
        # A declared table's root is a declared output too (its change is checked by check_tables).
        prefixes = self.request.prefixes + tuple(t.prefix for t in self.request.tables)
        if not prefixes:
            return
        if workspace is not None:
            outside: list[str] = [name for name, _ in workspace.files if not name.startswith(prefixes)]
        else:
            with self.guard.staging_may_vanish("while checking the output", staging):
                outside = self.lakefs.paths_outside(self.request.repository, staging, prefixes)
        if outside:
            tables = self.request.tables
            declared = f"output_prefixes {list(self.request.prefixes)}" + (
                f" and output_tables {[t.root for t in tables]}" if tables else ""
            )
            raise OutputPrefixError(
                f"the job wrote outside {declared}: {outside[:10]}; nothing published, the "
                f"output is kept in staging branch {staging!r}. {WHAT_TO_DO} fix the job's output paths or declare "
                "the prefix, then clear the task.",
                staging_branch=staging,
            )

    def drop_unwritten(self, staging: str, input_commit: str, workspace: Workspace | None) -> None:
        """``output_mode="replace"``: delete, in the staging branch, every object under a declared
        prefix that the input held and this attempt did not write, so the prefix ends up holding
        exactly this attempt's output (what a Spark ``overwrite`` means).

        Written means: a workspace file (workspace mode), or a path the job changed on the staging
        branch, committed or not (direct mode; a Spark overwrite through S3A has already removed the
        old objects, which then count as changed).

        :param staging: the staging branch.
        :param input_commit: the input commit.
        :param workspace: the uploaded workspace, ``None`` in direct mode.
        """
        prefixes = self.request.prefixes
        if not prefixes or self.request.output_mode != "replace":
            return
        client, repo = self.lakefs, self.request.repository
        stale: list[str] = []
        listed = self.list_replaced(input_commit)
        for prefix in prefixes:
            existing = listed[prefix]
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
                "Removed %d objects of the input under %s that this attempt did not write", len(stale), list(prefixes)
            )

    def check_tables(self, staging: str, input_commit: str, staged: CommitInfo) -> list[DeltaTableChange]:
        """The Delta check of step 7: the staged change under each declared table is Delta commits
        numbered on from the input's latest version (docs/delta.md); one two-dot diff of the input
        and the staged commit, and one listing of each table's log at the input.

        :param staging: the staging branch (kept as evidence on failure).
        :param input_commit: the input commit.
        :param staged: the staged commit.
        :raises DeltaLogError: when it is not; nothing is published.
        """
        tables = self.request.tables
        if not tables:
            return []
        checked = check_staged_tables(
            self.lakefs,
            self.request.repository,
            input_commit,
            staged.id,
            tables,
            output_prefixes=self.request.prefixes,
            staging_branch=staging,
        )
        for change in checked:
            self.log.info(
                "Delta table %s: version %s at the input, staged versions %s",
                change.root,
                change.input_version,
                list(change.new_versions) or "none",
            )
        return checked

    # -- step 7: stage ----------------------------------------------------------------------------

    def stage(self, attempt: AttemptId, staging: str, input_commit: str) -> CommitInfo:
        """Step 7: commit the staging branch with the attempt's record; nothing changed → C = I.

        :param attempt: this attempt.
        :param staging: the staging branch.
        :param input_commit: the input commit.
        :return: the staged commit.
        """
        client, repo = self.lakefs, self.request.repository
        record = LakeFenceRecord(attempt, ROLE_STAGE, input_commit)
        scope = self.request.scope
        metadata = {
            **(self.request.commit_metadata or {}),
            **encode_metadata(record),
            **output_prefixes_metadata(scope.output_prefixes if scope is not None else ()),
        }
        message = self.request.message(ROLE_STAGE, attempt)

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

        return self.guard.write_once("commit", commit, landed)
