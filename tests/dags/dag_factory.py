"""The one factory of the test DAGs run under ``dag.test()`` (fenced_test_dags, cost_dags,
reliability_dags): a DAG that records each failed try's exception, and the fenced Spark task
configured from ``dag_run.conf`` (repository, target, input_ref, job) with the fake spark-submit.

DAG modules load it with :func:`load` (by path: the dags folder is not a package).
"""

from __future__ import annotations

import os
import sys
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
WRITE_JOB = str(HERE.parent / "jobs" / "write_job.py")

Failures = dict[tuple[str, int], BaseException]


def failure_recording_dag(dag_id: str, failures: Failures, retries: int = 0) -> DAG:
    """A manual DAG with native rendering (conf values keep their types), no retry delay, and every
    failed try's exception kept in ``failures[(dag_id, try_number)]``.
    """

    def record(context: Any) -> None:
        ti = context["ti"]
        failures[(ti.dag_id, ti.try_number)] = context["exception"]

    return _manual_dag(dag_id, retries, on_failure_callback=record)


def _manual_dag(dag_id: str, retries: int, **callbacks: Any) -> DAG:
    """A manual DAG with native rendering, no retry delay and the given default callbacks."""
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        render_template_as_native_obj=True,
        default_args={"retries": retries, "retry_delay": timedelta(0), **callbacks},
    )


def fenced_spark(task_id: str = "publish", *, job: str = WRITE_JOB, **kwargs: Any) -> FencedSparkPublishOperator:
    """The fenced Spark task of the test DAGs, configured from ``dag_run.conf``; ``kwargs`` override."""
    # A prefix keeps native rendering from parsing the spec.
    defaults = {**_fenced_defaults(job), "application_args": ["spec={{ dag_run.conf.get('job', {}) | tojson }}"]}
    return FencedSparkPublishOperator(task_id=task_id, **{**defaults, **kwargs})


def _fenced_defaults(job: str) -> dict[str, Any]:
    """The arguments every fenced test task shares (the job's spec excepted)."""
    return {
        "conn_id": "spark_local",
        "application": job,
        "env_vars": {"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        "repository": "{{ dag_run.conf['repository'] }}",
        "target_branch": "{{ dag_run.conf['target'] }}",
        "input_ref": "{{ dag_run.conf['input_ref'] }}",
        "stale_grace_period": 0,
    }


#: (dag_id, map_index, try_number) -> the exception a failed try raised, retried tries included.
TryFailures = dict[tuple[str, int, int], BaseException]


def try_recording_dag(dag_id: str, failures: TryFailures, retries: int = 0) -> DAG:
    """:func:`failure_recording_dag` for mapped tasks and retries: every failed try's exception, also
    of a try that Airflow retries (``on_retry_callback``), in ``failures[(dag_id, map_index, try_number)]``
    (map index ``-1`` for an unmapped task).
    """

    def record(context: Any) -> None:
        ti = context["ti"]
        map_index = -1 if ti.map_index is None else ti.map_index
        failures[(ti.dag_id, map_index, ti.try_number)] = context["exception"]

    return _manual_dag(dag_id, retries, on_failure_callback=record, on_retry_callback=record)


def fenced_spark_partial(task_id: str = "publish", *, job: str = WRITE_JOB, **kwargs: Any) -> Any:
    """The fenced Spark task of :func:`fenced_spark` as a mapped task: its ``partial`` (without
    ``application_args``, which the caller expands, one list per map index); ``kwargs`` override."""
    return FencedSparkPublishOperator.partial(task_id=task_id, **{**_fenced_defaults(job), **kwargs})
