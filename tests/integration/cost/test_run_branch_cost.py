"""The cost of a run publication beside a single fenced task's (the cost contract's method:
the proxy's per-operation request counters, on either backend).

A run (tests/dags/run_branch_dags.py) costs: the run branch (2 calls), its task's fenced publish into
the run branch (a single fenced task: the figures of tests/integration/cost/test_cost_contract.py), and
the run's publication into ``main``, pinned here per lakeFS operation. docs/howto/branch-per-run.md
quotes the figures.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import lakefs
import pytest

from airflow_lakefence.lakefs_adapter.run_state_store import RUN_STATE_BRANCH
from tests.conftest import load_dag_module

pytestmark = [pytest.mark.run_branch, pytest.mark.usefixtures("airflow_db", "lakefs_conn")]

#: The run branch: the input resolved once, its pin and the branch's record written to the run state
#: (one uploadObject each: airflow_lakefence.lakefs_adapter.run_state_store), the branch made from it.
RUN_BRANCH = {"getCommit": 1, "createBranch": 1, "uploadObject": 2}
#: One fenced task publishing one workspace file by a merge (the cost contract's merge row, plus the
#: upload, plus two run-state records: the pin of its input branch and the publication it reports).
FENCED_TASK = {
    "getCommit": 3,
    "createBranch": 1,
    "uploadObject": 3,
    "commit": 1,
    "mergeIntoBranch": 1,
    "deleteBranch": 1,
}
#: The run publication: the single fenced task's calls, and four more: its job reads the run branch's
#: HEAD, checks with one merge base that it descends from the input and squash-merges it into the
#: staging branch (this attempt's staged commit); staging then finds "no changes" (the refused commit
#: of the fenced task's count) and reads the staging branch's HEAD, which carries this attempt's record.
RUN_PUBLICATION = {
    "getCommit": 5,
    "uploadObject": 1,  # the run-state record of the publication (its input is a commit id: no pin)
    "createBranch": 1,
    "findMergeBase": 1,
    "mergeIntoBranch": 2,
    "commit": 1,
    "deleteBranch": 1,
}


def test_a_run_publication_costs_a_fenced_publish_plus_four_calls(
    seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, _input_commit = seeded
    repo.branch(RUN_STATE_BRANCH).create("main", hidden=True)  # as after the repository's first record
    dags = load_dag_module("testdags/run_branch_dags.py")
    dag = dags.run_dag
    steps: dict[str, Counter[str]] = {}

    def snapshot(task_id: str) -> Any:
        def pre_execute(context: Any) -> None:
            steps[task_id] = Counter(lakefence_controls.counts())

        return pre_execute

    tasks = ["run_branch", "write", "publish"]
    for task_id in tasks:
        dag.task_dict[task_id].pre_execute = snapshot(task_id)
    lakefence_controls.reset_counts()
    try:
        dr = dag.test(run_conf={"repository": repo.id, "files": {"out/a.txt": "A"}})
    finally:
        for task_id in tasks:
            del dag.task_dict[task_id].pre_execute
    assert dr.state == "success"
    end = Counter(lakefence_controls.counts())
    marks = [steps["run_branch"], steps["write"], steps["publish"], end]
    cost = {t: dict(marks[i + 1] - marks[i]) for i, t in enumerate(tasks)}
    assert cost == {"run_branch": RUN_BRANCH, "write": FENCED_TASK, "publish": RUN_PUBLICATION}, cost
    # The data upload and the run-state records aside: the fenced protocol's calls.
    fenced, run = sum(FENCED_TASK.values()) - 3, sum(RUN_PUBLICATION.values()) - 1
    assert (fenced, run) == (7, 11)
