"""Job-side helper: where a Spark job launched by ``FencedSparkPublishOperator`` reads and writes.

Inside the job::

    from airflow_lakefence.spark import lakefence_spark_session

    job = lakefence_spark_session("daily-counts")
    df = job.spark.read.parquet(job.input_uri("tables/events/"))     # the pinned input commit
    df.groupBy("day").count().write.parquet(job.output_uri("tables/daily/"))

``output_uri`` is a path under the local workspace in ``workspace`` mode (the operator uploads it
into the staging branch) and ``s3a://<repository>/<staging branch>/<path>`` in ``direct`` mode.
URIs use the lakeFS S3 gateway scheme by default, or ``lakefs://`` for the lakeFS Hadoop
FileSystem. :func:`configure_s3a` points S3A at the lakeFS gateway for the repository alone
(per-bucket options) with the credentials from the driver's environment, set in the Hadoop
configuration at run time: they travel to executors inside the job's Hadoop configuration, and
never appear in argv, in Spark confs, in the UI or in the event log (Spark redacts the keys).

The submit side (what ``spark-submit`` needs: the matching ``hadoop-aws``, the credential confs of
Kubernetes and YARN) is :mod:`airflow_lakefence.spark.submit`; its names are re-exported here.

This module imports neither Airflow nor pyspark at import time.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_lakefence.core.names.locations import ACCESS_KEY_ID_ENV, SECRET_ACCESS_KEY_ENV, AttemptLocations
from airflow_lakefence.exceptions import JobEnvironmentError, S3AConfigError
from airflow_lakefence.spark.submit import (
    HADOOP_AWS,
    S3A_CONF,
    S3ASubmitOptions,
    hadoop_aws_coordinate,
    kubernetes_secret_conf,
    pyspark_hadoop_version,
    s3a_packages,
    s3a_submit_options,
    yarn_credential_provider_conf,
)

__all__ = [
    "COMMITTER_SETTINGS",
    "HADOOP_AWS",
    "S3A_CONF",
    "S3A_ENV",
    "AttemptLocations",
    "JobEnvironmentError",
    "LakeFenceJob",
    "S3AConfigError",
    "S3ASubmitOptions",
    "configure_s3a",
    "directory_marker_candidates",
    "hadoop_aws_coordinate",
    "kubernetes_secret_conf",
    "lakefence_locations",
    "lakefence_spark_session",
    "pyspark_hadoop_version",
    "s3a_enabled",
    "s3a_hadoop_options",
    "s3a_packages",
    "s3a_submit_options",
    "yarn_credential_provider_conf",
]

#: The switch of :data:`S3A_CONF` as an environment variable (wins over the conf).
S3A_ENV = "LAKEFENCE_S3A"
_S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"
# lakeFS ignores the region, but the AWS SDK v2 insists on one and would otherwise probe for it.
_GATEWAY_REGION = "us-east-1"

#: Output committer settings for writes through the lakeFS S3 gateway (why: docs/spark.md).
#: The classic FileOutputCommitter, algorithm 1: a task attempt's files become visible only
#: through its committed rename, so failed or speculative attempts leave nothing behind, and the
#: job's ``_temporary`` tree is deleted at job commit. Atomicity of the whole output comes from
#: the staging branch (nothing reaches the target before the operator's merge), not from the
#: committer. No ``_SUCCESS`` marker: the published commit is the success marker.
COMMITTER_SETTINGS: Mapping[str, str] = {
    "mapreduce.fileoutputcommitter.algorithm.version": "1",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "mapreduce.fileoutputcommitter.cleanup-failures.ignored": "false",
    "fs.s3a.committer.name": "file",
}

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def lakefence_locations(environ: Mapping[str, str] | None = None, *, scheme: str = "s3a") -> AttemptLocations:
    """Read the attempt's locations from the environment the operator set.

    :param environ: the environment (default ``os.environ``).
    :param scheme: ``s3a`` or ``lakefs``: the scheme of the URIs the locations build.
    :raises JobEnvironmentError: if the job was not started by the fenced operator.
    :raises ValueError: for an unknown scheme.
    """
    return AttemptLocations.from_environment(environ, scheme=scheme)


# -- S3A ------------------------------------------------------------------------------------


def s3a_hadoop_options(locations: AttemptLocations, access_key_id: str, secret_access_key: str) -> dict[str, str]:
    """The Hadoop options pointing S3A at the lakeFS gateway for this repository only.

    Per-bucket keys (``fs.s3a.bucket.<repository>.*``) leave every other bucket on its usual S3
    settings. The result holds the secret: set it into a Hadoop configuration, never log it.

    :param locations: from :func:`lakefence_locations`.
    :param access_key_id: the lakeFS access key id.
    :param secret_access_key: the lakeFS secret access key.
    """
    if not locations.endpoint:
        raise JobEnvironmentError("the locations name no lakeFS endpoint: read them with lakefence_locations()")
    bucket = f"fs.s3a.bucket.{locations.repository}"
    options = {
        f"{bucket}.endpoint": locations.endpoint,
        f"{bucket}.endpoint.region": _GATEWAY_REGION,
        f"{bucket}.path.style.access": "true",
        f"{bucket}.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        f"{bucket}.access.key": access_key_id,
        f"{bucket}.secret.key": secret_access_key,
    }
    options.update(COMMITTER_SETTINGS)
    return options


def _hadoop_conf(spark: Any) -> Any:
    return spark.sparkContext._jsc.hadoopConfiguration()


def configure_s3a(spark: Any, locations: AttemptLocations, environ: Mapping[str, str] | None = None) -> None:
    """Point S3A at the lakeFS S3 gateway for this repository, credentials from the environment.

    Sets :func:`s3a_hadoop_options` in the SparkContext's Hadoop configuration at run time, so
    the secret is never a command-line argument or a Spark conf; executors receive it inside the
    job's Hadoop configuration. Without credentials in the environment (YARN, Kubernetes set-ups
    where the cluster provides them), the credential keys are left to the cluster's Hadoop
    configuration or credential store.

    :param spark: the ``SparkSession``.
    :param locations: from :func:`lakefence_locations`.
    :param environ: the environment (default ``os.environ``).
    :raises JobEnvironmentError: if neither the environment nor the Hadoop configuration holds
        credentials for the repository.
    """
    env = os.environ if environ is None else environ
    key, secret = env.get(ACCESS_KEY_ID_ENV), env.get(SECRET_ACCESS_KEY_ENV)
    hadoop = _hadoop_conf(spark)
    bucket = f"fs.s3a.bucket.{locations.repository}"
    if key and secret:
        options = s3a_hadoop_options(locations, key, secret)
    else:
        provided = hadoop.get(f"{bucket}.access.key") or hadoop.get("hadoop.security.credential.provider.path")
        if not provided:
            raise JobEnvironmentError(
                f"{ACCESS_KEY_ID_ENV} / {SECRET_ACCESS_KEY_ENV} are not set in the job's environment and the "
                f"Hadoop configuration has no {bucket}.access.key nor a credential provider"
            )
        options = {
            name: value
            for name, value in s3a_hadoop_options(locations, "", "").items()
            if not name.endswith((".access.key", ".secret.key", ".aws.credentials.provider"))
        }
    for name, value in options.items():
        hadoop.set(name, value)


def _check_s3a_classpath(spark: Any) -> bool:
    """Whether S3A is loadable; raise if its hadoop-aws does not match Spark's Hadoop."""
    if _hadoop_conf(spark).getClassByNameOrNull(_S3A_CLASS) is None:
        return False
    hadoop_version = str(spark.sparkContext._jvm.org.apache.hadoop.util.VersionInfo.getVersion())
    jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
    for jar in jars.split(","):
        match = re.search(r"hadoop-aws-(\d[^/]*?)\.jar$", jar)
        if match and match.group(1) != hadoop_version:
            raise S3AConfigError(
                f"hadoop-aws {match.group(1)} is on the classpath but Spark runs Hadoop {hadoop_version}: "
                f"use {HADOOP_AWS}:{hadoop_version} (airflow_lakefence.spark.s3a_packages())"
            )
    return True


