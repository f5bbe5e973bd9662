"""The example job through the lakeFS S3 gateway in local mode: S3A read of the pinned input,
Spark's own writer into the staging branch (direct mode), published by the fenced operator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lakefs
import pyarrow.parquet as pq
import pytest

from airflow_lakefence.core.records.metadata import decode_metadata
from tests.integration.helpers import staging_branches, xcoms
from tests.spark.conftest import parquet_rows, seed_events

pytestmark = [
    pytest.mark.spark,
    pytest.mark.s3a,
    pytest.mark.real_lakefs,
    pytest.mark.usefixtures("airflow_db", "lakefs_conn", "gateway_lakefs"),
]

ROWS = 20_000


def _daily_counts(repo: lakefs.Repository, ref: str) -> dict[str, int]:
    import io

    counts: dict[str, int] = {}
    for obj in repo.ref(ref).objects(prefix="tables/daily_counts/"):
        with repo.ref(ref).object(obj.path).reader(mode="rb", pre_sign=False) as fd:
            for row in pq.read_table(io.BytesIO(fd.read())).to_pylist():
                counts[row["day"]] = row["events"]
    return counts


@pytest.mark.parametrize("mode", ["direct", "workspace"])
def test_example_job_reads_the_pinned_commit_through_s3a(
    mode: str,
    s3a_dags: Any,
    lakefence_repo: lakefs.Repository,
    gateway_lakefs: Any,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    input_commit = seed_events(lakefence_repo, ROWS)
    dag = s3a_dags.example_direct_dag if mode == "direct" else s3a_dags.example_workspace_dag
    run_conf = {"repository": lakefence_repo.id, "input_ref": input_commit, "event_log_dir": tmp_path.as_uri()}
    dr = dag.test(run_conf=run_conf)
    output = "".join(capfd.readouterr())
    assert dr.state == "success", s3a_dags.FAILURES

    values = xcoms(dr, "publish")
    head = lakefence_repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == head.id
    assert head.parents == [input_commit, values["staged_commit"]]
    assert decode_metadata(head.metadata).role == "publish"  # type: ignore[union-attr]
    paths, rows = parquet_rows(lakefence_repo, head.id, "tables/daily_counts/")
    # One part file and nothing else: no _SUCCESS, no _temporary, no directory markers.
    assert len(paths) == 1 and paths[0].startswith("tables/daily_counts/part-") and paths[0].endswith(".parquet")
    assert rows == 7
    assert sum(_daily_counts(lakefence_repo, head.id).values()) == ROWS
    assert staging_branches(lakefence_repo) == []

    # The job read with Spark through S3A; the task log holds the job's output and the logged
    # spark-submit command, and neither holds the secret.
    assert f"from input commit {input_commit} (input read via s3a)" in output
    assert "Spark-Submit cmd:" in output and "--packages org.apache.hadoop:hadoop-aws:" in output
    assert gateway_lakefs.secret_access_key not in output
    logs = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(logs) == 1
    event_log = logs[0].read_text()
    assert f'"spark.lakefence.repository":"{lakefence_repo.id}"' in event_log.replace(" ", "")
    assert gateway_lakefs.secret_access_key not in event_log


def test_the_example_dag_reads_and_writes_through_s3a(
    lakefence_client: lakefs.Client, lakefence_repo: lakefs.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dags_examples/example_fenced_publish.py itself, S3A flavour, on real lakeFS: published once, counts exact."""
    import importlib.util
    import json

    from airflow.models.pool import Pool

    from tests.conftest import DAGS_FOLDER

    monkeypatch.setenv("LAKEFENCE_EXAMPLE_S3A", "1")
    monkeypatch.setenv("LAKEFENCE_EXAMPLE_REPOSITORY", lakefence_repo.id)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    Pool.create_or_update_pool(
        f"lakefs_{lakefence_repo.id}_main", slots=1, description="one writer", include_deferred=False
    )
    input_commit = seed_events(lakefence_repo, ROWS)
    # A module of its own: the example reads its flavour from the environment at import time.
    spec = importlib.util.spec_from_file_location(
        "lakefence_example_s3a", DAGS_FOLDER / "examples" / "example_fenced_publish.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    publish = example.dag.get_task("daily_counts")
    assert publish.s3a and publish.write_mode == "direct"

    dr = example.dag.test()
    assert dr.state == "success"
    values = xcoms(dr, "daily_counts")
    head = lakefence_repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == head.id
    assert values["input_ref"] == input_commit and head.parents == [input_commit, values["staged_commit"]]
    paths, rows = parquet_rows(lakefence_repo, head.id, "tables/daily_counts/")
    assert paths and all(p.endswith(".parquet") for p in paths) and rows == 7  # one row a day
    assert sum(_daily_counts(lakefence_repo, head.id).values()) == ROWS
    assert sum(xcoms(dr, "report")["return_value"].values()) == ROWS
    assert staging_branches(lakefence_repo) == []
