"""DAGs of the cost-contract tests (tests/integration/test_cost_contract.py), run under ``dag.test()``.

Like fenced_test_dags.py, everything per run comes from dag_run.conf (repository, target,
input_ref, job) and the Spark engine is tests/fake_spark/spark-submit. Every fenced task also
calls :data:`PROBE` ``["try_start"]`` (when a test set it) before each try's ``execute``: the
boundary between the lakeFS calls of one attempt and the next.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow.sdk import DAG

from airflow_lakefence.operators import FencedSparkPublishOperator

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, fenced_spark

#: Set by a test: ``PROBE["try_start"]`` is called with the context at the start of every try.
PROBE: dict[str, Callable[[Any], None] | None] = {"try_start": None}

#: (dag_id, try_number) -> the exception a failed try raised.
FAILURES: dict[tuple[str, int], BaseException] = {}


def _try_start(context: Any) -> None:
    hook = PROBE["try_start"]
    if hook is not None:
        hook(context)


def _fenced(**kwargs: Any) -> FencedSparkPublishOperator:
    return fenced_spark("publish", pre_execute=_try_start, **kwargs)


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return failure_recording_dag(dag_id, FAILURES, retries)


with _dag("lf_cost_direct") as direct_dag:
    _fenced(write_mode="direct")

with _dag("lf_cost_direct_retry", retries=1) as direct_retry_dag:
    _fenced(write_mode="direct")

with _dag("lf_cost_direct_prefixes") as direct_prefixes_dag:
    _fenced(write_mode="direct", output_prefixes=["out/"])

with _dag("lf_cost_workspace") as workspace_dag:
    _fenced(write_mode="workspace")
