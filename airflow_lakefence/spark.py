"""Job-side helper: where a Spark job launched by ``FencedSparkPublishOperator`` reads and writes.

Inside the job::

    from airflow_lakefence.spark import lakefence_locations

    loc = lakefence_locations()
    df = spark.read.parquet(loc.input_uri("tables/events/"))   # the pinned input commit
    df.groupBy("day").count().write.parquet(loc.output_uri("tables/daily/"))

``output_uri`` is a path under the local workspace in ``workspace`` mode (the operator uploads it
into the staging branch) and a lakeFS URI of the staging branch in ``direct`` mode. URIs use the
lakeFS S3 gateway scheme ``s3a://<repository>/<ref>/<path>`` by default, or ``lakefs://`` for the
lakeFS Hadoop FileSystem. :func:`configure_s3a` points S3A at the lakeFS gateway with the
credentials taken from the environment, so they never appear in argv or Spark confs.

This module imports neither Airflow nor pyspark at import time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LakefenceLocations", "configure_s3a", "lakefence_locations"]

_SCHEMES = ("s3a", "lakefs")


@dataclass(frozen=True)
class LakefenceLocations:
    """The locations of one attempt.

    :param endpoint: the lakeFS endpoint URL.
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
        :raises RuntimeError: when the attempt is read-only.
        """
        if self.write_mode == "workspace" and self.workspace_dir is not None:
            return (self.workspace_dir / path.lstrip("/")).as_uri()
        if self.write_mode == "direct" and self.staging_branch:
            return self._uri(self.staging_branch, path)
        raise RuntimeError(f"this attempt writes nothing (write mode {self.write_mode!r})")

    def output_path(self, path: str = "") -> Path:
        """The local workspace path of ``path`` (workspace mode only).

        :param path: a path in the repository.
        :raises RuntimeError: outside workspace mode.
        """
        if self.write_mode != "workspace" or self.workspace_dir is None:
            raise RuntimeError("output_path is only available in workspace mode")
        return self.workspace_dir / path.lstrip("/")


def lakefence_locations(environ: Mapping[str, str] | None = None, *, scheme: str = "s3a") -> LakefenceLocations:
    """Read the attempt's locations from the environment the operator set.

    :param environ: the environment (default ``os.environ``).
    :param scheme: ``s3a`` or ``lakefs``.
    :raises RuntimeError: if the job was not started by the fenced operator.
    :raises ValueError: for an unknown scheme.
    """
    if scheme not in _SCHEMES:
        raise ValueError(f"scheme must be one of {_SCHEMES}, got {scheme!r}")
    env = os.environ if environ is None else environ
    missing = [
        name for name in ("LAKEFS_ENDPOINT", "LAKEFENCE_REPOSITORY", "LAKEFENCE_INPUT_COMMIT") if not env.get(name)
    ]
    if missing:
        raise RuntimeError(f"not started by FencedSparkPublishOperator: {', '.join(missing)} unset")
    workspace = env.get("LAKEFENCE_WORKSPACE_DIR")
    return LakefenceLocations(
        endpoint=env["LAKEFS_ENDPOINT"],
        repository=env["LAKEFENCE_REPOSITORY"],
        input_commit=env["LAKEFENCE_INPUT_COMMIT"],
        staging_branch=env.get("LAKEFENCE_STAGING_BRANCH") or None,
        write_mode=env.get("LAKEFENCE_WRITE_MODE", "workspace"),
        workspace_dir=Path(workspace) if workspace else None,
        scheme=scheme,
    )


def configure_s3a(spark: Any, locations: LakefenceLocations, environ: Mapping[str, str] | None = None) -> None:
    """Point S3A at the lakeFS S3 gateway for this repository, credentials from the environment.

    Sets per-bucket Hadoop options at runtime (``fs.s3a.bucket.<repository>.*``), so the secret
    is never a command-line argument or a Spark conf visible in the UI.

    :param spark: the ``SparkSession``.
    :param locations: from :func:`lakefence_locations`.
    :param environ: the environment (default ``os.environ``).
    :raises RuntimeError: if the credentials are not in the environment.
    """
    env = os.environ if environ is None else environ
    key, secret = env.get("LAKEFS_ACCESS_KEY_ID"), env.get("LAKEFS_SECRET_ACCESS_KEY")
    if not key or not secret:
        raise RuntimeError("LAKEFS_ACCESS_KEY_ID / LAKEFS_SECRET_ACCESS_KEY are not set in the job's environment")
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    bucket = f"fs.s3a.bucket.{locations.repository}"
    hadoop.set(f"{bucket}.endpoint", locations.endpoint)
    hadoop.set(f"{bucket}.path.style.access", "true")
    hadoop.set(f"{bucket}.access.key", key)
    hadoop.set(f"{bucket}.secret.key", secret)
