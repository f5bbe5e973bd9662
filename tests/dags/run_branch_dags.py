"""DAGs of the run-branch tests (tests/integration/operators/test_run_branch.py), driven by dag_run.conf.

conf keys: repository, source (the run's input ref), target, files (what the run's task writes,
``{path: text}``), output_prefixes (the run's declared prefixes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from airflow_lakefence.operators import FencedPythonPublishOperator, LakeFSStagingCleanupOperator
from airflow_lakefence.operators.run_branch import LakeFSPublishRunOperator, LakeFSRunBranchOperator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, manual_dag

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}

REPO = "{{ dag_run.conf['repository'] }}"


def write_files(lakefence: Any, dag_run: Any = None) -> None:
    """The run's task: write the conf's ``files`` into the attempt's workspace."""
    assert lakefence.workspace is not None
    for path, text in dict(dag_run.conf.get("files", {})).items():
        target = lakefence.workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _run_dag(dag_id: str, retries: int = 1, **publish: Any) -> Any:
    with failure_recording_dag(dag_id, FAILURES, retries=retries) as dag:
        branch = LakeFSRunBranchOperator(
            task_id="run_branch", repository=REPO, source_ref="{{ dag_run.conf.get('source', 'main') }}"
        )
        write = FencedPythonPublishOperator(
            task_id="write",
            python_callable=write_files,
            repository=REPO,
            target_branch=branch.output,
            input_ref=branch.output,
            stale_grace_period=0,
        )
        LakeFSPublishRunOperator(
            task_id="publish",
            repository=REPO,
            run_branch=branch.output,
            target_branch="{{ dag_run.conf.get('target', 'main') }}",
            input_ref=branch.input_commit,
            stale_grace_period=0,
            **publish,
        ).set_upstream(write)
    return dag


run_dag = _run_dag("lf_run_branch", output_prefixes="{{ dag_run.conf.get('output_prefixes') }}")
scoped_dag = _run_dag(
    "lf_run_branch_scoped", fence_scope="prefixes", output_prefixes="{{ dag_run.conf['output_prefixes'] }}"
)
deleting_dag = _run_dag("lf_run_branch_deleting", delete_run_branch=True)
once_dag = _run_dag("lf_run_branch_once", retries=0)
hard_dag = _run_dag("lf_run_branch_hard", hard_fence="require")
scoped_hard_dag = _run_dag(
    "lf_run_branch_scoped_hard",
    fence_scope="prefixes",
    output_prefixes="{{ dag_run.conf['output_prefixes'] }}",
    hard_fence="require",
)

with failure_recording_dag("lf_run_branch_mapped", FAILURES) as mapped_dag:
    # One run branch per map index: the same template, the same input, two branches.
    LakeFSRunBranchOperator.partial(task_id="run_branch", repository=REPO, run_branch="part-{{ run_id }}").expand(
        source_ref=["main", "main"]
    )

with manual_dag("lf_run_branch_clean") as clean_dag:
    # The staging-branch cleaner, told about the run's fenced steps (their unstaged branches' names
    # alone do not say whose they are).
    LakeFSStagingCleanupOperator(
        task_id="clean",
        repository=REPO,
        publishers=[{"dag_id": "lf_run_branch_once", "task_id": task} for task in ("write", "publish")],
    )
