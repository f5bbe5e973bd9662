"""A real lakeFS for tests: built from its Go module, started single-node on a free local port.

lakeFS is a Go module whose ``go.mod`` carries a ``replace`` line, so ``go install ...@version``
refuses it; instead a small wrapper module (``require`` the pinned release, repeat its ``replace``
lines, a 5-line ``main`` calling ``cmd.Execute()``) is built with ``go build``.
:func:`ensure_lakefs_binary` does that once per version into a cache directory
(``$XDG_CACHE_HOME/airflow-lakefence/lakefs-v<version>/lakefs``, reused when present) and
:class:`RealLakeFS` runs it: local blockstore in a directory, health-checked, its log kept in a
file, with its KV store (branches, commits' records, auth) either

- ``local``: lakeFS's embedded store in the directory; the admin comes from the environment
  (``LAKEFS_INSTALLATION_*``), no setup call; quick to start; or
- ``postgres``: a database of its own in a throw-away PostgreSQL cluster
  (:mod:`tests.tools.postgres`; by default the process's shared one), as production
  lakeFS runs; the admin is set up through ``POST /api/v1/setup_lakefs`` (lakeFS ignores the
  ``LAKEFS_INSTALLATION_*`` variables with PostgreSQL).

:meth:`RealLakeFS.kill` (SIGKILL) and :meth:`RealLakeFS.start` again restart it on the same port
and data (the PostgreSQL cluster keeps running), for crash tests.

Environment:

- ``LAKEFENCE_LAKEFS_BINARY``: use this lakeFS binary; nothing is built.
- ``LAKEFENCE_LAKEFS_GO_MODULE``: the wrapper module directory to build (its ``go.mod`` pins the
  version). Without it a wrapper module is generated for ``LAKEFENCE_LAKEFS_VERSION``
  (default :data:`DEFAULT_LAKEFS_VERSION`) from lakeFS's own ``go.mod``/``go.sum``.
- ``LAKEFENCE_CACHE_DIR``: the cache directory (default ``$XDG_CACHE_HOME/airflow-lakefence``).
- ``LAKEFENCE_LAKEFS_WEB_UI``: ``1`` builds lakeFS with its web UI (required: a build without ``npm``
  fails), ``0`` without it; unset, with it where ``npm`` is on PATH. lakeFS embeds its UI from
  ``webui/dist``, which its Go module ships empty ("lakeFS UI Not Built"): the build copies the
  module's source, builds the UI there with ``npm ci`` and ``npm run build`` from lakeFS's own
  lock file, and builds the wrapper module against that copy (a ``replace`` line). The binary is
  cached apart (``lakefs-v<version>-webui``), so the links the provider gives into lakeFS's UI can
  be opened on real lakeFS.
- ``LAKEFENCE_REAL_LAKEFS_KV``: ``local`` (default) or ``postgres``, the KV store of every
  :class:`RealLakeFS` not given one explicitly (CI sets ``postgres``).

Example::

    binary = ensure_lakefs_binary()
    with RealLakeFS(binary, tmp_path) as lakefs_server:
        client = lakefs.Client(host=lakefs_server.url, username=lakefs_server.access_key_id,
                               password=lakefs_server.secret_access_key)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import IO, TYPE_CHECKING, Self

from tests.tools.processes import Started, read_log_tail

if TYPE_CHECKING:
    from tests.tools.postgres import PostgresCluster

#: The lakeFS release the project is tested against (served by the Go module proxy here).
DEFAULT_LAKEFS_VERSION = "1.86.0"
BINARY_ENV = "LAKEFENCE_LAKEFS_BINARY"
GO_MODULE_ENV = "LAKEFENCE_LAKEFS_GO_MODULE"
VERSION_ENV = "LAKEFENCE_LAKEFS_VERSION"
CACHE_ENV = "LAKEFENCE_CACHE_DIR"
WEB_UI_ENV = "LAKEFENCE_LAKEFS_WEB_UI"
KV_ENV = "LAKEFENCE_REAL_LAKEFS_KV"
#: The KV stores :class:`RealLakeFS` can run on.
KV_STORES = ("local", "postgres")
LAKEFS_MODULE = "github.com/treeverse/lakefs"


class RealLakeFSError(RuntimeError):
    """Real lakeFS could not be built or started (the message says why)."""


class GoToolchainMissingError(RealLakeFSError):
    """No ``go`` command: real lakeFS cannot be built here."""


# The lakeFS quickstart credentials: what lakeFS examples and docs use (and the local server's default).
DEFAULT_ACCESS_KEY_ID = "AKIAIOSFOLQUICKSTART"
DEFAULT_SECRET_ACCESS_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
_MAIN_GO = """// Command lakefs is lakeFS's own command, built from its Go module at the version go.mod pins.
package main

