"""Run the example DAG end to end on this machine and print the published commit.

Everything is embedded: a SQLite Airflow metadata DB in a fresh home, local Spark (``local[2]``),
and the project's local lakeFS-compatible server on loopback. ``tox -e demo`` runs this file.

Usage: ``python dags_examples/run_demo.py [--home DIR] [--rows N]``
"""

from __future__ import annotations

import argparse
import io
import json
import os
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--home", type=Path, default=None, help="Airflow home and lakeFS data (default: a temp dir)")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    home = (args.home or Path(tempfile.mkdtemp(prefix="lakefence-demo-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)

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
