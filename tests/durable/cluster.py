"""The durable-job tier's Spark cluster and its Java job, shared by the tests and the benchmark.

A standalone master whose REST server is on (the provider's durable machinery asks it for a
driver's status) and one worker whose environment holds the lakeFS credentials: the cluster
supplies them to its drivers, as a YARN or Kubernetes cluster does (docs/spark.md). The job is
tests/durable/jobs/LakefenceMarkerJob.java, compiled here (cluster deploy mode runs JVM
applications only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.spark.conftest import _free_port, standalone_master_and_worker

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class DurableCluster:
    """A standalone master (RPC, REST and web UI on loopback) and one worker.

    :param master_url: ``spark://127.0.0.1:PORT``.
    :param rest_port: the master's REST submission port.
    :param ui_port: the master's web UI port (``/json/`` lists the drivers).
    :param jar: the Java job's jar.
    :param root: logs and the worker's work dir.
    """

    master_url: str
    rest_port: int
    ui_port: int
    jar: Path
    root: Path

    def drivers(self) -> list[dict[str, Any]]:
        """Every driver the master knows, active and completed (one per submission)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as answer:
            state = json.load(answer)
        return [*state.get("activedrivers", []), *state.get("completeddrivers", [])]

    def wait_for_driver(self, state: str, count: int, timeout: float = 60) -> None:
        """Wait until ``count`` drivers are in ``state`` (``RUNNING``, ``FINISHED``...)."""
        deadline = time.monotonic() + timeout
        while sum(d.get("state") == state for d in self.drivers()) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} driver(s) {state}: not within {timeout}s ({self.drivers()})")
            time.sleep(0.3)


def _compile_job(root: Path) -> Path:
    """javac the job against PySpark's jars (the classpath a Spark job has), and jar it."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    classes = root / "classes"
    classes.mkdir()
    subprocess.run(
        ["javac", "-cp", f"{jars}/*", "-d", str(classes), str(HERE / "jobs" / "LakefenceMarkerJob.java")],
        check=True,
    )
    jar = root / "lakefence-marker-job.jar"
    subprocess.run(["jar", "cf", str(jar), "-C", str(classes), "."], check=True)
    return jar


@contextlib.contextmanager
def running_cluster(access_key_id: str, secret_access_key: str) -> Iterator[DurableCluster]:
    """A master with its REST server on and one worker holding the lakeFS credentials, until the block ends.

    :param access_key_id: the lakeFS key the cluster hands its drivers.
    :param secret_access_key: its secret (in the worker's environment only).
    """
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    spark_class = spark_home / "bin" / "spark-class"
    root = Path(tempfile.mkdtemp(prefix="lakefence-durable-cluster-"))
    (root / "work").mkdir()
    jar = _compile_job(root)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEFS_", "AIRFLOW_CONN"))}
    port, rest_port, ui_port = _free_port(), _free_port(), _free_port()
    env.update(
        {
            "SPARK_HOME": str(spark_home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_WORKER_DIR": str(root / "work"),
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_MASTER_OPTS": f"-Dspark.master.rest.enabled=true -Dspark.master.rest.port={rest_port}",
        }
    )
    worker_env = {
        **env,
        "LAKEFS_ACCESS_KEY_ID": access_key_id,
        "LAKEFS_SECRET_ACCESS_KEY": secret_access_key,
    }
    try:
        with standalone_master_and_worker(
            spark_class, root, env, port=port, ui_port=ui_port, worker_env=worker_env
        ) as master_url:
            yield DurableCluster(master_url, rest_port, ui_port, jar, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def spark_connection(cluster: DurableCluster) -> dict[str, Any]:
    """The ``spark_durable`` connection's fields: the cluster's master, cluster deploy mode, its REST port."""
    extra = {"deploy-mode": "cluster", "rest-port": str(cluster.rest_port)}
    return {"conn_type": "spark", "host": cluster.master_url, "extra": json.dumps(extra)}


def job_runs(log: Path) -> list[tuple[str, float]]:
    """The job's own log: ``(event, epoch seconds)`` per line (``start``, ``fail``, ``done``)."""
    if not log.exists():
        return []
    return [(line.split()[0], float(line.split()[-1])) for line in log.read_text().splitlines()]
