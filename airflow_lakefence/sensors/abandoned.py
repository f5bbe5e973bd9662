"""``AbandonedPublicationSensor``: is a branch's HEAD a publication no successful try stands behind?"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_lakefence.airflow_adapter.task_instances import TaskSdkView
from airflow_lakefence.core.fences.scope import ScopeMode, parse_scope, rendered_at_run_time
from airflow_lakefence.core.names.staging_names import validate_staging_prefix
from airflow_lakefence.core.publication.abandonment import CONDITIONS, DETECT, PublisherScope, condition_met
from airflow_lakefence.exceptions import InvalidInputError
from airflow_lakefence.sensors.base import LakeFSBaseSensor
from airflow_lakefence.triggers.lakefs import AbandonedPublicationTrigger
from airflow_lakefence.triggers.probes import probe_abandoned


class AbandonedPublicationSensor(LakeFSBaseSensor):
    """Judge the HEAD of a branch from its lakefence record and the publishing task instance's state.

    HEAD is *abandoned* when it is a lakefence publication whose try is neither running nor
    succeeded with that output (the worker died after publishing, the task instance was failed,
    marked or cleared, or a newer try is running). See docs/abandoned-publications.md.

    ``condition="detect"`` succeeds when HEAD is abandoned (alerting, repair DAGs);
    ``condition="settled"`` succeeds when HEAD may be read: not a publication, another publisher's
    (with a scope), or one whose task instance succeeded with it. Put the settled sensor before a
    downstream task that reads the branch.

    For a **scoped** publisher (``fence_scope="prefixes"``, other writers publish onto the same
    branch) give its write set as ``output_prefixes``: the sensor then judges *the latest
    publication touching the write set*, not HEAD, so an abandoned publication is still found under
    other writers' publications stacked on top of it, and a settled one stays settled. That
    publication is found by one lakeFS ``log`` call restricted to the prefixes (flat in the history
    depth), and shows as its staged commit (``head`` in the judgement; ``publication`` names the
    merge commit when a successful try stands behind it).

    The XCom ``return_value`` is the judgement as a dict: ``verdict`` (``abandoned``, ``in_flight``,
    ``settled``, ``not_a_publication``, ``out_of_scope``), ``reason``, ``head``, ``state``,
    ``output_ref``, ``retry_pending``, ``replacement_running``, ``publication``, for a publication
    ``dag_id``, ``run_id``, ``task_id``, ``map_index``, ``try_number``, ``ti_id``, ``role``,
    ``input_ref``, and with ``output_prefixes`` the normalised ``output_prefixes``.

    A poke makes one lakeFS call (``get_commit`` of the branch; scoped: the ``log`` call), plus a
    listing of the publisher's staging branches only when the publishing task instance is running,
    and (scoped) one ``get_commit`` of the ``output_ref`` when the task instance has one; Airflow is
    asked for the task instance's state, and for its ``output_ref`` XCom only when it succeeded.

    :param repository: the lakeFS repository (templated).
    :param branch: the branch whose HEAD is judged (templated).
    :param condition: ``detect`` or ``settled``.
    :param publisher_dag_id: only judge publications of this DAG (templated); others count as
        ``out_of_scope`` (never abandoned, readable).
    :param publisher_task_id: only of this task of ``publisher_dag_id`` (templated).
    :param staging_branch_prefix: the publisher's ``staging_branch_prefix``.
    :param output_prefixes: a scoped publisher's write set (templated, e.g.
        ``["tables/t/date={{ ds }}/"]``): judge the latest publication touching it instead of HEAD.
    :param ignore_repairs_underway: in ``detect``, do not succeed for an abandoned HEAD that Airflow
        is already retrying (a retry pending, or a newer try running).
    :param kwargs: :class:`~airflow_lakefence.sensors.base.LakeFSBaseSensor` arguments
        (``lakefs_conn_id``, ``deferrable``, ``poke_interval``, ``timeout``, ``mode``...).
    :raises InvalidInputError: for an unknown condition or staging prefix; ``output_prefixes`` that
        are not relative object paths, repeat or nest (when rendered).
    """

    template_fields: Sequence[str] = (
        "repository",
        "branch",
        "publisher_dag_id",
        "publisher_task_id",
        "output_prefixes",
    )
    ui_color = "#ffe0b2"

    def __init__(
        self,
        *,
        repository: str,
        branch: str,
        condition: str = DETECT,
        publisher_dag_id: str | None = None,
        publisher_task_id: str | None = None,
        staging_branch_prefix: str = "lakefence",
        ignore_repairs_underway: bool = False,
        output_prefixes: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if condition not in CONDITIONS:
            raise InvalidInputError(f"condition must be one of {CONDITIONS}, got {condition!r}")
        try:
            validate_staging_prefix(staging_branch_prefix)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc
        self.repository = repository
        self.branch = branch
        self.condition = condition
        self.publisher_dag_id = publisher_dag_id
        self.publisher_task_id = publisher_task_id
        self.staging_branch_prefix = staging_branch_prefix
        self.ignore_repairs_underway = ignore_repairs_underway
        self.output_prefixes = output_prefixes
        if not rendered_at_run_time(output_prefixes):
            self._scoped_output_prefixes()

    def _scoped_output_prefixes(self) -> tuple[str, ...]:
        """The rendered write set, normalised (empty: judge HEAD)."""
        if not self.output_prefixes:
            return ()
        scope = parse_scope(list(self.output_prefixes), None, ScopeMode.PREFIXES)
        return () if scope is None else scope.output_prefixes

    def _scope(self) -> PublisherScope | None:
        if not self.publisher_dag_id and not self.publisher_task_id:
            return None
        try:
            return PublisherScope(self.publisher_dag_id or None, self.publisher_task_id or None)
        except ValueError as exc:
            raise InvalidInputError(str(exc)) from exc

    def probe(self) -> tuple[bool, Any]:
        """Judge HEAD once; ``(condition met, judgement dict)``."""
        judgement = probe_abandoned(
            self.client,
            TaskSdkView(),
            repository=self.repository,
            branch=self.branch,
            scope=self._scope(),
            staging_prefix=self.staging_branch_prefix,
            output_prefixes=self._scoped_output_prefixes(),
        )
        self.log.info("%s@%s: %s (%s)", self.repository, self.branch, judgement.verdict.value, judgement.reason)
        return condition_met(self.condition, judgement, self.ignore_repairs_underway), judgement.to_dict()

    def trigger(self, deadline: float) -> AbandonedPublicationTrigger:
        """The trigger repeating :meth:`probe` in the triggerer.

        :param deadline: epoch seconds after which it gives up.
        """
        scope = self._scope()
        return AbandonedPublicationTrigger(
            repository=self.repository,
            branch=self.branch,
            condition=self.condition,
            publisher_dag_id=None if scope is None else scope.dag_id,
            publisher_task_id=None if scope is None else scope.task_id,
            staging_branch_prefix=self.staging_branch_prefix,
            ignore_repairs_underway=self.ignore_repairs_underway,
            output_prefixes=list(self._scoped_output_prefixes()) or None,
            lakefs_conn_id=self.lakefs_conn_id,
            poke_interval=float(self.poke_interval),
            deadline=deadline,
        )
