"""``FencedSparkPublishOperator``: spark-submit with a fenced publish into a lakeFS branch.

A thin adapter: the protocol is :class:`~airflow_lakefence.core.engine.PublishEngine`, the Airflow
side shared with the Python adapter is :class:`~airflow_lakefence.operators.fenced_base.FencedPublishOperatorBase`.
This module only runs the Spark job: the provider builds its hook from the task's arguments plus the
attempt's confs and environment (:meth:`FencedSparkPublishOperator._get_hook`), so the provider's own
OpenLineage conf injection keeps working and the task's ``conf``/``env_vars``/``packages`` never change.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import BaseHook

from airflow_lakefence import failpoints
from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.staging.adoption import JobRecord, JobStatus, adopted_by_later_try
from airflow_lakefence.exceptions import InvalidInputError, JobError, SparkJobError
from airflow_lakefence.operators.fenced_base import FENCED_TEMPLATE_FIELDS, FencedPublishOperatorBase
from airflow_lakefence.spark.submit import kubernetes_secret_conf, s3a_submit_options

DEFAULT_SPARK_CONN_ID = "spark_default"
#: The levels Spark's ``spark.log.level`` accepts (``SparkContext.setLogLevel``'s).
SPARK_LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")


def spark_master(conn: Any) -> str:
    """The master URL the Spark provider derives from a Spark connection (its own rules).

    :param conn: the Airflow connection.
    """
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = str(conn.host)
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def conf_name(env_name: str) -> str:
    """``LAKEFENCE_STAGING_BRANCH`` → ``stagingBranch``; ``LAKEFS_ENDPOINT`` → ``endpoint``.

    :param env_name: the environment variable's name.
    """
    words = env_name.removeprefix("LAKEFENCE_").removeprefix("LAKEFS_").lower().split("_")
    return words[0] + "".join(word.title() for word in words[1:])


class _SubmitArguments:
    """The operator as the provider's hook construction reads it, with one attempt's ``conf``,
    ``env_vars`` and ``packages`` in place of the task's (every other argument is the operator's).

    :param operator: the fenced operator.
    :param arguments: the attempt's values.
    """

    def __init__(self, operator: SparkSubmitOperator, **arguments: Any) -> None:
        self._operator = operator
        self.__dict__.update(arguments)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._operator, name)


class SparkDurableJobs:
    """The engine's :class:`~airflow_lakefence.core.adoption.DurableJobPort` for one Spark try.

    The provider's own durable machinery does the work: its ``task_state_store`` entry
    (``spark_job_id``) is what a retry reconnects to, its status query tells active from succeeded
    from failed. This class only steers it: keep the entry (adopt) or drop it (submit a new job).

    :param operator: the fenced operator.
    :param context: the Airflow context.
    """

    def __init__(self, operator: FencedSparkPublishOperator, context: Any) -> None:
        self._operator = operator
        self._context = context
        self._store = context["task_state_store"]

    def stored_job_id(self) -> str | None:
        """The job id the provider stored for this task (shared by every try of the run)."""
        value = self._store.get(self._operator.external_id_key)
        return str(value) if value else None

    def job_status(self, job_id: str) -> JobStatus:
        """The job's status through the provider's own query; ``UNKNOWN`` when it fails.

        :param job_id: the provider's external id.
        """
        operator = self._operator
        try:
            status = operator.get_job_status(job_id, self._context)
            if operator.is_job_active(status):
                return JobStatus.ACTIVE
            return JobStatus.SUCCEEDED if operator.is_job_succeeded(status) else JobStatus.FAILED
        except Exception as exc:
            operator.log.warning("Could not read the status of Spark job %s: %s", job_id, exc)
            return JobStatus.UNKNOWN

    def adopt(self, record: JobRecord) -> None:
        """The provider reconnects to the stored job; a new submission is refused.

        :param record: the adopted job's record.
        """
        self._operator._adopted_job = record.job_id
        self._operator._on_submitted = None

    def submit_fresh(self, submitted: Callable[[str], None]) -> None:
        """Drop the stored id, so the provider submits a new job; ``submitted`` gets its id.

        :param submitted: called with the new job's id once the provider stored it, before the wait.
        """
        self._store.delete(self._operator.external_id_key)
        self._operator._adopted_job = self._operator._submitted_job = None
        self._operator._on_submitted = submitted


class FencedSparkPublishOperator(FencedPublishOperatorBase, SparkSubmitOperator):
    """Run a Spark job and publish its output into a lakeFS branch, fenced against stale attempts.

    The job reads the pinned input commit and writes into a private staging branch (``direct``
    mode) or a local workspace the operator uploads (``workspace`` mode). Its output reaches
    ``target_branch`` only if this is still the current Airflow try (attempt fence, checked before
    staging and before publishing) and the target is in a state the protocol can explain (publish
    fence). A publication left behind by a dead earlier try is replaced, not stacked.

    The job receives its locations (the variables of
    :data:`~airflow_lakefence.core.names.locations.JOB_ENVIRONMENT`: ``LAKEFS_ENDPOINT``,
    ``LAKEFENCE_REPOSITORY``, ``LAKEFENCE_INPUT_COMMIT``...) as environment variables and as
    ``spark.lakefence.*`` confs;
    credentials only through the environment (``LAKEFS_ACCESS_KEY_ID`` /
    ``LAKEFS_SECRET_ACCESS_KEY``), never in argv: on YARN and Kubernetes, where the provider turns
    the environment into ``--conf`` arguments, the cluster must supply them itself. With a
    ``local`` master and no ``SPARK_LOCAL_IP`` set, the job gets ``SPARK_LOCAL_IP=127.0.0.1`` so
    Spark does not bind to the machine's external address. Job code reads all of it with
    :func:`airflow_lakefence.spark.lakefence_locations`.

    XCom: ``output_ref`` (also the return value), ``staged_commit``, ``decision``, ``input_ref``
    (the resolved commit id) and ``staging_branch``.

    The lakeFS arguments (``repository``, ``target_branch``, ``output_prefixes``, ``input_ref``,
    ``options``...) are those of :class:`~airflow_lakefence.operators.fenced_base.FencedPublishOperatorBase`;
    the common case needs ``application``, ``repository``, ``target_branch`` and ``output_prefixes``.

    :param s3a: read and write lakeFS through its S3 gateway: adds the ``hadoop-aws`` package that
        matches the installed PySpark's Hadoop (resolved by Spark's ``--packages`` from Maven) and
        turns S3A on in :func:`airflow_lakefence.spark.lakefence_spark_session`.
    :param kubernetes_credentials_secret: on Kubernetes, the name of a Secret holding
        ``access_key_id`` / ``secret_access_key``: the driver pod gets them by reference
        (:func:`airflow_lakefence.spark.kubernetes_secret_conf`), never as values in argv.
    :param spark_log_level: the Spark driver's root log level, passed as ``spark.log.level``
        (applied when the SparkContext starts) unless ``conf`` sets that key itself. The default
        ``WARN`` keeps Spark's INFO chatter out of the task log (the provider streams every line
        spark-submit prints into it); ``None`` leaves Spark's log4j configuration alone.
    :param kwargs: those, and everything :class:`SparkSubmitOperator` takes (``application``,
        ``conn_id`` (default ``spark_default``), ``conf``, ``env_vars``...). ``durable`` follows the
        provider (``True`` by default on Airflow 3.3, no effect below): where the provider reconnects
        (standalone and YARN cluster mode, Kubernetes) and ``write_mode="direct"``, a retry whose
        earlier try died *adopts* that try's job and staging branch instead of running the job again,
        and publishes its output once through the same fences (docs/protocol.md, "Adoption");
        ``durable=False``: every attempt runs its own job into its own staging branch. ``conf``,
        ``env_vars`` and ``packages`` are never changed: the attempt's additions go to the hook
        (:meth:`_get_hook`).
    :raises InvalidInputError: at DAG parse time, for arguments that can never work (an S3AConfigError
        for a pinned ``hadoop-aws`` that does not match PySpark's Hadoop; a bad Secret name).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, *FENCED_TEMPLATE_FIELDS)
    ui_color = "#4dd0c5"
    job_name: ClassVar[str] = "Spark job"
    job_error: ClassVar[type[JobError]] = SparkJobError

    def __init__(
        self,
        *,
        s3a: bool = False,
        kubernetes_credentials_secret: str | None = None,
        spark_log_level: str | None = "WARN",
        **kwargs: Any,
    ) -> None:
        self.spark_conn_id: str = kwargs.get("conn_id", DEFAULT_SPARK_CONN_ID)
        self.s3a = s3a
        self.kubernetes_credentials_secret = kubernetes_credentials_secret
        if not isinstance(s3a, bool):
            raise InvalidInputError(f"s3a must be True or False, got {s3a!r}")
        if spark_log_level is not None and (
            not isinstance(spark_log_level, str) or spark_log_level.upper() not in SPARK_LOG_LEVELS
        ):
            raise InvalidInputError(
                f"spark_log_level must be one of {SPARK_LOG_LEVELS} or None, got {spark_log_level!r}"
            )
        self.spark_log_level = spark_log_level
        self._attempt_locations: AttemptLocations | None = None
        self._adopted_job: str | None = None
        self._on_submitted: Callable[[str], None] | None = None
        self._submitted_job: str | None = None
        self._job_branch: str | None = None
        super().__init__(**kwargs)
        # Fail at parse time, not in the worker, when the arguments can never work.
        if kubernetes_credentials_secret is not None:
            kubernetes_secret_conf(kubernetes_credentials_secret)
        if s3a and not (isinstance(self.packages, str) and "{{" in self.packages):
            s3a_submit_options(self.packages)

    def validate_job(self) -> None:
        """Refuse a missing Spark connection: the provider would silently fall back to YARN.

        :raises InvalidInputError: if the connection is not defined.
        """
        self._spark_master()

    def _spark_master(self) -> str:
        try:
            return spark_master(BaseHook.get_connection(self.spark_conn_id))
        except Exception as exc:
            raise InvalidInputError(
                f"Spark connection {self.spark_conn_id!r} is not defined (the provider would silently use yarn)"
            ) from exc

    def job_environment(self, locations: AttemptLocations) -> dict[str, str]:
        """The job's ``LAKEFS_*`` / ``LAKEFENCE_*`` environment, without credentials.

        :param locations: the attempt's locations.
        """
        return dataclasses.replace(locations, endpoint=self.lakefs_hook.endpoint).to_environment()

    def run_job(self, context: Any, locations: AttemptLocations) -> None:
        """Run spark-submit through the provider with this attempt's confs and environment.

        The provider's ``execute`` builds its hook with :meth:`_get_hook` (after injecting its
        OpenLineage confs into ``conf``); this operator's override adds the attempt's, so the task's
        own ``conf``, ``env_vars`` and ``packages`` are never changed.

        :param context: the Airflow context.
        :param locations: where the job reads and writes.
        """
        self._attempt_locations = locations
        self._job_branch = locations.staging_branch
        self._hook = None  # built by the provider's execute, from this attempt's arguments
        try:
            SparkSubmitOperator.execute(self, context)
        finally:
            # The hook holds the credentials: they live only while the job runs.
            self._attempt_locations = None
            self._hook = None

    def durable_jobs(self, context: Any) -> SparkDurableJobs | None:
        """The durable-job port when the provider would reconnect this task's job on a retry.

        That is: ``durable`` (the provider's default on Airflow 3.3; always off below), a
        ``task_state_store`` in the context, and a deploy mode the provider tracks (standalone or
        YARN cluster mode with the ResourceManager API, Kubernetes with the API tracking). Client
        mode runs the driver inside this process: nothing outlives it.

        :param context: the Airflow context.
        """
        if not getattr(self, "durable", False) or context.get("task_state_store") is None:
            return None
        hook = self._hook = SparkSubmitOperator._get_hook(self)  # status queries only: no job environment
        resumable = (
            hook._should_track_driver_status
            or hook._should_track_driver_via_k8s_api()
            or (hook._is_yarn_cluster_mode and hook._yarn_track_via_rm_api)
        )
        return SparkDurableJobs(self, context) if resumable else None

    def submit_job(self, context: Any) -> str | None:
        """The provider's submission, refused while adopting.

        :param context: the Airflow context.
        :raises SparkJobError: when the adopted job stopped before the provider reconnected (a new
            job into the adopted staging branch would mix two jobs' output).
        """
        if self._adopted_job is not None:
            raise SparkJobError(
                f"the adopted Spark job {self._adopted_job} is no longer running or succeeded: not submitting "
                "a new job into its staging branch (the next try runs a new job)"
            )
        job_id = super().submit_job(context)
        self._submitted_job = None if job_id is None else str(job_id)
        return job_id

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        """The provider's wait for the job; a job this try submitted is recorded first.

        The provider has stored the job's id by now (it does before it waits): the record written
        here therefore always names the id a retry's reconnect finds.

        :param external_id: the job's id.
        :param context: the Airflow context.
        """
        if self._on_submitted is not None and self._submitted_job == str(external_id):
            self._on_submitted(self._submitted_job)
            self._on_submitted = None
        failpoints.hit("mid_job")
        super().poll_until_complete(external_id, context)

    def on_kill(self) -> None:
        """Mark the attempt stale; kill the job unless a later try adopted it (then it is that try's)."""
        fence, branch = self._fence, self._job_branch
        if fence is not None and branch is not None and self._run_state is not None:
            fence.killed.set()
            try:
                later = adopted_by_later_try(self._run_state.reloaded(), fence.attempt, branch)
            except Exception as exc:  # the kill goes ahead, as without adoption
                self.log.warning("Could not read whether a later try adopted the job: %s", exc)
                later = None
            if later is not None:
                self.log.info("Not killing the Spark job: try %d adopted it", later.try_number)
                return
        FencedPublishOperatorBase.on_kill(self)

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, with this attempt's confs, environment and packages added to the task's.

        :return: the hook the provider's ``execute`` submits with.
        """
        locations = self._attempt_locations
        if locations is None:
            return super()._get_hook()
        env = self.job_environment(locations)
        master = self._spark_master()
        extra: dict[str, str] = {}
        # Standalone cluster mode: the provider refuses env_vars (the driver runs on a worker, with
        # the worker's environment): the job reads its locations from the spark.lakefence.* confs.
        standalone_cluster = master.startswith("spark://") and self._deploy_mode_of() == "cluster"
        if "yarn" in master or "k8s" in master or standalone_cluster:
            self.log.warning("YARN/Kubernetes/standalone-cluster master: lakeFS credentials are not passed to the job")
        else:
            extra = self.lakefs_hook.credentials_env()
        if master.startswith("local") and "SPARK_LOCAL_IP" not in {**os.environ, **(self.env_vars or {})}:
            extra["SPARK_LOCAL_IP"] = "127.0.0.1"
        conf: dict[str, Any] = {**(self.conf or {})}
        if self.spark_log_level is not None:
            conf.setdefault("spark.log.level", self.spark_log_level.upper())
        packages = self.packages
        if self.s3a:
            options = s3a_submit_options(self.packages, conf)
            packages, conf = options.packages, dict(options.conf)
        if self.kubernetes_credentials_secret is not None:
            conf.update(kubernetes_secret_conf(self.kubernetes_credentials_secret))
        arguments = _SubmitArguments(
            self,
            conf={**conf, **{f"spark.lakefence.{conf_name(k)}": v for k, v in env.items()}},
            env_vars=self.env_vars if standalone_cluster else {**(self.env_vars or {}), **env, **extra},
            packages=packages,
        )
        return SparkSubmitOperator._get_hook(cast(SparkSubmitOperator, arguments))

    def _deploy_mode_of(self) -> str | None:
        """The deploy mode the provider uses: the task's, else the connection's ``deploy-mode`` extra."""
        if self._deploy_mode:
            return str(self._deploy_mode)
        try:
            mode = BaseHook.get_connection(self.spark_conn_id).extra_dejson.get("deploy-mode")
        except Exception:
            return None
        return None if mode is None else str(mode)

    # The fenced protocol's execute, not SparkSubmitOperator's (which it calls as the job): named here
    # so the two bases' signatures do not have to agree.
    execute = FencedPublishOperatorBase.execute  # type: ignore[assignment]
