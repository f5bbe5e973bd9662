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

Submit side, :func:`s3a_submit_options` gives what ``spark-submit`` needs for S3A: the
``hadoop-aws`` coordinate matching the installed PySpark's Hadoop (resolved through
``--packages``), merged with the DAG's own packages. :func:`kubernetes_secret_conf` and
:func:`yarn_credential_provider_conf` give the confs that hand credentials to a driver on
Kubernetes / YARN without the values (docs/spark.md).

This module imports neither Airflow nor pyspark at import time.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_lakefence.exceptions import InvalidInputError, JobEnvironmentError, S3AConfigError

__all__ = [
    "COMMITTER_SETTINGS",
    "HADOOP_AWS",
    "JobEnvironmentError",
    "LakefenceJob",
    "LakefenceLocations",
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

_SCHEMES = ("s3a", "lakefs")

#: Maven group:artifact of the S3A connector.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
#: A Spark conf the operator (or a DAG) sets to ask the job for S3A: ``true`` / ``false``.
S3A_CONF = "spark.lakefence.s3a"
#: The same switch as an environment variable (wins over the conf).
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


@dataclass(frozen=True)
class LakefenceLocations:
    """The locations of one attempt.

    :param endpoint: the lakeFS endpoint URL (also the S3 gateway's).
    :param repository: the repository.
    :param input_commit: the commit id to read from.
    :param staging_branch: the attempt's staging branch (``None`` when read-only).
    :param write_mode: ``direct``, ``workspace`` or ``read_only``.
    :param workspace_dir: the local workspace (workspace mode).
    :param scheme: ``s3a`` (lakeFS S3 gateway) or ``lakefs`` (lakeFS Hadoop FileSystem).
    """

    endpoint: str
    repository: str
    input_commit: str
    staging_branch: str | None
    write_mode: str
    workspace_dir: Path | None
    scheme: str = "s3a"

    def _uri(self, ref: str, path: str) -> str:
        return f"{self.scheme}://{self.repository}/{ref}/{path.lstrip('/')}"

    def input_uri(self, path: str = "") -> str:
        """The URI of ``path`` at the pinned input commit.

        :param path: a path in the repository.
        """
        return self._uri(self.input_commit, path)

    def output_uri(self, path: str = "") -> str:
        """Where the job writes ``path``: the workspace or the staging branch.

        :param path: a path in the repository.
        :raises JobEnvironmentError: when the attempt is read-only.
        """
        if self.write_mode == "workspace" and self.workspace_dir is not None:
            return (self.workspace_dir / path.lstrip("/")).as_uri()
        if self.write_mode == "direct" and self.staging_branch:
            return self._uri(self.staging_branch, path)
        raise JobEnvironmentError(f"this attempt writes nothing (write mode {self.write_mode!r})")

    def output_path(self, path: str = "") -> Path:
        """The local workspace path of ``path`` (workspace mode only).

        :param path: a path in the repository.
        :raises JobEnvironmentError: outside workspace mode.
        """
        if self.write_mode != "workspace" or self.workspace_dir is None:
            raise JobEnvironmentError("output_path is only available in workspace mode")
        return self.workspace_dir / path.lstrip("/")


def lakefence_locations(environ: Mapping[str, str] | None = None, *, scheme: str = "s3a") -> LakefenceLocations:
    """Read the attempt's locations from the environment the operator set.

    :param environ: the environment (default ``os.environ``).
    :param scheme: ``s3a`` or ``lakefs``.
    :raises JobEnvironmentError: if the job was not started by the fenced operator.
    :raises ValueError: for an unknown scheme.
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
    env = os.environ if environ is None else environ
    missing = [
        name for name in ("LAKEFS_ENDPOINT", "LAKEFENCE_REPOSITORY", "LAKEFENCE_INPUT_COMMIT") if not env.get(name)
    ]
    if missing:
        raise JobEnvironmentError(f"not started by FencedSparkPublishOperator: {', '.join(missing)} unset")
    workspace = env.get("LAKEFENCE_WORKSPACE_DIR")
    return LakefenceLocations(
        endpoint=env["LAKEFS_ENDPOINT"].rstrip("/").removesuffix("/api/v1"),
        repository=env["LAKEFENCE_REPOSITORY"],
        input_commit=env["LAKEFENCE_INPUT_COMMIT"],
        staging_branch=env.get("LAKEFENCE_STAGING_BRANCH") or None,
        write_mode=env.get("LAKEFENCE_WRITE_MODE", "workspace"),
        workspace_dir=Path(workspace) if workspace else None,
        scheme=scheme,
    )


# -- submit side: hadoop-aws ----------------------------------------------------------------


def _spark_home() -> Path:
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home)
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise S3AConfigError("pyspark is not installed and SPARK_HOME has no jars/: cannot tell Spark's Hadoop version")
    return Path(next(iter(spec.submodule_search_locations)))


def pyspark_hadoop_version(spark_home: str | os.PathLike[str] | None = None) -> str:
    """The Hadoop version Spark was built with, read from its ``jars/hadoop-client-api-<v>.jar``.

    :param spark_home: the Spark installation (default: ``SPARK_HOME`` if it has ``jars/``, else
        the installed pyspark package, which is what ``spark-submit`` from the environment runs).
    :raises S3AConfigError: when no single Hadoop client jar is found.
    """
    home = Path(spark_home) if spark_home is not None else _spark_home()
    jars = sorted((home / "jars").glob("hadoop-client-api-*.jar"))
    if len(jars) != 1:
        raise S3AConfigError(f"expected one hadoop-client-api-*.jar in {home / 'jars'}, found {len(jars)}")
    return jars[0].name.removeprefix("hadoop-client-api-").removesuffix(".jar")


def hadoop_aws_coordinate(hadoop_version: str | None = None) -> str:
    """The Maven coordinate of the S3A connector matching Spark's Hadoop.

    :param hadoop_version: default :func:`pyspark_hadoop_version`.
    :raises S3AConfigError: when the version cannot be determined.
    """
    return f"{HADOOP_AWS}:{hadoop_version or pyspark_hadoop_version()}"


def s3a_packages(packages: str | None = None, *, hadoop_version: str | None = None) -> str:
    """``--packages`` with the matching hadoop-aws added to the DAG's own packages.

    hadoop-aws must be exactly Spark's Hadoop version: another one fails later with linkage
    errors deep inside a task, so a differing pinned coordinate is refused here.

    :param packages: the DAG's comma-separated coordinates, if any.
    :param hadoop_version: default :func:`pyspark_hadoop_version`.
    :raises S3AConfigError: if ``packages`` pins hadoop-aws at another version.
    """
    wanted = hadoop_aws_coordinate(hadoop_version)
    items = [item.strip() for item in (packages or "").split(",") if item.strip()]
    for item in items:
        group, _, rest = item.partition(":")
        artifact = rest.partition(":")[0]
        if f"{group}:{artifact}" != HADOOP_AWS:
            continue
        if item != wanted:
            raise S3AConfigError(
                f"packages pin {item!r} but this Spark is built on Hadoop {wanted.rsplit(':', 1)[1]}: "
                f"hadoop-aws must match it exactly; use {wanted!r} (or drop it and let lakefence add it)"
            )
        return ",".join(items)
    return ",".join([*items, wanted])


@dataclass(frozen=True)
class S3ASubmitOptions:
    """What ``spark-submit`` needs for a job that reads or writes lakeFS through S3A.

    :param packages: the ``packages`` argument (comma-separated coordinates).
    :param conf: the ``conf`` argument; no secrets.
    """

    packages: str
    conf: dict[str, str] = field(default_factory=dict)


def s3a_submit_options(
    packages: str | None = None, conf: Mapping[str, Any] | None = None, *, hadoop_version: str | None = None
) -> S3ASubmitOptions:
    """The operator-side half of S3A: packages and confs to pass to ``spark-submit``.

    The operator (or a DAG) calls this and passes ``packages=`` / ``conf=`` on; the job-side
    half, :func:`configure_s3a`, runs inside the job. The result holds no credential.

    :param packages: the DAG's own ``packages``.
    :param conf: the DAG's own ``conf``; kept, with :data:`S3A_CONF` set to ``true``.
    :param hadoop_version: default :func:`pyspark_hadoop_version`.
    :raises S3AConfigError: see :func:`s3a_packages`.
    """
    merged = {str(key): str(value) for key, value in (conf or {}).items()}
    merged[S3A_CONF] = "true"
    return S3ASubmitOptions(s3a_packages(packages, hadoop_version=hadoop_version), merged)


# -- cluster managers: credentials by reference ---------------------------------------------

_K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_K8S_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


def kubernetes_secret_conf(
    secret_name: str,
    *,
    access_key_id_key: str = "access_key_id",
    secret_access_key_key: str = "secret_access_key",
    executors: bool = False,
) -> dict[str, str]:
    """Spark confs that give the driver pod the lakeFS credentials from a Kubernetes Secret.

    ``spark.kubernetes.driver.secretKeyRef.ENV=secret:key`` makes Kubernetes inject the value
    into the pod's environment: argv carries only the Secret's name. Executors need nothing: the
    job puts the credentials into its Hadoop configuration (:func:`configure_s3a`), which travels
    with the tasks; ``executors=True`` also injects them into executor pods (for jobs that read
    them from the environment themselves).

    :param secret_name: the Secret in the job's namespace.
    :param access_key_id_key: the Secret's key holding the access key id.
    :param secret_access_key_key: the Secret's key holding the secret access key.
    :param executors: also reference the Secret from executor pods.
    :raises InvalidInputError: for names Kubernetes would refuse.
    """
    if len(secret_name) > 253 or not _K8S_NAME_RE.fullmatch(secret_name):
        raise InvalidInputError(f"{secret_name!r} is not a valid Kubernetes Secret name")
    for key in (access_key_id_key, secret_access_key_key):
        if len(key) > 253 or not _K8S_KEY_RE.fullmatch(key):
            raise InvalidInputError(f"{key!r} is not a valid Kubernetes Secret key")
    roles = ("driver", "executor") if executors else ("driver",)
    conf: dict[str, str] = {}
    for role in roles:
        conf[f"spark.kubernetes.{role}.secretKeyRef.LAKEFS_ACCESS_KEY_ID"] = f"{secret_name}:{access_key_id_key}"
        conf[f"spark.kubernetes.{role}.secretKeyRef.LAKEFS_SECRET_ACCESS_KEY"] = (
            f"{secret_name}:{secret_access_key_key}"
        )
    return conf


def yarn_credential_provider_conf(provider_path: str) -> dict[str, str]:
    """Spark confs that let S3A read the lakeFS key pair from a Hadoop credential store (YARN).

    Create the store once with ``hadoop credential create fs.s3a.bucket.<repository>.access.key
    -provider jceks://hdfs/...`` (and ``...secret.key``); the job then finds no credentials in
    its environment and :func:`configure_s3a` leaves them to the store.

    :param provider_path: e.g. ``jceks://hdfs@namenode/user/airflow/lakefs.jceks``.
    :raises InvalidInputError: for a path that is not a credential provider URI.
    """
    if not re.fullmatch(r"[a-z0-9]+://\S+", provider_path):
        raise InvalidInputError(f"{provider_path!r} is not a Hadoop credential provider URI (jceks://...)")
    return {"spark.hadoop.hadoop.security.credential.provider.path": provider_path}


# -- job side: S3A --------------------------------------------------------------------------


def s3a_hadoop_options(locations: LakefenceLocations, access_key_id: str, secret_access_key: str) -> dict[str, str]:
    """The Hadoop options pointing S3A at the lakeFS gateway for this repository only.

    Per-bucket keys (``fs.s3a.bucket.<repository>.*``) leave every other bucket on its usual S3
    settings. The result holds the secret: set it into a Hadoop configuration, never log it.

    :param locations: from :func:`lakefence_locations`.
    :param access_key_id: the lakeFS access key id.
    :param secret_access_key: the lakeFS secret access key.
    """
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


def configure_s3a(spark: Any, locations: LakefenceLocations, environ: Mapping[str, str] | None = None) -> None:
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
    key, secret = env.get("LAKEFS_ACCESS_KEY_ID"), env.get("LAKEFS_SECRET_ACCESS_KEY")
    hadoop = _hadoop_conf(spark)
    bucket = f"fs.s3a.bucket.{locations.repository}"
    if key and secret:
        options = s3a_hadoop_options(locations, key, secret)
    else:
        provided = hadoop.get(f"{bucket}.access.key") or hadoop.get("hadoop.security.credential.provider.path")
        if not provided:
            raise JobEnvironmentError(
                "LAKEFS_ACCESS_KEY_ID / LAKEFS_SECRET_ACCESS_KEY are not set in the job's environment and the "
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
class LakefenceJob:
    """A Spark session set up for one fenced attempt.

    :param spark: the ``SparkSession``.
    :param locations: the attempt's locations.
    :param s3a: whether S3A is configured for the lakeFS gateway.
    """

    spark: Any
    locations: LakefenceLocations
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
        """Where the job writes ``path`` (see :meth:`LakefenceLocations.output_uri`).

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

    def __enter__(self) -> LakefenceJob:
        return self

    def remove_checksum_files(self) -> list[Path]:
        """Delete the ``.<name>.crc`` sidecars Hadoop's local filesystem wrote into the workspace.

        With S3A on the classpath the job cannot switch the local filesystem to
        ``RawLocalFileSystem`` (S3A buffers its uploads through ``LocalFileSystem``), so the
        checksum files are removed here instead of being uploaded. Called by the context manager
        on success in workspace mode; returns the files removed.
        """
        workspace = self.locations.workspace_dir
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
) -> LakefenceJob:
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
    return LakefenceJob(spark, locations, use_s3a)
