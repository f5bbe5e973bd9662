"""DAGs of the cost-contract tests (tests/integration/cost/test_cost_contract.py), run under ``dag.test()``.

Like fenced_test_dags.py, everything per run comes from dag_run.conf (repository, target,
input_ref, job) and the Spark engine is tests/fake_spark/spark-submit. Every fenced task also
calls :data:`PROBE` ``["try_start"]`` (when a test set it) before each try's ``execute``: the
boundary between the lakeFS calls of one attempt and the next.

The hard-fence table's DAGs (``hf_*``, docs/hard-fence.md) run a Python function in workspace mode
instead (the same engine, no Spark): each try writes conf ``files_by_try[str(try_number)]``
({path: text}; nothing when absent), so one run can merge, replace and relocate.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lakefence.operators import FencedPythonPublishOperator, FencedSparkPublishOperator

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, fenced_python, fenced_spark

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


def write_try_files(lakefence: Any, dag_run: Any = None, ti: Any = None) -> int:
    """Write this try's ``files_by_try`` entry into the workspace; return how many files."""
    files = dict(dag_run.conf.get("files_by_try", {}).get(str(ti.try_number), {}))
    for path, text in files.items():
        target = lakefence.workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return len(files)


def _fenced_python(**kwargs: Any) -> FencedPythonPublishOperator:
    return fenced_python(python_callable=write_try_files, allow_empty_workspace=True, pre_execute=_try_start, **kwargs)


def _hard_fence_dag(dag_id: str, retries: int = 2, **options: Any) -> DAG:
    with _dag(dag_id, retries) as dag:
        _fenced_python(**options)
    return dag


# The rows of docs/hard-fence.md's cost table: the soft fence (off) and the hard fence (require),
# replacing by hard reset or by merges; two retries (merge, replace, relocate), or none.
hf_off_dag = _hard_fence_dag("lf_cost_hf_off", hard_fence="off")
hf_off_by_merge_dag = _hard_fence_dag("lf_cost_hf_off_by_merge", hard_fence="off", replace_by_merge=True)
hf_require_dag = _hard_fence_dag("lf_cost_hf_require", hard_fence="require")
hf_require_by_merge_dag = _hard_fence_dag("lf_cost_hf_require_by_merge", hard_fence="require", replace_by_merge=True)
hf_require_once_dag = _hard_fence_dag("lf_cost_hf_require_once", retries=0, hard_fence="require")

# The scoped fence (docs/howto/many-writers.md): the write set ``out/``, published onto a target that
# moved past the input outside it; the soft fence, and the hard fence v2 on the input.
scoped_off_dag = _hard_fence_dag(
    "lf_cost_scoped_off", retries=0, hard_fence="off", fence_scope="prefixes", output_prefixes=["out/"]
)
scoped_require_dag = _hard_fence_dag(
    "lf_cost_scoped_require", retries=0, hard_fence="require", fence_scope="prefixes", output_prefixes=["out/"]
)
