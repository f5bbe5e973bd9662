"""Real lakeFS itself fails: kill -9 in the middle of a publish, restart, the retry ends well.

The proxy's hook kills the launched lakeFS (SIGKILL: no graceful shutdown, only what its KV store
synced survives) at a chosen request: after it processed the staging commit, or after it processed
the merge and before its answer reached the operator. lakeFS is restarted on the same port and data
either at once (the try goes on against the new process) or only when the try has failed and
Airflow retries it (``on_retry_callback``). In every case the run ends in an allowed state: the
publication lands exactly once on the target, on top of the input commit, with the job's data, and
no staging branch is left behind.
"""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import decode_metadata
from lakefence_testing.controls import Call
from tests.conftest import fresh_dag_module
from tests.integration.helpers import publications_on_top_of, read_text, run_dag, staging_branches, ti_state, xcoms

pytestmark = [pytest.mark.real_lakefs, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]


@pytest.fixture
def crash_dags() -> Any:
    module = fresh_dag_module("testdags/real_lakefs_dags.py", "FAILURES", "ON_RETRY")
    yield module
    module.ON_RETRY.clear()


@pytest.fixture
def real(lakefence_server: Any) -> Any:
    """The launched real lakeFS (it can be killed and restarted)."""
    if lakefence_server.server is None or not hasattr(lakefence_server.server, "restart"):
        pytest.skip("needs the real lakeFS this session launched (not an external one): it is killed")
    return lakefence_server.server


def _assert_published_once(repo: lakefs.Repository, input_commit: str, dag_run: Any) -> dict[str, Any]:
    assert dag_run.state == "success"
    head = repo.branch("main").get_commit()
    values = xcoms(dag_run, "publish")
    assert values["output_ref"] == head.id
    assert publications_on_top_of(repo, input_commit) == [head.id]  # exactly one publication, nothing stacked
    assert head.parents[0] == input_commit
    assert read_text(repo, "main", "out/a.txt") == "A"
    assert read_text(repo, "main", "in/data.txt") == "input"  # the input survived the crash too
    assert staging_branches(repo) == []
    return values


def _conf(repo: lakefs.Repository, input_commit: str) -> dict[str, Any]:
    return {"repository": repo.id, "target": "main", "input_ref": input_commit, "job": {"files": {"out/a.txt": "A"}}}


@pytest.mark.parametrize(
    ("operation", "restart", "decision"),
    [
        # After the staging commit, before its answer: try 1 re-reads the staging branch, finds its
        # stage record there (or, had the commit been lost, commits again), then merges.
        ("commit", "at_once", "merge"),
        # After the merge, before its answer: try 1's next round reads the target and finds its own
        # publication.
        ("mergeIntoBranch", "at_once", "idempotent"),
        # lakeFS stays down for the rest of try 1, which fails before merging; try 2 finds the target
        # still at the input, removes try 1's staging branch and merges.
        ("commit", "on_retry", "merge"),
        # The merge landed, then lakeFS stayed down: try 1 cannot read the target again and fails;
        # try 2 finds try 1's publication on the input and replaces it.
        ("mergeIntoBranch", "on_retry", "replace"),
    ],
)
def test_kill_9_mid_publish(
    crash_dags: Any,
    seeded: tuple[lakefs.Repository, str],
    lakefence_controls: Any,
    real: Any,
    operation: str,
    restart: str,
    decision: str,
) -> None:
    repo, input_commit = seeded
    killed: list[Call] = []
    pids: list[int | None] = [real.pid]

    def crash(call: Call) -> None:
        assert call.status is not None and call.status < 300  # lakeFS did process the request
        killed.append(call)
        real.kill()
        if restart == "at_once":
            real.start()
            pids.append(real.pid)

    def restart_for_retry() -> None:
        if real.pid is None:
            real.start()
            pids.append(real.pid)

    crash_dags.ON_RETRY.append(restart_for_retry)
    # The answer never comes: the process that would have sent it is gone.
    lakefence_controls.add_fault(operation, when="after", drop=True, hook=crash)
    try:
        dag_run = run_dag(crash_dags.crash_dag, _conf(repo, input_commit))
    finally:
        if real.pid is None:  # the run ended with lakeFS down: bring it back for the assertions
            real.start()
    assert [c.operation for c in killed] == [operation]
    assert len(set(pids)) == 2  # one kill, one restart
    values = _assert_published_once(repo, input_commit, dag_run)
    assert ti_state(dag_run, "publish") == ("success", 2 if restart == "on_retry" else 1)
    assert list(crash_dags.FAILURES) == ([("lf_real_crash", 1)] if restart == "on_retry" else [])
    # A merge that landed before the crash is found again (or replaced by the retry), never merged twice.
    assert values["decision"] == decision
    record = decode_metadata(repo.branch("main").get_commit().metadata)
    assert record is not None and record.attempt.try_number == (2 if restart == "on_retry" else 1)


def test_acknowledged_writes_survive_kill_9(lakefence_repo: lakefs.Repository, real: Any) -> None:
    main = lakefence_repo.branch("main")
    main.object("x.txt").upload("x")
    commit = main.commit("before the crash").get_commit()
    real.restart()
    assert main.get_commit().id == commit.id
    assert read_text(lakefence_repo, commit.id, "x.txt") == "x"
