"""Where one attempt's job reads and writes, and the environment that carries it to a job process.

:class:`AttemptLocations` is the one type for these facts: the engine builds it, the Python
adapter hands it to the function (inside :class:`~airflow_lakefence.operators.fenced_python.LakeFenceAttempt`),
the Spark operator turns it into the job's environment (:meth:`AttemptLocations.to_environment`)
and the job-side helper reads it back (:meth:`AttemptLocations.from_environment`, behind
:func:`airflow_lakefence.spark.lakefence_locations`). :data:`JOB_ENVIRONMENT` is the one table of
the variable names; the credentials travel in their own variables (:data:`ACCESS_KEY_ID_ENV`...),
never in the locations.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType

from airflow_lakefence.exceptions import JobEnvironmentError

__all__ = [
    "ACCESS_KEY_ID_ENV",
    "JOB_ENVIRONMENT",
    "LAKECTL_ACCESS_KEY_ID_ENV",
    "LAKECTL_SECRET_ACCESS_KEY_ENV",
    "REQUIRED_ENVIRONMENT",
    "SECRET_ACCESS_KEY_ENV",
    "URI_SCHEMES",
    "AttemptLocations",
]

#: The job's environment: :class:`AttemptLocations` field → environment variable. A field that is
#: ``None`` is left out; the Spark operator also passes each as a ``spark.lakefence.*`` conf.
JOB_ENVIRONMENT: Mapping[str, str] = MappingProxyType(
    {
        "endpoint": "LAKEFS_ENDPOINT",
        "repository": "LAKEFENCE_REPOSITORY",
        "input_commit": "LAKEFENCE_INPUT_COMMIT",
        "target_branch": "LAKEFENCE_TARGET_BRANCH",
        "write_mode": "LAKEFENCE_WRITE_MODE",
        "staging_branch": "LAKEFENCE_STAGING_BRANCH",
        "workspace": "LAKEFENCE_WORKSPACE_DIR",
    }
)
#: The fields a job cannot work without: a process without them was not started by the operator.
REQUIRED_ENVIRONMENT = ("endpoint", "repository", "input_commit")
#: The lakeFS key pair, as the lakeFS clients and the job-side S3A set-up read it (environment only).
ACCESS_KEY_ID_ENV = "LAKEFS_ACCESS_KEY_ID"
SECRET_ACCESS_KEY_ENV = "LAKEFS_SECRET_ACCESS_KEY"
#: The same pair under lakectl's names.
LAKECTL_ACCESS_KEY_ID_ENV = "LAKECTL_CREDENTIALS_ACCESS_KEY_ID"
LAKECTL_SECRET_ACCESS_KEY_ENV = "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY"
#: ``s3a`` (the lakeFS S3 gateway) or ``lakefs`` (the lakeFS Hadoop FileSystem, lakefs-spec).
URI_SCHEMES = ("s3a", "lakefs")


@dataclass(frozen=True)
class AttemptLocations:
    """Where the attempt's job reads and writes.

    :param repository: the lakeFS repository.
    :param target_branch: the branch the output will be published into (never written by the
        job); ``None`` in a job started without it.
    :param input_commit: the resolved input commit id: read this, never a branch.
    :param staging_branch: the attempt's private branch (``direct`` mode writes here); ``None``
        when read-only.
    :param workspace: the attempt's fresh local directory (``workspace`` mode), else ``None``.
    :param write_mode: ``workspace``, ``direct`` or ``read_only``.
    :param endpoint: the lakeFS endpoint URL (also the S3 gateway's); ``None`` until an adapter,
        which knows the connection, sets it.
    :param scheme: the scheme of the URIs :meth:`input_uri` and :meth:`output_uri` build:
        ``s3a`` (lakeFS S3 gateway) or ``lakefs`` (lakeFS Hadoop FileSystem, lakefs-spec).
    """

    repository: str
    target_branch: str | None
    input_commit: str
    staging_branch: str | None
    workspace: Path | None
    write_mode: str
    endpoint: str | None = None
    scheme: str = "s3a"

    @property
    def workspace_dir(self) -> Path | None:
        """The local workspace (:attr:`workspace`, under the job helper's name)."""
        return self.workspace

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
        if self.write_mode == "workspace" and self.workspace is not None:
            return (self.workspace / path.lstrip("/")).as_uri()
        if self.write_mode == "direct" and self.staging_branch:
            return self._uri(self.staging_branch, path)
        raise JobEnvironmentError(f"this attempt writes nothing (write mode {self.write_mode!r})")

    def output_path(self, path: str = "") -> Path:
        """The local workspace path of ``path`` (workspace mode only).

        :param path: a path in the repository.
        :raises JobEnvironmentError: outside workspace mode.
        """
        if self.write_mode != "workspace" or self.workspace is None:
            raise JobEnvironmentError("output_path is only available in workspace mode")
        return self.workspace / path.lstrip("/")

    def to_environment(self) -> dict[str, str]:
        """The job's environment (:data:`JOB_ENVIRONMENT`): every field that is set; no credentials."""
        values = {name: getattr(self, name) for name in JOB_ENVIRONMENT}
        return {JOB_ENVIRONMENT[name]: str(value) for name, value in values.items() if value is not None}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None, *, scheme: str = "s3a") -> AttemptLocations:
        """Read the attempt's locations from the environment the operator set.

        :param environ: the environment (default ``os.environ``).
        :param scheme: ``s3a`` or ``lakefs``.
        :raises JobEnvironmentError: if the job was not started by the fenced operator.
        :raises ValueError: for an unknown scheme.
        """
        if scheme not in URI_SCHEMES:
            raise ValueError(f"scheme must be one of {URI_SCHEMES}, got {scheme!r}")
        env = os.environ if environ is None else environ
        values = {name: env.get(JOB_ENVIRONMENT[name]) or None for name in JOB_ENVIRONMENT}
        missing = [JOB_ENVIRONMENT[name] for name in REQUIRED_ENVIRONMENT if values[name] is None]
        if missing:
            raise JobEnvironmentError(f"not started by FencedSparkPublishOperator: {', '.join(missing)} unset")
        workspace = values["workspace"]
        return cls(
            repository=str(values["repository"]),
            target_branch=values["target_branch"],
            input_commit=str(values["input_commit"]),
            staging_branch=values["staging_branch"],
            workspace=Path(workspace) if workspace else None,
            write_mode=values["write_mode"] or "workspace",
            endpoint=str(values["endpoint"]).rstrip("/").removesuffix("/api/v1"),
            scheme=scheme,
        )


# Every field but the URI scheme travels in the environment.
assert {f.name for f in fields(AttemptLocations)} == {*JOB_ENVIRONMENT, "scheme"}
