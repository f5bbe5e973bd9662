"""A throw-away PostgreSQL cluster for tests: ``initdb`` in a temporary directory, loopback only.

Production Airflow and production lakeFS keep their state in PostgreSQL; the tests that stand for
production (the real-scheduler and Celery tiers, real lakeFS's KV store) run on one started here.
:class:`PostgresCluster` runs the server binaries of the installed PostgreSQL (Debian's
``postgresql`` package: ``$(pg_config --bindir)``, else ``/usr/lib/postgresql/<N>/bin``; or
``$LAKEFENCE_POSTGRES_BINDIR``):

- ``initdb -A trust`` into a new directory (no password: only loopback connections are accepted);
- ``postgres`` on a free port of ``127.0.0.1`` with its Unix socket in that directory, durability
  switched off (``fsync=off``: the cluster dies with the test session; a SIGKILLed lakeFS does not
  take it down, so every write lakeFS acknowledged is still there when it restarts);
- its log in ``<directory>/postgres.log`` (:meth:`PostgresCluster.log_tail` for a failing test);
- :meth:`PostgresCluster.create_database` for each user of the cluster (an Airflow stack, a lakeFS).

PostgreSQL refuses to run as root: as root, the cluster runs as the ``postgres`` user (created by
the Debian package) and its directory is handed to that user.

:func:`shared_cluster` is one cluster per process, started on first use and stopped at exit
(or by :func:`stop_shared_cluster`, which ``tests/conftest.py`` calls at the session's end).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Self

from tests.tools.processes import Started, read_log_tail

BINDIR_ENV = "LAKEFENCE_POSTGRES_BINDIR"
#: The superuser ``initdb`` creates (trust authentication: no password).
SUPERUSER = "postgres"


def postgres_bindir() -> Path | None:
    """Return the directory of PostgreSQL's server binaries (``initdb``, ``postgres``), or ``None``."""
    candidates = []
    if os.environ.get(BINDIR_ENV):
        candidates.append(os.environ[BINDIR_ENV])
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10)
            candidates.append(found.stdout.strip())

    def version(path: str) -> int:
        number = re.search(r"/(\d+)/bin$", path)
        return int(number.group(1)) if number else 0

    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists() and (Path(candidate) / "postgres").exists():
            return Path(candidate)
    return None


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _libc() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


#: Loaded before forking: the child runs as another user, who may not read this interpreter's files.
_LIBC = _libc()


def _die_with_parent() -> None:
    """In the child before exec (after the switch of user): SIGKILL it when the test process dies (Linux)."""
    if _LIBC is not None:
        try:
            _LIBC.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except AttributeError:
            pass


class PostgresError(RuntimeError):
    """The test PostgreSQL cluster could not be found, created or started (the message says why)."""


