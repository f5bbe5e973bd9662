"""The one factory of the test DAGs: those run under ``dag.test()`` (fenced_test_dags, cost_dags,
reliability_dags, sensor and scoped DAGs, the Spark and Delta tiers' DAGs), a DAG that records each
failed try's exception, the fenced Spark and Python tasks configured from ``dag_run.conf``
(repository, target, input_ref, job) with the fake spark-submit; and those the Airflow stacks run
(scheduler_dags, celery_dags): :func:`stack_dag`, :func:`stack_publish`.

DAG modules import it after putting this folder on ``sys.path`` (the dags folder is not a package).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import (
    FencedPythonPublishOperator,
    FencedSparkPublishOperator,
    LakeFSResolveRefOperator,
)

# Test DAGs behave alike on every Airflow version (tests/dags/_airflow_versions.py), by path.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _airflow_versions  # noqa: F401

HERE = Path(__file__).resolve().parent
FAKE_PATH = f"{HERE.parent / 'fake_spark'}{os.pathsep}{os.environ.get('PATH', '')}"
WRITE_JOB = str(HERE.parent / "jobs" / "write_job.py")

Failures = dict[tuple[str, int], BaseException]


START = pendulum.datetime(2026, 1, 1, tz="UTC")


def failure_recording_dag(dag_id: str, failures: Failures, retries: int = 0, *, native: bool = True) -> DAG:
    """A manual DAG with native rendering (conf values keep their types, unless ``native=False``), no
    retry delay, and every failed try's exception kept in ``failures[(dag_id, try_number)]``.
    """

    def record(context: Any) -> None:
        ti = context["ti"]
        failures[(ti.dag_id, ti.try_number)] = context["exception"]

    return manual_dag(dag_id, retries, native=native, on_failure_callback=record)


def manual_dag(dag_id: str, retries: int = 0, *, native: bool = True, **callbacks: Any) -> DAG:
    """A manual DAG with native rendering, no retry delay and the given default callbacks."""
    return DAG(
        dag_id,
        schedule=None,
        start_date=START,
        catchup=False,
        render_template_as_native_obj=native,
        default_args={"retries": retries, "retry_delay": timedelta(0), **callbacks},
    )


def fenced_spark(task_id: str = "publish", *, job: str = WRITE_JOB, **kwargs: Any) -> FencedSparkPublishOperator:
    """The fenced Spark task of the test DAGs, configured from ``dag_run.conf``; ``kwargs`` override."""
    # A prefix keeps native rendering from parsing the spec.
    defaults = {**_fenced_defaults(job), "application_args": ["spec={{ dag_run.conf.get('job', {}) | tojson }}"]}
    return FencedSparkPublishOperator(task_id=task_id, **{**defaults, **kwargs})


#: Where a conf-configured test task publishes: ``dag_run.conf`` names the repository, target and input.
CONF_TARGET = {
    "repository": "{{ dag_run.conf['repository'] }}",
    "target_branch": "{{ dag_run.conf['target'] }}",
    "input_ref": "{{ dag_run.conf['input_ref'] }}",
    "stale_grace_period": 0,
}


def _fenced_defaults(job: str) -> dict[str, Any]:
    """The arguments every fenced test task shares (the job's spec excepted)."""
    return {
        "conn_id": "spark_local",
        "application": job,
        "env_vars": {"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        **CONF_TARGET,
    }


def fenced_python(task_id: str = "publish", **kwargs: Any) -> FencedPythonPublishOperator:
    """The fenced Python task of the test DAGs, publishing where ``dag_run.conf`` says; ``kwargs`` add
    the callable and override."""
    return FencedPythonPublishOperator(task_id=task_id, **{**CONF_TARGET, **kwargs})


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

    return manual_dag(dag_id, retries, on_failure_callback=record, on_retry_callback=record)


def fenced_spark_partial(task_id: str = "publish", *, job: str = WRITE_JOB, **kwargs: Any) -> Any:
    """The fenced Spark task of :func:`fenced_spark` as a mapped task: its ``partial`` (without
    ``application_args``, which the caller expands, one list per map index); ``kwargs`` override."""
    return FencedSparkPublishOperator.partial(task_id=task_id, **{**_fenced_defaults(job), **kwargs})


# -- the DAGs of the Airflow stacks (tests/scheduler, tests/celery) ---------------------------------

#: The stacks' job (tests/stack/sched_job.py): a ``.started`` and a ``.done`` signal around its writes.
STACK_JOB = str(HERE.parent / "stack" / "sched_job.py")


def stack_pool_name(repository: str, target: str) -> str:
    """The 1-slot pool of one target branch (the tier creates one per target of its DAGs)."""
    return f"lakefs_{repository}_{target}"


def stack_dag(dag_id: str, tag: str, **kwargs: Any) -> DAG:
    """A DAG of a stack tier: manual unless ``kwargs`` say otherwise, tagged with its tier."""
    return DAG(dag_id, **{"schedule": None, "start_date": START, "catchup": False, "tags": [tag], **kwargs})


def stack_publish(
    task_id: str, repository: str, target: str, input_ref: Any, *, job: str = STACK_JOB, **kwargs: Any
) -> FencedSparkPublishOperator:
    """The fenced Spark task of a stack tier: the job's spec in ``dag_run.conf["job"]``, the fake
    spark-submit, one writer per target (a 1-slot pool per target, one active try per task)."""
    return FencedSparkPublishOperator(
        task_id=task_id,
        conn_id="spark_local",
        application=job,
        application_args=["spec={{ dag_run.conf.get('job', {}) | tojson }}"],
        env_vars={"PATH": FAKE_PATH, "LAKEFENCE_TEST_PYTHON": sys.executable},
        repository=repository,
        target_branch=target,
        input_ref=input_ref,
        write_mode="workspace",
        commit_message=f"{task_id} {{{{ run_id }}}}",
        pool=stack_pool_name(repository, target),
        max_active_tis_per_dag=1,
        **kwargs,
    )


def stack_backfill(publish: Any, repository: str, target: str) -> None:
    """Inside a DAG: the backfill scenario's tasks, onto one target, five dates.

    The runs of one DAG share the target, so each run may pin its input only after the previous run
    published: depends_on_past + wait_for_downstream on the resolve task (it waits for the previous
    run's resolve *and* publish), depends_on_past on the fenced task. Without them the runs resolve
    the same HEAD and all but the first fail closed.

    :param publish: the tier's fenced-task factory (:func:`stack_publish` with its ``pre_execute``).
    """
    resolve = LakeFSResolveRefOperator(
        task_id="resolve_input", repository=repository, ref=target, depends_on_past=True, wait_for_downstream=True
    )
    publish(
        "publish",
        repository,
        target,
        resolve.output,
        depends_on_past=True,
        retries=0,
        commit_metadata={"logical_date": "{{ logical_date.isoformat() }}"},
    )
