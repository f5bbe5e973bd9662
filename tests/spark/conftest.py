"""Fixtures of the S3A / Spark-cluster tier: real lakeFS's S3 gateway, a standalone Spark cluster.

The tier needs a real lakeFS (the local test server has no S3 gateway): run it with
``--lakefs-backend=real`` or the ``LAKEFENCE_TEST_LAKEFS_*`` variables; on the local server its
tests skip. hadoop-aws comes from Maven through ``spark-submit --packages`` (Ivy cache).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lakefs
import pytest

from tests.conftest import DAGS_FOLDER, fresh_dag_module

HERE = Path(__file__).resolve().parent
if not (DAGS_FOLDER / "sparkdags").exists():
    (DAGS_FOLDER / "sparkdags").symlink_to(HERE / "dags")


@pytest.fixture
def gateway_lakefs(lakefence_server: Any) -> Any:
    """The session's lakeFS, if it serves the S3 gateway (a real lakeFS); skip otherwise."""
    if lakefence_server.is_local:
        pytest.skip("S3A needs the real lakeFS's S3 gateway (--lakefs-backend=real or LAKEFENCE_TEST_LAKEFS_*)")
    return lakefence_server


@pytest.fixture
def s3a_dags() -> Any:
    """tests/spark/dags/s3a_dags.py, with the failures of earlier tests forgotten."""
    return fresh_dag_module("sparkdags/s3a_dags.py")


def seed_events(repo: lakefs.Repository, rows: int, files: int = 2) -> str:
    """Commit ``rows`` events as ``files`` parquet files under ``events/`` on main; return the commit."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    branch = repo.branch("main")
    per_file = -(-rows // files)
    for index, start in enumerate(range(0, rows, per_file)):
        ids = range(start, min(rows, start + per_file))
        table = pa.table({"day": [f"2026-11-{1 + n % 7:02d}" for n in ids], "value": list(ids)})
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        branch.object(f"events/part-{index:05d}.parquet").upload(buffer.getvalue(), pre_sign=False)
    return branch.commit(f"seed {rows} events").get_commit().id


def parquet_rows(repo: lakefs.Repository, ref: str, prefix: str) -> tuple[list[str], int]:
    """(object paths under ``prefix`` at ``ref``, total parquet rows in them)."""
    import pyarrow.parquet as pq

    paths = sorted(o.path for o in repo.ref(ref).objects(prefix=prefix))
    rows = 0
    for path in paths:
        with repo.ref(ref).object(path).reader(mode="rb", pre_sign=False) as fd:
            rows += pq.read_metadata(io.BytesIO(fd.read())).num_rows
    return paths, rows


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(condition: Any, what: str, timeout: float, procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: a Spark daemon exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout}s")
        time.sleep(0.2)


@dataclass(frozen=True)
class SparkCluster:
    """A standalone master and one worker on loopback.

    :param master_url: ``spark://127.0.0.1:PORT``.
    :param root: the directory holding the daemons' logs and the worker's work dir.
    """

    master_url: str
    root: Path

    @property
    def work_dir(self) -> Path:
        """The worker's work dir: one directory per application, executor logs and launch commands."""
        return self.root / "work"

    def daemon_text(self) -> str:
        """Everything the daemons and executors wrote to disk (logs, launch commands, stdout/stderr)."""
        parts = []
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and path.suffix not in (".jar", ".py", ".zip"):
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)


@pytest.fixture(scope="module")
def spark_cluster() -> Iterator[SparkCluster]:
    """A standalone Spark master and one worker from PySpark's own launch classes (for the module).

    The daemons get an environment without any lakeFS credential, so executors can only get them
    the way the job hands them out (its Hadoop configuration).
    """
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    root = Path(tempfile.mkdtemp(prefix="lakefence-spark-cluster-"))
    (root / "work").mkdir()
    secrets = {v for k, v in os.environ.items() if "SECRET" in k or "PASSWORD" in k}
    env = {k: v for k, v in os.environ.items() if v not in secrets and not k.startswith(("LAKEFS_", "AIRFLOW_CONN"))}
    env.update(
        {
            "SPARK_HOME": str(spark_home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(root / "work"),
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    with standalone_master_and_worker(spark_class, root, env) as master_url:
        yield SparkCluster(master_url, root)

@contextlib.contextmanager
def standalone_master_and_worker(
    spark_class: Path,
    root: Path,
    env: dict[str, str],
    *,
    port: int | None = None,
    ui_port: int | None = None,
    worker_env: dict[str, str] | None = None,
) -> Iterator[str]:
    """A standalone master and one worker (2 cores, 1 GiB) on loopback, logging under ``root``; yields
    the master's URL and stops both when the block ends.

    :param spark_class: PySpark's ``bin/spark-class``.
    :param root: where the logs go.
    :param env: the daemons' environment.
    :param port: the master's port (a free one when ``None``).
    :param ui_port: the master's web UI port (a free one when ``None``).
    :param worker_env: the worker's environment, when it differs from ``env``.
    """
    port = port or _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    master_log, worker_log = root / "master.log", root / "worker.log"
    try:
        with master_log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                     "--port", str(port), "--webui-port", str(ui_port or _free_port())],
                    env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                )
            )  # fmt: skip
        _wait_for(lambda: "I have been elected leader" in master_log.read_text(errors="replace"), "master", 90, procs)
        with worker_log.open("wb") as out:
            procs.append(
                subprocess.Popen(
                    [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port()), master_url],
                    env=worker_env or env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                )
            )  # fmt: skip
        _wait_for(
            lambda: "Successfully registered with master" in worker_log.read_text(errors="replace"),
            "worker registration",
            90,
            procs,
        )
        yield master_url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def spark_cluster_conn(spark_cluster: SparkCluster, monkeypatch: pytest.MonkeyPatch) -> SparkCluster:
    """The ``spark_cluster`` Airflow connection: the session's master, client deploy mode."""
    conn = {"conn_type": "spark", "host": spark_cluster.master_url, "extra": {"deploy-mode": "client"}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps(conn))
    return spark_cluster