def s3a_enabled(spark: Any, environ: Mapping[str, str] | None = None) -> bool:
    """Whether this job should use S3A: asked for (:data:`S3A_ENV` / :data:`S3A_CONF`) or available.

    Unset means "when hadoop-aws is on the classpath": a DAG that passes the packages from
    :func:`s3a_submit_options` gets S3A, one that does not (the embedded demo, whose local
    lakeFS server has no S3 gateway) gets the job's fallback.

    :param spark: the ``SparkSession``.
    :param environ: the environment (default ``os.environ``).
    :raises S3AConfigError: if S3A is asked for but hadoop-aws is missing or mismatched.
    """
    env = os.environ if environ is None else environ
    wanted = (env.get(S3A_ENV) or spark.conf.get(S3A_CONF, None) or "").strip().lower()
    if wanted in _FALSE:
        return False
    available = _check_s3a_classpath(spark)
    if wanted in _TRUE and not available:
        raise S3AConfigError(
            f"S3A was asked for but {_S3A_CLASS} is not on the classpath: submit with "
            f"packages={hadoop_aws_coordinate()!r} (airflow_lakefence.spark.s3a_submit_options())"
        )
    return available


@dataclass(frozen=True)
class LakeFenceJob:
    """A Spark session set up for one fenced attempt.

    :param spark: the ``SparkSession``.
    :param locations: the attempt's locations.
    :param s3a: whether S3A is configured for the lakeFS gateway.
    """

    spark: Any
    locations: AttemptLocations
    s3a: bool
    written: set[str] = field(default_factory=set, compare=False)

    def input_uri(self, path: str = "") -> str:
        """The URI of ``path`` at the pinned input commit (needs S3A or the lakeFS FileSystem).

        :param path: a path in the repository.
        :raises JobEnvironmentError: without S3A under the ``s3a`` scheme.
        """
        if self.locations.scheme == "s3a" and not self.s3a:
            raise JobEnvironmentError(self._no_s3a("reading the input commit with Spark"))
        return self.locations.input_uri(path)

    def output_uri(self, path: str = "") -> str:
        """Where the job writes ``path`` (see :meth:`AttemptLocations.output_uri`).

        :param path: a path in the repository.
        :raises JobEnvironmentError: in direct mode without S3A, or when read-only.
        """
        if self.locations.write_mode == "direct" and self.locations.scheme == "s3a" and not self.s3a:
            raise JobEnvironmentError(self._no_s3a("direct mode"))
        uri = self.locations.output_uri(path)
        self.written.add(path)
        return uri

    def remove_directory_markers(self) -> list[str]:
        """Delete the empty directory markers S3A left at and above the direct-mode outputs.

        S3A keeps a directory "existing" by writing a zero-byte ``<dir>/`` object when the last
        object under it goes: an overwrite that deletes ``tables/t/`` leaves ``tables/``, a failed
        write leaves ``tables/t/``. On lakeFS those are stray objects in the staging branch (and
        fall outside ``output_prefixes``). Markers the input commit already had are kept. Called
        by the context manager on success; returns the paths removed.
        """
        if self.locations.write_mode != "direct" or not self.s3a or not self.written:
            return []
        loc = self.locations
        assert loc.staging_branch is not None
        jvm = self.spark.sparkContext._jvm
        root = jvm.org.apache.hadoop.fs.Path(f"s3a://{loc.repository}/")
        fs = root.getFileSystem(_hadoop_conf(self.spark))
        # The S3 client S3A itself uses for this bucket (the lakeFS gateway, the job's credentials).
        s3 = fs.getS3AInternals().getAmazonS3Client("lakefence: remove directory markers")
        model = jvm.software.amazon.awssdk.services.s3.model
        removed = []
        for directory in sorted(directory_marker_candidates(self.written), key=len, reverse=True):
            if _marker_size(s3, model, loc.repository, f"{loc.staging_branch}/{directory}") != 0:
                continue
            if _marker_size(s3, model, loc.repository, f"{loc.input_commit}/{directory}") is not None:
                continue
            s3.deleteObject(
                model.DeleteObjectRequest.builder()
                .bucket(loc.repository)
                .key(f"{loc.staging_branch}/{directory}")
                .build()
            )
            removed.append(directory)
        return removed

    @staticmethod
    def _no_s3a(what: str) -> str:
        return (
            f"{what} goes through the lakeFS S3 gateway, but S3A is not available: submit with "
            "airflow_lakefence.spark.s3a_submit_options() (packages=hadoop-aws matching Spark's Hadoop)"
        )

    def stop(self) -> None:
        """Stop the session."""
        self.spark.stop()

    def __enter__(self) -> LakeFenceJob:
        return self

    def remove_checksum_files(self) -> list[Path]:
        """Delete the ``.<name>.crc`` sidecars Hadoop's local filesystem wrote into the workspace.

        With S3A on the classpath the job cannot switch the local filesystem to
        ``RawLocalFileSystem`` (S3A buffers its uploads through ``LocalFileSystem``), so the
        checksum files are removed here instead of being uploaded. Called by the context manager
        on success in workspace mode; returns the files removed.
        """
        workspace = self.locations.workspace
        if self.locations.write_mode != "workspace" or workspace is None or not workspace.is_dir():
            return []
        removed = []
        for crc in workspace.rglob(".*.crc"):
            # Only a sidecar of a file that is there: ".part-0.parquet.crc" next to "part-0.parquet".
            if crc.is_file() and (crc.parent / crc.name[1:].removesuffix(".crc")).exists():
                crc.unlink()
                removed.append(crc)
        return removed

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is None:
                self.remove_directory_markers()
                self.remove_checksum_files()
        finally:
            self.stop()


