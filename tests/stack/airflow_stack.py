"""A full Airflow stack on loopback for end-to-end tests: api-server, scheduler, dag-processor, triggerer.

The base of the real-scheduler tier (tests/scheduler) and the Celery tier (tests/celery, which adds
Redis and Celery workers). :class:`AirflowStack` makes a throw-away ``AIRFLOW_HOME`` whose metadata
database is a database of its own on PostgreSQL, as in production (the test process's throw-away
cluster, :func:`tests.tools.postgres.shared_cluster`, unless given a URL), uses the
LocalExecutor, puts the given DAG
files into its dags folder, migrates the database, starts the four components as subprocesses on
free loopback ports, waits until the health endpoint reports all of them healthy, and gives a
small REST client (:class:`AirflowAPI`) that drives Airflow the way the UI does (``/api/v2``,
a JWT from the simple auth manager). Everything it started is stopped on exit, even on failure:
each component's process group, and then every process still carrying the stack's marker in its
environment (task processes run in process groups of their own, Spark jobs below them).

All component logs and task logs stay in the home directory; :meth:`AirflowStack.dump_logs`
prints their tails and PostgreSQL's (the tests call it when a test fails).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import psutil
from cryptography.fernet import Fernet

from tests.tools.postgres import PostgresCluster, shared_cluster

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
#: Every process the stack starts carries this variable (value: the stack's id), so teardown finds
#: all of them, including task processes that left the components' process groups.
MARKER_ENV = "LAKEFENCE_SCHEDULER_HARNESS"

T = TypeVar("T")


class StackError(RuntimeError):
    """The stack did not come up, or a wait timed out."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
    """Poll ``probe`` until it returns a truthy value, and return that value.

    :param what: what is awaited, for the error message.
    :param probe: returns the awaited value, or something falsy to keep waiting; may raise to give up.
    :param timeout: seconds.
    :param interval: seconds between polls.
    :raises StackError: on timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise StackError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class AirflowAPI:
    """The REST calls the UI makes, on ``/api/v2`` with a bearer token.

    :param base_url: the api-server URL, e.g. ``http://127.0.0.1:8080``.
    :param token: a JWT for the API.
    """

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url = base_url
        self.http = httpx.Client(
            base_url=f"{base_url}/api/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def close(self) -> None:
        """Close the HTTP client."""
        self.http.close()

    def request(self, method: str, path: str, *, ok: Iterable[int] = (200,), **kwargs: Any) -> Any:
        """Send a request; return the decoded JSON body (``None`` when empty).

        :raises StackError: for a status not in ``ok``, with the body in the message.
        """
        response = self.http.request(method, path, **kwargs)
        if response.status_code not in tuple(ok):
            raise StackError(f"{method} {path} -> {response.status_code}: {response.text[:2000]}")
        return response.json() if response.content else None

    # -- set-up ------------------------------------------------------------------------------

    def create_pool(self, name: str, slots: int) -> None:
        """Create a pool (Admin > Pools)."""
        self.request("POST", "/pools", json={"name": name, "slots": slots, "include_deferred": True}, ok=(201,))

    def create_connection(self, conn_id: str, conn_type: str, **fields: Any) -> None:
        """Create a connection (Admin > Connections)."""
        self.request(
            "POST", "/connections", json={"connection_id": conn_id, "conn_type": conn_type, **fields}, ok=(201,)
        )

    def import_errors(self) -> list[dict[str, Any]]:
        """DAG import errors."""
        return list(self.request("GET", "/importErrors")["import_errors"])

    def dag(self, dag_id: str) -> dict[str, Any] | None:
        """The DAG, or ``None`` while the dag-processor has not parsed it yet."""
        response = self.http.get(f"/dags/{dag_id}")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise StackError(f"GET /dags/{dag_id} -> {response.status_code}: {response.text[:2000]}")
        return dict(response.json())

    def unpause(self, dag_id: str) -> None:
        """Switch the DAG on."""
        self.request("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    # -- runs --------------------------------------------------------------------------------

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Trigger a run (the "Trigger" button); return its run id."""
        body = {"logical_date": None, "conf": dict(conf or {})}
        return str(self.request("POST", f"/dags/{dag_id}/dagRuns", json=body)["dag_run_id"])

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """One DAG run."""
        return dict(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}"))

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        """All runs of a DAG, oldest logical date first."""
        body = self.request("GET", f"/dags/{dag_id}/dagRuns", params={"order_by": "logical_date", "limit": 100})
        return list(body["dag_runs"])

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        """A task instance as the grid shows it: state, try_number, start_date, id..."""
        return dict(self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}"))

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of a task instance (history and current), by try number."""
        body = self.request("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return sorted(body["task_instances"], key=lambda t: int(t["try_number"]))

    def clear(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Clear one task instance (Clear > only this task, no up/downstream), as the UI does."""
        body = {
            "dry_run": False,
            "dag_run_id": run_id,
            "task_ids": [task_id],
            "only_failed": False,
            "only_running": False,
            "include_upstream": False,
            "include_downstream": False,
            "reset_dag_runs": True,
        }
        return list(self.request("POST", f"/dags/{dag_id}/clearTaskInstances", json=body)["task_instances"])

    def mark(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        """Mark a task instance ``success`` or ``failed`` (Mark as...)."""
        self.request("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}", json={"new_state": state})

    def create_backfill(self, dag_id: str, from_date: str, to_date: str, **options: Any) -> dict[str, Any]:
        """Create a backfill (the "Backfill" dialog)."""
        body = {"dag_id": dag_id, "from_date": from_date, "to_date": to_date, **options}
        return dict(self.request("POST", "/backfills", json=body))

    def backfill(self, backfill_id: int) -> dict[str, Any]:
        """One backfill."""
        return dict(self.request("GET", f"/backfills/{backfill_id}"))

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The text of one try's log."""
        body = self.request(
            "GET",
            f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
            params={"full_content": "true"},
            headers={"Accept": "application/json"},
        )
        content = body.get("content", [])
        lines = []
        for item in content if isinstance(content, list) else [content]:
            if isinstance(item, dict):
                lines.append(" ".join(str(item.get(k, "")) for k in ("timestamp", "level", "event", "error_detail")))
            else:
                lines.append(str(item))
        return "\n".join(lines)

    def wait_ti(
        self,
        dag_id: str,
        run_id: str,
        task_id: str,
        states: Iterable[str],
        timeout: float,
        try_number: int | None = None,
    ) -> dict[str, Any]:
        """Wait until the task instance is in one of ``states`` (and at ``try_number``, if given)."""
        wanted = set(states)
        last: dict[str, Any] = {}

        def probe() -> dict[str, Any] | None:
            nonlocal last
            last = self.task_instance(dag_id, run_id, task_id)
            if last.get("state") in wanted and (try_number is None or last.get("try_number") == try_number):
                return last
            return None

        try:
            return wait_for(f"{dag_id}.{task_id} in {sorted(wanted)}", probe, timeout, interval=0.2)
        except StackError as exc:
            raise StackError(f"{exc} Last seen: state={last.get('state')} try={last.get('try_number')}") from None

    def wait_run(self, dag_id: str, run_id: str, states: Iterable[str], timeout: float) -> dict[str, Any]:
        """Wait until the DAG run is in one of ``states``."""
        wanted = set(states)

        def probe() -> dict[str, Any] | None:
            run = self.dag_run(dag_id, run_id)
            return run if run.get("state") in wanted else None

        return wait_for(f"run {dag_id}/{run_id} in {sorted(wanted)}", probe, timeout, interval=0.5)


class AirflowStack:
    """The four Airflow components on loopback, on PostgreSQL with the LocalExecutor.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`.

    :param dag_files: DAG files linked into the dags folder.
    :param connections: ``{conn_id: {"conn_type": ..., "host": ..., ...}}``, created through the API.
    :param pools: ``{name: slots}``, created through the API.
    :param home: the AIRFLOW_HOME (default: a new temporary directory, removed by a clean stop).
    :param parallelism: the executor's slots.
    :param extra_config: more ``AIRFLOW__SECTION__KEY`` settings for every component.
    :param boot_timeout: seconds for the components to report healthy.
    :param database_url: the metadata database's SQLAlchemy URL (default: a new database in the
        process's throw-away PostgreSQL cluster).
    """

    def __init__(
        self,
        dag_files: Iterable[Path],
        *,
        connections: Mapping[str, Mapping[str, Any]] | None = None,
        pools: Mapping[str, int] | None = None,
        home: Path | None = None,
        parallelism: int = 8,
        extra_config: Mapping[str, str] | None = None,
        boot_timeout: float = 120.0,
        database_url: str | None = None,
    ) -> None:
        self.dag_files = [Path(f) for f in dag_files]
        self.connections = dict(connections or {})
        self.pools = dict(pools or {})
        self._own_home = home is None
        self.home = home or Path(tempfile.mkdtemp(prefix="lakefence-scheduler-"))
        self.parallelism = parallelism
        self.extra_config = dict(extra_config or {})
        self.boot_timeout = boot_timeout
        self.stack_id = uuid.uuid4().hex
        self.database_url = database_url
        self.postgres: PostgresCluster | None = None
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.api: AirflowAPI | None = None
        #: seconds from the first component's start to all four healthy (``airflow db migrate`` excluded).
        self.boot_seconds = 0.0
        self.migrate_seconds = 0.0
        self._port = free_port()
        self.base_url = f"http://127.0.0.1:{self._port}"
        self._worker_log_port = free_port()
        self._trigger_log_port = free_port()
        # The scheduler mints the tasks' JWTs and the api-server checks them: one shared secret.
        self._jwt_secret = secrets.token_urlsafe(32)
        self._fernet_key = Fernet.generate_key().decode()  # connection passwords encrypted at rest
        self._log_files: list[IO[bytes]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> AirflowStack:
        try:
            self.start()
        except BaseException:
            self.dump_logs()
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self.dump_logs()
        self.stop(remove_home=exc_type is None)

    @property
    def logs(self) -> Path:
        """The directory of component and task logs."""
        return self.home / "logs"

    def environment(self) -> dict[str, str]:
        """The environment every component (and so every task) runs with."""
        # Nothing of the test process's own Airflow set-up (tests/conftest.py) may leak into the stack.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW_")}
        env.update(
            {
                MARKER_ENV: self.stack_id,
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.home / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": str(self.parallelism),
                "AIRFLOW__CORE__FERNET_KEY": self._fernet_key,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                # The simple auth manager then hands out admin tokens without a password (/auth/token).
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self._database_url(),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self._port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": self._jwt_secret,
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.logs),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self._worker_log_port),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self._trigger_log_port),
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "PYTHONUNBUFFERED": "1",
                **self.extra_config,
            }
        )
        return env

    def _database_url(self) -> str:
        """The metadata database: a database of the stack's own in the throw-away PostgreSQL cluster."""
        if self.database_url is None:
            self.postgres = shared_cluster()
            name = self.postgres.create_database(f"airflow_{self.stack_id[:16]}")
            self.database_url = self.postgres.url(name, driver="postgresql+psycopg2")
        return self.database_url

    def start(self) -> None:
        """Migrate the database, start the components, wait for health, create connections and pools.

        :raises StackError: if a component exits or the stack is not healthy within ``boot_timeout``.
        """
        (self.home / "dags").mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        for dag_file in self.dag_files:
            link = self.home / "dags" / dag_file.name
            if not link.exists():
                link.symlink_to(dag_file.resolve())
        env = self.environment()
        migrating = time.monotonic()
        migrate = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, check=False
        )
        self.migrate_seconds = time.monotonic() - migrating
        (self.logs / "db-migrate.log").write_text(migrate.stdout + migrate.stderr)
        if migrate.returncode != 0:
            raise StackError(f"airflow db migrate failed ({migrate.returncode}): {migrate.stderr[-3000:]}")
        started = time.monotonic()
        for name in COMPONENTS:
            self._spawn(name, env)
        self._wait_healthy()
        self.boot_seconds = time.monotonic() - started
        self.api = AirflowAPI(self.base_url, self._token())
        for conn_id, fields in self.connections.items():
            self.api.create_connection(conn_id, **fields)
        for pool, slots in self.pools.items():
            self.api.create_pool(pool, slots)

    def _spawn(self, name: str, env: dict[str, str]) -> None:
        args = [sys.executable, "-m", "airflow", name]
        if name in ("scheduler", "triggerer"):
            args.append("--skip-serve-logs")  # the api-server reads task logs from the shared folder
        log = open(self.logs / f"{name}.log", "wb")  # closed in stop()
        self._log_files.append(log)
        # A session (and so a process group) of its own: stop() can signal the whole component.
        self.processes[name] = subprocess.Popen(
            args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=self.home
        )

    def _check_alive(self) -> None:
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise StackError(f"airflow {name} exited with {proc.returncode}; see {self.logs / (name + '.log')}")

    def _wait_healthy(self) -> None:
        last: dict[str, Any] = {}

        def probe() -> bool:
            nonlocal last
            self._check_alive()
            try:
                response = httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5)
            except httpx.HTTPError:
                return False
            if response.status_code != 200:
                return False
            last = response.json()
            return all(
                (last.get(part) or {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
            )

        try:
            wait_for("a healthy Airflow stack", probe, self.boot_timeout, interval=0.5)
        except StackError as exc:
            raise StackError(f"{exc} Last health: {json.dumps(last)}") from None

    def _token(self) -> str:
        response = httpx.get(f"{self.base_url}/auth/token", timeout=10)
        if response.status_code not in (200, 201):
            raise StackError(f"GET /auth/token -> {response.status_code}: {response.text[:500]}")
        return str(response.json()["access_token"])

    def wait_for_dags(self, dag_ids: Iterable[str], timeout: float = 90.0) -> None:
        """Wait until the dag-processor has parsed every DAG; fail at once on an import error.

        :raises StackError: on an import error, a dead component or the timeout.
        """
        assert self.api is not None, "start() first"
        api, wanted = self.api, list(dag_ids)

        def probe() -> bool:
            self._check_alive()
            errors = api.import_errors()
            if errors:
                raise StackError(f"DAG import errors: {json.dumps(errors)[:3000]}")
            return all(api.dag(dag_id) is not None for dag_id in wanted)

        wait_for(f"DAGs {sorted(wanted)} to be parsed", probe, timeout, interval=0.5)

    def stop(self, remove_home: bool = False) -> list[str]:
        """Stop everything the stack started; return the processes that had to be killed at the end.

        Components get SIGTERM on their process groups, SIGKILL after 15 s; then every process still
        carrying the stack's marker (a task process or a Spark job left behind) gets SIGKILL.

        :param remove_home: remove the home directory (only one the stack created itself).
        """
        if self.api is not None:
            self.api.close()
            self.api = None
        for proc in self.processes.values():
            signal_group(proc.pid, signal.SIGTERM)
        wait_or_kill_groups(self.processes.values(), time.monotonic() + 15)
        self.processes.clear()
        leftovers = self.kill_leftovers()
        for log in self._log_files:
            log.close()
        self._log_files.clear()
        if remove_home and self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)
        return leftovers

    def marked_processes(self) -> list[psutil.Process]:
        """Live processes carrying this stack's marker (task processes and Spark jobs included)."""
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARKER_ENV) == self.stack_id:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def kill_leftovers(self) -> list[str]:
        """SIGKILL every process still carrying the marker; return their descriptions."""
        killed = []
        procs = self.marked_processes()
        for proc in procs:
            try:
                killed.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
                proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        psutil.wait_procs(procs, timeout=10)
        return killed

    def dump_logs(self, tail: int = 80) -> None:
        """Print the tail of every component log, task log and PostgreSQL's log (for a failing test's report)."""
        if self.postgres is not None:
            lines = self.postgres.log_tail().splitlines()
            print(f"\n===== PostgreSQL {self.postgres.log_path} (last {tail} lines) =====")
            print("\n".join(lines[-tail:]))
        if not self.logs.exists():
            return
        print(f"\n===== Airflow home {self.home} =====")
        print_log_tails(self.logs.rglob("*"), self.home, tail)


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal a process group, ignoring one that is gone."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def wait_or_kill_groups(processes: Iterable[subprocess.Popen[bytes]], deadline: float) -> None:
    """Wait for each process until ``deadline`` (``time.monotonic()``), then SIGKILL its process group."""
    for proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def print_log_tails(paths: Iterable[Path], base: Path, tail: int, label: str = "") -> None:
    """Print the last ``tail`` lines of each log file among ``paths`` (named relative to ``base``)."""
    for path in sorted(paths):
        try:
            lines = path.read_text(errors="replace").splitlines() if path.is_file() else None
        except OSError:
            continue
        if lines is not None:
            print(f"\n===== {label}{path.relative_to(base)} (last {tail} of {len(lines)} lines) =====")
            print("\n".join(lines[-tail:]))
