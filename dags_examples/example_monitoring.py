"""Hourly monitoring of a lakeFS branch published by FencedSparkPublishOperator.

* ``detect_abandoned`` (AbandonedPublicationSensor, ``detect``, deferrable): succeeds when the
  branch's HEAD is an abandoned publication, a commit no successful try stands behind (a worker died
  after publishing, before Airflow recorded its success). When nothing is found within the hour
  it is skipped (``soft_fail``), and so is the alert.
* ``alert``: gets the sensor's judgement (who published HEAD, which try, the task instance's state,
  whether Airflow is already retrying) and raises it to the operators. Replace the log line with
  your notifier (Slack, e-mail, PagerDuty...).
* ``clean_staging`` (LakeFSStagingCleanupOperator): deletes the staging branches of provably dead
  attempts, keeps live attempts' and evidence branches.

Repair is a human decision: see docs/abandoned-publications.md.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.common.compat.sdk import DAG, task

from airflow_lakefence.operators import LakeFSStagingCleanupOperator
from airflow_lakefence.sensors import AbandonedPublicationSensor

REPOSITORY = os.environ.get("LAKEFENCE_EXAMPLE_REPOSITORY", "example-repo")
PUBLISHER_DAG = "lakefence_example_daily_counts"
PUBLISHER_TASK = "daily_counts"

with DAG(
    "lakefence_example_monitoring",
    schedule="@hourly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={"repository": REPOSITORY, "branch": "main", "publisher_dag_id": PUBLISHER_DAG},
    tags=["lakefence", "example", "monitoring"],
) as dag:
    detect_abandoned = AbandonedPublicationSensor(
        task_id="detect_abandoned",
        repository="{{ params.repository }}",
        branch="{{ params.branch }}",
        condition="detect",
        publisher_dag_id="{{ params.publisher_dag_id }}",
        deferrable=True,  # waits in the triggerer, not in a worker slot
        poke_interval=60,
        timeout=timedelta(minutes=55),
        soft_fail=True,  # nothing abandoned this hour: skipped, not failed
    )

    @task
    def alert(found: dict[str, Any]) -> dict[str, Any]:
        """Tell the operators which publication is abandoned, and whether Airflow is repairing it."""
        import logging

        from airflow.providers.common.compat.sdk import get_current_context

        repository = get_current_context()["params"]["repository"]
        repairing = found["retry_pending"] or found["replacement_running"]
        logging.getLogger(__name__).warning(
            "ABANDONED PUBLICATION on %s: HEAD %s published by %s.%s run %s try %s (task instance %s)%s",
            repository,
            found["head"],
            found["dag_id"],
            found["task_id"],
            found["run_id"],
            found["try_number"],
            found["state"],
            "; a retry is under way" if repairing else "; nobody will replace it: repair it",
        )
        return found

    alert(detect_abandoned.output)

    LakeFSStagingCleanupOperator(
        task_id="clean_staging",
        repository="{{ params.repository }}",
        publishers=[{"dag_id": PUBLISHER_DAG, "task_id": PUBLISHER_TASK}],
        # Only for branches the cleaner cannot tie to a task instance; longer than any fenced task.
        max_age=timedelta(days=2),
    )
