"""``FencedSparkPublishOperator``: spark-submit with a fenced publish into a lakeFS branch.

The steps follow the protocol (docs/protocol.md) one to one; the numbers in comments refer to it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, AssetAlias, BaseHook

from airflow_lakefence import assets as lakefs_assets
from airflow_lakefence import failpoints
from airflow_lakefence.attempt import AttemptFence, attempt_from_context
from airflow_lakefence.core.cleanup import evidence_metadata, evidence_of
from airflow_lakefence.core.fence import Action, FenceDecision, HeadState, decide_publish
from airflow_lakefence.core.keys import AttemptId
from airflow_lakefence.core.metadata import (
    ROLE_PUBLISH,
    ROLE_STAGE,
    LakefenceRecord,
    check_user_metadata,
    decode_metadata,
    encode_metadata,
)
from airflow_lakefence.core.naming import (
    is_valid_branch_name,
    staging_branch_name,
    staging_branch_prefix,
    validate_staging_prefix,
)
from airflow_lakefence.exceptions import (
    InputRefError,
    InvalidInputError,
    LakeFenceError,
    LakeFSBadRequestError,
    LakeFSConflictError,
    LakeFSNotFoundError,
    LakeFSUnavailableError,
    OutputPrefixError,
    PublishBudgetError,
    PublishFenceError,
    PublishRaceError,
    SparkJobError,
    StaleAttemptError,
    WorkspaceError,
)
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_client import CommitInfo, LakeFSClient
from airflow_lakefence.links import LakeFSCommitLink, LakeFSStagingLink

WRITE_MODES = ("direct", "workspace")
DECISION_READ_ONLY = "read_only"

_REPOSITORY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")
_REF_RE = re.compile(r"^[^\s\x00-\x1f]{1,1024}$")
# Publishing is a handful of calls: two rounds let a write whose answer was lost be re-evaluated
# once against the fresh HEAD, never repeated blindly.
_PUBLISH_ROUNDS = 2


def _seconds(value: timedelta | float | int | None, name: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds < 0:
        raise InvalidInputError(f"{name} must not be negative, got {seconds}")
    return seconds


def _normalise_prefixes(prefixes: Sequence[str] | None) -> tuple[str, ...]:
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


class FencedSparkPublishOperator(SparkSubmitOperator):
    """Run a Spark job and publish its output into a lakeFS branch, fenced against stale attempts.

    The job reads the pinned input commit and writes into a private staging branch (``direct``
    mode) or a local workspace the operator uploads (``workspace`` mode). Its output reaches
    ``target_branch`` only if this is still the current Airflow try (attempt fence, checked before
    staging and before publishing) and the target is in a state the protocol can explain (publish
    fence). A publication left behind by a dead earlier try is replaced, not stacked.

    The job receives ``LAKEFS_ENDPOINT``, ``LAKEFENCE_REPOSITORY``, ``LAKEFENCE_STAGING_BRANCH``,
    ``LAKEFENCE_INPUT_COMMIT``, ``LAKEFENCE_WRITE_MODE`` and ``LAKEFENCE_WORKSPACE_DIR`` as
    environment variables and as ``spark.lakefence.*`` confs; credentials only through the
    environment (``LAKEFS_ACCESS_KEY_ID`` / ``LAKEFS_SECRET_ACCESS_KEY``), never in argv. Job code
    reads all of it with :func:`airflow_lakefence.spark.lakefence_locations`.

    XCom: ``output_ref`` (also the return value), ``staged_commit``, ``decision``, ``input_ref``
    (the resolved commit id) and ``staging_branch``.

    :param repository: the lakeFS repository (templated).
    :param target_branch: the branch to publish into (templated).
    :param input_ref: the commit the job reads and builds on; a branch or tag is resolved once to a
        commit id (templated; an ``XComArg`` such as ``LakeFSResolveRefOperator().output`` works).
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param read_only: run the job against the input commit and write nothing to lakeFS.
    :param write_mode: ``workspace`` (the job writes a local directory, uploaded in parallel) or
        ``direct`` (the job writes into the staging branch itself).
    :param workspace_dir: the parent of the per-attempt workspace (templated); a temporary
        directory when ``None``.
    :param output_prefixes: if given, every changed path must lie under one of them (templated).
    :param publish_budget: refuse to start publishing when less of ``execution_timeout`` remains.
    :param commit_message: the staging and merge commit message (templated).
    :param commit_metadata: extra commit metadata, str to str; ``lakefence.*`` keys are reserved.
    :param staging_branch_prefix: the first part of staging branch names.
    :param workspace_check: a callable given the workspace ``Path`` after the job; raising rejects
        the output (workspace mode).
    :param allow_empty_workspace: accept a job that wrote no file (then nothing is published).
    :param stale_grace_period: seconds to wait for the supervisor's kill when the attempt is stale.
    :param kwargs: everything :class:`SparkSubmitOperator` takes (``application``, ``conn_id``,
        ``conf``, ``env_vars``...). ``durable`` is forced off: each attempt runs its own job.
    :raises InvalidInputError: at DAG parse time, for arguments that can never work.
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "repository",
        "target_branch",
        "input_ref",
        "workspace_dir",
        "output_prefixes",
        "commit_message",
        "commit_metadata",
    )
    ui_color = "#4dd0c5"
    operator_extra_links = (LakeFSCommitLink(), LakeFSStagingLink())

    def __init__(
        self,
        *,
        repository: str,
        target_branch: str,
        input_ref: Any,
        lakefs_conn_id: str = LakeFSHook.default_conn_name,
        read_only: bool = False,
        write_mode: str = "workspace",
        workspace_dir: str | None = None,
        output_prefixes: Sequence[str] | None = None,
        publish_budget: timedelta | float | None = None,
        commit_message: str | None = None,
        commit_metadata: Mapping[str, str] | None = None,
        staging_branch_prefix: str = "lakefence",
        workspace_check: Callable[[Path], None] | None = None,
        allow_empty_workspace: bool = False,
        stale_grace_period: float = 15.0,
        **kwargs: Any,
    ) -> None:
        kwargs["durable"] = False
        super().__init__(**kwargs)
        if write_mode not in WRITE_MODES:
            raise InvalidInputError(f"write_mode must be one of {WRITE_MODES}, got {write_mode!r}")
        if read_only and (output_prefixes or commit_message or commit_metadata or publish_budget is not None):
            raise InvalidInputError(
                "read_only=True writes nothing: output_prefixes, commit_message, commit_metadata and "
                "publish_budget do not apply"
            )
        try:
            validate_staging_prefix(staging_branch_prefix)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        self.publish_budget = _seconds(publish_budget, "publish_budget")
        _seconds(stale_grace_period, "stale_grace_period")
        timeout = _seconds(self.execution_timeout, "execution_timeout")
        if self.publish_budget is not None and timeout is not None and self.publish_budget >= timeout:
            raise PublishBudgetError(
                f"publish_budget {self.publish_budget}s does not fit in execution_timeout {timeout}s"
            )
        self.repository = repository
        self.target_branch = target_branch
        self.input_ref = input_ref
        self.lakefs_conn_id = lakefs_conn_id
        self.read_only = read_only
        self.write_mode = write_mode
        self.workspace_dir = workspace_dir
        self.output_prefixes = output_prefixes
        self.commit_message = commit_message
        self.commit_metadata = commit_metadata
        self.staging_branch_prefix = staging_branch_prefix
        self.workspace_check = workspace_check
        self.allow_empty_workspace = allow_empty_workspace
        self.stale_grace_period = stale_grace_period
        self._fence: AttemptFence | None = None
        self._deleted_staging: set[str] = set()
        self._outcome: dict[str, Any] = {}
        self._lakefs_outlets, self._asset_alias = self._take_lakefs_outlets()

    def _take_lakefs_outlets(self) -> tuple[list[Asset], AssetAlias | None]:
        # Airflow emits an event for every declared outlet when the task succeeds, published or
        # not. lakefs:// outlets are therefore emitted through an alias, and only on publication.
        lakefs = [o for o in self.outlets if isinstance(o, Asset) and o.uri.startswith(f"{lakefs_assets.SCHEME}://")]
        if not lakefs:
            return [], None
        digest = hashlib.sha256(repr((self.dag_id, self.task_id, sorted(a.uri for a in lakefs))).encode()).hexdigest()
        alias = AssetAlias(name=f"lakefence-{self.task_id}-{digest[:12]}")
        self.outlets = [o for o in self.outlets if o not in lakefs] + [alias]
        return lakefs, alias

    @cached_property
    def lakefs_hook(self) -> LakeFSHook:
        """The lakeFS hook, built on first use."""
        return LakeFSHook(lakefs_conn_id=self.lakefs_conn_id)

    @property
    def lakefs(self) -> LakeFSClient:
        """The lakeFS client adapter of :attr:`lakefs_hook`."""
        return self.lakefs_hook.client

    # -- step 1: validation ------------------------------------------------------------------

    def _validate_rendered(self) -> tuple[str, ...]:
        if not isinstance(self.repository, str) or not _REPOSITORY_RE.fullmatch(self.repository):
            raise InvalidInputError(f"repository {self.repository!r} is not a valid lakeFS repository name")
        if not isinstance(self.target_branch, str) or not is_valid_branch_name(self.target_branch):
            raise InvalidInputError(f"target_branch {self.target_branch!r} is not a valid lakeFS branch name")
        if not isinstance(self.input_ref, str) or not _REF_RE.fullmatch(self.input_ref):
            raise InputRefError(f"input_ref {self.input_ref!r} is not a ref (a commit id, branch or tag)")
        try:
            check_user_metadata(self.commit_metadata)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        prefixes = _normalise_prefixes(self.output_prefixes)
        # A missing Spark connection makes the provider fall back to master "yarn" silently.
        try:
            BaseHook.get_connection(self._conn_id)
        except Exception as exc:
            raise InvalidInputError(
                f"Spark connection {self._conn_id!r} is not defined (the provider would silently use yarn)"
            ) from exc
        for asset in self._lakefs_outlets:
            repository, branch, _prefix = lakefs_assets.parse_uri(asset.uri)
            if (repository, branch) != (self.repository, self.target_branch):
                raise InvalidInputError(
                    f"outlet {asset.uri!r} is not on the target {self.repository}/{self.target_branch}"
                )
        self.lakefs_hook.settings  # noqa: B018 - validates the lakeFS connection before any call
        return prefixes

    # -- the protocol ------------------------------------------------------------------------

    def execute(self, context: Any) -> str:  # type: ignore[override]
        """Run the fenced protocol; return the output ref.

        :param context: the Airflow context.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        started = time.monotonic()
        attempt = attempt_from_context(context)
        prefixes = self._validate_rendered()
        client = self.lakefs
        repo = self.repository
        if self.read_only:
            input_commit = self._resolve_input(client)
            with self._workspace(None) as workspace:
                self._run_spark(context, staging=None, input_commit=input_commit, workspace=workspace)
            return self._report(context, input_commit, None, DECISION_READ_ONLY, input_commit, None)

        fence = self._fence = AttemptFence(context, grace_period=self.stale_grace_period)
        target_head = self._get_target_head(client)  # step 1: repository and target exist
        fence.arm()  # step 2
        staging = staging_branch_name(attempt, self.staging_branch_prefix)
        input_commit = self._create_staging(client, staging)  # step 3
        # Pushed now so the "lakeFS staging" link works for a try that fails closed.
        context["ti"].xcom_push(key="staging_branch", value=staging)
        keep_staging = False
        try:
            early = decide_publish(target_head, input_commit, attempt, True, input_commit)
            if early.action is Action.FAIL_CLOSED:
                raise PublishFenceError(f"before the job: {early.reason}")
            self._remove_earlier_staging(client, attempt, staging)
            failpoints.hit("after_staging_branch")
            with self._workspace(staging) as workspace:
                with self._stale_first(fence, "after the Spark job failed", client, staging):
                    self._run_spark(context, staging=staging, input_commit=input_commit, workspace=workspace)
                failpoints.hit("after_job")
                if workspace is not None:
                    files = self._collect_workspace(workspace, prefixes)
                self._check_fence(fence, "before stage", client, staging)  # step 6
                failpoints.hit("after_fence_1")
                if workspace is not None:
                    with self._stale_first(fence, "while uploading", client, staging):
                        self._upload(client, staging, files)
                elif prefixes:
                    with self._stale_first(fence, "while checking the output", client, staging):
                        outside = client.paths_outside(repo, staging, prefixes)
                    if outside:
                        keep_staging = True
                        raise OutputPrefixError(
                            f"the job wrote outside output_prefixes {list(prefixes)}: {outside}",
                            staging_branch=staging,
                        )
            with self._stale_first(fence, "while staging", client, staging):
                staged = self._stage(client, attempt, staging, input_commit)  # step 7
            failpoints.hit("after_stage")
            self._check_fence(fence, "before publish", client, staging)  # step 8
            failpoints.hit("after_fence_2")
            self._check_budget(started)  # step 9
            try:
                decision, output_ref = self._publish(client, attempt, staging, input_commit, staged)  # 10-11
            except PublishFenceError:
                keep_staging = True
                raise
            failpoints.hit("after_verify")
            # A try cleared after publishing must not overwrite the new try's XCom: its publication
            # is an abandoned one, which the new try replaces.
            self._check_fence(fence, "before reporting", client, staging)
            result = self._report(context, output_ref, staged.id, decision.action.value, input_commit, staging)  # 12
            self._emit_asset_events(context, decision.action.value, output_ref, input_commit, staged.id)
            failpoints.hit("after_xcom")
            return result
        except PublishFenceError as exc:
            if keep_staging:
                self._mark_evidence(client, attempt, staging, input_commit, exc)
            raise
        finally:
            if not keep_staging:
                self._delete_quietly(client, staging)

    def _resolve_input(self, client: LakeFSClient) -> str:
        try:
            return client.get_commit(self.repository, self.input_ref).id
        except LakeFSNotFoundError as exc:
            raise InputRefError(f"input_ref {self.input_ref!r} not found in repository {self.repository!r}") from exc

    def _get_target_head(self, client: LakeFSClient) -> HeadState:
        try:
            head = client.get_commit(self.repository, self.target_branch)
        except LakeFSNotFoundError as exc:
            raise InvalidInputError(
                f"target branch {self.target_branch!r} or repository {self.repository!r} not found"
            ) from exc
        return HeadState(head.id, head.parents, head.metadata, head.version)

    def _remove_earlier_staging(self, client: LakeFSClient, attempt: AttemptId, staging: str) -> None:
        # Try numbers only grow, so a first try has no predecessor to clean up: skip the listing.
        if attempt.try_number <= 1:
            return
        prefix = staging_branch_prefix(attempt.key, self.staging_branch_prefix)
        for name, _commit in client.list_branches(self.repository, prefix, show_hidden=True):
            if name == staging:
                continue
            # Leftovers exist only after a crash or a fail-closed try: one read spares the evidence.
            if evidence_of(client.get_commit(self.repository, name).metadata):
                self.log.info("Keeping staging branch %s of an earlier try: evidence of a fence violation", name)
                continue
            client.delete_branch(self.repository, name)
            self.log.info("Removed staging branch %s of an earlier try", name)

    def _create_staging(self, client: LakeFSClient, staging: str) -> str:
        """Create the staging branch from the input ref; return the commit it resolved to.

        A lost answer is not repeated blindly: the branch, whose name is unique to this attempt,
        tells whether the creation landed (and from which commit).
        """
        last_error: LakeFSUnavailableError | None = None
        for _ in range(_PUBLISH_ROUNDS):
            try:
                return client.create_branch(self.repository, staging, self.input_ref, hidden=True)
            except LakeFSNotFoundError as exc:
                raise InputRefError(
                    f"input_ref {self.input_ref!r} not found in repository {self.repository!r}"
                ) from exc
            except LakeFSConflictError:
                if last_error is None:
                    raise
            except LakeFSUnavailableError as exc:
                last_error = exc
            try:
                return client.get_commit(self.repository, staging).id
            except LakeFSNotFoundError:
                continue
        assert last_error is not None
        self._delete_quietly(client, staging)  # in case a creation lands late
        raise last_error

    @contextmanager
    def _stale_first(self, fence: AttemptFence, where: str, client: LakeFSClient, staging: str) -> Iterator[None]:
        """Report a failure on the staging branch as staleness when the attempt is stale.

        A newer try deletes the staging branches of earlier tries, so a stale attempt's job, upload
        or commit fails on its vanished branch: that is a StaleAttemptError, not a lakeFS error.
        """
        try:
            yield
        except (SparkJobError, LakeFSNotFoundError):
            self._check_fence(fence, where, client, staging)
            raise

    def _check_fence(self, fence: AttemptFence, where: str, client: LakeFSClient, staging: str) -> None:
        reason = fence.stale_reason()
        if reason is None:
            return
        # A stale attempt's own staging branch is worthless: drop it before waiting for the kill.
        self._delete_quietly(client, staging)
        fence.fail(where, reason)

    def _check_budget(self, started: float) -> None:
        timeout = _seconds(self.execution_timeout, "execution_timeout")
        if self.publish_budget is None or timeout is None:
            return
        remaining = timeout - (time.monotonic() - started)
        if remaining < self.publish_budget:
            raise PublishBudgetError(
                f"{remaining:.1f}s of execution_timeout remain, less than publish_budget "
                f"{self.publish_budget:.1f}s: not publishing"
            )

    # -- step 4: the Spark job ---------------------------------------------------------------

    def _lakefence_env(self, staging: str | None, input_commit: str, workspace: Path | None) -> dict[str, str]:
        values = {
            "LAKEFS_ENDPOINT": self.lakefs_hook.endpoint,
            "LAKEFENCE_REPOSITORY": self.repository,
            "LAKEFENCE_INPUT_COMMIT": input_commit,
            "LAKEFENCE_TARGET_BRANCH": self.target_branch,
            "LAKEFENCE_WRITE_MODE": "read_only" if self.read_only else self.write_mode,
        }
        if staging is not None:
            values["LAKEFENCE_STAGING_BRANCH"] = staging
        if workspace is not None:
            values["LAKEFENCE_WORKSPACE_DIR"] = str(workspace)
        return values

    def _run_spark(self, context: Any, *, staging: str | None, input_commit: str, workspace: Path | None) -> None:
        env = self._lakefence_env(staging, input_commit, workspace)
        conf = {f"spark.lakefence.{_conf_name(k)}": v for k, v in env.items()}
        original_conf, original_env = self.conf, self.env_vars
        self.conf = {**(original_conf or {}), **conf}
        self.env_vars = {**(original_env or {}), **env}
        self._hook = self._get_hook()
        if self._hook._is_yarn or self._hook._is_kubernetes:
            # The provider turns env_vars into --conf arguments on YARN/Kubernetes (visible argv):
            # there the cluster must supply lakeFS credentials itself.
            self.log.warning("YARN/Kubernetes master: lakeFS credentials are not passed to the job")
        else:
            self._hook._env_vars = {**self.env_vars, **self.lakefs_hook.credentials_env()}
        try:
            super().execute(context)
        except LakeFenceError:
            raise
        except Exception as exc:
            if self._fence is not None and self._fence.killed.is_set():
                raise StaleAttemptError("the Spark job was killed (on_kill): nothing is staged") from exc
            raise SparkJobError(f"Spark job failed: {exc}") from exc
        finally:
            self.conf, self.env_vars = original_conf, original_env

    def on_kill(self) -> None:
        """Mark the attempt stale, then kill the Spark job."""
        if self._fence is not None:
            self._fence.killed.set()
        super().on_kill()

    # -- workspace mode ----------------------------------------------------------------------

    def _workspace(self, staging: str | None) -> Any:
        operator = self

        class _Workspace:
            path: Path | None = None

            def __enter__(self) -> Path | None:
                if operator.write_mode != "workspace":
                    return None
                parent = operator.workspace_dir
                if parent:
                    Path(parent).mkdir(parents=True, exist_ok=True)
                # One directory per attempt, so no earlier try's files can leak into this one.
                self.path = Path(tempfile.mkdtemp(prefix=f"{staging or 'read-only'}-", dir=parent or None))
                return self.path

            def __exit__(self, *exc: object) -> None:
                if self.path is not None:
                    shutil.rmtree(self.path, ignore_errors=True)

        return _Workspace()

    def _collect_workspace(self, workspace: Path, prefixes: tuple[str, ...]) -> list[tuple[str, Path]]:
        if self.workspace_check is not None:
            try:
                self.workspace_check(workspace)
            except Exception as exc:
                raise WorkspaceError(f"workspace check rejected the output: {exc}") from exc
        files = sorted(
            (path.relative_to(workspace).as_posix(), path) for path in workspace.rglob("*") if path.is_file()
        )
        if not files and not self.allow_empty_workspace:
            raise WorkspaceError(
                "the job wrote no file into the workspace (set allow_empty_workspace=True to accept that)"
            )
        outside = [name for name, _ in files if prefixes and not name.startswith(prefixes)]
        if outside:
            raise OutputPrefixError(
                f"the job wrote outside output_prefixes {list(prefixes)}: {outside[:10]}; nothing uploaded"
            )
        return files

    def _upload(self, client: LakeFSClient, staging: str, files: list[tuple[str, Path]]) -> None:
        if not files:
            return
        half = len(files) // 2
        count = client.upload_tree(self.repository, staging, files[:half])
        failpoints.hit("mid_upload")
        count += client.upload_tree(self.repository, staging, files[half:])
        self.log.info("Uploaded %d files into staging branch %s", count, staging)

    # -- step 7: stage -----------------------------------------------------------------------

    def _stage(self, client: LakeFSClient, attempt: AttemptId, staging: str, input_commit: str) -> CommitInfo:
        record = LakefenceRecord(attempt, ROLE_STAGE, input_commit)
        metadata = {**check_user_metadata(self.commit_metadata), **encode_metadata(record)}
        message = self.commit_message or f"lakefence: stage {attempt.key.task_id} try {attempt.try_number}"
        last_error: LakeFSUnavailableError | None = None
        for _ in range(_PUBLISH_ROUNDS):
            try:
                staged = client.commit(self.repository, staging, message, metadata)
            except LakeFSUnavailableError as exc:
                # The answer was lost: the staging branch's HEAD tells whether the commit happened.
                last_error = exc
                head = client.get_commit(self.repository, staging)
                if decode_metadata(head.metadata) == record:
                    return head
                if head.id != input_commit:
                    raise
                continue
            return staged if staged is not None else CommitInfo(id=input_commit)  # nothing changed: C = I
        raise LakeFSUnavailableError(
            f"staging commit on {staging!r} could not be confirmed: {last_error}",
            status=None if last_error is None else last_error.status,
            operation="commit",
        ) from last_error

    # -- steps 10 and 11: publish fence, act, verify -----------------------------------------

    def _publish(
        self, client: LakeFSClient, attempt: AttemptId, staging: str, input_commit: str, staged: CommitInfo
    ) -> tuple[FenceDecision, str]:
        repo, target = self.repository, self.target_branch
        changed = staged.id != input_commit
        publish_meta = {
            **check_user_metadata(self.commit_metadata),
            **encode_metadata(LakefenceRecord(attempt, ROLE_PUBLISH, input_commit, staged.id)),
        }
        message = self.commit_message or f"lakefence: publish {attempt.key.task_id} try {attempt.try_number}"
        last_error: LakeFSUnavailableError | None = None
        for _ in range(_PUBLISH_ROUNDS):
            head = self._get_target_head(client)
            decision = decide_publish(head, input_commit, attempt, changed, staged.id)
            failpoints.hit("after_publish_read")
            self.log.info("Publish fence: %s (%s)", decision.action.value, decision.reason)
            try:
                if decision.action is Action.FAIL_CLOSED:
                    raise PublishFenceError(decision.reason, staging_branch=staging)
                if decision.action is Action.MERGE:
                    try:
                        merge_ref = client.merge(repo, staged.id, target, message, publish_meta)
                    except LakeFSConflictError as exc:
                        raise PublishRaceError(
                            f"merge into {target!r} conflicted: another writer raced the publish",
                            staging_branch=staging,
                        ) from exc
                    except LakeFSBadRequestError as exc:
                        if "dirty" not in str(exc).lower():
                            raise
                        raise PublishRaceError(
                            f"{target!r} has uncommitted changes: another writer is active on it; nothing merged",
                            staging_branch=staging,
                        ) from exc
                    failpoints.hit("after_publish_action")
                    merged = client.get_commit(repo, merge_ref)
                    if merged.parents[:1] != (input_commit,):
                        raise PublishRaceError(
                            f"merge commit {merge_ref} has first parent {merged.parents[:1]}, not the input "
                            f"{input_commit}: another writer raced the publish; {target!r} left as is",
                            staging_branch=staging,
                        )
                    return decision, merge_ref
                if decision.action in (Action.REPLACE, Action.RELOCATE):
                    assert decision.output_ref is not None
                    client.hard_reset(repo, target, decision.output_ref)
                    failpoints.hit("after_publish_action")
                    now = client.get_commit(repo, target)
                    # A commit whose first parent is what was set came after the reset: not a race.
                    on_top = HeadState(now.id, now.parents, now.metadata, now.version).first_parent
                    if decision.output_ref not in (now.id, on_top):
                        raise PublishRaceError(
                            f"after resetting {target!r} to {decision.output_ref} its HEAD is {now.id}: another "
                            "writer raced the publish; left as is",
                            staging_branch=staging,
                        )
                    return decision, decision.output_ref
                if decision.action is Action.IDEMPOTENT:
                    # A previous round's write landed although its answer was lost.
                    assert decision.output_ref is not None
                    return decision, decision.output_ref
                return decision, input_commit  # NOOP
            except LakeFSUnavailableError as exc:
                self.log.warning("Publish outcome unknown (%s); re-reading the target", exc)
                last_error = exc
        assert last_error is not None
        raise last_error

    # -- step 12 -----------------------------------------------------------------------------

    def _report(
        self, context: Any, output_ref: str, staged: str | None, decision: str, input_commit: str, staging: str | None
    ) -> str:
        ti = context["ti"]
        for key, value in (
            ("staged_commit", staged),
            ("decision", decision),
            ("input_ref", input_commit),
            ("staging_branch", staging),
            ("output_ref", output_ref),
        ):
            ti.xcom_push(key=key, value=value)
        self._outcome = {"output_ref": output_ref, "input_ref": input_commit, "decision": decision}
        self.log.info("lakefence %s: output ref %s", decision, output_ref)
        return output_ref

    def _emit_asset_events(
        self, context: Any, decision: str, output_ref: str, input_commit: str, staged: str | None
    ) -> None:
        if self._asset_alias is None or decision not in lakefs_assets.PUBLISHING_DECISIONS:
            return
        events = context["outlet_events"][self._asset_alias]
        for asset in self._lakefs_outlets:
            _repository, _branch, prefix = lakefs_assets.parse_uri(asset.uri)
            extra = lakefs_assets.event_extra(
                repository=self.repository,
                output_ref=output_ref,
                input_ref=input_commit,
                staged_commit=staged,
                decision=decision,
                prefix=prefix,
            )
            events.add(asset, extra=extra)

    # -- OpenLineage (used when apache-airflow-providers-openlineage is installed) -----------

    def _lineage(self, input_commit: str | None, output_commit: str | None) -> Any:
        from airflow_lakefence.lineage import operator_lineage

        return operator_lineage(
            endpoint=self.lakefs_hook.endpoint,
            repository=self.repository,
            input_ref=self.input_ref,
            input_commit=input_commit,
            target_branch=self.target_branch,
            output_prefixes=_normalise_prefixes(self.output_prefixes),
            output_commit=output_commit,
        )

    def get_openlineage_facets_on_start(self) -> Any:
        """Lineage before running: the input as given; no output yet."""
        return self._lineage(None, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Lineage of the finished try: the input commit read and, if it published, the output commit.

        :param task_instance: the task instance (unused: the try's own outcome is kept in memory).
        """
        published = self._outcome.get("decision") in lakefs_assets.PUBLISHING_DECISIONS
        return self._lineage(self._outcome.get("input_ref"), self._outcome.get("output_ref") if published else None)

    def _mark_evidence(
        self, client: LakeFSClient, attempt: AttemptId, staging: str, input_commit: str, exc: PublishFenceError
    ) -> None:
        # A marker commit on the kept branch tells retries and the cleaner it is evidence, not a
        # crash leftover; it names the error class only (a message could quote anything).
        metadata = evidence_metadata(attempt, input_commit, type(exc).__name__)
        try:
            client.commit(
                self.repository, staging, f"lakefence: evidence of {type(exc).__name__}", metadata, allow_empty=True
            )
        except LakeFenceError as err:
            self.log.warning("Could not mark staging branch %s as evidence: %s", staging, err)

    def _delete_quietly(self, client: LakeFSClient, staging: str) -> None:
        if staging in self._deleted_staging:
            return
        self._deleted_staging.add(staging)
        try:
            client.delete_branch(self.repository, staging)
        except LakeFenceError as exc:
            self.log.warning("Could not delete staging branch %s: %s (the cleaner will)", staging, exc)


def _conf_name(env_name: str) -> str:
    """``LAKEFENCE_STAGING_BRANCH`` → ``stagingBranch``; ``LAKEFS_ENDPOINT`` → ``endpoint``."""
    words = env_name.removeprefix("LAKEFENCE_").removeprefix("LAKEFS_").lower().split("_")
    return words[0] + "".join(word.title() for word in words[1:])
