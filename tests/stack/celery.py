"""The full Airflow stack with the CeleryExecutor and several Celery workers, on loopback.

:class:`CeleryStack` extends :class:`tests.stack.airflow_stack.AirflowStack` (api-server, scheduler,
dag-processor, triggerer, the metadata database on PostgreSQL, driven through the REST API) with:

- a Redis server (Debian's ``redis-server``) on a free port, the Celery broker (db 0) and result
  backend (db 1), its data in the stack's home, nothing persisted;
- the scheduler on ``CeleryExecutor``;
- N ``airflow celery worker`` processes, each with a home of its own: its own ``AIRFLOW_HOME``,
  dags folder (a link to the same DAG file: the same code deployed twice), log folder, ``HOME``,
  ``TMPDIR`` and, as its database setting, an empty SQLite file that is *not* the metadata
  database, so nothing reaches the other components through the local disk, and a worker that
  touched the database by accident would fail instead of succeeding. Workers reach Airflow only through the
  Execution API (HTTP) and Redis, as on separate machines. Each reports its own name as the
  task instances' ``hostname`` (:mod:`tests.celery.hostname`) and as its Celery node name.

:meth:`CeleryStack.kill_worker` plays a machine dying: every process of that worker (the Celery
main process, its pool processes, the Task SDK supervisors and the task processes, which run in
process groups of their own) is stopped with SIGSTOP and then SIGKILLed, so none of them sees
the others go. :meth:`CeleryStack.start_worker` brings a worker back.

The workers' task logs are on their own disks; the api-server cannot fetch them (the hostnames are
names, not addresses), so :meth:`CeleryStack.task_log` reads them from the worker's log folder.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import psutil

from tests.celery.hostname import WORKER_NAME_ENV
from tests.stack.airflow_stack import (
    MARKER_ENV,
    AirflowStack,
    StackError,
    free_port,
    print_log_tails,
    signal_group,
    wait_for,
    wait_or_kill_groups,
)

REPO = Path(__file__).resolve().parent.parent.parent


def redis_server_binary() -> str | None:
    """The ``redis-server`` executable, or ``None`` when Redis is not installed."""
    return shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)


class CeleryStack(AirflowStack):
    """api-server, scheduler (CeleryExecutor), dag-processor, triggerer, Redis and Celery workers.

    :param dag_files: DAG files linked into every dags folder (components' and workers').
    :param workers: the workers' names; each becomes its Celery node name and its task instances' hostname.
    :param worker_concurrency: task slots per worker.
    :param kwargs: :class:`~tests.stack.airflow_stack.AirflowStack` arguments.
    """

    def __init__(
        self,
        dag_files: Iterable[Path],
        *,
        workers: Iterable[str] = ("worker-1", "worker-2"),
        worker_concurrency: int = 2,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("home", None)
        super().__init__(dag_files, **kwargs)
        if self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = Path(tempfile.mkdtemp(prefix="lakefence-celery-"))
        self.worker_names = list(workers)
        self.worker_concurrency = worker_concurrency
        self._redis_port = free_port()
        self.broker_url = f"redis://127.0.0.1:{self._redis_port}/0"
        self.result_backend = f"redis://127.0.0.1:{self._redis_port}/1"
        self.redis: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        #: seconds from the workers' start to both answering a Celery ping.
        self.workers_ready_seconds = 0.0

    # -- configuration -----------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The components' environment: the LocalExecutor stack's, on Celery and Redis."""
        env = super().environment()
        env.update(
            {
                "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
                "AIRFLOW__CELERY__BROKER_URL": self.broker_url,
                # Redis, not the database: the workers never need a database connection.
                "AIRFLOW__CELERY__RESULT_BACKEND": self.result_backend,
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(self.worker_concurrency),
                **self.extra_config,
            }
        )
        return env

    def worker_home(self, name: str) -> Path:
        """A worker's own directory (its AIRFLOW_HOME, HOME and TMPDIR are under it)."""
        return self.home / "workers" / name

    def worker_environment(self, name: str) -> dict[str, str]:
        """One worker's environment: nothing on the components' disk, only URLs and the shared config."""
        home = self.worker_home(name)
        env = self.environment()
        env.pop("AIRFLOW__API_AUTH__JWT_SECRET", None)  # tokens come with the workloads; a worker mints none
        env.update(
            {
                WORKER_NAME_ENV: name,
                "HOME": str(home / "user"),
                "TMPDIR": str(home / "tmp"),
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
                # A database of its own that nothing migrated: any use of it would fail loudly.
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'not-the-metadata-db.db'}",
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": "tests.celery.hostname.worker_hostname",
                "PYTHONPATH": str(REPO),
            }
        )
        return env

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start Redis, the four components, then the workers; wait until every worker answers a ping.

        :raises StackError: if something exits or is not ready in time.
        """
        self._start_redis()
        super().start()
        started = time.monotonic()
        for name in self.worker_names:
            self.start_worker(name, wait=False)
        self.wait_workers(self.worker_names)
        self.workers_ready_seconds = time.monotonic() - started

    def _start_redis(self) -> None:
        binary = redis_server_binary()
        if binary is None:
            raise StackError("redis-server is not installed (apt-get install -y redis-server)")
        directory = self.home / "redis"
        directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / "redis.log", "wb")  # closed in stop()
        self._log_files.append(log)
        self.redis = subprocess.Popen(
            [
                binary,
                "--port",
                str(self._redis_port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(directory),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # No stack marker: stop() ends Redis itself, after the workers (the marker sweep would come first).
            env={"PATH": "/usr/bin:/bin"},
        )
        redis = self.redis

        def ready() -> bool:
            if redis.poll() is not None:
                raise StackError(f"redis-server exited with {redis.returncode}; see {self.logs / 'redis.log'}")
            import redis as redis_client

            try:
                return bool(redis_client.Redis(port=self._redis_port, socket_timeout=2).ping())
            except redis_client.RedisError:
                return False

        wait_for("redis-server to answer", ready, 30)

    def start_worker(self, name: str, wait: bool = True) -> None:
        """Start (or restart) one Celery worker.

        :param name: one of :attr:`worker_names`.
        :param wait: wait until it answers a Celery ping.
        """
        home = self.worker_home(name)
        for sub in ("dags", "logs", "user", "tmp"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        for dag_file in self.dag_files:
            link = home / "dags" / dag_file.name
            if not link.exists():
                link.symlink_to(dag_file.resolve())
        log = open(self.logs / f"{name}.log", "ab")  # closed in stop()
        self._log_files.append(log)
        args = [
            sys.executable,
            "-m",
            "airflow",
            "celery",
            "worker",
            "--celery-hostname",
            name,
            "--concurrency",
            str(self.worker_concurrency),
            "--skip-serve-logs",  # its logs are read from its folder (the hostname is not an address)
            "--without-gossip",
            "--without-mingle",
        ]
        self.workers[name] = subprocess.Popen(
            args,
            env=self.worker_environment(name),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=home,
        )
        if wait:
            self.wait_workers([name])

    def ping(self) -> list[str]:
        """The Celery node names answering a ping now."""
        from celery import Celery

        app = Celery(broker=self.broker_url)
        try:
            answers = app.control.ping(timeout=1.0)
        finally:
            app.close()
        return sorted(node for answer in answers for node in answer)

    def wait_workers(self, names: Iterable[str], timeout: float = 120.0) -> None:
        """Wait until each named worker answers a ping; fail if one exits.

        :raises StackError: on a worker's exit or the timeout.
        """
        wanted = set(names)

        def probe() -> bool:
            for name in wanted:
                if self.workers[name].poll() is not None:
                    raise StackError(f"worker {name} exited with {self.workers[name].returncode}")
            nodes = self.ping()
            return all(any(node.endswith(f"@{name}") for node in nodes) for name in wanted)

        wait_for(f"workers {sorted(wanted)} to answer a ping", probe, timeout, interval=1.0)

    def worker_processes(self, name: str) -> list[psutil.Process]:
        """Every live process of one worker (Celery processes, supervisors, task processes, jobs).

        The worker's process tree, plus any process carrying its name in the environment (one that
        left the tree). The tree matters: Celery's processes retitle themselves (setproctitle), which
        overwrites the memory ``/proc/<pid>/environ`` shows, so their environment cannot be read back.
        """
        found: dict[int, psutil.Process] = {}
        worker = self.workers.get(name)
        if worker is not None and worker.poll() is None:
            try:
                root = psutil.Process(worker.pid)
                for proc in [root, *root.children(recursive=True)]:
                    found[proc.pid] = proc
            except psutil.NoSuchProcess:
                pass
        for proc in psutil.process_iter():
            try:
                env = proc.environ()
                if env.get(MARKER_ENV) == self.stack_id and env.get(WORKER_NAME_ENV) == name:
                    found[proc.pid] = proc
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        live = []
        for proc in found.values():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    live.append(proc)
            except psutil.NoSuchProcess:
                continue
        return live

    def kill_worker(self, name: str) -> int:
        """The worker's machine dies: SIGSTOP every process of it, then SIGKILL them; return how many.

        Stopping them first means none of them can react to another one's death (a supervisor to
        its task process, Celery to its pool), as when the machine loses power.
        """
        procs = self.worker_processes(name)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for proc in procs:
                try:
                    proc.send_signal(sig)
                except psutil.NoSuchProcess:
                    continue
        psutil.wait_procs(procs, timeout=10)
        worker = self.workers.get(name)
        if worker is not None:
            worker.wait(timeout=10)
        left = self.worker_processes(name)
        if left:
            raise StackError(f"worker {name} survived SIGKILL: {left}")
        return len(procs)

    def stop(self, remove_home: bool = False) -> list[str]:
        """Stop workers, components and Redis (see :meth:`AirflowStack.stop`)."""
        # Everything gets SIGTERM at once (workers here, components in super().stop()): the shutdowns overlap.
        for proc in self.workers.values():
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        leftovers = super().stop(remove_home=False)
        wait_or_kill_groups(self.workers.values(), deadline)
        self.workers.clear()
        if self.redis is not None:
            self.redis.terminate()
            try:
                self.redis.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.redis.kill()
                self.redis.wait(timeout=10)
            self.redis = None
        if remove_home and self._own_home:
            shutil.rmtree(self.home, ignore_errors=True)
        return leftovers

    # -- task logs on the workers' disks -----------------------------------------------------

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> tuple[str | None, str]:
        """``(worker name, log text)`` of one try, read from the worker that ran it (``None``, "" if none)."""
        relative = Path(f"dag_id={dag_id}") / f"run_id={run_id}" / f"task_id={task_id}" / f"attempt={try_number}.log"
        for name in self.worker_names:
            path = self.worker_home(name) / "logs" / relative
            if path.exists():
                return name, path.read_text(errors="replace")
        return None, ""

    def dump_logs(self, tail: int = 80) -> None:
        """Print the tails of component, worker and task logs."""
        super().dump_logs(tail)
        for name in self.worker_names:
            logs = self.worker_home(name) / "logs"
            print_log_tails(logs.rglob("*.log"), logs, tail, f"{name}: ")


def settings_summary(env: Mapping[str, str]) -> dict[str, str]:
    """The settings that bound the stale window, as the stack runs them (for the tier's report)."""
    keys = (
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL",
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY",
    )
    return {k: env[k] for k in keys if k in env}
