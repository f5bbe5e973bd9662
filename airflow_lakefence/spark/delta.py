"""Job-side helpers for Delta Lake tables written by a fenced Spark job (docs/delta.md).

Inside the job::

    from airflow_lakefence.spark.delta import delta_table, with_delta
    from airflow_lakefence.spark import lakefence_spark_session

    with lakefence_spark_session("events", builder=with_delta(SparkSession.builder)) as job:
        events = delta_table("tables/events")             # the attempt's locations from the environment
        df.write.format("delta").mode("append").options(**events.write_options("append-day")).save(events.uri)

A table is written on the attempt's staging branch through lakeFS's S3 gateway
(``s3a://<repository>/<staging branch>/<root>``), so Delta appends to the log as it is at the
input commit. ``write_options`` gives Delta's idempotent-write options (``txnAppId`` /
``txnVersion``) derived from the staging branch, which is unique per attempt: a write repeated
inside one attempt (a driver re-run by the cluster manager, a retry loop in the job) is a no-op;
a later attempt starts from a fresh staging branch and writes again.

Submit side, :func:`delta_submit_options` gives the packages (hadoop-aws and Delta's jar matching
the installed PySpark and delta-spark) and the session confs.

This module imports neither Airflow nor pyspark at import time.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.spark import (
    JobEnvironmentError,
    S3ASubmitOptions,
    lakefence_locations,
    s3a_submit_options,
)

__all__ = [
    "DELTA_SESSION_CONF",
    "DeltaTableLocation",
    "delta_package",
    "delta_submit_options",
    "delta_table",
    "txn_app_id",
    "with_delta",
]

#: The Spark session confs Delta needs (its SQL extension and catalog).
DELTA_SESSION_CONF: Mapping[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
#: Delta's Maven group.
DELTA_GROUP = "io.delta"
_SCALA = "2.13"
# delta-spark names its jar per Spark minor from this release on (delta-spark_4.1_2.13).
_SUFFIXED_FROM = (4, 1)


def _major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    return int(parts[0]), int(parts[1])


def delta_package(delta_version: str | None = None, spark_version: str | None = None) -> str:
    """The Maven coordinate of Delta's Spark jar for the installed delta-spark and PySpark.

    Follows delta-spark's own rule (``delta.pip_utils.configure_spark_with_delta_pip``):
    ``io.delta:delta-spark_2.13:<v>`` up to 4.0, ``io.delta:delta-spark_<spark major.minor>_2.13:<v>``
    from 4.1 on.

    :param delta_version: the delta-spark version (default: the installed one).
    :param spark_version: the PySpark version (default: the installed one).
    :raises JobEnvironmentError: when delta-spark or pyspark is not installed and no version is given.
    """
    try:
        delta_version = delta_version or importlib.metadata.version("delta-spark")
        spark_version = spark_version or importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError as exc:
        raise JobEnvironmentError(f"{exc.name} is not installed: pip install delta-spark (with pyspark)") from exc
    if _major_minor(delta_version) >= _SUFFIXED_FROM:
        spark_mm = ".".join(spark_version.split(".")[:2])
        return f"{DELTA_GROUP}:delta-spark_{spark_mm}_{_SCALA}:{delta_version}"
    return f"{DELTA_GROUP}:delta-spark_{_SCALA}:{delta_version}"


def delta_submit_options(conf: Mapping[str, str] | None = None, packages: str | None = None) -> S3ASubmitOptions:
    """``spark-submit`` options for a job writing Delta tables through the lakeFS S3 gateway.

    :func:`airflow_lakefence.spark.s3a_submit_options` (hadoop-aws matching Spark's Hadoop) plus
    Delta's jar (:func:`delta_package`) and :data:`DELTA_SESSION_CONF`.

    :param conf: the DAG's own Spark confs (they win over the Delta session confs).
    :param packages: the DAG's own comma-separated Maven coordinates.
    :raises S3AConfigError: when the packages pin another hadoop-aws.
    """
    extra = delta_package()
    merged = f"{packages},{extra}" if packages else extra
    return s3a_submit_options(conf={**DELTA_SESSION_CONF, **(conf or {})}, packages=merged)


def with_delta(builder: Any) -> Any:
    """A ``SparkSession.Builder`` with Delta's SQL extension and catalog set.

    The jar itself comes from ``--packages`` (:func:`delta_submit_options`) or, in a plain Python
    process, from ``delta.configure_spark_with_delta_pip``.

    :param builder: a ``SparkSession.Builder``.
    """
    for key, value in DELTA_SESSION_CONF.items():
        builder = builder.config(key, value)
    return builder


def txn_app_id(staging_branch: str, table_root: str, name: str = "write") -> str:
    """The ``txnAppId`` of one write of one attempt to one table.

    Derived from the staging branch (itself derived from the publication key, the try number and
    the task-instance id, so unique per attempt), the table root and a name the job gives the
    write. Bounded and free of characters Delta would have to escape.

    :param staging_branch: the attempt's staging branch.
    :param table_root: the table's root in the repository.
    :param name: the job's name for this write (distinct writes of one attempt need distinct names,
        or increasing ``txnVersion`` values).
    """
    digest = hashlib.sha256(f"{table_root.strip('/')}\x00{name}".encode()).hexdigest()[:16]
    return f"lakefence-{staging_branch}-{digest}"


@dataclass(frozen=True)
class DeltaTableLocation:
    """Where one declared Delta table is read and written by this attempt.

    :param locations: the attempt's locations (:func:`airflow_lakefence.spark.lakefence_locations`).
    :param table: the declared table.
    """

    locations: AttemptLocations
    table: DeltaTableOutput

    @property
    def uri(self) -> str:
        """The table on the staging branch: ``s3a://<repository>/<staging branch>/<root>``.

        :raises JobEnvironmentError: outside direct mode (a Delta table must be written where its
            log is, on the staging branch, so that Delta appends to the input's versions).
        """
        if self.locations.write_mode != "direct" or not self.locations.staging_branch:
            raise JobEnvironmentError(
                f"Delta table {self.table.root!r} needs write_mode='direct': Delta appends to the table's log "
                f"where it lies, and write mode {self.locations.write_mode!r} would start a new table"
            )
        return self.locations.output_uri(self.table.root.strip("/"))

    @property
    def input_uri(self) -> str:
        """The table at the pinned input commit (read-only): ``s3a://<repository>/<input commit>/<root>``."""
        return self.locations.input_uri(self.table.root.strip("/"))

    def write_options(self, name: str = "write", version: int = 0) -> dict[str, str]:
        """Delta's idempotent-write options for one write of this attempt.

        Delta skips a write whose ``txnVersion`` is at or below the version the table's log already
        records for its ``txnAppId``: repeating the same write (same ``name`` and ``version``) in
        this attempt commits nothing. A job that writes one table several times gives each write
        its own ``name`` (or one name with increasing versions).

        :param name: the job's name for the write.
        :param version: a non-negative number; increase it for successive writes under one name.
        :raises ValueError: for a negative version or an empty name.
        :raises JobEnvironmentError: when the attempt has no staging branch.
        """
        if not name:
            raise ValueError("a write needs a non-empty name")
        if version < 0:
            raise ValueError(f"txnVersion must not be negative, got {version}")
        if not self.locations.staging_branch:
            raise JobEnvironmentError("this attempt has no staging branch: it writes nothing")
        return {
            "txnAppId": txn_app_id(self.locations.staging_branch, self.table.root, name),
            "txnVersion": str(version),
        }


def delta_table(
    table: DeltaTableOutput | str,
    locations: AttemptLocations | None = None,
    environ: Mapping[str, str] | None = None,
) -> DeltaTableLocation:
    """The declared table's locations for this attempt.

    :param table: a :class:`DeltaTableOutput` or the table's root.
    :param locations: the attempt's locations (default: from the environment the operator set).
    :param environ: the environment to read them from (default ``os.environ``).
    :raises JobEnvironmentError: outside a fenced attempt.
    """
    declared = table if isinstance(table, DeltaTableOutput) else DeltaTableOutput(table)
    return DeltaTableLocation(locations or lakefence_locations(environ), declared)