import "github.com/treeverse/lakefs/cmd/lakefs/cmd"

func main() { cmd.Execute() }
"""


def cache_dir() -> Path:
    """Return the cache directory of built lakeFS binaries."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airflow-lakefence"


def module_version(module_dir: str | os.PathLike[str]) -> str:
    """Return the lakeFS version a wrapper module's ``go.mod`` requires (without the ``v``).

    :param module_dir: the wrapper module directory.
    :raises RealLakeFSError: if its go.mod does not require lakeFS.
    """
    text = (Path(module_dir) / "go.mod").read_text()
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(LAKEFS_MODULE)}\s+v(\S+)", text, re.MULTILINE)
    if found is None:
        raise RealLakeFSError(f"{module_dir}/go.mod does not require {LAKEFS_MODULE}")
    return found.group(1)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise GoToolchainMissingError(
            "the Go toolchain (`go`) is not on PATH: install Go >= 1.26 to build real lakeFS, "
            f"or point {BINARY_ENV} at a lakeFS binary"
        )
    return go


def _run(args: list[str], cwd: Path, log: IO[str]) -> str:
    log.write(f"$ {' '.join(args)}  (in {cwd})\n")
    log.flush()
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    log.write(result.stdout + result.stderr)
    log.flush()
    if result.returncode != 0:
        raise RealLakeFSError(f"`{' '.join(args[:3])}` failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout


def _generate_module(go: str, version: str, target: Path, log: IO[str]) -> Path:
    """Write a wrapper module for ``version`` from lakeFS's own go.mod (replace lines) and go.sum."""
    target.mkdir(parents=True, exist_ok=True)
    info = json.loads(_run([go, "mod", "download", "-json", f"{LAKEFS_MODULE}@v{version}"], target, log))
    source = Path(info["Dir"])
    upstream_mod = (source / "go.mod").read_text()
    go_line = re.search(r"^go\s+(\S+)", upstream_mod, re.MULTILINE)
    replaces = re.findall(r"^replace\s+.*$", upstream_mod, re.MULTILINE)
    block = re.search(r"^replace\s*\((.*?)^\)", upstream_mod, re.MULTILINE | re.DOTALL)
    if block:
        replaces += [f"replace {line.strip()}" for line in block.group(1).splitlines() if line.strip()]
    (target / "go.mod").write_text(
        "module lakefence.local/real_lakefs\n\n"
        f"go {go_line.group(1) if go_line else '1.26'}\n\n"
        f"require {LAKEFS_MODULE} v{version}\n\n" + "\n".join(replaces) + "\n"
    )
    # `go mod tidy` cannot verify lakeFS's own forks against the checksum database: lakeFS's go.sum vouches.
    shutil.copyfile(source / "go.sum", target / "go.sum")
    (target / "main.go").write_text(_MAIN_GO)
    _run([go, "mod", "tidy"], target, log)
    return target


def wants_web_ui() -> bool:
    """Return whether lakeFS is built with its web UI (``LAKEFENCE_LAKEFS_WEB_UI``; unset: ``npm`` on PATH).

    :raises RealLakeFSError: for a value other than ``0`` or ``1``.
    """
    configured = os.environ.get(WEB_UI_ENV, "").strip()
    if configured not in ("", "0", "1"):
        raise RealLakeFSError(f"{WEB_UI_ENV}={configured!r}: use 1 (with lakeFS's web UI) or 0 (without)")
    return configured == "1" or (configured == "" and shutil.which("npm") is not None)


def _with_web_ui(go: str, version: str, module: Path, home: Path, log: IO[str]) -> Path:
    """Return a copy of ``module`` built against a copy of lakeFS's source whose web UI is built."""
    npm = shutil.which("npm")
    if npm is None:
        raise RealLakeFSError(
            f"{WEB_UI_ENV}=1 but `npm` is not on PATH: install Node.js >= 20.19 with npm to build lakeFS's "
            f"web UI, or set {WEB_UI_ENV}=0"
        )
    info = json.loads(_run([go, "mod", "download", "-json", f"{LAKEFS_MODULE}@v{version}"], module, log))
    source = home / "src"
    if source.exists():
        shutil.rmtree(source)
    # The module cache is read-only, and its webui/dist holds only a placeholder.
    shutil.copytree(info["Dir"], source, ignore=shutil.ignore_patterns("node_modules"))
    for path in [source, *source.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    webui = source / "webui"
    _run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], webui, log)
    _run([npm, "run", "build"], webui, log)
    if not (webui / "dist" / "index.html").exists():
        raise RealLakeFSError(f"lakeFS's web UI build left no {webui / 'dist' / 'index.html'}")
    built = home / "module-webui"
    if built.exists():
        shutil.rmtree(built)
    built.mkdir()
    for name in ("go.mod", "go.sum", "main.go"):
        shutil.copyfile(module / name, built / name)
    with open(built / "go.mod", "a") as go_mod:
        go_mod.write(f"\nreplace {LAKEFS_MODULE} => {source}\n")
    return built


