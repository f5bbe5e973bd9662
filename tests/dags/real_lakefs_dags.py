"""A fenced publish with one retry whose retry callback the real-lakeFS crash tests drive.

conf keys as in fenced_test_dags.py: repository, target, input_ref, job (the write_job spec).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator

# Test DAGs behave alike on every Airflow version (tests/dags/_airflow_versions.py), by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _airflow_versions  # noqa: F401

HERE = Path(__file__).resolve().parent
FAKE_PATH = f"{HERE.parent / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
JOB = str(HERE.parent / "jobs" / "write_job.py")

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}
#: Called (in order) when a try fails and the task is retried: e.g. restart the killed lakeFS.
ON_RETRY: list[Callable[[], None]] = []


def _record_failure(context: Any) -> None:
    ti = context["ti"]
    FAILURES[(ti.dag_id, ti.try_number)] = context["exception"]


def _on_retry(context: Any) -> None:
    _record_failure(context)
    for action in ON_RETRY:
        action()


with DAG(
    "lf_real_crash",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    default_args={
        "retries": 1,
        "retry_delay": timedelta(0),
        "on_failure_callback": _record_failure,
        "on_retry_callback": _on_retry,
    },
) as crash_dag:
    FencedSparkPublishOperator(
        task_id="publish",
        conn_id="spark_local",
        application=JOB,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        env_vars={"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="{{ dag_run.conf['target'] }}",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        write_mode="workspace",
        stale_grace_period=0,
    )
