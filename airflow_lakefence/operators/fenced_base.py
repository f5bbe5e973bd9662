"""The Airflow side shared by every fenced publish adapter (Spark, Python, TaskFlow).

:class:`FencedPublishOperatorBase` renders and validates the lakeFS arguments, builds the
:class:`~airflow_lakefence.core.engine.PublishEngine` over the lakeFS hook's client and the
Airflow attempt fence, and reports: XCom, asset events, the closing log line, OpenLineage.
A concrete adapter only says how to run its job (:meth:`FencedPublishOperatorBase.run_job`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar

from airflow.providers.common.compat.sdk import Asset, BaseOperator

from airflow_lakefence.airflow_adapter.attempt_fence import AttemptFence
from airflow_lakefence.airflow_adapter.task_instances import EVIDENCE_KEY, OUTPUT_REF_KEY, SUPERSEDES_KEY
from airflow_lakefence.assets import lakefs as lakefs_assets
from airflow_lakefence.core.engine import (
    PublishEngine,
    PublishRequest,
    PublishResult,
    seconds,
)
from airflow_lakefence.core.fences.scope import Scope, parse_scope
from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.request import PublishOptions
from airflow_lakefence.core.staging.adoption import DurableJobPort
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.exceptions import InvalidInputError, JobError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.run_state_store import LakeFSRunState
from airflow_lakefence.links.lakefs import (
    LakeFSCommitLink,
    LakeFSOutputLink,
    LakeFSPublicationsLink,
    LakeFSStagingLink,
    commit_url,
)

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


#: The knobs of :class:`PublishOptions`: their old spelling as operator arguments still works, deprecated.
OPTION_NAMES = tuple(f.name for f in dataclasses.fields(PublishOptions))


def _options(options: PublishOptions | None, kwargs: dict[str, Any], operator: str) -> PublishOptions:
    """The task's options: ``options``, or the knobs passed one by one the old way (taken out of ``kwargs``).

    :raises InvalidInputError: for both at once, or an ``options`` that is not a :class:`PublishOptions`.
    """
    flat = {name: kwargs.pop(name) for name in OPTION_NAMES if name in kwargs}
    if options is not None and not isinstance(options, PublishOptions):
        raise InvalidInputError(f"options must be a PublishOptions, got {type(options).__name__}")
    if not flat:
        return options or PublishOptions()
    if options is not None:
        raise InvalidInputError(f"pass {', '.join(flat)} inside options=PublishOptions(...), not next to it")
    warnings.warn(
        f"{operator}({', '.join(f'{n}=...' for n in flat)}) is deprecated and will be removed in the next "
        f"release: pass options=PublishOptions({', '.join(f'{n}=...' for n in flat)})",
        DeprecationWarning,
        stacklevel=_dag_file_level(),
    )
    return PublishOptions(**flat)


def _dag_file_level() -> int:
    """The ``stacklevel`` that points a warning of the caller at the DAG file (past Airflow's and our frames)."""
    frame, level = sys._getframe(1), 0
    while frame.f_back is not None and any(
        f"{os.sep}{package}{os.sep}" in frame.f_code.co_filename for package in ("airflow", "airflow_lakefence")
    ):
        frame, level = frame.f_back, level + 1
    return level


class AirflowReporter:
    """The engine's :class:`~airflow_lakefence.core.records.reporting.Reporter` for a task: XCom pushes.

    :param context: the Airflow context (its task instance pushes).
    :param details: pushes the outcome's details (every XCom but ``output_ref``), told the staging
        branch this reporter already pushed, if any.
    :param published: what the operator does with the recorded outcome (XCom ``output_ref``, asset
        events, the log line).
    """

    def __init__(self, context: Any, *, details: Callable[..., None], published: Callable[..., None]) -> None:
        self._ti = context["ti"]
        self._details = details
        self._published = published
        self._details_told = False
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

    def reporting(self, result: PublishResult) -> None:
        """Step 12, while the run state records the outcome: push its details.

        :param result: what the attempt did.
        """
        self._details(result, pushed_staging=self.staging)
        self._details_told = True

    def published(self, result: PublishResult) -> None:
        """Step 12, recorded: hand the outcome to the operator (its details first, if not told yet).

        :param result: what the attempt did.
        """
        if not self._details_told:  # a read-only attempt records nothing: all of it now
            self.reporting(result)
        self._published(result)


class FencedPublishOperatorBase(BaseOperator):
    """The fenced publish of one task's output into a lakeFS branch (see docs/protocol.md).

    The common case names where to publish and what the job writes; everything else has a default
    or lives in :class:`~airflow_lakefence.core.request.PublishOptions`.

    **One writer per target branch.** The branch-wide fence (the default) lets one publication at a
    time build on the target's HEAD: the operator sets ``max_active_tis_per_dag=1`` itself (runs of
    one DAG publish one after another, each on the previous one's output; pass another value to
    override; a mapped task, ``.partial().expand()``, takes it from ``partial`` only). It cannot
    order writers of *other* DAGs: give every task that publishes into one target branch the same
    1-slot pool (``pool="lakefs_<repository>_<branch>"``, created with ``airflow pools set``).
    Without it a concurrent writer fails closed with ``PublishFenceError`` (safe, not done). The
    scoped fence (``fence_scope="prefixes"``) is made for many writers: there neither default applies.

    :param repository: the lakeFS repository (templated).
    :param target_branch: the branch to publish into (templated).
    :param output_prefixes: every changed path must lie under one of them (templated); with
        ``output_mode="replace"`` each holds exactly this attempt's output after publishing. The write
        set of the scoped fence.
    :param input_ref: the commit the job reads and builds on (templated). By default the target
        branch, resolved by the first try of the run to its HEAD commit and pinned: every retry builds
        on that same commit. A branch, tag or commit id, or an ``XComArg`` (``LakeFSResolveRefOperator().output``).
    :param write_mode: ``workspace`` (the job writes a local directory, uploaded in parallel) or
        ``direct`` (the job writes into the staging branch itself).
    :param output_mode: ``replace`` (default): after publishing, each declared output prefix holds
        exactly this attempt's output (objects of the input under it that the job did not write are
        deleted); ``upsert``: the job's files are added to what the input held there.
    :param fence_scope: ``branch`` (the default: the target's HEAD must be the input, so every read is
        fenced) or ``prefixes``: the publish fence covers only ``output_prefixes`` and
        ``input_prefixes``, so publications of disjoint prefixes run and publish side by side
        (docs/howto/many-writers.md).
    :param input_prefixes: the read set of the scoped fence: the prefixes the job reads (templated).
    :param output_tables: Delta tables the job writes (``DeltaTableOutput`` or root paths, roots
        templated; ``write_mode="direct"`` only). Before publishing, each table's staged change must be
        Delta commits numbered on from the input's latest version; their versions at the output ref
        go to the XCom ``delta_versions``, the asset events and OpenLineage (docs/delta.md).
    :param read_only: run the job against the input commit and write nothing to lakeFS.
    :param commit_message: the staging and merge commit message (templated).
    :param commit_metadata: extra commit metadata, str to str (templated); ``lakefence.*`` keys are reserved.
    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param options: the expert knobs (hard fence, publish budget, workspace...). Passing them one by
        one (``hard_fence="require"``...) still works, with a ``DeprecationWarning``, for one release.
    :param kwargs: the base operator's arguments.
    :raises InvalidInputError: at DAG parse time, for every argument that can never work
        (:meth:`~airflow_lakefence.core.request.PublishRequest.validated`).
    """

    operator_extra_links = (LakeFSCommitLink(), LakeFSOutputLink(), LakeFSStagingLink(), LakeFSPublicationsLink())
    #: How messages name the job, and the error a failed job is reported as.
    job_name: ClassVar[str] = "job"
    job_error: ClassVar[type[JobError]] = JobError

    def __init__(
        self,
        *,
        repository: str,
        target_branch: str,
        output_prefixes: Sequence[str] | None = None,
        input_ref: Any = None,
        write_mode: str = "workspace",
        output_mode: str = "replace",
        fence_scope: str = "branch",
        input_prefixes: Sequence[str] | None = None,
        output_tables: Sequence[DeltaTableOutput | str] | None = None,
        read_only: bool = False,
        commit_message: str | None = None,
        commit_metadata: Mapping[str, str] | None = None,
        lakefs_conn_id: str = LakeFSHook.default_conn_name,
        options: PublishOptions | None = None,
        **kwargs: Any,
    ) -> None:
        options = _options(options, kwargs, type(self).__name__)
        if fence_scope == "branch" and not read_only:
            kwargs.setdefault("max_active_tis_per_dag", 1)  # one writer per target (see the class docstring)
        super().__init__(**kwargs)
        self.repository = repository
        self.target_branch = target_branch
        # The target itself by default: check_input reads its HEAD, the run pins it for every retry.
        self.input_ref = target_branch if input_ref is None else input_ref
        self.lakefs_conn_id = lakefs_conn_id
        self.read_only = read_only
        self.write_mode = write_mode
        self.output_prefixes = output_prefixes
        self.output_mode = output_mode
        self.commit_message = commit_message
        self.commit_metadata = commit_metadata
        self.fence_scope = fence_scope
        self.input_prefixes = input_prefixes
        self.output_tables = list(output_tables) if isinstance(output_tables, (list, tuple)) else output_tables
        self.options = options
        # The templated knob is the task's own attribute, so rendering never touches a shared options object.
        self.workspace_dir = options.workspace_dir
        # Fail when the DAG file is parsed, not in the worker, for every value already known: the
        # same validator runs again in each try on the rendered values.
        self._request(self.output_tables).validated(parse_time=True)
        self._fence: AttemptFence | None = None
        self._run_state: LakeFSRunState | None = None
        self._outcome: PublishResult | None = None
        # Declared as they are, so Airflow knows this task produces them (the Assets view, the
        # graph); their events are emitted only when the attempt published (see _emit_asset_events).
        self._lakefs_outlets = [
            o for o in self.outlets if isinstance(o, Asset) and o.uri.startswith(f"{lakefs_assets.SCHEME}://")
        ]

    def _request(self, output_tables: Sequence[DeltaTableOutput | str] | None) -> PublishRequest:
        """This task's arguments as the engine's request (rendered once the task runs).

        :param output_tables: the declared tables (with their roots rendered, in the try).
        """
        options = self.options
        return PublishRequest(
            repository=self.repository,
            target_branch=self.target_branch,
            input_ref=self.input_ref,
            write_mode=self.write_mode,
            read_only=self.read_only,
            output_prefixes=self.output_prefixes,
            output_mode=self.output_mode,
            commit_message=self.commit_message,
            commit_metadata=self.commit_metadata,
            staging_prefix=options.staging_branch_prefix,
            workspace_dir=self.workspace_dir,
            workspace_check=options.workspace_check,
            allow_empty_workspace=options.allow_empty_workspace,
            publish_budget=seconds(options.publish_budget, "publish_budget"),
            hard_fence=options.hard_fence,
            replace_by_merge=options.replace_by_merge,
            fence_scope=self.fence_scope,
            input_prefixes=self.input_prefixes,
            output_tables=output_tables,
            execution_timeout=seconds(self.execution_timeout, "execution_timeout"),
            stale_grace_period=options.stale_grace_period,
        )

    def _rendered_tables(self, context: Any) -> Sequence[DeltaTableOutput | str] | None:
        """The declared tables with their roots rendered (a ``DeltaTableOutput`` is not templated by Airflow)."""
        if not isinstance(self.output_tables, (list, tuple)):
            return self.output_tables  # None, or a value the validator refuses
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

    def durable_jobs(self, context: Any) -> DurableJobPort | None:
        """The adapter's durable jobs, when its job outlives its process (a retry may adopt it).

        :param context: the Airflow context.
        """
        return None

    # -- the protocol -----------------------------------------------------------------------------

    def execute(self, context: Any) -> str:
        """Run the fenced protocol; return the output ref.

        :param context: the Airflow context.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        # The parse-time validator again, now on the rendered values, before any connection is read.
        request = self._request(self._rendered_tables(context))
        request.validated()
        timeout = seconds(self.execution_timeout, "execution_timeout")
        if timeout is not None:
            request = dataclasses.replace(request, deadline=time.monotonic() + timeout)
        fence = self._fence = AttemptFence(context, grace_period=self.options.stale_grace_period)
        run_state = self._run_state = LakeFSRunState(
            self.lakefs,
            self.repository,
            fence.attempt.key,
            source_branch=self.target_branch,
            fresh=fence.attempt.try_number <= 1,
        )
        engine = PublishEngine(
            self.lakefs,
            fence,
            request,
            log=self.log,
            job_name=self.job_name,
            job_error=self.job_error,
            run_state=run_state,
            redact=self.lakefs_hook.redact,
        )
        self._validate_outlets()
        self.validate_job()
        self.lakefs_hook.settings  # noqa: B018 - validates the lakeFS connection before any call
        reporter = AirflowReporter(
            context,
            details=functools.partial(self._report_details, context),
            published=functools.partial(self._report, context),
        )
        try:
            result = engine.run(functools.partial(self.run_job, context), reporter, durable=self.durable_jobs(context))
        except Exception as exc:
            # A fail-closed error names the staging branch it kept; any other failure deleted it,
            # and the link must not point at a branch that is gone.
            if reporter.staging is not None and getattr(exc, "staging_branch", None) != reporter.staging:
                try:
                    context["ti"].xcom_push(key="staging_branch", value=None)
                except Exception as push_error:  # Airflow 3.0's Execution API refuses a None value
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

    def _report_details(self, context: Any, result: PublishResult, *, pushed_staging: str | None) -> None:
        """Push every XCom of the outcome but ``output_ref`` (each push is one Execution-API request).

        :param context: the Airflow context.
        :param result: the outcome.
        :param pushed_staging: the staging branch this try pushed when it created it, if any.
        """
        ti = context["ti"]
        for key in XCOM_KEYS:
            if key == OUTPUT_REF_KEY:
                continue
            value = getattr(result, key)
            if key == "staging_branch" and value == pushed_staging:
                continue  # pushed when the branch was created, with this very value
            # A try starts without XComs of its own (Airflow clears them when it starts running, on
            # every version), so an XCom never pushed already reads back as None; and Airflow 3.0's
            # Execution API refuses a None value (422). None is pushed only over the staging branch
            # this try pushed when it created it.
            if value is None and not (key == "staging_branch" and pushed_staging is not None):
                continue
            ti.xcom_push(key=key, value=value)
        if self.output_tables:
            ti.xcom_push(key=DELTA_VERSIONS_KEY, value=dict(result.delta_versions))

    def _report(self, context: Any, result: PublishResult) -> None:
        """The recorded outcome: XCom ``output_ref``, asset events, the closing log line.

        :param context: the Airflow context.
        :param result: the outcome.
        """
        context["ti"].xcom_push(key=OUTPUT_REF_KEY, value=result.output_ref)
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
                output_prefixes=scope.output_prefixes if scope is not None else (),
                input_prefixes=scope.input_prefixes if scope is not None else (),
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
        from airflow_lakefence.lineage.openlineage import operator_lineage

        scope = self._scope()
        return operator_lineage(
            endpoint=self.lakefs_hook.endpoint,
            repository=self.repository,
            input_ref=self.input_ref,
            input_commit=input_commit,
            target_branch=self.target_branch,
            output_prefixes=scope.output_prefixes if scope is not None else normalise_prefixes(self.output_prefixes),
            output_commit=output_commit,
            delta_versions=delta_versions,
            input_prefixes=scope.input_prefixes if scope is not None else (),
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


# The knobs' old spelling as arguments (deprecated, one release): ``.partial()`` checks its arguments
# against the parameter names Airflow's operator metaclass keeps for each ``__init__``.
FencedPublishOperatorBase.__init__._BaseOperatorMeta__param_names.update(OPTION_NAMES)  # type: ignore[attr-defined]
