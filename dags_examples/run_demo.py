"""Run the example DAG on this machine: end to end under ``dag.test()``, or in the Airflow UI.

Everything is embedded: a SQLite Airflow metadata DB in a fresh home, local Spark (``local[2]``),
and the project's local lakeFS-compatible server on loopback (the ``testing`` extra).
``tox -e demo`` runs the first mode.

Usage:

- ``python dags_examples/run_demo.py [--home DIR] [--rows N]``: run the DAG once with
  ``dag.test()`` and print the published commit.
- ``python dags_examples/run_demo.py --ui [--port 8080] [--home DIR]``: start the local lakeFS
  server with a seeded repository, prepare Airflow (the ``lakefs_default`` and ``spark_default``
  connections, the target's 1-slot pool) and run ``airflow standalone``; trigger the DAG in the UI.
  Ctrl-C stops everything.
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
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DAG_ID = "lakefence_example_daily_counts"
REPOSITORY = "example-repo"
ACCESS_KEY_ID = "AKIAIOSFODNN7DEMO"


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
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "AIRFLOW_CONN_LAKEFS_DEFAULT": json.dumps(
                {"conn_type": "lakefs", "host": endpoint, "login": ACCESS_KEY_ID, "password": secret}
            ),
            "LAKEFENCE_EXAMPLE_REPOSITORY": REPOSITORY,
            "PYSPARK_PYTHON": sys.executable,
            # Spark would otherwise bind to the machine's external address.
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    )
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


def run_example_dag() -> Any:
    """Migrate the DB, create the target's 1-slot pool, run the DAG under ``dag.test()``."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    from airflow.models.dagbag import DagBag
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
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
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


def serve_ui(home: Path, rows: int, port: int) -> int:
    """Start lakeFS and ``airflow standalone``; return when either stops (Ctrl-C stops both)."""
    import secrets

    import lakefs

    from airflow_lakefence.testing.lakefs_server import LakeFSServer

    secret = secrets.token_urlsafe(24)
    with LakeFSServer(home / "lakefs", access_key_id=ACCESS_KEY_ID, secret_access_key=secret) as server:
        client = lakefs.Client(host=server.url, username=ACCESS_KEY_ID, password=secret)
        input_commit = seed_events(client, REPOSITORY, rows, home / "storage")
        configure_airflow(home, server.url, secret)
        prepare_ui(home, server.url, secret, port)
        print(
            f"lakeFS (local test server): {server.url}, "
            f"repository {REPOSITORY!r} seeded (main at {input_commit[:12]})\n"
            f"Airflow home: {home}\n"
            f"Starting Airflow; in a minute open http://127.0.0.1:{port}/dags/{DAG_ID} (no login),\n"
            "switch the DAG on (or tick 'unpause' in the trigger dialog), press Trigger. Ctrl-C stops.\n",
            flush=True,
        )
        # Its own process group, so that stopping it stops every Airflow component it started.
        standalone = subprocess.Popen([sys.executable, "-m", "airflow", "standalone"], cwd=home, start_new_session=True)
        try:
            return standalone.wait()
        except KeyboardInterrupt:
            print("\nStopping Airflow and lakeFS...", flush=True)
            _stop_group(standalone)
            return 0  # stopped as asked
        finally:
            # A component that outlived `airflow standalone` (it does not always stop its children).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(standalone.pid, signal.SIGKILL)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _stop_group(process: subprocess.Popen[bytes]) -> int:
    """Stop a process group: SIGTERM, then SIGKILL after a minute."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            return process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            continue
    return process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, default=None, help="Airflow home and lakeFS data (default: a temp dir)")
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--ui", action="store_true", help="run the Airflow UI (airflow standalone) instead")
    parser.add_argument("--port", type=int, default=8080, help="the Airflow UI's port (with --ui)")
    args = parser.parse_args()
    home = (args.home or Path(tempfile.mkdtemp(prefix="lakefence-demo-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    if args.ui:
        # Ctrl-C, and a plain kill, stop Airflow and lakeFS (also when started from a script).
        signal.signal(signal.SIGINT, _interrupt)
        signal.signal(signal.SIGTERM, _interrupt)
        return serve_ui(home, args.rows, args.port)

    import secrets

    import lakefs

    from airflow_lakefence.testing.lakefs_server import LakeFSServer

    secret = secrets.token_urlsafe(24)
    with LakeFSServer(home / "lakefs", access_key_id=ACCESS_KEY_ID, secret_access_key=secret) as server:
        client = lakefs.Client(host=server.url, username=ACCESS_KEY_ID, password=secret)
        input_commit = seed_events(client, REPOSITORY, args.rows, home / "storage")
        configure_airflow(home, server.url, secret)
        dag_run = run_example_dag()
        head = lakefs.Repository(REPOSITORY, client=client).branch("main").get_commit()
        print(f"\nDAG run {dag_run.run_id}: {dag_run.state}")
        print(f"input commit:     {input_commit}")
        print(f"published commit: {head.id} (first parent {head.parents[0] if head.parents else None})")
        return 0 if str(dag_run.state) in ("success", "DagRunState.SUCCESS") and head.id != input_commit else 1


if __name__ == "__main__":
    sys.exit(main())
