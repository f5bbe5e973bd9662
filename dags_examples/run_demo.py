"""Run the example DAG on this machine: end to end under ``dag.test()``, or in the Airflow UI.

Everything is embedded: a SQLite Airflow metadata DB in a fresh home, local Spark (``local[2]``),
and the project's local lakeFS-compatible server (the ``testing`` extra). Every server the demo
starts listens on 127.0.0.1 only: the Airflow UI has no login and makes every visitor an admin.
``tox -e demo`` runs the first mode.

Usage:

- ``python dags_examples/run_demo.py [--home DIR] [--rows N]``: run the DAG once with
  ``dag.test()``; print each task's outcome and time, the published commit, and where the full
  log (Airflow's task log, Spark's output) was written.
- ``python dags_examples/run_demo.py --ui [--port 8080] [--home DIR]``: start the local lakeFS
  server with a seeded repository, prepare Airflow (the ``lakefs_default`` and ``spark_default``
  connections, the target's 1-slot pool) and start Airflow's components (API server and UI,
  scheduler, DAG processor, triggerer: what ``airflow standalone`` runs, on loopback and without
  the log servers it would open on every interface); trigger the DAG in the UI. Ctrl-C stops
  everything.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DAG_ID = "lakefence_example_daily_counts"
REPOSITORY = "example-repo"
ACCESS_KEY_ID = "AKIAIOSFODNN7DEMO"
#: The only interface any server of the demo listens on.
LOOPBACK = "127.0.0.1"


def seed_events(client: Any, repository: str, rows: int, storage_root: Path) -> str:
    """Create ``repository`` with an ``events/`` parquet table on ``main``; return the commit id.

    :param client: a ``lakefs.Client``.
    :param repository: the repository name.
    :param rows: how many events to generate.
    :param storage_root: a local directory for the repository's storage namespace.
    """
    import lakefs
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = lakefs.Repository(repository, client=client).create(
        storage_namespace=f"local://{storage_root / repository}", default_branch="main", exist_ok=True
    )
    days = [f"2026-11-{1 + n % 7:02d}" for n in range(rows)]
    table = pa.table({"day": days, "user": [f"u{n % 97}" for n in range(rows)], "value": list(range(rows))})
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    main = repo.branch("main")
    main.object("events/part-00000.parquet").upload(buffer.getvalue(), pre_sign=False)
    return main.commit("seed events", metadata={"source": "run_demo"}).get_commit().id


def configure_airflow(home: Path, endpoint: str, secret: str) -> None:
    """Set the environment of an embedded Airflow before it is imported."""
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(HERE),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_LAKEFS_DEFAULT": json.dumps(
                {"conn_type": "lakefs", "host": endpoint, "login": ACCESS_KEY_ID, "password": secret}
            ),
            "LAKEFENCE_EXAMPLE_REPOSITORY": REPOSITORY,
            "PYSPARK_PYTHON": sys.executable,
            # Spark would otherwise bind to the machine's external address.
            "SPARK_LOCAL_IP": LOOPBACK,
        }
    )
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_example_dag() -> Any:
    """Migrate the DB, create the target's 1-slot pool, run the DAG under ``dag.test()``."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    # Register the DAGs and their assets as the DAG processor does: Airflow 3.0's dag.test() does not,
    # and then refuses the fenced task's outlet as an inactive asset.
    subprocess.run([sys.executable, "-m", "airflow", "dags", "reserialize"], check=True, capture_output=True)
    from airflow.models import DagBag  # airflow.dag_processing.dagbag from 3.2, airflow.models.dagbag before
    from airflow.models.pool import Pool

    Pool.create_or_update_pool(f"lakefs_{REPOSITORY}_main", slots=1, description="one writer", include_deferred=False)
    bag = DagBag(dag_folder=str(HERE))
    if bag.import_errors:
        raise SystemExit(f"DAG import errors: {bag.import_errors}")
    return bag.get_dag(DAG_ID).test()


POOL = f"lakefs_{REPOSITORY}_main"


def prepare_ui(home: Path, endpoint: str, secret: str, port: int) -> None:
    """Migrate the DB and save what the example needs, as a user would in the UI or with the CLI.

    The ``lakefs_default`` connection is stored in the metadata DB (visible and testable in the UI,
    Admin > Connections) instead of the environment; the 1-slot pool is the one
    ``airflow pools set lakefs_example-repo_main 1 "one writer"`` creates.
    """
    del os.environ["AIRFLOW_CONN_LAKEFS_DEFAULT"]
    os.environ.update(
        {
            # The API server (and UI) on loopback only: with no login anyone reaching it is an admin.
            "AIRFLOW__API__HOST": LOOPBACK,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://{LOOPBACK}:{port}",
            # A local demo: no login page, and the connection form's Test button enabled.
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            # One machine runs the API server on SQLite, the scheduler and Spark: on a busy laptop a
            # task's first Execution-API call can take longer than the 5 s default and fail the try.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        }
    )
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    from airflow.models.connection import Connection
    from airflow.models.pool import Pool
    from airflow.utils.session import create_session

    Pool.create_or_update_pool(POOL, slots=1, description="one writer per target branch", include_deferred=False)
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == "lakefs_default").delete()
        session.add(
            Connection(
                conn_id="lakefs_default",
                conn_type="lakefs",
                description="the demo's local lakeFS-compatible server",
                host=endpoint,
                login=ACCESS_KEY_ID,
                password=secret,
                extra=json.dumps({"verify_ssl": True}),
            )
        )


