"""DAGs of the issue-13 tests (tests/integration/test_output_correctness.py), driven by dag_run.conf.

conf keys: repository, target, input_ref, job (the write_job spec, or the commit_job spec),
output_prefixes; ``jobs`` (one spec per map index) for the mapped DAG.
The Spark engine is tests/fake_spark/spark-submit (the JVM skipped) via PATH; the protocol,
SparkSubmitHook, Airflow and lakeFS are all real.
"""

from __future__ import annotations

import inspect
import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset

from airflow_lakefence.operators import FencedSparkPublishOperator, LakeFSStagingCleanupOperator

HERE = Path(__file__).resolve().parent
FAKE_PATH = f"{HERE.parent / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
WRITE_JOB = str(HERE.parent / "jobs" / "write_job.py")
COMMIT_JOB = str(HERE.parent / "jobs" / "commit_job.py")
SPEC = "spec={{ dag_run.conf.get('job', {}) | tojson }}"  # a prefix keeps native rendering from parsing it
PREFIXES = "{{ dag_run.conf.get('output_prefixes') }}"

#: (dag_id, map_index, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int, int], BaseException] = {}


def _record_failure(context: Any) -> None:
    ti = context["ti"]
    FAILURES[(ti.dag_id, -1 if ti.map_index is None else ti.map_index, ti.try_number)] = context["exception"]


def _spark(**kwargs: Any) -> dict[str, Any]:
    return {
        "conn_id": "spark_local",
        "env_vars": {"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        "repository": "{{ dag_run.conf['repository'] }}",
        "target_branch": "{{ dag_run.conf['target'] }}",
        "input_ref": "{{ dag_run.conf['input_ref'] }}",
        "stale_grace_period": 0,
        **kwargs,
    }


def _fenced(application: str = WRITE_JOB, **kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish", application=application, application_args=[SPEC], **_spark(**kwargs)
    )


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        render_template_as_native_obj=True,
        default_args={
            "retries": retries,
            "retry_delay": timedelta(0),
            "on_failure_callback": _record_failure,
            "on_retry_callback": _record_failure,
        },
    )


with _dag("lf13_workspace") as workspace_dag:
    _fenced(write_mode="workspace", output_prefixes=PREFIXES)

with _dag("lf13_workspace_retry", retries=1) as workspace_retry_dag:
    _fenced(write_mode="workspace", output_prefixes=PREFIXES, allow_empty_workspace=True)

with _dag("lf13_direct") as direct_dag:
    _fenced(write_mode="direct", output_prefixes=PREFIXES)

with _dag("lf13_direct_commit") as direct_commit_dag:
    _fenced(COMMIT_JOB, write_mode="direct", output_prefixes=PREFIXES)


upsert_dag: DAG | None = None
# The option is issue 13's: until it exists the DAG is not built (its test then fails).
if any("output_mode" in inspect.signature(cls.__init__).parameters for cls in FencedSparkPublishOperator.__mro__):
    with _dag("lf13_workspace_upsert") as upsert_dag:
        _fenced(write_mode="workspace", output_prefixes=PREFIXES, output_mode="upsert")

with _dag("lf13_mapped") as mapped_dag:
    FencedSparkPublishOperator.partial(task_id="publish", application=WRITE_JOB, **_spark(write_mode="direct")).expand(
        application_args=[
            ["spec={{ dag_run.conf['jobs'][0] | tojson }}"],
            ["spec={{ dag_run.conf['jobs'][1] | tojson }}"],
        ]
    )

#: A fixed repository: asset URIs cannot be templated.
ASSET_REPOSITORY = "lakefence-i13-assets"
ASSET_URI = f"lakefs://{ASSET_REPOSITORY}/main/out"
with _dag("lf13_assets") as assets_dag:
    _fenced(write_mode="workspace", outlets=[Asset(f"{ASSET_URI}/")])

with _dag("lf13_clean") as clean_dag:
    LakeFSStagingCleanupOperator(
        task_id="clean",
        repository="{{ dag_run.conf['repository'] }}",
        publishers=[
            {"dag_id": dag_id, "task_id": "publish"}
            for dag_id in ("lf13_workspace", "lf13_workspace_retry", "lf13_direct", "lf13_direct_commit")
        ],
    )
