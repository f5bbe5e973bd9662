"""Submit side of a fenced Spark job: what ``spark-submit`` needs, computed in the Airflow worker.

:func:`s3a_submit_options` gives what ``spark-submit`` needs for S3A: the ``hadoop-aws``
coordinate matching the installed PySpark's Hadoop (resolved through ``--packages``), merged with
the DAG's own packages. :func:`kubernetes_secret_conf` and :func:`yarn_credential_provider_conf`
give the confs that hand credentials to a driver on Kubernetes / YARN without the values
(docs/spark.md). The job-side half (what runs inside the Spark driver) is :mod:`airflow_lakefence.spark`,
which also re-exports these names.

This module imports neither Airflow nor pyspark at import time.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_lakefence.core.names.locations import ACCESS_KEY_ID_ENV, SECRET_ACCESS_KEY_ENV
from airflow_lakefence.exceptions import InvalidInputError, S3AConfigError

__all__ = [
    "HADOOP_AWS",
    "S3A_CONF",
    "S3ASubmitOptions",
    "hadoop_aws_coordinate",
    "kubernetes_secret_conf",
    "pyspark_hadoop_version",
    "s3a_packages",
    "s3a_submit_options",
    "yarn_credential_provider_conf",
]

#: Maven group:artifact of the S3A connector.
HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
#: A Spark conf the operator (or a DAG) sets to ask the job for S3A: ``true`` / ``false``.
S3A_CONF = "spark.lakefence.s3a"


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
    half, :func:`~airflow_lakefence.spark.configure_s3a`, runs inside the job. The result holds no credential.

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
    job puts the credentials into its Hadoop configuration
    (:func:`~airflow_lakefence.spark.configure_s3a`), which travels with the tasks;
    ``executors=True`` also injects them into executor pods (for jobs that read them from the
    environment themselves).

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
        conf[f"spark.kubernetes.{role}.secretKeyRef.{ACCESS_KEY_ID_ENV}"] = f"{secret_name}:{access_key_id_key}"
        conf[f"spark.kubernetes.{role}.secretKeyRef.{SECRET_ACCESS_KEY_ENV}"] = f"{secret_name}:{secret_access_key_key}"
    return conf


def yarn_credential_provider_conf(provider_path: str) -> dict[str, str]:
    """Spark confs that let S3A read the lakeFS key pair from a Hadoop credential store (YARN).

    Create the store once with ``hadoop credential create fs.s3a.bucket.<repository>.access.key
    -provider jceks://hdfs/...`` (and ``...secret.key``); the job then finds no credentials in
    its environment and :func:`~airflow_lakefence.spark.configure_s3a` leaves them to the store.

    :param provider_path: e.g. ``jceks://hdfs@namenode/user/airflow/lakefs.jceks``.
    :raises InvalidInputError: for a path that is not a credential provider URI.
    """
    if not re.fullmatch(r"[a-z0-9]+://\S+", provider_path):
        raise InvalidInputError(f"{provider_path!r} is not a Hadoop credential provider URI (jceks://...)")
    return {"spark.hadoop.hadoop.security.credential.provider.path": provider_path}