#: What ``airflow standalone`` runs, the API server on loopback. The log servers that the scheduler
#: (for LocalExecutor) and the triggerer would start listen on every interface at fixed ports: they
#: are skipped, the UI reads the task logs from their files on this machine.
def airflow_components(port: int) -> dict[str, list[str]]:
    """The Airflow commands the UI mode runs, by component name.

    :param port: the API server's (and UI's) port.
    """
    return {
        "api-server": ["api-server", "--host", LOOPBACK, "--port", str(port)],
        "scheduler": ["scheduler", "--skip-serve-logs"],
        "dag-processor": ["dag-processor"],
        "triggerer": ["triggerer", "--skip-serve-logs"],
    }


def serve_ui(home: Path, rows: int, port: int) -> int:
    """Start lakeFS and Airflow's components; return when one stops (Ctrl-C stops all)."""
    import secrets

    import lakefs

    from lakefence_testing.lakefs_server import LakeFSServer

    secret = secrets.token_urlsafe(24)
    with LakeFSServer(home / "lakefs", host=LOOPBACK, access_key_id=ACCESS_KEY_ID, secret_access_key=secret) as server:
        client = lakefs.Client(host=server.url, username=ACCESS_KEY_ID, password=secret)
        input_commit = seed_events(client, REPOSITORY, rows, home / "storage")
        configure_airflow(home, server.url, secret)
        prepare_ui(home, server.url, secret, port)
        logs = home / "logs" / "components"
        logs.mkdir(parents=True, exist_ok=True)
        ui = f"http://{LOOPBACK}:{port}"
        print(
            f"lakeFS (local test server): {server.url}, "
            f"repository {REPOSITORY!r} seeded (main at {input_commit[:12]})\n"
            f"Every server of the demo listens on {LOOPBACK} only (the UI has no login: every visitor is an admin).\n"
            f"Airflow home: {home}\n"
            f"Starting Airflow (API server and UI on {ui}, scheduler, DAG processor, triggerer); "
            f"their output: {logs}/",
            flush=True,
        )
        started = time.monotonic()
        processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            _start_components(processes, home, port, logs)
            failed = _wait_until_listed(f"{ui}/api/v2/dags/{DAG_ID}", processes, logs)
            if failed is not None:
                return failed
            print(
                f"The UI lists the DAG ({time.monotonic() - started:.0f} s): open {ui}/dags/{DAG_ID} (no login),\n"
                "switch the DAG on (or tick 'unpause' in the trigger dialog), press Trigger. When the run is\n"
                "green, the daily_counts task's Details tab has the 'lakeFS commit' link (a page of the local\n"
                f"lakeFS server; the branch: {server.url}/repositories/{REPOSITORY}/objects?ref=main).\n"
                "Ctrl-C stops everything.\n",
                flush=True,
            )
            return _wait_any(processes, logs)
        except KeyboardInterrupt:
            print("\nStopping Airflow and lakeFS...", flush=True)
            _stop_group(processes)
            return 0  # stopped as asked
        finally:
            # What outlived its component (Airflow does not always stop its children).
            _signal_groups(processes, signal.SIGKILL)


def _start_components(processes: dict[str, subprocess.Popen[bytes]], home: Path, port: int, logs: Path) -> None:
    """Start every component in a process group of its own, so that one signal stops it and its children."""
    for name, command in airflow_components(port).items():
        with (logs / f"{name}.log").open("ab") as out:
            processes[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", *command],
                cwd=home,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )


def _signal_groups(processes: dict[str, subprocess.Popen[bytes]], sig: signal.Signals) -> None:
    for process in processes.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)


def _exited(processes: dict[str, subprocess.Popen[bytes]], logs: Path) -> int | None:
    """The exit code of the first component that stopped (others are stopped too), else ``None``."""
    for name, process in processes.items():
        if process.poll() is not None:
            print(f"Airflow's {name} stopped (exit code {process.returncode}); see {logs / name}.log", flush=True)
            _stop_group(processes)
            return process.returncode or 1
    return None


def _wait_until_listed(url: str, processes: dict[str, subprocess.Popen[bytes]], logs: Path) -> int | None:
    """Poll the API until it lists the DAG; ``None`` when it does, else a stopped component's exit code."""
    while True:
        failed = _exited(processes, logs)
        if failed is not None:
            return failed
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as answer:
            if answer.status == 200:
                return None
        time.sleep(1)  # polling the API server while it starts and the DAG processor parses the DAGs


