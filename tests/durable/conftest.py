"""Fixtures of the durable-job tier: the cluster of tests/durable/cluster.py for a module, its Airflow
connection, the tier's DAGs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DAGS_FOLDER, fresh_dag_module
from tests.durable.cluster import DurableCluster, running_cluster, spark_connection

HERE = Path(__file__).resolve().parent
if not (DAGS_FOLDER / "durabledags").exists():
    (DAGS_FOLDER / "durabledags").symlink_to(HERE / "dags")


@pytest.fixture(scope="module")
def durable_cluster(lakefence_server: Any) -> Iterator[DurableCluster]:
    """The module's cluster (:func:`tests.durable.cluster.running_cluster`)."""
    with running_cluster(lakefence_server.access_key_id, lakefence_server.secret_access_key) as cluster:
        yield cluster


@pytest.fixture
def durable_conn(durable_cluster: DurableCluster, monkeypatch: pytest.MonkeyPatch) -> DurableCluster:
    """The ``spark_durable`` Airflow connection: the module's master, cluster deploy mode, its REST port."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DURABLE", json.dumps(spark_connection(durable_cluster)))
    return durable_cluster


@pytest.fixture
def durable_dags() -> Any:
    """tests/durable/dags/durable_dags.py, with the failures of earlier tests forgotten."""
    return fresh_dag_module("durabledags/durable_dags.py")
