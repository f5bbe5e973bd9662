"""A real lakeFS for one test session: the binary on a free loopback port, its data in a temp dir.

Unlike a shared instance, this one can be restarted in the middle of a test (same port, same
key-value store and blockstore), which is how the Celery tier plays "lakeFS restarted during a
publish". The admin credentials are created at first start through lakeFS's ``installation``
settings and are random per session; they only reach Airflow through a connection.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import string
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx

from tests.scheduler.harness import StackError, free_port, wait_for

#: Where the build of tests/real_lakefs puts the binary (override with this variable).
BINARY_ENV = "LAKEFENCE_LAKEFS_BINARY"
DEFAULT_BINARY = "/tmp/lakefs-bin/lakefs"


def lakefs_binary() -> str | None:
    """The lakeFS binary to run, or ``None`` when there is none."""
    candidate = os.environ.get(BINARY_ENV) or DEFAULT_BINARY
    if Path(candidate).is_file() and os.access(candidate, os.X_OK):
        return candidate
    return shutil.which("lakefs")


class LakeFSProcess:
    """A real lakeFS process; a context manager.

    :param binary: the ``lakefs`` executable.
    :param directory: data directory (default: a new temporary directory, removed on exit).
    """

    def __init__(self, binary: str, directory: Path | None = None) -> None:
        self.binary = binary
        self._own_dir = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="lakefence-reallakefs-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        alphabet = string.ascii_uppercase + string.digits
        self.access_key_id = "AKIALF" + "".join(secrets.choice(alphabet) for _ in range(14))
        self.secret_access_key = secrets.token_urlsafe(30)
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._log: IO[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The API endpoint, ``<url>/api/v1``."""
        return f"{self.url}/api/v1"

    @property
    def log_path(self) -> Path:
        """lakeFS's own log."""
        return self.directory / "lakefs.log"

    def _write_config(self) -> Path:
        config = self.directory / "config.yaml"
        # The installation block creates the admin user and key on the first start only.
        config.write_text(
            f"""listen_address: 127.0.0.1:{self.port}
database:
  type: local
  local:
    path: {self.directory / "kv"}
blockstore:
  type: local
  local:
    path: {self.directory / "data"}
auth:
  encrypt:
    secret_key: {secrets.token_hex(16)}
installation:
  user_name: admin
  access_key_id: {self.access_key_id}
  secret_access_key: {self.secret_access_key}
stats:
  enabled: false
usage_report:
  enabled: false
logging:
  level: WARN
"""
        )
        config.chmod(0o600)
        return config

    def start(self, timeout: float = 60.0) -> None:
        """Start lakeFS (again, after :meth:`stop`, on the same port and data) and wait until it answers.

        :raises StackError: if it exits or does not answer within ``timeout``.
        """
        config = self.directory / "config.yaml"
        if not config.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            config = self._write_config()
        self._log = open(self.log_path, "ab")  # closed in stop()
        self.process = subprocess.Popen(
            [self.binary, "-c", str(config), "run"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            start_new_session=True,
        )
        process = self.process

        def ready() -> bool:
            if process.poll() is not None:
                raise StackError(f"lakeFS exited with {process.returncode}; see {self.log_path}")
            try:
                response = httpx.get(f"{self.endpoint}/user", auth=(self.access_key_id, self.secret_access_key))
            except httpx.HTTPError:
                return False
            return response.status_code == 200

        wait_for("lakeFS to answer", ready, timeout)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        """Stop lakeFS (SIGTERM, SIGKILL after 20 s); the data stays for a restart."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self, down_for: float = 0.0) -> float:
        """Stop, stay down ``down_for`` seconds, start again; return the seconds it did not answer."""
        stopped = time.monotonic()
        self.stop()
        if down_for:
            time.sleep(down_for)
        self.start()
        self.restarts += 1
        return time.monotonic() - stopped

    def __enter__(self) -> LakeFSProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_dir and exc == (None, None, None):
            shutil.rmtree(self.directory, ignore_errors=True)