def _wait_any(processes: dict[str, subprocess.Popen[bytes]], logs: Path) -> int:
    while True:
        failed = _exited(processes, logs)
        if failed is not None:
            return failed
        time.sleep(1)  # polling the components' liveness


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_group(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """Stop the components' process groups: SIGTERM, then SIGKILL after a minute."""
    for sig, grace in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)):
        _signal_groups(processes, sig)
        deadline = time.monotonic() + grace
        for process in processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
        if all(process.poll() is not None for process in processes.values()):
            break
    for process in processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (and its children's: Spark's) to ``path``, appending."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with path.open("ab") as log:
        for fd in saved:
            os.dup2(log.fileno(), fd)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


def _task_story(dag_run: Any) -> list[str]:
    """One line per task of the run, in the order they ran: state, time, what it did."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    try:
        from airflow.models.xcom import XComModel as XComRow

        def read(row: Any) -> Any:
            return XComRow.deserialize_value(row)
    except ImportError:  # Airflow 2: the ORM class is XCom, and it deserializes the value when it loads a row
        from airflow.models.xcom import XCom as XComRow

        def read(row: Any) -> Any:
            return row.value

    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).all()
        rows = session.query(XComRow).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id).all()
        values: dict[str, dict[str, Any]] = {}
        for row in rows:
            values.setdefault(row.task_id, {})[row.key] = read(row)
        tis.sort(key=lambda ti: (ti.start_date is None, ti.start_date))
        lines = []
        for ti in tis:
            seconds = (ti.end_date - ti.start_date).total_seconds() if ti.start_date and ti.end_date else 0.0
            mine = values.get(ti.task_id, {})
            if "decision" in mine:
                what = (
                    f"decision {mine['decision']}: published {str(mine.get('output_ref'))[:12]}"
                    f" (staged {str(mine.get('staged_commit'))[:12]}) on main, try {ti.try_number}"
                )
            elif ti.task_id == "main_settled":
                what = "main settled: its HEAD is no abandoned publication"
            elif ti.task_id == "report" and isinstance(mine.get("return_value"), dict):
                counts = mine["return_value"]
                what = f"read back {len(counts)} days, {sum(map(int, counts.values()))} events at the published commit"
            else:
                what = ""
            lines.append(f"  {ti.task_id:<14} {ti.state!s:<8} {seconds:5.1f} s  {what}".rstrip())
        return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=None, help="Airflow home and lakeFS data (default: a temp dir)")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--ui", action="store_true", help="run the Airflow UI instead")
    parser.add_argument("--port", type=int, default=8080, help="the Airflow UI's port (with --ui)")
    args = parser.parse_args()
    home = (args.home or Path(tempfile.mkdtemp(prefix="lakefence-demo-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    if args.ui:
        # Ctrl-C, and a plain kill, stop Airflow and lakeFS (also when started from a script).
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
        return serve_ui(home, args.rows, args.port)
    return run_once(home, args.rows)


def run_once(home: Path, rows: int) -> int:
    """Run the example DAG once under ``dag.test()``: the story on the terminal, the full log in a file.

    :param home: the Airflow home and lakeFS data.
    :param rows: how many input events to seed.
    """
    import secrets

    import lakefs

    from lakefence_testing.lakefs_server import LakeFSServer

    log = home / "demo.log"
    secret = secrets.token_urlsafe(24)
    with LakeFSServer(home / "lakefs", host=LOOPBACK, access_key_id=ACCESS_KEY_ID, secret_access_key=secret) as server:
        print(
            f"lakefence demo: {DAG_ID} once under dag.test() (SQLite Airflow, local Spark,\n"
            f"local lakeFS server on {server.url}, loopback only); full log: {log}",
            flush=True,
        )
        started = time.monotonic()
        client = lakefs.Client(host=server.url, username=ACCESS_KEY_ID, password=secret)
        with _output_to(log):
            input_commit = seed_events(client, REPOSITORY, rows, home / "storage")
        print(f"  {'seed':<14} {'done':<8} {time.monotonic() - started:5.1f} s  main: events/ ({rows} rows)"
              f" at {input_commit[:12]}", flush=True)  # fmt: skip
        configure_airflow(home, server.url, secret)
        started = time.monotonic()
        with _output_to(log):
            dag_run = run_example_dag()
        for line in _task_story(dag_run):
            print(line)
        head = lakefs.Repository(REPOSITORY, client=client).branch("main").get_commit()
        print(f"DAG run {dag_run.run_id}: {dag_run.state} in {time.monotonic() - started:.0f} s")
        print(f"input commit:     {input_commit}")
        print(f"published commit: {head.id} (first parent {head.parents[0] if head.parents else None})")
        print(f"full log (Airflow's task log, Spark's output): {log}")
        print("To click through it in the Airflow UI and see the commit's page: run_demo.py --ui", flush=True)
        return 0 if str(dag_run.state) in ("success", "DagRunState.SUCCESS") and head.id != input_commit else 1


if __name__ == "__main__":
    sys.exit(main())
