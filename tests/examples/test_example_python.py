"""The pandas example DAG (dags_examples/example_python_publish.py) end to end under dag.test()."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import decode_metadata
from tests.conftest import REPO, load_dag_module
from tests.integration.helpers import staging_branches, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")


def _seed_events(client: Any, repository: str, tmp_path: Path) -> str:
    spec = importlib.util.spec_from_file_location("lakefence_run_demo", REPO / "dags_examples" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return str(demo.seed_events(client, repository, 700, tmp_path))


def test_the_pandas_example_publishes_users_per_day(
    lakefence_client: lakefs.Client, example_repository: str, tmp_path: Path
) -> None:
    from airflow.models.pool import Pool

    input_commit = _seed_events(lakefence_client, example_repository, tmp_path)
    Pool.create_or_update_pool(
        f"lakefs_{example_repository}_main", slots=1, description="one writer", include_deferred=False
    )
    dr = load_dag_module("examples/example_python_publish.py").dag.test(logical_date=None)
    assert dr.state == "success"
    repo = lakefs.Repository(example_repository, client=lakefence_client)
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "users_per_day")
    assert (values["decision"], values["input_ref"], values["output_ref"]) == ("merge", input_commit, head.id)
    assert head.parents == [input_commit, values["staged_commit"]]
    assert head.metadata["pipeline"] == "users_per_day" and head.message == f"users per day, run {dr.run_id}"
    assert decode_metadata(head.metadata).role == "publish"  # type: ignore[union-attr]
    assert [o.path for o in repo.ref(head.id).objects(prefix="tables/users_per_day/")] == [
        "tables/users_per_day/part-00000.parquet"
    ]
    # 700 events over 7 days, users u0..u96: every day sees 97 users (n % 97 covers all of them in 100 events).
    assert xcoms(dr, "report")["return_value"] == {f"2026-11-{d:02d}": 97 for d in range(1, 8)}
    assert staging_branches(repo) == []
