"""``LakeFSHook``: an Airflow connection of type ``lakefs`` turned into a lakeFS client adapter."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_lakefence.exceptions import InvalidInputError, LakeFenceError
from airflow_lakefence.lakefs_client import LakeFSClient

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _as_bool(value: Any, name: str) -> bool:
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
    *extra* ``verify_ssl`` (default true), ``ui_base_url`` (for links) and ``timeout`` (seconds
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
            "verify_ssl": _as_bool(extra.get("verify_ssl", True), "verify_ssl"),
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
        return {
            "LAKECTL_CREDENTIALS_ACCESS_KEY_ID": self._connection.login,
            "LAKECTL_CREDENTIALS_SECRET_ACCESS_KEY": self._connection.password,
            "LAKEFS_ACCESS_KEY_ID": self._connection.login,
            "LAKEFS_SECRET_ACCESS_KEY": self._connection.password,
        }

    def test_connection(self) -> tuple[bool, str]:
        """Check the endpoint and credentials with one authenticated call.

        :return: ``(ok, message)`` as Airflow's connection test expects.
        """
        try:
            self.client.list_branches("lakefence-connection-test", show_hidden=False)
        except LakeFenceError as exc:
            status = getattr(exc, "status", None)
            if status == 404:  # authenticated: only the probe repository is missing
                return True, f"Connected to lakeFS at {self.endpoint}"
            return False, str(exc)
        return True, f"Connected to lakeFS at {self.endpoint}"
