"""``FencedPythonPublishOperator``: a Python function's output, published into lakeFS with the same fences.

The second adapter of :class:`~airflow_lakefence.core.engine.PublishEngine` (the first is
:class:`~airflow_lakefence.operators.fenced_spark.FencedSparkPublishOperator`): the job is a Python
callable (pandas, polars, DuckDB, plain Python...). It receives the attempt's locations as a
:class:`LakeFenceAttempt` (an :class:`~airflow_lakefence.core.names.locations.AttemptLocations` with a
client) in its ``lakefence`` argument; everything else (the attempt fence, the
staging branch, the publish fence, evidence, XCom, links, assets, lineage) is the shared protocol.
The TaskFlow form is ``@task.lakefs_publish`` (:mod:`airflow_lakefence.decorators`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from airflow.providers.standard.operators.python import PythonOperator

from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.exceptions import JobError
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.operators.fenced_base import FENCED_TEMPLATE_FIELDS, FencedPublishOperatorBase

#: The argument name under which the callable receives its :class:`LakeFenceAttempt`.
ATTEMPT_ARG = "lakefence"


@dataclass(frozen=True)
class LakeFenceAttempt:
    """What one attempt's function gets: its locations, a lakeFS client and fsspec options.

    Read the input at :attr:`input_commit` (a commit id, fixed for the attempt), never at a branch.
    In ``workspace`` mode write files under :attr:`workspace` (paths relative to it become object
    paths); in ``direct`` mode write objects into :attr:`staging_branch` (for example with
    :attr:`client`), never into the target branch.

    :param locations: where the attempt reads and writes (with the lakeFS endpoint; its URIs are
        ``lakefs://`` ones, for lakefs-spec).
    :param client: a lakeFS client on the task's connection (``read_object``, ``list_objects``,
        ``upload_file``...).
    """

    locations: AttemptLocations
    client: LakeFSClient = field(repr=False)
    _credentials: tuple[str, str] = field(repr=False, default=("", ""))

    @property
    def repository(self) -> str:
        """The lakeFS repository."""
        return self.locations.repository

    @property
    def target_branch(self) -> str | None:
        """The branch the output will be published into."""
        return self.locations.target_branch

    @property
    def input_commit(self) -> str:
        """The resolved input commit id."""
        return self.locations.input_commit

    @property
    def staging_branch(self) -> str | None:
        """The attempt's private branch (``None`` when read-only)."""
        return self.locations.staging_branch

    @property
    def workspace(self) -> Path | None:
        """The attempt's fresh local directory (``workspace`` mode), else ``None``."""
        return self.locations.workspace

    @property
    def write_mode(self) -> str:
        """``workspace``, ``direct`` or ``read_only``."""
        return self.locations.write_mode

    @property
    def endpoint(self) -> str:
        """The lakeFS endpoint URL."""
        return self.locations.endpoint or ""

    @property
    def input_uri(self) -> str:
        """``lakefs://<repository>/<input commit>/``: the input, for fsspec/lakefs-spec readers."""
        return f"lakefs://{self.repository}/{self.input_commit}/"

    @property
    def staging_uri(self) -> str | None:
        """``lakefs://<repository>/<staging branch>/``: where a direct-mode function writes."""
        return None if self.staging_branch is None else f"lakefs://{self.repository}/{self.staging_branch}/"

    @property
    def storage_options(self) -> dict[str, str]:
        """fsspec ``storage_options`` for ``lakefs://`` URIs (lakefs-spec): endpoint and credentials.

        Pass them to readers and writers (``pandas.read_csv(uri, storage_options=...)``); never log them.
        """
        return {"host": self.endpoint, "username": self._credentials[0], "password": self._credentials[1]}


class FencedPythonPublishOperator(FencedPublishOperatorBase, PythonOperator):
    """Run a Python callable and publish what it wrote into a lakeFS branch, fenced against stale attempts.

    The callable gets the attempt's :class:`LakeFenceAttempt` in its ``lakefence`` argument (when
    its signature has one) next to the usual context arguments and ``op_args`` / ``op_kwargs``.
    What it returns is logged, not pushed: the task's return value is the published ``output_ref``.

    The lakeFS arguments (``repository``, ``target_branch``, ``output_prefixes``, ``input_ref``,
    ``options``...) and the XCom keys are those of
    :class:`~airflow_lakefence.operators.fenced_base.FencedPublishOperatorBase`.

    :param python_callable: the function producing the output.
    :param kwargs: the lakeFS arguments, and :class:`PythonOperator`'s (``op_args``, ``op_kwargs``...).
    :raises InvalidInputError: at DAG parse time, for arguments that can never work.
    """

    template_fields: Sequence[str] = (*PythonOperator.template_fields, *FENCED_TEMPLATE_FIELDS)
    ui_color = "#80deea"
    job_name: ClassVar[str] = "Python function"
    job_error: ClassVar[type[JobError]] = JobError

    def __init__(self, *, python_callable: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(python_callable=python_callable, **kwargs)

    def run_job(self, context: Any, locations: AttemptLocations) -> None:
        """Call the function with the attempt's locations in its ``lakefence`` argument.

        :param context: the Airflow context.
        :param locations: where the function reads and writes.
        """
        connection = self.lakefs_hook.get_connection(self.lakefs_conn_id)
        attempt = LakeFenceAttempt(
            dataclasses.replace(locations, endpoint=self.lakefs_hook.endpoint, scheme="lakefs"),
            client=self.lakefs,
            _credentials=(str(connection.login or ""), str(connection.password or "")),
        )
        if ATTEMPT_ARG in inspect.signature(self.python_callable).parameters:
            self.op_kwargs = {**self.op_kwargs, ATTEMPT_ARG: attempt}
        returned = PythonOperator.execute(self, context)
        if returned is not None:
            self.log.info("The function returned %r (the task returns the published output_ref)", returned)

    def execute(self, context: Any) -> str:
        """Run the fenced protocol around the function; return the output ref.

        :param context: the Airflow context.
        :raises LakeFenceError: a subclass naming the failure; nothing half-published.
        """
        return FencedPublishOperatorBase.execute(self, context)
