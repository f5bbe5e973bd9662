"""lakeFS faults at every lakeFS call of the protocol.

Each call the fenced publish makes (``getCommit`` at its three places, ``createBranch``,
``listBranches``, ``deleteBranch``, ``commit``, ``diffBranch``, ``uploadObject``,
``mergeIntoBranch``, ``hardResetBranch``) meets each fault the local server can inject: a 503
before the call runs, a 503 after it ran (the write happened, the answer says it failed), the
connection dropped before / after, and an answer delayed past the client's timeout (before /
after running). Real Airflow (``dag.test()``), real HTTP through the real SDK.

What must hold: reads are retried; a write is repeated only when re-reading the state shows it did
not happen (the server's call counts tell); there is never a second publication; the published data
is right; a staging branch left by a failed delete is removed by the cleaner; and when lakeFS keeps
failing, the task fails with a ``LakeFSUnavailableError`` naming the operation, publishing nothing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.engine import PUBLISH_ROUNDS
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.exceptions import InvalidInputError, LakeFSUnavailableError
from airflow_lakefence.hooks.lakefs import LakeFSHook
from airflow_lakefence.lakefs_adapter.run_state_store import RUN_STATE_BRANCH
from tests.integration.helpers import (
    commit_files,
    die_after_publishing,
    publications_on_top_of,
    publish_conf,
    read_text,
    run_dag,
    staging_branches,
    xcoms,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")

READ_TIMEOUT = 0.75  # the client's read timeout in the delay cases (connection extra "timeout")
DELAY = 1.5  # how late the delayed answer (or call) is
WORKSPACE_JOB = {"files": {"out/a.txt": "A", "out/b.txt": "B"}}

#: Fault kinds: the server-control arguments of each.
KINDS: dict[str, dict[str, Any]] = {
    "503_before": {"status": 503, "when": "before"},
    "503_after": {"status": 503, "when": "after"},
    "drop_before": {"drop": True, "when": "before"},
    "drop_after": {"drop": True, "when": "after"},
    "timeout_before": {"delay": DELAY, "when": "before"},
    "timeout_after": {"delay": DELAY, "when": "after"},
}


@dataclass(frozen=True)
class Call:
    """One lakeFS call of the protocol.

    :param operation: the swagger operationId.
    :param scenario: ``workspace`` (first try merges), ``direct`` (with output prefixes: the diff
        listing) or ``replace`` (try 1 dies after publishing, try 2 lists, replaces by hard reset).
    :param nth: which call of that operation in the run is faulted.
    :param write: whether it changes lakeFS state (never repeated blindly).
    :param where: what the call is for, for the report.
    """

    operation: str
    scenario: str
    nth: int
    write: bool
    where: str


CALLS = [
    Call("getCommit", "workspace", 1, False, "target HEAD before the job"),
    Call("createBranch", "workspace", 1, True, "create the staging branch"),
    Call("uploadObject", "workspace", 1, False, "upload the workspace (private branch: safe to repeat)"),
    Call("commit", "workspace", 1, True, "stage"),
    Call("getCommit", "workspace", 2, False, "publish-fence read of the target"),
    Call("mergeIntoBranch", "workspace", 1, True, "publish by merge"),
    Call("getCommit", "workspace", 3, False, "verification read"),
    Call("deleteBranch", "workspace", 1, True, "delete the staging branch"),
    Call("diffBranch", "direct", 1, False, "output-prefix check (direct mode)"),
    Call("listBranches", "replace", 1, False, "list earlier tries' staging branches"),
    Call("hardResetBranch", "replace", 1, True, "publish by replacement"),
]

#: lakeFS calls of each scenario without faults (``replace``: both tries).
#: Each uploadObject count holds the run state's record of the try that reported (one; the try that died
#: after publishing wrote none), and the retry reads the run state once (listObjects).
# Each first try reads the input's action file once (hard_fence="auto", the default, on an input that does
# not vouch for the fence either way); try 2 of "replace" learns it from try 1's publication (no read).
BASELINE = {
    "workspace": {"getCommit": 3, "createBranch": 1, "uploadObject": 2 + 1, "commit": 1, "mergeIntoBranch": 1,
                  "deleteBranch": 1, "getObject": 1},
    # output_mode="replace" lists the declared prefix at the input once (what the job did not write goes).
    "direct": {"getCommit": 3, "createBranch": 1, "uploadObject": 2 + 1, "diffBranch": 1, "listObjects": 1,
               "commit": 1, "mergeIntoBranch": 1, "deleteBranch": 1, "getObject": 1},
    "replace": {"getCommit": 6, "createBranch": 2, "uploadObject": 6 + 1, "commit": 2, "mergeIntoBranch": 1,
                "deleteBranch": 2, "listBranches": 1, "hardResetBranch": 1, "listObjects": 1, "getObject": 1},
}  # fmt: skip

#: The decision the task reports when a write's answer was lost after it landed.
RESOLVED_BY_REREAD = {"mergeIntoBranch": "idempotent", "hardResetBranch": "idempotent"}


@pytest.fixture
def seeded(lakefence_repo: lakefs.Repository) -> tuple[lakefs.Repository, str]:
    commit = commit_files(lakefence_repo, "main", {"in/data.txt": "input"}, "seed input")
    # The run state's branch exists (it does after a repository's first record): a try's record is
    # then one uploadObject, counted in the baselines.
    lakefence_repo.branch(RUN_STATE_BRANCH).create("main", hidden=True)
    return lakefence_repo, commit


@pytest.fixture
def short_timeout(lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The lakeFS connection with a short read timeout (extra ``timeout``)."""
    conn = {**lakefs_conn, "extra": json.dumps({"timeout": [5, READ_TIMEOUT]})}
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_DEFAULT", json.dumps(conn))
    yield