def directory_marker_candidates(paths: Iterable[str]) -> set[str]:
    """The directories (``a/``, ``a/b/``) at and above each written path, where S3A may leave markers.

    :param paths: output paths in the repository (``tables/t/`` or ``tables/t/part.parquet``).
    """
    found: set[str] = set()
    for path in paths:
        parts = [part for part in path.strip("/").split("/") if part]
        if not path.endswith("/"):
            parts = parts[:-1]  # a file's own name is not a directory
        for depth in range(1, len(parts) + 1):
            found.add("/".join(parts[:depth]) + "/")
    return found


def _marker_size(s3: Any, model: Any, bucket: str, key: str) -> int | None:
    """The size of object ``key``, ``None`` when it does not exist."""
    from py4j.protocol import Py4JJavaError

    try:
        return int(s3.headObject(model.HeadObjectRequest.builder().bucket(bucket).key(key).build()).contentLength())
    except Py4JJavaError as exc:
        if "NoSuchKey" in str(exc) or "404" in str(exc):
            return None
        raise


def lakefence_spark_session(
    app_name: str | None = None,
    *,
    builder: Any = None,
    environ: Mapping[str, str] | None = None,
    scheme: str = "s3a",
) -> LakeFenceJob:
    """Start (or get) the job's ``SparkSession``, configured for the attempt's lakeFS locations.

    S3A is configured for the lakeFS gateway when :func:`s3a_enabled` says so; a DAG author
    writes no S3A configuration.

    :param app_name: the application name, if the job sets one.
    :param builder: a ``SparkSession.Builder`` to start from (default ``SparkSession.builder``).
    :param environ: the environment (default ``os.environ``).
    :param scheme: ``s3a`` or ``lakefs`` (the lakeFS FileSystem, configured by the cluster).
    :raises JobEnvironmentError: outside the fenced operator, or without credentials for S3A.
    :raises S3AConfigError: when S3A is asked for and cannot work.
    """
    locations = lakefence_locations(environ, scheme=scheme)
    if builder is None:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
    if app_name:
        builder = builder.appName(app_name)
    spark = builder.getOrCreate()
    use_s3a = scheme == "s3a" and s3a_enabled(spark, environ)
    if use_s3a:
        configure_s3a(spark, locations, environ)
    return LakeFenceJob(spark, locations, use_s3a)


#: Names of earlier releases: the old spelling → the name to use.
_DEPRECATED_NAMES = {"LakefenceJob": "LakeFenceJob", "LakefenceLocations": "AttemptLocations"}


def __getattr__(name: str) -> Any:
    if name in _DEPRECATED_NAMES:
        new = _DEPRECATED_NAMES[name]
        warnings.warn(f"airflow_lakefence.spark.{name} is deprecated: use {new}", DeprecationWarning, stacklevel=2)
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
