"""A DAG written for airflow-provider-lakefs (the shape of treeverse's samples), moved to this package
by a change of imports; run by tests/integration/operators/test_lakefs.py.

conf keys: repository.
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_lakefence.operators.lakefs import (
    LakeFSCommitOperator,
    LakeFSCreateBranchOperator,
    LakeFSCreateSymlinkOperator,
    LakeFSDeleteBranchOperator,
    LakeFSGetCommitOperator,
    LakeFSGetObjectOperator,
    LakeFSMergeOperator,
    LakeFSUploadOperator,
)
from airflow_lakefence.sensors import LakeFSCommitSensor, LakeFSFileSensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag

#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}

REPO = "{{ dag_run.conf['repository'] }}"
BRANCH = "example_{{ run_id | replace(':', '_') | replace('+', '_') | replace('.', '_') }}"
FAST = {"poke_interval": 0.2, "timeout": 20}

with failure_recording_dag("lf_provider_workflow", FAILURES, retries=1) as workflow_dag:
    create = LakeFSCreateBranchOperator(task_id="create_branch", repo=REPO, branch=BRANCH, source_branch="main")
    upload = LakeFSUploadOperator(task_id="upload", repo=REPO, branch=BRANCH, path="out/hello.txt", content=b"hello")
    sense_file = LakeFSFileSensor(task_id="sense_file", repo=REPO, branch=BRANCH, path="out/hello.txt", **FAST)
    commit = LakeFSCommitOperator(
        task_id="commit", repo=REPO, branch=BRANCH, msg="hello", metadata={"committed_from": "airflow"}
    )
    sense_commit = LakeFSCommitSensor(
        task_id="sense_commit", repo=REPO, branch=BRANCH, prev_commit_id=create.output, **FAST
    )
    merge = LakeFSMergeOperator(
        task_id="merge", repo=REPO, source_ref=BRANCH, destination_branch="main", msg="merge hello", metadata={}
    )
    get_commit = LakeFSGetCommitOperator(task_id="get_commit", repo=REPO, ref="main")
    get_object = LakeFSGetObjectOperator(task_id="get_object", repo=REPO, ref="main", path="out/hello.txt")
    create >> upload >> sense_file >> commit >> sense_commit >> merge >> [get_commit, get_object]

with failure_recording_dag("lf_provider_delete", FAILURES) as delete_dag:
    LakeFSDeleteBranchOperator(task_id="delete_branch", repo=REPO, branch="{{ dag_run.conf['branch'] }}")

with failure_recording_dag("lf_provider_symlink", FAILURES, retries=1) as symlink_dag:
    LakeFSCreateSymlinkOperator(task_id="symlink", repo=REPO, branch="main")
