"""The DAG of benchmarks/publications_view.py: one fenced Python task publishing one file into
``pubview@main`` on top of ``main``."""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_lakefence.operators import FencedPythonPublishOperator

REPOSITORY = "pubview"


def write(lakefence: Any) -> None:
    """Write one file into the attempt's workspace."""
    from pathlib import Path

    (Path(lakefence.workspace) / "out").mkdir(parents=True, exist_ok=True)
    (Path(lakefence.workspace) / "out" / "a.txt").write_text(lakefence.staging_branch or "")


with DAG("pubview", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False) as dag:
    FencedPythonPublishOperator(
        task_id="publish",
        python_callable=write,
        repository=REPOSITORY,
        target_branch="main",
        input_ref="main",
        write_mode="workspace",
    )
