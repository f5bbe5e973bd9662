"""DAGs of the hard-fence operator tests under ``dag.test()``
(tests/integration/operators/test_fenced_spark_hard_fence.py).

conf keys: repository, target, input_ref, files ({path: text} the function writes). The DAG (failure
capture, no retry delay, native rendering) comes from the shared factory, tests/dags/dag_factory.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import FencedPythonPublishOperator

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}
#: dag_id -> how many times the function ran.
RUNS: dict[str, int] = {}


def write_files(lakefence: Any, dag_run: Any = None, ti: Any = None) -> int:
    """Write the run's ``files`` into the workspace (the try number into ``out/try.txt``)."""
    RUNS[ti.dag_id] = RUNS.get(ti.dag_id, 0) + 1
    files = {**dict(dag_run.conf.get("files", {})), "out/try.txt": str(ti.try_number)}
    for path, text in files.items():
        target = lakefence.workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return len(files)


def _dag(dag_id: str, retries: int = 0, **options: Any) -> DAG:
    with failure_recording_dag(dag_id, FAILURES, retries) as dag:
        FencedPythonPublishOperator(
            task_id="publish",
            python_callable=write_files,
            repository="{{ dag_run.conf['repository'] }}",
            target_branch="{{ dag_run.conf['target'] }}",
            input_ref="{{ dag_run.conf['input_ref'] }}",
            output_prefixes=["out/"],
            stale_grace_period=0,
            **options,
        )
    return dag


required_dag = _dag("lf_hf_required", hard_fence="require")
required_retry_dag = _dag("lf_hf_required_retry", retries=1, hard_fence="require")
merge_only_retry_dag = _dag("lf_hf_merge_only_retry", retries=1, hard_fence="require", replace_by_merge=True)