def ensure_lakefs_binary(
    module_dir: str | os.PathLike[str] | None = None,
    version: str | None = None,
    log: IO[str] | None = None,
    *,
    web_ui: bool | None = None,
) -> Path:
    """Return a lakeFS binary, building it once per version into :func:`cache_dir`.

    :param module_dir: the wrapper module to build (default ``$LAKEFENCE_LAKEFS_GO_MODULE``, else
        one generated for ``version``).
    :param version: the lakeFS version when no module is given (default
        ``$LAKEFENCE_LAKEFS_VERSION`` or :data:`DEFAULT_LAKEFS_VERSION`).
    :param log: where the build's commands and output go (default ``build.log`` in the cache).
    :param web_ui: build lakeFS with its web UI (default :func:`wants_web_ui`).
    :raises GoToolchainMissingError: without ``go`` (and without a cached binary).
    :raises RealLakeFSError: if the build fails.
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RealLakeFSError(f"{BINARY_ENV}={explicit} is not an executable file")
        return Path(explicit)
    module = module_dir if module_dir is not None else os.environ.get(GO_MODULE_ENV)
    if module:
        version = module_version(module)
    version = (version or os.environ.get(VERSION_ENV) or DEFAULT_LAKEFS_VERSION).removeprefix("v")
    if web_ui is None:
        web_ui = wants_web_ui()
    home = cache_dir() / (f"lakefs-v{version}-webui" if web_ui else f"lakefs-v{version}")
    binary = home / "lakefs"
    if binary.exists():
        return binary
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        # Another session may be building the same version: wait for it, then reuse its binary.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists():
            return binary
        go = _go()
        with contextlib.ExitStack() as stack:
            out = log if log is not None else stack.enter_context(open(home / "build.log", "a"))
            source = Path(module) if module else _generate_module(go, version, home / "module", out)
            if web_ui:
                source = _with_web_ui(go, version, source.resolve(), home, out)
            partial = home / f"lakefs.partial-{os.getpid()}"
            _run(
                [go, "build", "-ldflags", f"-X {LAKEFS_MODULE}/pkg/version.Version={version}", "-o", str(partial), "."],
                source,
                out,
            )
            partial.replace(binary)
        if web_ui:
            # The UI's node_modules alone take about 700 MB; the binary embeds what it needs.
            shutil.rmtree(home / "src", ignore_errors=True)
    return binary


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the test process dies (Linux), so no lakeFS outlives it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def default_kv() -> str:
    """Return the KV store selected by ``LAKEFENCE_REAL_LAKEFS_KV`` (``local`` when unset).

    :raises RealLakeFSError: for another value.
    """
    kv = os.environ.get(KV_ENV, "").strip().lower() or "local"
    if kv not in KV_STORES:
        raise RealLakeFSError(f"{KV_ENV}={kv!r}: use one of {', '.join(KV_STORES)}")
    return kv


def free_port(host: str = "127.0.0.1") -> int:
    """Return a port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class RealLakeFS(Started):
    """A real lakeFS process: single node, local blockstore under ``data_dir``, local or PostgreSQL KV.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Repositories take storage
    namespaces ``local://<name>``.

    :param binary: the lakeFS binary (:func:`ensure_lakefs_binary`).
    :param data_dir: directory for the config, the KV store, the objects and the log; reusing it
        keeps every acknowledged write (the KV store syncs its writes).
    :param host: interface to bind.
    :param port: port to bind; 0 picks a free one at the first start (kept across restarts).
    :param access_key_id: the installation's access key id.
    :param secret_access_key: its secret.
    :param startup_timeout: seconds to wait for the health check.
    :param log_level: lakeFS's log level.
    :param kv: ``"local"`` or ``"postgres"`` (default :func:`default_kv`).
    :param postgres: the cluster of the ``postgres`` KV store (default: the process's shared one,
        :func:`tests.tools.postgres.shared_cluster`); lakeFS gets a database of its own in it.
    """

    def __init__(
        self,
        binary: str | os.PathLike[str],
        data_dir: str | os.PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        access_key_id: str = DEFAULT_ACCESS_KEY_ID,
        secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY,
        startup_timeout: float = 120.0,
        log_level: str = "INFO",
        kv: str | None = None,
        postgres: PostgresCluster | None = None,
    ) -> None:
        self.binary = Path(binary)
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.startup_timeout = startup_timeout
        self.log_level = log_level
        self.log_path = self.data_dir / "lakefs.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._encrypt_key = secrets.token_hex(16)
        self.kv = kv if kv is not None else default_kv()
        if self.kv not in KV_STORES:
            raise RealLakeFSError(f"kv={self.kv!r}: use one of {', '.join(KV_STORES)}")
        self.postgres = postgres
        #: The database of the ``postgres`` KV store (one per instance, kept across restarts).
        self.database = f"lakefs_{uuid.uuid4().hex[:12]}"

    @property
    def url(self) -> str:
        """Base URL, ``http://HOST:PORT`` (no ``/api/v1``)."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The running process's id, or ``None``."""
        return None if self._process is None else self._process.pid

    @property
    def endpoint(self) -> str:
        """The lakeFS API endpoint, ``<url>/api/v1``."""
        return f"{self.url}/api/v1"

    def _write_config(self) -> Path:
        config = self.data_dir / "config.yaml"
        # The encryption key must stay the same across restarts on the same data.
        config.write_text(
            f"listen_address: {self.host}:{self.port}\n"
            "logging:\n"
            f"  level: {self.log_level}\n"
            "  format: text\n"
            f"{self._database_config()}"
            # lakeFS's default metarange cache is ~/lakefs/data/cache: shared by every lakeFS of the
            # user, whose workspace clean-ups then break each other's commits. One per instance.
            "committed:\n"
            "  local_cache:\n"
            f"    dir: {self.data_dir / 'cache'}\n"
            "blockstore:\n"
            "  type: local\n"
            "  local:\n"
            f"    path: {self.data_dir / 'objects'}\n"
            "auth:\n"
            "  encrypt:\n"
            f"    secret_key: {self._encrypt_key}\n"
            "stats:\n"
            "  enabled: false\n"
            "usage_report:\n"
            "  enabled: false\n"
        )
        return config

    def _database_config(self) -> str:
        if self.kv == "postgres":
            assert self.postgres is not None
            url = self.postgres.url(self.database, driver="postgres")
            return f'database:\n  type: postgres\n  postgres:\n    connection_string: "{url}?sslmode=disable"\n'
        return f"database:\n  type: local\n  local:\n    path: {self.data_dir / 'kv'}\n    sync_writes: true\n"

    def _start_postgres(self) -> None:
        from tests.tools.postgres import PostgresError, shared_cluster

        try:
            if self.postgres is None:
                self.postgres = shared_cluster()
            elif not self.postgres.running:
                self.postgres.start()
            self.postgres.create_database(self.database)
        except PostgresError as exc:
            raise RealLakeFSError(f"lakeFS's PostgreSQL KV store: {exc}") from exc

    def _set_up_admin(self) -> None:
        """Create the admin with this instance's credentials, unless lakeFS is set up already (a restart)."""
        with urllib.request.urlopen(f"{self.endpoint}/setup_lakefs", timeout=10) as response:
            state = json.loads(response.read() or b"{}").get("state")
        if state == "initialized":
            return
        body = json.dumps(
            {
                "username": "admin",
                "key": {"access_key_id": self.access_key_id, "secret_access_key": self.secret_access_key},
            }
        ).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/setup_lakefs", data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30):
                pass
        except urllib.error.HTTPError as exc:
            # Never the request body: it carries the secret.
            raise RealLakeFSError(f"POST /api/v1/setup_lakefs answered {exc.code}: {exc.read()[:500]!r}") from None

    def start(self) -> Self:
        """Start lakeFS and wait until its health check answers (and, on PostgreSQL, its admin exists).

        :raises RuntimeError: if already running.
        :raises RealLakeFSError: if it exits or does not answer in time (the message ends with its log).
        """
        if self._process is not None:
            raise RuntimeError("lakeFS is already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port(self.host)
        if self.kv == "postgres":
            self._start_postgres()
        config = self._write_config()
        env = {
            **os.environ,
            "LAKEFS_INSTALLATION_USER_NAME": "admin",
            "LAKEFS_INSTALLATION_ACCESS_KEY_ID": self.access_key_id,
            "LAKEFS_INSTALLATION_SECRET_ACCESS_KEY": self.secret_access_key,
        }
        with open(self.log_path, "ab") as log:
            log.write(f"--- starting lakeFS on {self.url} ---\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                [str(self.binary), "--config", str(config), "run"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.data_dir,
                start_new_session=True,
                # PR_SET_PDEATHSIG follows the forking *thread*: only the main thread lives as long as the tests.
                preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
            )
        try:
            self._wait_healthy()
            if self.kv == "postgres":
                self._set_up_admin()
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        pause = 0.05
        while True:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise RealLakeFSError(f"lakeFS exited with {code} while starting:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/healthcheck", timeout=5) as response:
                    if response.status == 204:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RealLakeFSError(f"lakeFS did not answer within {self.startup_timeout}s:\n{self.log_tail()}")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop lakeFS (SIGTERM, SIGKILL after ``timeout`` seconds). Safe to call twice.

        :param timeout: seconds to wait for a graceful exit.
        """
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def exited(self) -> int | None:
        """Return the exit code if lakeFS died on its own (not by :meth:`stop`/:meth:`kill`), else ``None``."""
        return None if self._process is None else self._process.poll()

    def ensure_running(self) -> int | None:
        """Restart lakeFS if it died on its own (something else killed it); return its exit code then.

        :raises RealLakeFSError: if it cannot be restarted.
        """
        code = self.exited()
        if code is not None:
            self._process = None
            self.start()
        return code

    def kill(self) -> None:
        """SIGKILL lakeFS and reap it: nothing of it runs afterwards (a crash, for tests)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()

    def restart(self) -> None:
        """``kill -9`` lakeFS and start it again on the same port and data."""
        self.kill()
        self.start()

    def log_size(self) -> int:
        """Return the log's current size in bytes (to show only what a test added)."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_tail(self, since: int = 0, max_bytes: int = 20_000) -> str:
        """Return the log from byte ``since`` on, at most its last ``max_bytes`` bytes.

        :param since: offset to start from (:meth:`log_size` earlier).
        :param max_bytes: bound on the text returned.
        """
        return read_log_tail(self.log_path, since=since, max_bytes=max_bytes)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.tools.real_lakefs [--module DIR] [--version V]``: build (or find) lakeFS.

    Prints the binary's path; CI runs it once before the tests so the build is not charged to a test.
    """
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m tests.tools.real_lakefs", description=main.__doc__)
    parser.add_argument("--module", help="the wrapper Go module to build (default $LAKEFENCE_LAKEFS_GO_MODULE)")
    parser.add_argument("--version", help=f"lakeFS version without a module (default {DEFAULT_LAKEFS_VERSION})")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        binary = ensure_lakefs_binary(args.module, args.version, log=sys.stderr)
    except RealLakeFSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(binary)
    print(f"lakeFS binary ready in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
