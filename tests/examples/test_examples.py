"""The example DAGs are tests too: they import cleanly and run end to end with real PySpark."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import decode_metadata
from tests.conftest import REPO, load_dag_module
from tests.integration.helpers import attempt_and_summary, only, staging_branches, xcoms

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
    assert task.max_active_tis_per_dag == 1  # the operator's own default: one writer per target
    assert task.pool == "lakefs_example-repo_main"
    assert task.input_ref == "main"


#: The loggers of the fenced task's lines: the operator's and the Spark provider's hook's.
TASK_LOGGERS = (
    "operators.airflow_lakefence.operators.fenced_spark.FencedSparkPublishOperator",
    "hooks.airflow.providers.apache.spark.hooks.spark_submit.SparkSubmitHook",
)
#: A line Spark's log4j console appender prints at INFO ("26/11/24 21:40:33 INFO SparkContext: ...").
SPARK_INFO = re.compile(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ")


@pytest.mark.spark
def test_example_dag_publishes_with_real_pyspark(
    lakefence_client: lakefs.Client,
    example_repository: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow.models.pool import Pool

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    input_commit = _demo_module().seed_events(lakefence_client, example_repository, 2_000, tmp_path)
    Pool.create_or_update_pool(
        f"lakefs_{example_repository}_main", slots=1, description="one writer", include_deferred=False
    )
    # Register every DAG (the asset consumer included) as the dag processor would.
    subprocess.run([sys.executable, "-m", "airflow", "dags", "reserialize"], check=True, capture_output=True)
    capfd.readouterr()
    # No logical date: what the REST API gives a manual run by default.
    dr = load_dag_module("examples/example_fenced_publish.py").dag.test(logical_date=None)
    log = "".join(capfd.readouterr()).splitlines()
    assert dr.state == "success"
    assert dr.logical_date is None

    repo = lakefs.Repository(example_repository, client=lakefence_client)
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "daily_counts")
    assert values["decision"] == "merge"
    assert values["input_ref"] == input_commit
    assert values["output_ref"] == head.id
    assert head.parents[0] == input_commit and head.parents[1] == values["staged_commit"]
    assert head.message == f"daily counts, run {dr.run_id}"
    assert head.metadata["pipeline"] == "daily_counts"
    assert decode_metadata(head.metadata).role == "publish"  # type: ignore[union-attr]
    outputs = [o.path for o in repo.ref(head.id).objects(prefix="tables/daily_counts/")]
    assert outputs and all(p.endswith(".parquet") for p in outputs)  # no _SUCCESS / .crc
    assert staging_branches(repo) == []
    counts = xcoms(dr, "report")["return_value"]
    assert sum(counts.values()) == 2_000 and len(counts) == 7
    assert values["_link_LakeFSCommitLink"].endswith(f"/repositories/{example_repository}/commits/{head.id}")

    # The fenced task's log: the attempt before the job, spark-submit's output (the provider streams
    # each line into the task log) without Spark's INFO chatter (spark_log_level="WARN" by default,
    # applied when the SparkContext starts: only its first few lines come before), the summary after.
    # The lines the operator and the Spark hook logged (Airflow's own lines around them vary).
    task_log = [line for line in log if any(f"[airflow.task.{name}]" in line for name in TASK_LOGGERS)]
    submit = only(task_log, "Spark-Submit cmd:")
    assert "--conf spark.log.level=WARN" in task_log[submit]
    spark_info = [line for line in task_log if SPARK_INFO.search(line)]
    # Measured: 294 such lines (281 Spark INFO) without the default, 17 (3: the pattern does match) with it.
    assert 0 < len(spark_info) <= 5 and len(task_log) < 40, (len(task_log), spark_info)
    # No warning a reader would have to judge: PySpark's about pandas >= 3 (the extras pin pandas < 3),
    # nor any about the provider's or the example's own code.
    assert not [line for line in log if "FutureWarning" in line], [line for line in log if "FutureWarning" in line]
    ours = [line for line in log if "Warning" in line and ("airflow_lakefence" in line or "dags_examples" in line)]
    assert not ours, ours
    attempt, summary = attempt_and_summary(
        task_log, input_commit, values, (head.id, values["staged_commit"], "1 files")
    )
    assert attempt < submit < only(task_log, f"wrote 7 days from input commit {input_commit}") < summary
    assert f"lakeFS commit: {values['_link_LakeFSCommitLink']}" in task_log[summary + 1]

    # What `tox -e demo` prints of such a run: one line per task, in the order they ran.
    story = _demo_module()._task_story(dr)
    assert [line.split()[:2] for line in story] == [
        [task, "success"] for task in ("daily_counts", "main_settled", "report")
    ], story
    assert story[0].endswith(
        f"decision merge: published {head.id[:12]} (staged {values['staged_commit'][:12]}) on main, try 1"
    )
    assert story[2].endswith("read back 7 days, 2000 events at the published commit")

    # The publication emitted one asset event naming the exact commit, which queues the consumer DAG.
    from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
    from airflow.utils.session import create_session

    uri = f"lakefs://{example_repository}/main/tables/daily_counts"
    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
        ).all()
        assert [e.extra["output_ref"] for e in events] == [head.id]
        assert events[0].extra["input_ref"] == input_commit and events[0].extra["decision"] == "merge"
        queued = [q.target_dag_id for q in session.query(AssetDagRunQueue).all()]
        assert "lakefence_example_daily_counts_consumer" in queued
        consumer = load_dag_module("examples/example_asset_consumer.py")
        task = consumer.dag.get_task("published_commits")
        assert task.python_callable(triggering_asset_events={consumer.DAILY_COUNTS: events}) == [head.id]


@pytest.mark.parametrize(
    ("example", "marker"),
    [("example_fenced_publish.py", "lakefence_example"), ("example_asset_consumer.py", "lakefence_asset_consumer")],
)
def test_docs_quote_the_examples(example: str, marker: str) -> None:
    """docs/operator.md includes each example between its markers (the Sphinx -W build fails on a missing one)."""
    source = (REPO / "dags_examples" / example).read_text()
    assert f"# [START {marker}]\n" in source and f"# [END {marker}]" in source
    docs = (REPO / "docs" / "operator.md").read_text()
    assert f"../dags_examples/{example}" in docs and f'"[START {marker}]"' in docs and f'"[END {marker}]"' in docs
