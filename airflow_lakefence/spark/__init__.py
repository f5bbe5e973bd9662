"""Spark: the job side of a fenced Spark job and the submit side that launches it.

- :mod:`airflow_lakefence.spark.job`: inside the job, where it reads and writes (re-exported here,
  so a job imports ``from airflow_lakefence.spark import lakefence_spark_session``);
- :mod:`airflow_lakefence.spark.submit`: in the Airflow worker, what ``spark-submit`` needs;
- :mod:`airflow_lakefence.spark.delta`: Delta Lake tables written by a fenced job.

Nothing here imports Airflow or pyspark at import time.
"""

from __future__ import annotations

from typing import Any

from airflow_lakefence.spark import job as _job
from airflow_lakefence.spark.job import *  # noqa: F403
from airflow_lakefence.spark.job import __all__ as __all__


def __getattr__(name: str) -> Any:
    # The job module's own deprecated spellings, reached through the package.
    return getattr(_job, name)
