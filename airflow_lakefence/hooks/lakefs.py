"""``LakeFSHook``: an Airflow connection of type ``lakefs`` turned into a lakeFS client adapter."""

from __future__ import annotations

import urllib.parse
from functools import cached_property
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook
from airflow.providers.common.compat.sdk import redact as airflow_redact

from airflow_lakefence.core.fences.hard import FenceCheck
from airflow_lakefence.core.names.locations import (
    ACCESS_KEY_ID_ENV,
    LAKECTL_ACCESS_KEY_ID_ENV,
    LAKECTL_SECRET_ACCESS_KEY_ENV,
    SECRET_ACCESS_KEY_ENV,
)
from airflow_lakefence.exceptions import (
    InvalidInputError,
    LakeFenceError,
    LakeFSAuthError,
    LakeFSConnectionError,
    LakeFSError,
    LakeFSNotFoundError,
    LakeFSRepositoryNotFoundError,
)
from airflow_lakefence.hardfence import InstallResult, check_hard_fence, install_hard_fence
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from airflow_lakefence.lakefs_adapter.errors import transport_cause

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


# A repository name nobody uses: reading it needs valid credentials, and "not found" proves them.
_PROBE_REPOSITORY = "lakefence-connection-test"
# The connection test answers a person waiting in the UI: one try, short timeouts.
_PROBE_TIMEOUT = (5.0, 15.0)


def _as_bool(value: Any, name: str, *, default: bool) -> bool:
    # The UI's connection form saves an untouched switch as null: that means "the default".
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise InvalidInputError(f"lakeFS connection extra {name!r} must be a boolean, got {value!r}")


def _as_timeout(value: Any) -> tuple[float, float] | None:
    """``timeout`` extra: read seconds, or ``[connect, read]`` seconds; ``None`` keeps the default."""
    if value is None or value == "":
        return None
    parts = list(value) if isinstance(value, (list, tuple)) else [value, value]
    try:
        connect, read = (float(part) for part in parts)
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"lakeFS connection extra 'timeout' must be seconds or [connect, read] seconds, got {value!r}"
        ) from None
    if not (connect > 0 and read > 0):
        raise InvalidInputError(f"lakeFS connection extra 'timeout' must be positive, got {value!r}")
    return connect, read