def run_scenario(dags: Any, scenario: str, repo: lakefs.Repository, input_commit: str) -> Any:
    if scenario == "workspace":
        return run_dag(dags.workspace_dag, publish_conf(repo, input_commit, WORKSPACE_JOB))
    if scenario == "direct":
        return run_dag(dags.direct_dag, publish_conf(repo, input_commit, WORKSPACE_JOB, output_prefixes=["out/"]))
    die_after_publishing()
    job = {"files": WORKSPACE_JOB["files"], "stamp_path": "out/s"}
    return run_dag(dags.retry_dag, publish_conf(repo, input_commit, job))


def clean(dags: Any, repo: lakefs.Repository) -> Any:
    """Run the staging cleaner (real Airflow) over the repository."""
    return run_dag(dags.clean_dag, {"repository": repo.id})


@pytest.mark.parametrize("scenario", sorted(BASELINE))
def test_baseline_call_counts(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any, scenario: str
) -> None:
    repo, input_commit = seeded
    lakefence_controls.reset_counts()
    dr = run_scenario(dags, scenario, repo, input_commit)
    assert dr.state == "success"
    counts = {k: v for k, v in lakefence_controls.counts().items() if v}
    assert counts == BASELINE[scenario]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("call", CALLS, ids=lambda c: f"{c.operation}{c.nth}")
def test_one_fault_at_each_call(
    request: pytest.FixtureRequest,
    dags: Any,
    seeded: tuple[lakefs.Repository, str],
    lakefence_controls: Any,
    call: Call,
    kind: str,
) -> None:
    if kind.startswith("timeout"):
        request.getfixturevalue("short_timeout")
    repo, input_commit = seeded
    lakefence_controls.reset_counts()
    lakefence_controls.add_fault(call.operation, nth=call.nth, **KINDS[kind])
    late_call_answered = threading.Event()
    if kind.startswith("timeout"):
        # The same call, once lakeFS has answered it (after the delay when the delay came first): the
        # client gave up long before, so the late call may still change the state after the run.
        lakefence_controls.add_fault(
            call.operation, nth=call.nth, when="after", hook=lambda _call: late_call_answered.set()
        )
    dr = run_scenario(dags, call.scenario, repo, input_commit)
    if kind.startswith("timeout"):
        assert late_call_answered.wait(DELAY + 30), "the late call never reached lakeFS"
    assert dr.state == "success", dags.FAILURES
    assert lakefence_controls.faults() == []  # the fault fired

    count = lakefence_controls.counts().get(call.operation, 0)
    baseline = BASELINE[call.scenario][call.operation]
    landed = kind.endswith("after")
    values = xcoms(dr, "publish")
    if not call.write:
        # A read (or an upload into the private staging branch) is simply retried.
        assert count >= baseline + 1
    elif call.operation == "deleteBranch":
        assert count == baseline  # the attempt's last call: a failure is logged, not retried
    elif landed:
        assert count == baseline  # re-reading showed the write had happened: not repeated
    else:
        assert count == baseline + 1  # re-reading showed it had not: done once more
    if call.write and landed and call.operation in RESOLVED_BY_REREAD:
        assert values["decision"] == RESOLVED_BY_REREAD[call.operation]
    else:
        assert values["decision"] == ("replace" if call.scenario == "replace" else "merge")

    # Exactly one publication, with the right data.
    above = publications_on_top_of(repo, input_commit)
    assert above == [values["output_ref"]]
    record = decode_metadata(repo.commit(above[0]).get_commit().metadata)
    assert record is not None and record.attempt.try_number == (2 if call.scenario == "replace" else 1)
    assert read_text(repo, "main", "out/a.txt") == "A"

    # A delete that failed leaves the branch to the cleaner, as may a creation that reached the
    # server after the attempt had ended; nothing is left once the cleaner ran.
    left = staging_branches(repo)
    if call.operation == "deleteBranch" and kind in ("503_before", "drop_before"):
        assert left == [values["staging_branch"]]
    elif not (call.operation == "createBranch" and kind == "timeout_before"):
        assert left == []
    if left:
        assert clean(dags, repo).state == "success"
    assert staging_branches(repo) == []


