"""DAGs of the durable-job tier, run under ``dag.test()``.

dag_run.conf keys: repository, input_ref, jar, seconds (how long the job sleeps), runs_log (where
the job records that it ran), fail_once (a marker path: the first job fails, ``-`` for never).
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_lakefence.operators import FencedSparkPublishOperator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "dags"))
from dag_factory import failure_recording_dag

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}


def _publish(**more: object) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish",
        conn_id="spark_durable",
        application="{{ dag_run.conf['jar'] }}",
        java_class="LakefenceMarkerJob",
        application_args=[
            "{{ dag_run.conf['seconds'] }}",
            "{{ dag_run.conf['runs_log'] }}",
            "{{ dag_run.conf.get('fail_once', '-') }}",
        ],
        driver_memory="512m",
        spark_log_level=None,
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="main",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        write_mode="direct",
        output_prefixes=["out/"],
        stale_grace_period=0,
        **more,
    )


with failure_recording_dag("lf_durable", FAILURES, retries=1, native=False) as durable_dag:
    _publish()

with failure_recording_dag("lf_not_durable", FAILURES, retries=1, native=False) as not_durable_dag:
    _publish(durable=False)
