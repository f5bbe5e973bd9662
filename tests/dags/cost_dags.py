"""DAGs of the cost-contract tests (tests/integration/test_cost_contract.py), run under ``dag.test()``.

Like fenced_test_dags.py, everything per run comes from dag_run.conf (repository, target,
input_ref, job) and the Spark engine is tests/fake_spark/spark-submit. Every fenced task also
calls :data:`PROBE` ``["try_start"]`` (when a test set it) before each try's ``execute``: the
boundary between the lakeFS calls of one attempt and the next.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator

HERE = Path(__file__).resolve().parent
FAKE_PATH = f"{HERE.parent / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
JOB = str(HERE.parent / "jobs" / "write_job.py")

#: Set by a test: ``PROBE["try_start"]`` is called with the context at the start of every try.
PROBE: dict[str, Callable[[Any], None] | None] = {"try_start": None}

#: (dag_id, try_number) -> the exception a failed try raised.
FAILURES: dict[tuple[str, int], BaseException] = {}


def _try_start(context: Any) -> None:
    hook = PROBE["try_start"]
    if hook is not None:
        hook(context)


def _record_failure(context: Any) -> None:
    ti = context["ti"]
    FAILURES[(ti.dag_id, ti.try_number)] = context["exception"]


def _fenced(**kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(
        task_id="publish",
        conn_id="spark_local",
        application=JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        env_vars={"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="{{ dag_run.conf['target'] }}",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        stale_grace_period=0,
        pre_execute=_try_start,
        **kwargs,
    )


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        render_template_as_native_obj=True,
        default_args={"retries": retries, "retry_delay": timedelta(0), "on_failure_callback": _record_failure},
    )


with _dag("lf_cost_direct") as direct_dag:
    _fenced(write_mode="direct")

with _dag("lf_cost_direct_retry", retries=1) as direct_retry_dag:
    _fenced(write_mode="direct")

with _dag("lf_cost_direct_prefixes") as direct_prefixes_dag:
    _fenced(write_mode="direct", output_prefixes=["out/"])

with _dag("lf_cost_workspace") as workspace_dag:
    _fenced(write_mode="workspace")