#: (call, how many consecutive failures exhaust the budget, the operation the error names). Reads
#: are retried by the adapter (4 tries); a write is never repeated blindly: the engine settles each
#: lost answer from fresh state, for at most PUBLISH_ROUNDS rounds (docs/reliability.md).
EXHAUSTED = [
    (Call("getCommit", "workspace", 1, False, ""), 4, "get_commit"),
    (Call("createBranch", "workspace", 1, True, ""), PUBLISH_ROUNDS, "create_branch"),
    (Call("uploadObject", "workspace", 1, False, ""), 4, "upload_object"),
    (Call("commit", "workspace", 1, True, ""), PUBLISH_ROUNDS, "commit"),
    (Call("mergeIntoBranch", "workspace", 1, True, ""), PUBLISH_ROUNDS, "merge"),
    (Call("diffBranch", "direct", 1, False, ""), 4, "diff_branch"),
    (Call("hardResetBranch", "replace", 1, True, ""), PUBLISH_ROUNDS, "hard_reset"),
]


def test_listing_earlier_tries_keeps_failing_and_the_retry_still_replaces(
    dags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    """Removing earlier tries' branches is clean-up, not protocol: a listing that keeps failing is
    logged (the cleaner removes them later) and never fails the attempt."""
    repo, input_commit = seeded
    for nth in range(1, 5):
        lakefence_controls.add_fault("listBranches", nth=nth, status=503)
    dr = run_scenario(dags, "replace", repo, input_commit)
    assert dr.state == "success"
    assert lakefence_controls.faults() == []  # every listing failed: the retry went on without it
    head = repo.branch("main").get_commit()
    assert head.parents == [input_commit]  # replaced (hard reset to the staged commit), not stacked
    assert decode_metadata(head.metadata).attempt.try_number == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(("call", "failures", "operation"), EXHAUSTED, ids=lambda v: getattr(v, "operation", ""))
def test_lakefs_keeps_failing_is_a_clear_error_and_publishes_nothing(
    dags: Any,
    seeded: tuple[lakefs.Repository, str],
    lakefence_controls: Any,
    lakefs_conn: dict[str, str],
    call: Call,
    failures: int,
    operation: str,
) -> None:
    repo, input_commit = seeded
    for nth in range(1, failures + 1):
        lakefence_controls.add_fault(call.operation, nth=nth, status=503)
    before = publications_on_top_of(repo, input_commit)
    job = {"files": {"out/a.txt": "A"}}  # one file: its upload meets every fault
    if call.scenario == "workspace":
        dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, job))
    else:
        dr = run_scenario(dags, call.scenario, repo, input_commit)
    assert dr.state == "failed"
    try_number = 2 if call.scenario == "replace" else 1
    error = dags.FAILURES[(dr.dag_id, try_number)]
    assert type(error) is LakeFSUnavailableError, error
    assert error.operation == operation and error.status == 503
    assert lakefs_conn["password"] not in str(error) + repr(error)
    lakefence_controls.clear_faults()
    after = publications_on_top_of(repo, input_commit)
    if call.scenario == "replace":
        # Try 1's abandoned publication stays until a later try can replace it; nothing stacked.
        assert len(after) == 1 and decode_metadata(repo.commit(after[0]).get_commit().metadata).attempt.try_number == 1  # type: ignore[union-attr]
    else:
        assert after == before == []
    assert staging_branches(repo) == []


@pytest.mark.parametrize(
    ("extra", "expected"),
    [({"timeout": 7}, (7.0, 7.0)), ({"timeout": [2, 30]}, (2.0, 30.0)), ({"timeout": "3.5"}, (3.5, 3.5)), ({}, None)],
)
def test_connection_timeout_extra(
    lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], expected: Any
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_T", json.dumps({**lakefs_conn, "extra": json.dumps(extra)}))
    hook = LakeFSHook("lakefs_t")
    assert hook.settings["timeout"] == expected
    assert hook.client._timeout == (expected or (10.0, 120.0))


def test_a_write_past_the_timeout_is_an_unknown_outcome(
    short_timeout: None, lakefence_repo: lakefs.Repository, lakefence_controls: Any
) -> None:
    """The connection's ``timeout`` reaches every request: a write answered too late is not waited for."""
    lakefence_controls.add_fault("createBranch", delay=DELAY, when="after")
    started = time.monotonic()
    with pytest.raises(LakeFSUnavailableError) as info:
        LakeFSHook().client.create_branch(lakefence_repo.id, "late", "main")
    assert time.monotonic() - started < DELAY
    assert info.value.operation == "create_branch" and info.value.status is None  # no answer
    # It did happen, once the delayed answer's call completes: the outcome was unknown, not negative.
    deadline = time.monotonic() + DELAY + 30
    while "late" not in [b.id for b in lakefence_repo.branches()]:
        assert time.monotonic() < deadline, "the late createBranch never landed"
        time.sleep(0.05)


@pytest.mark.parametrize("value", [0, -1, "soon", [1, 2, 3], [1, 0]])
def test_connection_timeout_extra_rejects_nonsense(
    lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch, value: Any
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_T", json.dumps({**lakefs_conn, "extra": json.dumps({"timeout": value})}))
    with pytest.raises(InvalidInputError, match="timeout"):
        LakeFSHook("lakefs_t").client  # noqa: B018
