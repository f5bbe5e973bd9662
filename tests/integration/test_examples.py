"""The example DAGs are tests too: they import cleanly and run end to end with real PySpark."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.metadata import decode_metadata
from tests.conftest import REPO, load_dag_module
from tests.integration.helpers import staging_branches, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")


def _demo_module() -> Any:
    spec = importlib.util.spec_from_file_location("lakefence_run_demo", REPO / "dags_examples" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dagbag_imports_examples_cleanly() -> None:
    from airflow.models.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags_examples"))
    assert bag.import_errors == {}
    assert "lakefence_example_daily_counts" in bag.dag_ids
    task = bag.get_dag("lakefence_example_daily_counts").get_task("daily_counts")
    assert task.max_active_tis_per_dag == 1
    assert task.pool == "lakefs_example-repo_main"


@pytest.mark.spark
def test_example_dag_publishes_with_real_pyspark(
    lakefs_client: lakefs.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.pool import Pool

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    input_commit = _demo_module().seed_events(lakefs_client, "example-repo", 2_000, tmp_path)
    Pool.create_or_update_pool("lakefs_example-repo_main", slots=1, description="one writer", include_deferred=False)
    dr = load_dag_module("examples/example_fenced_publish.py").dag.test()
    assert dr.state == "success"

    repo = lakefs.Repository("example-repo", client=lakefs_client)
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "daily_counts")
    assert values["decision"] == "merge"
    assert values["input_ref"] == input_commit
    assert values["output_ref"] == head.id
    assert head.parents[0] == input_commit and head.parents[1] == values["staged_commit"]
    assert head.metadata["pipeline"] == "daily_counts"
    assert decode_metadata(head.metadata).role == "publish"  # type: ignore[union-attr]
    outputs = [o.path for o in repo.ref(head.id).objects(prefix="tables/daily_counts/")]
    assert outputs and all(p.endswith(".parquet") for p in outputs)  # no _SUCCESS / .crc
    assert staging_branches(repo) == []
    counts = xcoms(dr, "report")["return_value"]
    assert sum(counts.values()) == 2_000 and len(counts) == 7


def test_docs_quote_the_example_verbatim() -> None:
    source = (REPO / "dags_examples" / "example_fenced_publish.py").read_text()
    start, end = "# [START lakefence_example]\n", "# [END lakefence_example]"
    snippet = source[source.index(start) + len(start) : source.index(end)]
    assert snippet in (REPO / "docs" / "operator.md").read_text()