class PostgresCluster(Started):
    """A PostgreSQL cluster of its own, on ``127.0.0.1`` (context manager, or :meth:`start`/:meth:`stop`).

    :param directory: where the cluster lives (data, socket, log); default a new temporary
        directory, removed by :meth:`stop`.
    :param port: the TCP port; 0 picks a free one.
    :param startup_timeout: seconds to wait until it accepts connections.
    :param settings: more ``-c name=value`` server settings.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        port: int = 0,
        startup_timeout: float = 60.0,
        settings: dict[str, str] | None = None,
    ) -> None:
        self._own_directory = directory is None
        self.directory = Path(directory) if directory is not None else None
        self.port = port
        self.startup_timeout = startup_timeout
        self.settings = dict(settings or {})
        self._process: subprocess.Popen[bytes] | None = None
        self._bindir: Path | None = None
        self._user: pwd.struct_passwd | None = None
        self._databases: set[str] = set()
        self._lock = threading.Lock()

    @property
    def host(self) -> str:
        """The address it listens on."""
        return "127.0.0.1"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        assert self.directory is not None, "start() first"
        return self.directory / "postgres.log"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def url(self, database: str, driver: str = "postgresql") -> str:
        """A connection URL for ``database`` as the superuser (no password, loopback).

        :param database: the database name.
        :param driver: the URL scheme, e.g. ``postgresql+psycopg2`` (SQLAlchemy) or ``postgres`` (lakeFS).
        """
        return f"{driver}://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def _run_as(self) -> tuple[int | None, int | None]:
        """The user and group to run a server binary as: not root (PostgreSQL refuses root), else unchanged."""
        if self._user is None:
            return None, None
        return self._user.pw_uid, self._user.pw_gid

    def _bin(self, name: str) -> str:
        assert self._bindir is not None
        return str(self._bindir / name)

    def start(self) -> Self:
        """``initdb`` (first start only) and start the server; wait until it accepts connections.

        :raises PostgresError: without PostgreSQL's server binaries, or if it fails to start.
        """
        if self.running:
            return self
        self._bindir = postgres_bindir()
        if self._bindir is None:
            raise PostgresError(
                "PostgreSQL's server binaries (initdb, postgres) were not found: install Debian's `postgresql` "
                f"package (apt-get install -y postgresql) or set {BINDIR_ENV}"
            )
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam(SUPERUSER)
            except KeyError:
                raise PostgresError(
                    "running as root, and there is no `postgres` user to run PostgreSQL as "
                    "(Debian's postgresql package creates it)"
                ) from None
        if self.directory is None:
            # Not under pytest's tmp_path: its 0700 parents would keep the `postgres` user out.
            self.directory = Path(tempfile.mkdtemp(prefix="lakefence-pg-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            os.chown(self.directory, self._user.pw_uid, self._user.pw_gid)
        data = self.directory / "data"
        if not (data / "PG_VERSION").exists():
            init = subprocess.run(
                [self._bin("initdb"), "-A", "trust", "-U", SUPERUSER, "-E", "UTF8", "--no-sync", "-D", str(data)],
                capture_output=True,
                text=True,
                check=False,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
                cwd=self.directory,
                user=self._run_as()[0],
                group=self._run_as()[1],
            )
            if init.returncode != 0:
                raise PostgresError(f"initdb failed ({init.returncode}):\n{init.stdout[-2000:]}{init.stderr[-3000:]}")
        if not self.port:
            self.port = _free_port()
        settings = {
            "listen_addresses": self.host,
            "unix_socket_directories": str(self.directory),
            "max_connections": "300",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "logging_collector": "off",
            **self.settings,
        }
        args = [self._bin("postgres"), "-D", str(data), "-p", str(self.port)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.directory,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C.UTF-8"},
                start_new_session=True,
                # PR_SET_PDEATHSIG follows the forking thread: only the main thread lives as long as the tests.
                preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
                user=self._run_as()[0],
                group=self._run_as()[1],
            )
        finally:
            os.close(log)
        try:
            self._wait_ready()
        except BaseException:
            self.stop(remove=False)
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise PostgresError(f"postgres exited with {self._process.returncode}:\n{self.log_tail()}")
            ready = subprocess.run(
                [self._bin("pg_isready"), "-q", "-h", self.host, "-p", str(self.port), "-U", SUPERUSER],
                capture_output=True,
                check=False,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise PostgresError(f"postgres did not accept connections within {self.startup_timeout}s:\n"
                                    f"{self.log_tail()}")
            time.sleep(0.1)

    def create_database(self, name: str) -> str:
        """Create a database (once; a second call with the same name does nothing) and return its name.

        :param name: letters, digits and underscores.
        :raises PostgresError: for another name or if ``createdb`` fails.
        """
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
            raise PostgresError(f"database name {name!r}: use letters, digits and underscores (at most 63)")
        with self._lock:
            if name in self._databases:
                return name
            created = subprocess.run(
                [self._bin("createdb"), "-h", self.host, "-p", str(self.port), "-U", SUPERUSER, name],
                capture_output=True,
                text=True,
                check=False,
            )
            if created.returncode != 0 and "already exists" not in created.stderr:
                raise PostgresError(f"createdb {name} failed ({created.returncode}): {created.stderr.strip()}")
            self._databases.add(name)
        return name

    def stop(self, remove: bool | None = None, timeout: float = 20.0) -> None:
        """Stop the server (fast shutdown, SIGKILL after ``timeout``); safe to call twice.

        :param remove: remove the directory (default: when the cluster created it itself).
        :param timeout: seconds to wait for the shutdown.
        """
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # "fast" shutdown: disconnect clients, stop
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._databases.clear()
        if (self._own_directory if remove is None else remove) and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log_tail(self, max_bytes: int = 20_000) -> str:
        """Return the end of the server's log (at most ``max_bytes``)."""
        if self.directory is None:
            return ""
        return read_log_tail(self.log_path, max_bytes=max_bytes)


_SHARED: PostgresCluster | None = None
_SHARED_PID = 0
_SHARED_LOCK = threading.Lock()


def shared_cluster() -> PostgresCluster:
    """Return this process's shared cluster, started on first use (stopped at exit).

    :raises PostgresError: if it cannot be started.
    """
    global _SHARED, _SHARED_PID
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED_PID != os.getpid() or not _SHARED.running:
            if _SHARED is None or _SHARED_PID != os.getpid():
                atexit.register(stop_shared_cluster)
            _SHARED, _SHARED_PID = PostgresCluster(), os.getpid()
            _SHARED.start()
        return _SHARED


def stop_shared_cluster() -> None:
    """Stop this process's shared cluster, if this process started one (a forked child leaves it alone)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is not None and _SHARED_PID == os.getpid():
            _SHARED.stop()
        _SHARED = None
