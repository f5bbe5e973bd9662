"""The Airflow side shared by every fenced publish adapter (Spark, Python, TaskFlow).

:class:`FencedPublishOperatorBase` renders and validates the lakeFS arguments, builds the
:class:`~airflow_lakefence.core.engine.PublishEngine` over the lakeFS hook's client and the
Airflow attempt fence, and reports: XCom, asset events, the closing log line, OpenLineage.
A concrete adapter only says how to run its job (:meth:`FencedPublishOperatorBase.run_job`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from airflow.providers.common.compat.sdk import Asset, BaseOperator

from airflow_lakefence import assets as lakefs_assets
from airflow_lakefence.attempt import AttemptFence
from airflow_lakefence.core.delta import DeltaTableOutput, check_output_mode, normalise_table_roots
from airflow_lakefence.core.engine import (
    HARD_FENCE_MODES,
    PublishEngine,
    PublishRequest,
    PublishResult,
    seconds,
)
from airflow_lakefence.core.locations import AttemptLocations
from airflow_lakefence.core.naming import validate_staging_prefix
from airflow_lakefence.core.scope import Scope, ScopeMode, parse_scope, rendered_at_run_time
from airflow_lakefence.exceptions import InvalidInputError, JobError, PublishBudgetError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_client import LakeFSClient
from airflow_lakefence.links import LakeFSCommitLink, LakeFSOutputLink, LakeFSStagingLink, commit_url
from airflow_lakefence.run_state import LakeFSRunState
from airflow_lakefence.task_instances import EVIDENCE_KEY, SUPERSEDES_KEY

#: Template fields every adapter adds to its base operator's.
FENCED_TEMPLATE_FIELDS = (
    "repository",
    "target_branch",
    "input_ref",
    "workspace_dir",
    "output_prefixes",
    "input_prefixes",
    "output_tables",
    "commit_message",
    "commit_metadata",
)
#: The XCom keys of a fenced task (``output_ref`` is also the return value).
XCOM_KEYS = ("staged_commit", "decision", "reason", "input_ref", "staging_branch", "output_ref")
#: The XCom key of the declared Delta tables' versions at the output ref (pushed only with output_tables).
DELTA_VERSIONS_KEY = "delta_versions"


class AirflowReporter:
    """The engine's :class:`~airflow_lakefence.core.reporting.Reporter` for a task: XCom pushes.

    :param context: the Airflow context (its task instance pushes).
    :param published: what the operator does with the outcome (XCom, asset events, the log line).
    """

    def __init__(self, context: Any, *, published: Callable[[PublishResult], None]) -> None:
        self._ti = context["ti"]
        self._published = published
        #: The staging branch, once it exists.
        self.staging: str | None = None

    def staging_created(self, name: str) -> None:
        """Push it at once, so the "lakeFS staging" link works for a try that fails.

        :param name: the staging branch.
        """
        self.staging = name
        self._ti.xcom_push(key="staging_branch", value=name)

    def supersedes(self, value: Mapping[str, Any]) -> None:
        """Push it before the job, so monitoring calls the replaced publication superseded.

        :param value: ``{"output_ref", "try_number"}``.
        """
        self._ti.xcom_push(key=SUPERSEDES_KEY, value=dict(value))

    def evidence(self, value: Mapping[str, str]) -> None:
        """Push the run's evidence branches, marked or not: the cleaner never deletes one named here.

        :param value: ``{branch: error class}``.
        """
        self._ti.xcom_push(key=EVIDENCE_KEY, value=dict(value))

    def published(self, result: PublishResult) -> None:
        """Step 12: hand the outcome to the operator.

        :param result: what the attempt did.
        """
        self._published(result)


class FencedPublishOperatorBase(BaseOperator):
    """The fenced publish of one task's output into a lakeFS branch (see docs/protocol.md).

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
    :param output_mode: ``replace`` (default): after publishing, each declared output prefix holds
        exactly this attempt's output (objects of the input under it that the job did not write are
        deleted); ``upsert``: the job's files are added to what the input held there.
    :param publish_budget: refuse to start publishing when less of ``execution_timeout`` remains.
    :param commit_message: the staging and merge commit message (templated).
    :param commit_metadata: extra commit metadata, str to str; ``lakefence.*`` keys are reserved.
    :param staging_branch_prefix: the first part of staging branch names.
    :param workspace_check: a callable given the workspace ``Path`` after the job; raising rejects
        the output (workspace mode).
    :param allow_empty_workspace: accept a job that wrote no file (then nothing is published).
    :param stale_grace_period: seconds to wait for the supervisor's kill when the attempt is stale.
    :param hard_fence: ``off``, ``auto`` or ``require``: rely on the hard fence (a lakeFS pre-merge hook
        installed with ``python -m airflow_lakefence.hardfence install``) when the input commit carries
        it, and with ``require`` fail before the job when it does not (docs/hard-fence.md).
    :param replace_by_merge: replace an abandoned publication by merges instead of a hard reset
        (always done on a protected target).
    :param fence_scope: ``branch`` (the default: the target's HEAD must be the input, so every read is
        fenced) or ``prefixes``: the publish fence covers only ``output_prefixes`` (the write set) and
        ``input_prefixes`` (the read set), so publications of disjoint prefixes run and publish side by
        side (docs/howto/many-writers.md).
    :param input_prefixes: the read set of the scoped fence: the prefixes the job reads (templated).
    :param output_tables: Delta tables the job writes (``DeltaTableOutput`` or root paths, roots
        templated; ``write_mode="direct"`` only). Before publishing, each table's staged change must be
        Delta commits numbered on from the input's latest version; their versions at the output ref
        go to the XCom ``delta_versions``, the asset events and OpenLineage (docs/delta.md).
    :param kwargs: the base operator's arguments.
    :raises InvalidInputError: at DAG parse time, for arguments that can never work.
    """

    operator_extra_links = (LakeFSCommitLink(), LakeFSOutputLink(), LakeFSStagingLink())
    #: How messages name the job, and the error a failed job is reported as.
    job_name: ClassVar[str] = "job"
    job_error: ClassVar[type[JobError]] = JobError

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
        output_mode: str = "replace",
        publish_budget: timedelta | float | None = None,
        commit_message: str | None = None,
        commit_metadata: Mapping[str, str] | None = None,
        staging_branch_prefix: str = "lakefence",
        workspace_check: Callable[[Path], None] | None = None,
        allow_empty_workspace: bool = False,
        stale_grace_period: float = 15.0,
        hard_fence: str = "off",
        replace_by_merge: bool = False,
        fence_scope: str = "branch",
        input_prefixes: Sequence[str] | None = None,
        output_tables: Sequence[DeltaTableOutput | str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if write_mode not in ("direct", "workspace"):
            raise InvalidInputError(f"write_mode must be one of ('direct', 'workspace'), got {write_mode!r}")
        if read_only and (output_prefixes or commit_message or commit_metadata or publish_budget is not None):
            raise InvalidInputError(
                "read_only=True writes nothing: output_prefixes, commit_message, commit_metadata and "
                "publish_budget do not apply"
            )
        try:
            validate_staging_prefix(staging_branch_prefix)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        self.publish_budget = seconds(publish_budget, "publish_budget")
        seconds(stale_grace_period, "stale_grace_period")
        timeout = seconds(self.execution_timeout, "execution_timeout")
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
        self.output_mode = output_mode
        self.commit_message = commit_message
        self.commit_metadata = commit_metadata
        self.staging_branch_prefix = staging_branch_prefix
        self.workspace_check = workspace_check
        self.allow_empty_workspace = allow_empty_workspace
        self.stale_grace_period = stale_grace_period
        if hard_fence not in HARD_FENCE_MODES:
            raise InvalidInputError(f"hard_fence must be one of {HARD_FENCE_MODES}, got {hard_fence!r}")
        self.hard_fence = hard_fence
        self.replace_by_merge = replace_by_merge
        if read_only and (fence_scope != "branch" or input_prefixes):
            raise InvalidInputError("read_only=True publishes nothing: fence_scope and input_prefixes do not apply")
        _check_scope(fence_scope, output_prefixes, input_prefixes, output_tables)
        self.fence_scope = fence_scope
        self.input_prefixes = input_prefixes
        self.output_tables = list(output_tables) if output_tables is not None else None
        self._check_tables_at_parse_time()
        self._fence: AttemptFence | None = None
        self._outcome: PublishResult | None = None
        # Declared as they are, so Airflow knows this task produces them (the Assets view, the
        # graph); their events are emitted only when the attempt published (see _emit_asset_events).
        self._lakefs_outlets = [
            o for o in self.outlets if isinstance(o, Asset) and o.uri.startswith(f"{lakefs_assets.SCHEME}://")
        ]

    def _check_tables_at_parse_time(self) -> None:
        """Refuse at DAG parse time what ``PublishRequest.validated`` would refuse in every try."""
        if not self.output_tables:
            return
        if self.read_only:
            raise InvalidInputError("read_only=True writes nothing: output_tables does not apply")
        if self.write_mode != "direct":
            raise InvalidInputError(
                "output_tables need write_mode='direct': Delta appends to a table's log where it lies (on the "
                "staging branch), and a workspace upload would start a new table at version 0"
            )
        values = [t.root if isinstance(t, DeltaTableOutput) else t for t in self.output_tables]
        values += list(self.output_prefixes or []) if not isinstance(self.output_prefixes, str) else []
        if not any(isinstance(v, str) and "{{" in v for v in values):
            check_output_mode(self.output_mode, self.output_prefixes, normalise_table_roots(self.output_tables))

    def _rendered_tables(self, context: Any) -> list[DeltaTableOutput | str] | None:
        """The declared tables with their roots rendered (a ``DeltaTableOutput`` is not templated by Airflow)."""
        if self.output_tables is None:
            return None
        return [
            dataclasses.replace(t, root=self.render_template(t.root, context)) if isinstance(t, DeltaTableOutput) else t
            for t in self.output_tables
        ]

    @cached_property
    def lakefs_hook(self) -> LakeFSHook:
        """The lakeFS hook, built on first use."""
        return LakeFSHook(lakefs_conn_id=self.lakefs_conn_id)

    @property
    def lakefs(self) -> LakeFSClient:
        """The lakeFS client adapter of :attr:`lakefs_hook`."""
        return self.lakefs_hook.client

    # -- what an adapter provides ---------------------------------------------------------------

    def validate_job(self) -> None:
        """Check the job's own arguments after rendering, before any lakeFS write (step 1)."""

    def run_job(self, context: Any, locations: AttemptLocations) -> None:
        """Run the attempt's job (step 4): read ``locations.input_commit``, write the workspace or
        the staging branch.

        :param context: the Airflow context.
        :param locations: where to read and write.
        """
        raise NotImplementedError

    # -- the protocol -----------------------------------------------------------------------------

    def execute(self, context: Any) -> str:
        """Run the fenced protocol; return the output ref.

        :param context: the Airflow context.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        timeout = seconds(self.execution_timeout, "execution_timeout")
        request = PublishRequest(
            repository=self.repository,
            target_branch=self.target_branch,
            input_ref=self.input_ref,
            write_mode=self.write_mode,
            read_only=self.read_only,
            output_prefixes=self.output_prefixes,
            output_mode=self.output_mode,
            commit_message=self.commit_message,
            commit_metadata=self.commit_metadata,
            staging_prefix=self.staging_branch_prefix,
            workspace_dir=self.workspace_dir,
            workspace_check=self.workspace_check,
            allow_empty_workspace=self.allow_empty_workspace,
            publish_budget=self.publish_budget,
            hard_fence=self.hard_fence,
            replace_by_merge=self.replace_by_merge,
            fence_scope=self.fence_scope,
            input_prefixes=self.input_prefixes,
            output_tables=self._rendered_tables(context),
            deadline=None if timeout is None else time.monotonic() + timeout,
        )
        fence = self._fence = AttemptFence(context, grace_period=self.stale_grace_period)
        engine = PublishEngine(
            self.lakefs,
            fence,
            request,
            log=self.log,
            job_name=self.job_name,
            job_error=self.job_error,
            run_state=LakeFSRunState(
                self.lakefs,
                self.repository,
                fence.attempt.key,
                source_branch=self.target_branch,
                fresh=fence.attempt.try_number <= 1,
            ),
        )
        self._validate_outlets()
        self.validate_job()
        self.lakefs_hook.settings  # noqa: B018 - validates the lakeFS connection before any call
        reporter = AirflowReporter(context, published=lambda outcome: self._report(context, outcome))
        try:
            result = engine.run(lambda locations: self.run_job(context, locations), reporter)
        except Exception as exc:
            # A fail-closed error names the staging branch it kept; any other failure deleted it,
            # and the link must not point at a branch that is gone.
            if reporter.staging is not None and getattr(exc, "staging_branch", None) != reporter.staging:
                try:
                    context["ti"].xcom_push(key="staging_branch", value=None)
                except Exception as push_error:  # Airflow 3.0 refuses XComs of a task no longer running
                    self.log.warning("Could not clear the staging_branch XCom: %s", push_error)
            raise
        return result.output_ref

    def _validate_outlets(self) -> None:
        for asset in self._lakefs_outlets:
            repository, branch, _prefix = lakefs_assets.parse_uri(asset.uri)
            if (repository, branch) != (self.repository, self.target_branch):
                raise InvalidInputError(
                    f"outlet {asset.uri!r} is not on the target {self.repository}/{self.target_branch}"
                )

    def _report(self, context: Any, result: PublishResult) -> None:
        ti = context["ti"]
        for key in XCOM_KEYS:
            ti.xcom_push(key=key, value=getattr(result, key))
        if self.output_tables:
            ti.xcom_push(key=DELTA_VERSIONS_KEY, value=dict(result.delta_versions))
        self._outcome = result
        self._emit_asset_events(context, result)
        self.log.info(result.summary())
        ui_base = self.lakefs_hook.settings.get("ui_base_url")
        if ui_base:
            self.log.info("lakeFS commit: %s", commit_url(str(ui_base), self.repository, result.output_ref))

    def _emit_asset_events(self, context: Any, result: PublishResult) -> None:
        if not self._lakefs_outlets:
            return
        if result.decision not in lakefs_assets.PUBLISHING_DECISIONS:
            # Airflow emits an event for every outlet of a successful task: nothing was published,
            # so this try withdraws its lakefs:// outlets (only this try's copy of the task changes).
            self.outlets = [o for o in self.outlets if o not in self._lakefs_outlets]
            return
        scope = self._scope()
        for asset in self._lakefs_outlets:
            _repository, _branch, prefix = lakefs_assets.parse_uri(asset.uri)
            context["outlet_events"][asset].extra = lakefs_assets.event_extra(
                repository=self.repository,
                output_ref=result.output_ref,
                input_ref=result.input_ref,
                staged_commit=result.staged_commit,
                decision=result.decision,
                prefix=prefix,
                delta_versions=result.delta_versions,
                write_prefixes=scope.write if scope is not None else (),
                read_prefixes=scope.read if scope is not None else (),
            )
            if result.supersedes is not None:
                # Consumers of the replaced publication's event learn it is no longer on the branch.
                context["outlet_events"][asset].extra["supersedes"] = result.supersedes["output_ref"]

    def on_kill(self) -> None:
        """Mark the attempt stale (the engine stops at its next fence check)."""
        if self._fence is not None:
            self._fence.killed.set()
        super().on_kill()

    # -- OpenLineage (used when apache-airflow-providers-openlineage is installed) ---------------

    def _lineage(
        self,
        input_commit: str | None,
        output_commit: str | None,
        delta_versions: Mapping[str, int | None] | None = None,
    ) -> Any:
        from airflow_lakefence.core.engine import normalise_prefixes
        from airflow_lakefence.lineage import operator_lineage

        scope = self._scope()
        return operator_lineage(
            endpoint=self.lakefs_hook.endpoint,
            repository=self.repository,
            input_ref=self.input_ref,
            input_commit=input_commit,
            target_branch=self.target_branch,
            output_prefixes=scope.write if scope is not None else normalise_prefixes(self.output_prefixes),
            output_commit=output_commit,
            delta_versions=delta_versions,
            input_prefixes=scope.read if scope is not None else (),
        )

    def _scope(self) -> Scope | None:
        """The rendered scope of a scoped publication (``None`` in the branch-wide mode)."""
        return parse_scope(self.output_prefixes, self.input_prefixes, self.fence_scope)

    def get_openlineage_facets_on_start(self) -> Any:
        """Lineage before running: the input as given; no output yet."""
        return self._lineage(None, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """Lineage of the finished try: the input commit read and, if it published, the output commit.

        :param task_instance: the task instance (unused: the try's own outcome is kept in memory).
        """
        outcome = self._outcome
        if outcome is None:
            return self._lineage(None, None)
        published = outcome.decision in lakefs_assets.PUBLISHING_DECISIONS
        if not published:
            return self._lineage(outcome.input_ref, None)
        return self._lineage(outcome.input_ref, outcome.output_ref, outcome.delta_versions)


def _check_scope(fence_scope: str, output_prefixes: Any, input_prefixes: Any, output_tables: Any = None) -> None:
    """Refuse at parse time a scope that can never work; templated values are checked when rendered.

    Declared Delta tables join the write set in the try (``PublishRequest.validated``), so the scoped
    mode with tables only is accepted here.

    :raises InvalidInputError: for an unknown mode, the scoped mode without output prefixes or tables,
        or literal prefixes that nest, overlap or are not object paths.
    """

    if fence_scope not in tuple(ScopeMode):
        raise InvalidInputError(f"fence_scope must be 'branch' or 'prefixes', got {fence_scope!r}")
    if fence_scope == ScopeMode.PREFIXES and not output_prefixes and not output_tables:
        parse_scope(output_prefixes, input_prefixes, fence_scope)  # raises: the write set is missing
    if rendered_at_run_time(output_prefixes) or rendered_at_run_time(input_prefixes):
        return
    if fence_scope == ScopeMode.PREFIXES and not output_prefixes:
        return  # the write set is the declared tables' roots, joined and checked in the try
    parse_scope(output_prefixes, input_prefixes, fence_scope)
