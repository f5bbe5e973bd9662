"""DAGs of the output-correctness tests (tests/integration/operators/test_fenced_spark_output.py), driven
by dag_run.conf.

conf keys: repository, target, input_ref, job (the write_job spec, or the commit_job spec),
output_prefixes; ``jobs`` (one spec per map index) for the mapped DAG.
The Spark engine is tests/fake_spark/spark-submit (the JVM skipped) via PATH; the protocol,
SparkSubmitHook, Airflow and lakeFS are all real. The DAGs and the fenced task come from the one
shared factory (tests/dags/dag_factory.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.providers.common.compat.sdk import Asset

from airflow_lakefence.operators import LakeFSStagingCleanupOperator

# The one shared factory, by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import TryFailures, fenced_spark, fenced_spark_partial, try_recording_dag

COMMIT_JOB = str(Path(__file__).resolve().parent.parent / "jobs" / "commit_job.py")
PREFIXES = "{{ dag_run.conf.get('output_prefixes') }}"

#: (dag_id, map_index, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: TryFailures = {}

with try_recording_dag("lf13_workspace", FAILURES) as workspace_dag:
    fenced_spark(write_mode="workspace", output_prefixes=PREFIXES)

with try_recording_dag("lf13_workspace_retry", FAILURES, retries=1) as workspace_retry_dag:
    fenced_spark(write_mode="workspace", output_prefixes=PREFIXES, allow_empty_workspace=True)

with try_recording_dag("lf13_direct", FAILURES) as direct_dag:
    fenced_spark(write_mode="direct", output_prefixes=PREFIXES)

with try_recording_dag("lf13_direct_commit", FAILURES) as direct_commit_dag:
    fenced_spark(job=COMMIT_JOB, write_mode="direct", output_prefixes=PREFIXES)

with try_recording_dag("lf13_workspace_upsert", FAILURES) as upsert_dag:
    fenced_spark(write_mode="workspace", output_prefixes=PREFIXES, output_mode="upsert")

with try_recording_dag("lf13_mapped", FAILURES) as mapped_dag:
    fenced_spark_partial(write_mode="direct").expand(
        application_args=[
            ["spec={{ dag_run.conf['jobs'][0] | tojson }}"],
            ["spec={{ dag_run.conf['jobs'][1] | tojson }}"],
        ]
    )

#: A fixed repository: asset URIs cannot be templated.
ASSET_REPOSITORY = "lakefence-i13-assets"
ASSET_URI = f"lakefs://{ASSET_REPOSITORY}/main/out"
with try_recording_dag("lf13_assets", FAILURES) as assets_dag:
    fenced_spark(write_mode="workspace", outlets=[Asset(f"{ASSET_URI}/")])

with try_recording_dag("lf13_clean", FAILURES) as clean_dag:
    LakeFSStagingCleanupOperator(
        task_id="clean",
        repository="{{ dag_run.conf['repository'] }}",
        publishers=[
            {"dag_id": dag_id, "task_id": "publish"}
            for dag_id in ("lf13_workspace", "lf13_workspace_retry", "lf13_direct", "lf13_direct_commit")
        ],
    )