class LakeFSHook(BaseHook):
    """Interact with lakeFS through an Airflow connection.

    The connection (type ``lakefs``) holds the endpoint in *host* (``http(s)://host:port``, with or
    without ``/api/v1``), the access key id in *login*, the secret access key in *password*, and in
    *extra* ``verify_ssl`` (default true; ``null``, as the UI form saves an untouched switch, means
    the default), ``ui_base_url`` (for links) and ``timeout`` (seconds
    each request may take: a number, or ``[connect, read]``; default ``[10, 120]``; a read past it
    is retried, a write's outcome is re-read). Nothing is fetched or built until the client is
    first used.

    :param lakefs_conn_id: the Airflow connection id.
    """

    conn_name_attr = "lakefs_conn_id"
    default_conn_name = "lakefs_default"
    conn_type = "lakefs"
    hook_name = "lakeFS"

    def __init__(self, lakefs_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lakefs_conn_id = lakefs_conn_id

    @cached_property
    def settings(self) -> dict[str, Any]:
        """The validated connection settings (endpoint, verify_ssl, ui_base_url, timeout); no secret.

        :raises InvalidInputError: if the connection is missing or malformed.
        """
        conn = self._connection
        host = (conn.host or "").strip()
        if not host:
            raise InvalidInputError(f"lakeFS connection {self.lakefs_conn_id!r} has no host (endpoint URL)")
        if "://" not in host:
            scheme = "https" if (conn.schema or "").lower() == "https" else "http"
            host = f"{scheme}://{host}"
        if conn.port and host.count(":") < 2:
            host = f"{host}:{conn.port}"
        if not conn.login or not conn.password:
            raise InvalidInputError(
                f"lakeFS connection {self.lakefs_conn_id!r} needs the access key id (login) and the secret "
                "access key (password)"
            )
        extra = conn.extra_dejson
        return {
            "endpoint": host.rstrip("/").removesuffix("/api/v1"),
            "verify_ssl": _as_bool(extra.get("verify_ssl"), "verify_ssl", default=True),
            "ui_base_url": (extra.get("ui_base_url") or host).rstrip("/").removesuffix("/api/v1"),
            "timeout": _as_timeout(extra.get("timeout")),
        }

    @cached_property
    def _connection(self) -> Any:
        try:
            return self.get_connection(self.lakefs_conn_id)
        except LakeFenceError:
            raise
        except Exception as exc:
            raise InvalidInputError(f"lakeFS connection {self.lakefs_conn_id!r} is not defined") from exc

    @cached_property
    def client(self) -> LakeFSClient:
        """The lakeFS client adapter (one per hook, built on first use)."""
        settings = self.settings
        timeout = {} if settings["timeout"] is None else {"timeout": settings["timeout"]}
        return LakeFSClient(
            settings["endpoint"],
            self._connection.login,
            self._connection.password,
            verify_ssl=settings["verify_ssl"],
            **timeout,
        )

    def get_conn(self) -> LakeFSClient:
        """Return the client adapter.

        :raises InvalidInputError: if the connection is missing or malformed.
        """
        return self.client

    @property
    def endpoint(self) -> str:
        """The lakeFS endpoint URL (no ``/api/v1``)."""
        return str(self.settings["endpoint"])

    def credentials_env(self) -> dict[str, str]:
        """Return the credentials as the environment variables lakeFS clients read.

        Only for a child process's environment: never log, template or push these.
        """
        login, password = self._connection.login, self._connection.password
        return {
            LAKECTL_ACCESS_KEY_ID_ENV: login,
            LAKECTL_SECRET_ACCESS_KEY_ENV: password,
            ACCESS_KEY_ID_ENV: login,
            SECRET_ACCESS_KEY_ENV: password,
        }

    def redact(self, text: str) -> str:
        """``text`` with this connection's access key id and secret access key masked (``***``), then
        through Airflow's secrets masker, which masks the task log: what the package may write to
        lakeFS of an error's message.

        :param text: the text.
        """
        login, password = self._connection.login, self._connection.password
        for secret in (password, login):
            if secret:
                text = text.replace(secret, "***")
        try:
            text = str(airflow_redact(text))
        except Exception:  # the masker is a second net: the key pair is masked above
            pass
        return text

    # -- hard fence (the lakeFS pre-merge hook; airflow_lakefence.hardfence) -----------------

    def install_hard_fence(self, repository: str, branch: str, *, force: bool = False) -> InstallResult:
        """Install or upgrade the hard fence (a lakeFS pre-merge hook) on ``branch``, by a merge.

        :param repository: the repository.
        :param branch: the target branch whose publications it guards (may be protected).
        :param force: overwrite a foreign file at the action's path.
        :return: what was found and done.
        :raises LakeFenceError: see :func:`airflow_lakefence.hardfence.install_hard_fence`.
        """
        return install_hard_fence(self.client, repository, branch, force=force)

    def check_hard_fence(self, repository: str, ref: str) -> FenceCheck:
        """Judge the hard fence on ``ref`` (one lakeFS call).

        :param repository: the repository.
        :param ref: the commit or branch publications build on.
        :return: the fence's state (``enforced`` tells whether publications may rely on it).
        :raises LakeFSError: when lakeFS cannot answer.
        """
        return check_hard_fence(self.client, repository, ref)

    def test_connection(self) -> tuple[bool, str]:
        """Check the endpoint and the credentials with one authenticated read (the UI's *Test* button).

        The probe reads a repository nobody creates: lakeFS answers "not found" only to valid
        credentials. One try with short timeouts, so a wrong host or port answers quickly. The
        message names the endpoint (``host:port``) and says what to check; it never contains the secret.

        :return: ``(ok, message)`` as Airflow's connection test expects.
        """
        try:
            settings = self.settings
        except LakeFenceError as exc:
            return False, str(exc)
        endpoint = settings["endpoint"]
        probe = LakeFSClient(
            endpoint,
            self._connection.login,
            self._connection.password,
            verify_ssl=settings["verify_ssl"],
            read_attempts=1,
            timeout=settings["timeout"] or _PROBE_TIMEOUT,
        )
        try:
            probe.get_repository(_PROBE_REPOSITORY)
        except LakeFSRepositoryNotFoundError:
            return True, f"Connected to lakeFS at {endpoint}: the access key {self._connection.login!r} is valid"
        except LakeFSNotFoundError as exc:
            return False, (
                f"{endpoint} answered 404 to a lakeFS API call ({_server_message(exc)}): it does not look like "
                "a lakeFS server; check the endpoint URL (host, port, path)"
            )
        except LakeFSAuthError as exc:
            return False, (
                f"Authentication failed at lakeFS {endpoint} (HTTP {exc.status}: {_server_message(exc)}): check "
                f"the access key id ({self._connection.login!r}) and the secret access key"
            )
        except LakeFSConnectionError as exc:
            return False, f"Cannot reach lakeFS at {_host_port(endpoint)} ({endpoint}): {transport_cause(exc)}"
        except LakeFSError as exc:
            status = f"HTTP {exc.status}" if exc.status is not None else "no status"
            return False, f"lakeFS at {endpoint} answered the connection test with an error ({status}): {exc}"
        except LakeFenceError as exc:
            return False, f"Connection test of lakeFS at {endpoint} failed: {exc}"
        # A server that lets anyone read any repository name (no such lakeFS) still answered.
        return True, f"Connected to lakeFS at {endpoint}"


def _server_message(exc: LakeFSError) -> str:
    """The server's own words from a translated error (the adapter keeps them), else the whole message."""
    return exc.server_message or str(exc)


def _host_port(endpoint: str) -> str:
    parsed = urllib.parse.urlsplit(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{parsed.hostname}:{port}"


class LakeFSHookMixin:
    """The lazily built hook and client of an operator or sensor with a ``lakefs_conn_id``."""

    lakefs_conn_id: str

    @cached_property
    def hook(self) -> LakeFSHook:
        """The lakeFS hook, built on first use."""
        return LakeFSHook(lakefs_conn_id=self.lakefs_conn_id)

    @property
    def client(self) -> LakeFSClient:
        """The lakeFS client adapter of :attr:`hook`."""
        return self.hook.client
