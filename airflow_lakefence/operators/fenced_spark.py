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
from collections.abc import Sequence
from typing import Any, ClassVar, cast

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import BaseHook

from airflow_lakefence.core.names.locations import AttemptLocations
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
        ``conn_id`` (default ``spark_default``), ``conf``, ``env_vars``...). ``durable`` is forced off:
        each attempt runs its own job into its own staging branch. ``conf``, ``env_vars`` and
        ``packages`` are never changed: the attempt's additions go to the hook (:meth:`_get_hook`).
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
        kwargs["durable"] = False
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
        self._hook = None  # built by the provider's execute, from this attempt's arguments
        try:
            SparkSubmitOperator.execute(self, context)
        finally:
            # The hook holds the credentials: they live only while the job runs.
            self._attempt_locations = None
            self._hook = None

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
        if "yarn" in master or "k8s" in master:
            self.log.warning("YARN/Kubernetes master: lakeFS credentials are not passed to the job")
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
            env_vars={**(self.env_vars or {}), **env, **extra},
            packages=packages,
        )
        return SparkSubmitOperator._get_hook(cast(SparkSubmitOperator, arguments))

    # The fenced protocol's execute, not SparkSubmitOperator's (which it calls as the job): named here
    # so the two bases' signatures do not have to agree.
    execute = FencedPublishOperatorBase.execute  # type: ignore[assignment]
