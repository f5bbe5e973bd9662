"""DAGs of the sensor and cleaner integration tests, driven by dag_run.conf.

conf keys: repository, branch, since_ref, prefix, path, publisher_dag_id, publisher_task_id.
The publishing DAGs are those of fenced_test_dags.py.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pendulum
from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import LakeFSStagingCleanupOperator
from airflow_lakefence.sensors import AbandonedPublicationSensor, LakeFSCommitSensor, LakeFSFileSensor

REPO = "{{ dag_run.conf['repository'] }}"
FAST = {"poke_interval": 0.2, "timeout": 20}
PUBLISHERS = [
    {"dag_id": "lf_test_workspace", "task_id": "publish"},
    {"dag_id": "lf_test_direct", "task_id": "publish"},
    {"dag_id": "lf_test_retry", "task_id": "publish"},
]


class MovableClock:
    """The age-rule cleaner's clock: it stands still until a test moves it (no sleeping, no drift)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds``."""
        self.now += seconds


#: The clock of lf_clean_unscoped (the cleaner with max_age).
CLOCK = MovableClock()


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        render_template_as_native_obj=True,
        default_args={"retries": 0},
    )


def _abandoned(condition: str, **kwargs: object) -> AbandonedPublicationSensor:
    return AbandonedPublicationSensor(
        task_id="sense",
        repository=REPO,
        branch="{{ dag_run.conf.get('branch', 'main') }}",
        condition=condition,
        publisher_dag_id="{{ dag_run.conf.get('publisher_dag_id') }}",
        publisher_task_id="{{ dag_run.conf.get('publisher_task_id') }}",
        **{**FAST, **kwargs},  # type: ignore[arg-type]
    )


with _dag("lf_sense_detect") as detect_dag:
    _abandoned("detect")

with _dag("lf_sense_detect_briefly") as detect_briefly_dag:
    _abandoned("detect", timeout=1)

with _dag("lf_sense_detect_deferred") as detect_deferred_dag:
    _abandoned("detect", deferrable=True)

with _dag("lf_sense_settled") as settled_dag:
    _abandoned("settled", timeout=1)

with _dag("lf_sense_settled_deferred") as settled_deferred_dag:
    _abandoned("settled", deferrable=True)

with _dag("lf_sense_settled_reschedule") as settled_reschedule_dag:
    _abandoned("settled", mode="reschedule", poke_interval=1)


def _commit(**kwargs: object) -> LakeFSCommitSensor:
    return LakeFSCommitSensor(
        task_id="sense",
        repository=REPO,
        branch="{{ dag_run.conf.get('branch', 'main') }}",
        since_ref="{{ dag_run.conf['since_ref'] }}",
        prefix="{{ dag_run.conf.get('prefix') }}",
        **{**FAST, **kwargs},  # type: ignore[arg-type]
    )


with _dag("lf_sense_commit") as commit_dag:
    _commit(timeout=1)

with _dag("lf_sense_commit_deferred") as commit_deferred_dag:
    _commit(deferrable=True)

with _dag("lf_sense_commit_reschedule") as commit_reschedule_dag:
    _commit(mode="reschedule", poke_interval=1)


def _file(**kwargs: object) -> LakeFSFileSensor:
    return LakeFSFileSensor(
        task_id="sense",
        repository=REPO,
        ref="{{ dag_run.conf.get('branch', 'main') }}",
        path="{{ dag_run.conf['path'] }}",
        **{**FAST, **kwargs},  # type: ignore[arg-type]
    )


with _dag("lf_sense_file") as file_dag:
    _file(timeout=1)

with _dag("lf_sense_file_deferred") as file_deferred_dag:
    _file(deferrable=True)

with _dag("lf_sense_prefix_deferred") as prefix_deferred_dag:
    LakeFSFileSensor(
        task_id="sense",
        repository=REPO,
        ref="{{ dag_run.conf.get('branch', 'main') }}",
        prefix="{{ dag_run.conf['prefix'] }}",
        deferrable=True,
        **FAST,  # type: ignore[arg-type]
    )

with _dag("lf_clean") as clean_dag:
    LakeFSStagingCleanupOperator(task_id="clean", repository=REPO, publishers=PUBLISHERS)

with _dag("lf_clean_unscoped") as clean_unscoped_dag:
    LakeFSStagingCleanupOperator(task_id="clean", repository=REPO, max_age=timedelta(seconds=1), clock=CLOCK)

with _dag("lf_clean_dry_run") as clean_dry_run_dag:
    LakeFSStagingCleanupOperator(task_id="clean", repository=REPO, publishers=PUBLISHERS, dry_run=True)

with _dag("lf_clean_evidence") as clean_evidence_dag:
    LakeFSStagingCleanupOperator(task_id="clean", repository=REPO, publishers=PUBLISHERS, delete_evidence=True)
