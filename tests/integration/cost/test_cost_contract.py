"""The cost contract of one fenced publish: lakeFS calls and Airflow Execution-API calls per attempt.

On a real deployment every call is a network round-trip, so the number of calls of one publish is
part of the operator's interface. These tests pin it exactly, split before/after the Spark job, for
every publish decision, and prove it does not depend on the target's history depth (1, 100, 1,000
commits) nor on how many objects the job changed (1, 100, 10,000; direct mode). A change that adds
a call, or makes one depend on history or data volume, fails here. docs/performance.md explains the
method and the figures. The hard fence's table (``HARD_FENCE_CONTRACT``, docs/hard-fence.md) is
pinned the same way: soft and hard fence, replacements by hard reset, by merges and on a protected
target, at two history depths, with the fenced Python operator in workspace mode.

How it is measured, with real components only:

* lakeFS: the fault-injecting proxy's per-operation request counters (every HTTP request the
  SDK sends), on either backend (``--lakefs-backend=local|real|both``): the same contract holds on
  both. The state a scenario needs (history, the job's objects, a racing foreign commit) is made
  through a :class:`Backdoor` that the proxy does not see: the local server's store in-process
  (no request, no test time), or real lakeFS's own port directly (uploads in parallel). On real
  lakeFS the job changes at most ``REAL_MAX_OBJECTS`` objects (10,000 uploads per scenario would
  take minutes); the call counts asserted are the same. tests/integration/cost/cost_measure.py holds
  the measuring (shared with tests/integration/cost/test_cost_versions.py: the same rows on every
  Airflow version).
* Airflow: a spy on the in-process Execution-API channel of ``dag.test()``
  (``InProcessSupervisorComms.send``) counts every request the task sends to the API server, by
  message type, and delegates to the real implementation.
* Boundaries: each try starts with the DAG's ``pre_execute`` hook, and failpoint callbacks mark
  the protocol points (``after_job``, ``after_fence_1``...), snapshotting both counters.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from airflow_lakefence.core.fences.hard import EXPECTED_HEAD_KEY, FENCE_KEY, HARD_FENCE_VERSION, is_chain_link
from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_prefix
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.exceptions import HardFenceRaceError, PublishFenceError, StaleAttemptError
from lakefence_testing.pytest_plugin import LakeFSServerInfo
from tests.integration.cost.cost_measure import (
    PROTECTED_PREFIX,
    Attempt,
    Backdoor,
    Run,
    Scenario,
    execution_api_spy,
    plus,
    run_publish,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")

REPOSITORY = f"cost-contract-{uuid.uuid4().hex[:8]}"
MAX_DEPTH = 1000
#: (target history depth, objects the job changes): every depth and volume the cost targets name.
POINTS = [(1, 1), (100, 1), (1000, 1), (1000, 100), (1000, 10_000)]
POINT_IDS = [f"depth{d}-objects{n}" for d, n in POINTS]

#: The target's HEAD (the early fence, beside the attempt fence's arming), then the staging branch
#: from the input and, with ``hard_fence="auto"`` (the default), the input's action file (beside it:
#: one round trip; none when the target's HEAD is the input and vouches for its fence, or for none).
_BEFORE_OFF = {"getCommit": 1, "createBranch": 1}  # hard_fence="off", or a HEAD that vouches
_BEFORE = {**_BEFORE_OFF, "getObject": 1}
#: + earlier tries' staging branches, and the run state's records (one listing: the pin, the
#: reported publication, the evidence list; a first try reads none: no earlier try wrote any).
_BEFORE_RETRY = {**_BEFORE, "listBranches": 1, "listObjects": 1}
#: The run state's write (docs/protocol.md, "Run state"): a try that reports its output, or keeps its
#: staging branch as evidence, creates one write-once record (uploadObject) after the job. The rows
#: below are the protocol's calls without it; the assertions add it for every try that got that far
#: (a try that dies after publishing writes none). A retry also reads the run's records once.
_RECORD = {"uploadObject": 1}
RUN_STATE_READ = 1
#: decision -> (lakeFS calls before the Spark job, after it), per attempt. docs/performance.md.
CONTRACT: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "merge": (_BEFORE, {"commit": 1, "getCommit": 2, "mergeIntoBranch": 1, "deleteBranch": 1}),
    # "No changes" is checked against the staging branch's HEAD (to identify the staged
    # commit by this attempt's record, never by "no changes means C = I"): one more read.
    "noop": (_BEFORE, {"commit": 1, "getCommit": 2, "deleteBranch": 1}),
    "replace": (_BEFORE_RETRY, {"commit": 1, "getCommit": 2, "hardResetBranch": 1, "deleteBranch": 1}),
    # Nothing changed: like noop, "no changes" is checked against the staging branch's HEAD.
    "relocate": (_BEFORE_RETRY, {"commit": 1, "getCommit": 3, "hardResetBranch": 1, "deleteBranch": 1}),
    # The staging branch is kept as evidence, marked by one more (empty) commit: no delete.
    "fail_closed": (_BEFORE, {"commit": 2, "getCommit": 1}),
    # The target already moved past the input: refused before spending a Spark job, and before any
    # write (the merge base proves the input an ancestor of the target, not another branch's commit).
    "fail_closed_before_job": ({"getCommit": 1, "findMergeBase": 1}, {}),
}
#: decision -> serial round trips to lakeFS (before the Spark job, after it), the run state's record
#: included: calls sent side by side count once: the staging branch's creation and the fence's read;
#: on a first try, the staging commit and the publish fence's read of the target; the record, the
#: staging branch's delete and the merge's verifying read. A retry over an earlier try's publication
#: reads the target only after the staging commit (a hard reset acts on the freshest read). At a
#: network round trip of ``r`` a publish's lakeFS time is about ``(before + after) * r``.
SERIAL: dict[str, tuple[int, int]] = {
    "merge": (2, 3),
    "noop": (2, 3),
    "replace": (4, 5),
    "relocate": (4, 6),
    "fail_closed": (2, 3),
    "fail_closed_before_job": (2, 0),
}
#: The targets with the run state's record (9 and 5 without it); a retry may read the run state once more.
MAX_CALLS_PER_ATTEMPT = 10
MAX_CALLS_AFTER_JOB = 6
#: Serial round trips per attempt (a retry's listings of earlier tries' branches and of the run
#: state are two more).
MAX_ROUNDS_PER_ATTEMPT = 7
RETRY_ROUNDS = 2
#: Execution-API requests of the attempt fence: one to arm it, two per check.
FENCE_MESSAGES = ("SetTaskStateStore", "GetTaskStateStore", "GetTaskStates")
FENCE_CHECK = {"GetTaskStateStore": 1, "GetTaskStates": 1}
MAX_API_CALLS_PER_CHECK = 2
#: Before the job: arming the fence (one write). The run state lives in lakeFS (counted there): a
#: commit id as input_ref pins itself, so these runs write no pin.
ARM_FIRST_TRY = {"SetTaskStateStore": 1}
ARM_RETRY = {"SetTaskStateStore": 1}
#: A first try refused before the job: armed, nothing written.
ARM_REFUSED = {"SetTaskStateStore": 1}
#: A try that publishes records what it reports in the run state (in lakeFS) after its last fence check.
REPORT_RECORD: dict[str, int] = {}

# -- the hard fence's table (docs/hard-fence.md, "Cost of each path") -----------------------------
#: Before the job, ``hard_fence="require"`` reads the action file on the input commit (one getObject;
#: each try here runs as in a new worker process, which remembers no check) unless the target's HEAD
#: is the input and vouches for its fence (the installer's merge, or an intact publication): a first
#: try on the fenced input costs what the soft fence does; a retry over an earlier try's
#: publication (HEAD is not the input) reads the file.
_BEFORE_RETRY_OFF = {**_BEFORE_OFF, "listBranches": 1, "listObjects": 1}
HF_BEFORE = {"soft": _BEFORE_OFF, "hard": _BEFORE_OFF}
HF_BEFORE_RETRY = {"soft": _BEFORE_RETRY_OFF, "hard": _BEFORE_RETRY}
#: A retry whose target HEAD is the input again (an earlier try's publication not there yet).
HF_BEFORE_RETRY_ON_INPUT = {"soft": _BEFORE_RETRY_OFF, "hard": _BEFORE_RETRY_OFF}
#: What a merge-only replacement adds to its merges: createBranch and revertBranch (the temporary
#: branch from the abandoned publication), deleteBranch of it (besides the staging branch's).
_BY_MERGES = {"createBranch": 1, "revertBranch": 1, "deleteBranch": 2}
#: (decision, soft|hard) -> lakeFS calls after the job, workspace mode, without the workspace's
#: uploads (one uploadObject per file). Soft: ``hard_fence="off"`` on an input without the fence;
#: hard: ``hard_fence="require"`` on an input that carries it. ``*_by_merge``: ``replace_by_merge=True``;
#: ``*_protected``: a protected target without it (the hard reset is refused: 403, then merge-only).
HARD_FENCE_CONTRACT: dict[tuple[str, str], dict[str, int]] = {
    ("merge", "soft"): CONTRACT["merge"][1],
    # lakeFS checks the merge's first parent: no read of the target before it, no verify after it.
    ("merge", "hard"): {"commit": 1, "mergeIntoBranch": 1, "deleteBranch": 1},
    ("noop", "soft"): CONTRACT["noop"][1],
    ("noop", "hard"): CONTRACT["noop"][1],  # nothing to merge: the target is read as with the soft fence
    ("fail_closed", "soft"): CONTRACT["fail_closed"][1],
    # The merge is refused (412), then the target is read (a foreign commit: fail closed, evidence kept).
    ("fail_closed", "hard"): {"commit": 2, "mergeIntoBranch": 1, "getCommit": 1},
    # The merge is refused (409 or 412), then the target is read: an earlier try's publication, replaced.
    ("replace_after_refusal", "hard"): {
        "commit": 1,
        "mergeIntoBranch": 1,
        "getCommit": 2,
        "hardResetBranch": 1,
        "deleteBranch": 1,
    },
    ("replace", "soft"): CONTRACT["replace"][1],
    ("replace", "hard"): CONTRACT["replace"][1],  # a hard reset is not fenced: read first, verify after
    ("relocate", "soft"): CONTRACT["relocate"][1],
    ("relocate", "hard"): CONTRACT["relocate"][1],
    ("replace_by_merge", "soft"): {"commit": 1, "getCommit": 2, "mergeIntoBranch": 2, **_BY_MERGES},
    ("replace_by_merge", "hard"): {"commit": 1, "mergeIntoBranch": 2, **_BY_MERGES},
    # Nothing changed: "no changes" is checked against the staging branch's HEAD (one getCommit).
    ("relocate_by_merge", "soft"): {"commit": 1, "getCommit": 3, "mergeIntoBranch": 1, **_BY_MERGES},
    ("relocate_by_merge", "hard"): {"commit": 1, "getCommit": 1, "mergeIntoBranch": 1, **_BY_MERGES},
    ("replace_protected", "soft"): {
        "commit": 1,
        "getCommit": 2,
        "hardResetBranch": 1,
        "mergeIntoBranch": 2,
        **_BY_MERGES,
    },
    ("replace_protected", "hard"): {
        "commit": 1,
        "getCommit": 1,
        "hardResetBranch": 1,
        "mergeIntoBranch": 2,
        **_BY_MERGES,
    },
    ("relocate_protected", "soft"): {
        "commit": 1,
        "getCommit": 3,
        "hardResetBranch": 1,
        "mergeIntoBranch": 1,
        **_BY_MERGES,
    },
    ("relocate_protected", "hard"): {
        "commit": 1,
        "getCommit": 2,
        "hardResetBranch": 1,
        "mergeIntoBranch": 1,
        **_BY_MERGES,
    },
}

#: (decision, soft|hard) -> serial round trips from the staged commit on (the publish, the report
#: record beside the staging branch's delete; for a try that dies after publishing, the delete
#: alone). Before the job: 2 on a first try (the target's HEAD; the staging branch beside the
#: fence's read), 4 on a retry (the earlier tries' branches and the run state are listed first).
#: A first try's soft merge matches the hard one: the publish fence's read went beside the staging
#: commit, the verifying read beside the record and the delete.
HARD_FENCE_SERIAL: dict[tuple[str, str], int] = {
    ("merge", "soft"): 2,
    ("merge", "hard"): 2,
    ("noop", "hard"): 2,
    ("fail_closed", "hard"): 4,
    ("replace_after_refusal", "hard"): 5,
    ("replace", "hard"): 4,
    ("relocate", "hard"): 4,
    ("replace_by_merge", "soft"): 8,
    ("replace_by_merge", "hard"): 6,
    ("relocate_by_merge", "soft"): 7,
    ("relocate_by_merge", "hard"): 5,
    ("replace_protected", "soft"): 9,
    ("replace_protected", "hard"): 8,
    ("relocate_protected", "soft"): 8,
    ("relocate_protected", "hard"): 7,
}


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(lakefence_server: LakeFSServerInfo) -> Backdoor:
    """This module's uncounted access to the session's lakeFS, with the test repository created."""
    backdoor = Backdoor(lakefence_server, REPOSITORY)
    backdoor.create_repository()
    return backdoor


@pytest.fixture(scope="module")
def history(server: Backdoor) -> dict[int, str]:
    """A repository whose ``main`` is ``MAX_DEPTH`` commits deep; returns {depth: commit id}."""
    server.stage("main", ["in/data.txt"], b"input")
    server.commit("main", "seed input", allow_empty=False)  # depth 2: the creation commit is depth 1
    for n in range(MAX_DEPTH - 2):
        server.commit("main", f"history {n}")
    return {depth: server.get_commit(f"main~{MAX_DEPTH - depth}").id for depth in (1, 100, 1000)}


#: The history depths of the hard-fence table.
HF_DEPTHS = (1, 1000)


@pytest.fixture(scope="module")
def fenced_history(server: Backdoor, history: dict[int, str]) -> dict[int, str]:
    """Inputs that carry the hard fence: its installation merge on top of ``history[depth]``, per depth."""
    inputs = {}
    for depth in HF_DEPTHS:
        branch = f"fenced-{depth}"
        server.create_branch(branch, history[depth])
        inputs[depth] = server.install_hard_fence(branch)
    return inputs


@pytest.fixture(scope="module")
def protected_targets(server: Backdoor, history: dict[int, str]) -> str:
    """Protect every branch named ``protected-*`` in the module's repository; return the prefix."""
    probe = f"{PROTECTED_PREFIX}probe"
    server.create_branch(probe, history[1])
    server.protect(f"{PROTECTED_PREFIX}*", probe)
    return PROTECTED_PREFIX


@pytest.fixture
def dags(cost_dags: Any) -> Any:
    return cost_dags


@pytest.fixture
def api_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count every Execution-API request of the task, by message type (delegating spy)."""
    return execution_api_spy(monkeypatch)


# -- measuring ---------------------------------------------------------------------------------


def assert_contract(attempt: Attempt, decision: str, over: int = 0, *, recorded: bool = True) -> None:
    """The lakeFS calls of ``attempt`` are exactly the contract's for ``decision`` (plus the run
    state's record when ``recorded``), within the limits (``over`` calls above them, for a row
    documented as exceeding them; a retry's one read of the run state)."""
    before, after = CONTRACT[decision]
    after = plus(after, _RECORD if recorded else {})
    assert (attempt.before, attempt.after) == (before, after)
    # A try that dies after publishing writes no record: its staging branch's delete is its last round.
    assert (attempt.rounds_before, attempt.rounds_after) == SERIAL[decision], decision
    retry = RUN_STATE_READ if "listBranches" in before else 0
    assert attempt.total <= MAX_CALLS_PER_ATTEMPT + over + retry
    assert sum(attempt.after.values()) <= MAX_CALLS_AFTER_JOB + over
    retry_rounds = RETRY_ROUNDS if retry else 0
    assert attempt.rounds_before + attempt.rounds_after <= MAX_ROUNDS_PER_ATTEMPT + over + retry_rounds


def assert_fence_cost(attempt: Attempt, checks: int = 3, arm: dict[str, int] = ARM_FIRST_TRY) -> None:
    """The attempt fence: one request to arm it (plus the run state's, see ARM_*), two per check.

    A try that publishes checks three times (before stage, before publish, before reporting);
    one that fails closed at the publish fence, twice.
    """
    assert attempt.fence_arm == arm
    expected = [FENCE_CHECK] * checks
    if checks == 3:
        expected[-1] = {**FENCE_CHECK, **REPORT_RECORD}
    assert attempt.fence_checks == expected
    checks_only = [{k: v for k, v in check.items() if k != "SetTaskStateStore"} for check in attempt.fence_checks]
    assert all(sum(check.values()) <= MAX_API_CALLS_PER_CHECK for check in checks_only)


@pytest.fixture
def measure(server: Backdoor, lakefence_controls: Any, api_calls: Counter[str], dags: Any) -> Callable[..., Run]:
    def measure_(dag: Any, input_commit: str, scenario: Scenario, job: dict[str, Any] | None = None) -> Run:
        return run_publish(
            server, lakefence_controls, api_calls, dags, dag, input_commit, scenario, job, fence_messages=FENCE_MESSAGES
        )

    return measure_


# -- the contract, decision by decision --------------------------------------------------------


@pytest.mark.parametrize(("depth", "objects"), POINTS, ids=POINT_IDS)
def test_merge(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, depth: int, objects: int
) -> None:
    run = measure(dags.direct_dag, history[depth], Scenario(objects=objects))
    assert run.dag_run.state == "success"
    head = server.get_commit(run.target)
    assert run.xcom["decision"] == "merge" and run.xcom["output_ref"] == head.id
    assert head.parents == [run.input_commit, run.xcom["staged_commit"]]
    assert server.count_objects(run.target) == server.cap(objects)
    assert list(run.attempts) == [1]
    assert_contract(run.attempts[1], "merge")
    assert_fence_cost(run.attempts[1])


@pytest.mark.parametrize("depth", [1, 100, 1000])
def test_noop(measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, depth: int) -> None:
    run = measure(dags.direct_dag, history[depth], Scenario(objects=0))
    assert run.dag_run.state == "success"
    assert run.xcom["decision"] == "noop" and run.xcom["output_ref"] == run.input_commit
    assert server.get_commit(run.target).id == run.input_commit
    assert_contract(run.attempts[1], "noop")
    assert_fence_cost(run.attempts[1])


@pytest.mark.parametrize(("depth", "objects"), POINTS, ids=POINT_IDS)
def test_replace(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, depth: int, objects: int
) -> None:
    run = measure(dags.direct_retry_dag, history[depth], Scenario(objects=objects, die_after_publishing=True))
    assert run.dag_run.state == "success"
    assert list(run.attempts) == [1, 2]
    abandoned = server.get_commit(run.published_before_death[0])
    assert decode_metadata(abandoned.metadata).attempt.try_number == 1  # type: ignore[union-attr]
    head = server.get_commit(run.target)
    assert run.xcom["decision"] == "replace"
    assert head.id == run.xcom["output_ref"] == run.xcom["staged_commit"]
    assert head.parents == [run.input_commit]
    assert server.count_objects(run.target) == server.cap(objects)
    assert_contract(run.attempts[1], "merge", recorded=False)  # the try that died had merged
    assert_contract(run.attempts[2], "replace")
    assert_fence_cost(run.attempts[2], arm=ARM_RETRY)


@pytest.mark.parametrize(("depth", "objects"), POINTS, ids=POINT_IDS)
def test_relocate(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, depth: int, objects: int
) -> None:
    scenario = Scenario(objects=objects, objects_on_retry=0, die_after_publishing=True)
    run = measure(dags.direct_retry_dag, history[depth], scenario)
    assert run.dag_run.state == "success"
    assert run.xcom["decision"] == "relocate"
    assert server.get_commit(run.target).id == run.xcom["output_ref"] == run.input_commit
    assert run.published_before_death and run.published_before_death[0] != run.input_commit
    assert server.count_objects(run.target) == 0
    assert_contract(run.attempts[1], "merge", recorded=False)
    # One over the limits: "no changes" is checked on the staging branch's HEAD.
    assert_contract(run.attempts[2], "relocate", over=1)
    assert_fence_cost(run.attempts[2], arm=ARM_RETRY)


@pytest.mark.parametrize(("depth", "objects"), POINTS, ids=POINT_IDS)
def test_fail_closed(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, depth: int, objects: int
) -> None:
    run = measure(dags.direct_dag, history[depth], Scenario(objects=objects, foreign_commit_during_job=True))
    assert run.dag_run.state == "failed"
    error = dags.FAILURES[("lf_cost_direct", 1)]
    assert type(error) is PublishFenceError
    assert server.get_commit(run.target).id == run.foreign[0]
    marker = server.get_commit(error.staging_branch)
    assert marker.metadata["lakefence.evidence"] == "PublishFenceError"
    evidence = server.get_commit(marker.parents[0])
    assert evidence.parents == [run.input_commit]
    assert server.count_objects(error.staging_branch) == server.cap(objects)
    assert_contract(run.attempts[1], "fail_closed")
    assert_fence_cost(run.attempts[1], checks=2)


@pytest.mark.parametrize("depth", [1, 1000])
def test_fail_closed_before_the_job(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, depth: int
) -> None:
    run = measure(dags.direct_dag, history[depth], Scenario(foreign_commit_before_run=True))
    assert run.dag_run.state == "failed"
    assert isinstance(dags.FAILURES[("lf_cost_direct", 1)], PublishFenceError)
    assert server.get_commit(run.target).id == run.foreign[0]
    assert_contract(run.attempts[1], "fail_closed_before_job", recorded=False)  # nothing written
    assert run.attempts[1].fence_arm == ARM_REFUSED and run.attempts[1].fence_checks == []


# -- what configuration adds -------------------------------------------------------------------


@pytest.mark.parametrize("objects", [1, 10_000])
def test_output_prefixes_add_one_diff_per_prefix_level(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any, objects: int
) -> None:
    """Direct mode with ``output_prefixes=["out/"]``: one uncommitted-diff listing after the job,
    whatever the volume, and (``output_mode="replace"``) one listing of what the input holds under
    the prefix, before the job (a Delta table there is refused before any write).

    The diff is one call over the ≤ 5 after the job (see docs/performance.md).
    """
    run = measure(dags.direct_prefixes_dag, history[1000], Scenario(objects=objects))
    assert run.dag_run.state == "success" and run.xcom["decision"] == "merge"
    assert server.count_objects(run.target) == server.cap(objects)
    before, after = CONTRACT["merge"]
    assert run.attempts[1].before == {**before, "listObjects": 1}
    assert run.attempts[1].after == plus(after, _RECORD, {"diffBranch": 1})
    assert run.attempts[1].total == MAX_CALLS_PER_ATTEMPT + 1


def test_workspace_mode_adds_one_upload_per_file(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any
) -> None:
    job = {"generate": {"prefix": "out/", "count": 100, "size": 16}}
    run = measure(dags.workspace_dag, history[1000], Scenario(objects=0), job)
    assert run.dag_run.state == "success" and run.xcom["decision"] == "merge"
    assert server.count_objects(run.target) == 100
    before, after = CONTRACT["merge"]
    assert run.attempts[1].before == before
    assert run.attempts[1].after == plus(after, _RECORD, {"uploadObject": 100})


def test_replace_after_a_crash_also_deletes_the_dead_staging_branch(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], dags: Any
) -> None:
    """A worker killed after publishing leaves its staging branch: the retry reads its HEAD (to spare
    evidence) and deletes it: +2 calls per leftover branch.

    This row exceeds the 8-call target by two per leftover branch (docs/performance.md).
    """
    scenario = Scenario(objects=1, die_after_publishing=True, leave_staging_behind=True)
    run = measure(dags.direct_retry_dag, history[1000], scenario)
    assert run.dag_run.state == "success" and run.xcom["decision"] == "replace"
    before, after = CONTRACT["replace"]
    assert run.attempts[2].before == {**before, "getCommit": before["getCommit"] + 1, "deleteBranch": 1}
    assert run.attempts[2].after == plus(after, _RECORD)
    assert run.attempts[2].total == MAX_CALLS_PER_ATTEMPT + 2 + RUN_STATE_READ
    key = PublicationKey(run.dag_run.dag_id, run.dag_run.run_id, "publish", -1)
    assert server.branches(staging_branch_prefix(key)) == []  # the dead try's branch is gone, and so is the retry's own


# -- the attempt fence -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "requests", "reason"), [("failed", 2, "state is 'failed'"), ("clear", 1, "no longer live")]
)
def test_a_stale_answer_costs_at_most_two_api_calls(
    measure: Callable[..., Run],
    server: Backdoor,
    history: dict[int, str],
    dags: Any,
    action: str,
    requests: int,
    reason: str,
) -> None:
    run = measure(dags.direct_dag, history[1], Scenario(mark_stale_after_stage=action))
    error = dags.FAILURES.get(("lf_cost_direct", 1))
    assert isinstance(error, StaleAttemptError) and reason in str(error)
    assert server.get_commit(run.target).id == run.input_commit
    assert list(run.attempts) == [1]
    attempt = run.attempts[1]
    assert attempt.fence_checks == [FENCE_CHECK]  # before stage: still current
    # The second check answered "stale" and raised before its mark: count up to the end of the try.
    stage_mark = next(m for m in run.marks if m.label == "after_stage")
    second = {k: v for k, v in (run.marks[-1].airflow - stage_mark.airflow).items() if k in FENCE_MESSAGES}
    assert sum(second.values()) == requests <= MAX_API_CALLS_PER_CHECK
    assert not {"mergeIntoBranch", "hardResetBranch"} & set(attempt.after)


# -- the hard fence's table (docs/hard-fence.md) -----------------------------------------------


def assert_hard_fence_row(
    attempt: Attempt,
    decision: str,
    fence: str,
    *,
    retry: bool,
    uploads: int,
    head_is_input: bool | None = None,
    recorded: bool = True,
    before: dict[str, int] | None = None,
) -> None:
    """The lakeFS calls of ``attempt`` are exactly the hard-fence table's row (plus its uploads).

    ``head_is_input``: the target's HEAD was the input when the try started (a first try; by default
    not on a retry, whose HEAD is an earlier try's publication).
    """
    on_input = not retry if head_is_input is None else head_is_input
    if before is None:
        before = (HF_BEFORE if not retry else HF_BEFORE_RETRY_ON_INPUT if on_input else HF_BEFORE_RETRY)[fence]
    after = plus(
        HARD_FENCE_CONTRACT[(decision, fence)], {"uploadObject": uploads + recorded} if uploads + recorded else {}
    )
    assert (attempt.before, attempt.after) == (before, after), (decision, fence)
    assert attempt.rounds_before == (4 if retry else 2), (decision, fence)
    assert attempt.rounds_published == HARD_FENCE_SERIAL[(decision, fence)], (decision, fence)


#: Try 1 publishes two files and dies, try 2 publishes one (a replacement) and dies, try 3 writes
#: nothing (a relocation back to the input).
CHAIN_FILES = {1: {"out/a.txt": "try 1", "out/only1.txt": "x"}, 2: {"out/a.txt": "try 2"}}
#: (how replacements are made, fence, depth): hard at each depth; soft at one (its reads are depth-free).
CHAIN_CASES = [
    *[("hard_reset", "hard", d) for d in HF_DEPTHS],
    *[("by_merge", fence, d) for fence, d in (("hard", 1), ("hard", 1000), ("soft", 1000))],
    *[("protected", fence, d) for fence, d in (("hard", 1), ("hard", 1000), ("soft", 1000))],
]


@pytest.mark.hard_fence
@pytest.mark.parametrize(("how", "fence", "depth"), CHAIN_CASES, ids=[f"{h}-{f}-depth{d}" for h, f, d in CHAIN_CASES])
def test_hard_fence_table_merge_replace_relocate(
    request: pytest.FixtureRequest,
    measure: Callable[..., Run],
    server: Backdoor,
    history: dict[int, str],
    fenced_history: dict[int, str],
    dags: Any,
    how: str,
    fence: str,
    depth: int,
) -> None:
    """One run, three tries: merge (the worker dies after publishing), replace (dies again), relocate.

    By hard reset (an unprotected target), by merges (``replace_by_merge=True``), or on a protected
    target (the refused hard reset, then merges).
    """
    if how == "protected":
        request.getfixturevalue("protected_targets")
    dag = {
        ("hard_reset", "hard"): dags.hf_require_dag,
        ("by_merge", "hard"): dags.hf_require_by_merge_dag,
        ("by_merge", "soft"): dags.hf_off_by_merge_dag,
        ("protected", "hard"): dags.hf_require_dag,
        ("protected", "soft"): dags.hf_off_dag,
    }[(how, fence)]
    input_commit = (fenced_history if fence == "hard" else history)[depth]
    scenario = Scenario(
        objects=0,
        die_after_publishing=True,
        die_on_tries=(1, 2),
        protected=how == "protected",
        files_by_try=CHAIN_FILES,
    )
    run = measure(dag, input_commit, scenario)
    assert run.dag_run.state == "success" and list(run.attempts) == [1, 2, 3]
    # Outcomes: try 1's publication P1 (2 files), try 2's P2 (1 file), try 3 relocated to the input's tree.
    p1, p2 = (server.get_commit(ref) for ref in run.published_before_death)
    head = server.get_commit(run.target)
    assert run.xcom["decision"] == "relocate" and run.xcom["output_ref"] == head.id
    assert (server.count_objects(p1.id), server.count_objects(p2.id), server.count_objects(head.id)) == (2, 1, 0)
    assert p1.parents[0] == input_commit and decode_metadata(p1.metadata).attempt.try_number == 1  # type: ignore[union-attr]
    if how == "hard_reset":
        assert p2.parents == [input_commit] and head.id == input_commit
    else:  # a chain of links, each on the publication it replaced
        assert p2.parents[0] == p1.id and is_chain_link(p2.metadata, p1.id)
        assert head.parents[0] == p2.id and is_chain_link(head.metadata, p2.id)
    if fence == "hard":  # every merge named the head it expected, and lakeFS checked it
        assert p1.metadata[EXPECTED_HEAD_KEY] == input_commit
    key = PublicationKey(run.dag_run.dag_id, run.dag_run.run_id, "publish", -1)
    assert server.branches(staging_branch_prefix(key)) == []  # staging and temporary branches gone
    # The calls of each try.
    replace, relocate = {"hard_reset": ("replace", "relocate")}.get(how, (f"replace_{how}", f"relocate_{how}"))
    assert_hard_fence_row(run.attempts[1], "merge", fence, retry=False, uploads=2, recorded=False)
    assert_hard_fence_row(run.attempts[2], replace, fence, retry=True, uploads=1, recorded=False)
    assert_hard_fence_row(run.attempts[3], relocate, fence, retry=True, uploads=0)


@pytest.mark.hard_fence
@pytest.mark.parametrize("depth", HF_DEPTHS)
def test_hard_fence_table_noop(
    measure: Callable[..., Run], server: Backdoor, fenced_history: dict[int, str], dags: Any, depth: int
) -> None:
    run = measure(dags.hf_require_dag, fenced_history[depth], Scenario(objects=0))
    assert run.dag_run.state == "success" and list(run.attempts) == [1]
    assert run.xcom["decision"] == "noop" and run.xcom["output_ref"] == run.input_commit
    assert server.get_commit(run.target).id == run.input_commit
    assert_hard_fence_row(run.attempts[1], "noop", "hard", retry=False, uploads=0)


@pytest.mark.hard_fence
@pytest.mark.parametrize("depth", HF_DEPTHS)
def test_hard_fence_table_fail_closed(
    measure: Callable[..., Run], server: Backdoor, fenced_history: dict[int, str], dags: Any, depth: int
) -> None:
    """A foreign commit lands during the job: lakeFS refuses the optimistic merge (412)."""
    scenario = Scenario(objects=0, foreign_commit_during_job=True, files_by_try={1: {"out/a.txt": "a"}})
    run = measure(dags.hf_require_once_dag, fenced_history[depth], scenario)
    assert run.dag_run.state == "failed"
    error = dags.FAILURES[("lf_cost_hf_require_once", 1)]
    assert isinstance(error, HardFenceRaceError)
    assert server.get_commit(run.target).id == run.foreign[0]
    marker = server.get_commit(error.staging_branch)
    assert marker.metadata["lakefence.evidence"] == "HardFenceRaceError"
    assert server.get_commit(marker.parents[0]).parents == [run.input_commit]  # the staged commit, kept
    assert_hard_fence_row(run.attempts[1], "fail_closed", "hard", retry=False, uploads=1)


@pytest.mark.hard_fence
@pytest.mark.parametrize("depth", HF_DEPTHS)
def test_hard_fence_table_replace_after_the_refusal(
    measure: Callable[..., Run], server: Backdoor, fenced_history: dict[int, str], dags: Any, depth: int
) -> None:
    """Try 1's publication lands during try 2's job (a zombie): try 2's optimistic merge is refused
    (409: both wrote out/a.txt), the target is read, and try 1's publication is replaced."""
    scenario = Scenario(
        objects=0,
        die_after_publishing=True,
        zombie_publishes_during_retry_job=True,
        files_by_try={1: {"out/a.txt": "try 1"}, 2: {"out/a.txt": "try 2"}},
    )
    run = measure(dags.hf_require_dag, fenced_history[depth], scenario)
    assert run.dag_run.state == "success" and list(run.attempts) == [1, 2]
    head = server.get_commit(run.target)
    assert run.xcom["decision"] == "replace"
    assert head.id == run.xcom["output_ref"] == run.xcom["staged_commit"] and head.parents == [run.input_commit]
    assert run.published_before_death[0] in run.xcom["reason"]  # the zombie's publication, replaced
    # Try 2 started on the input (the zombie's publication had not landed): no getObject.
    assert_hard_fence_row(run.attempts[2], "replace_after_refusal", "hard", retry=True, uploads=1, head_is_input=True)


@pytest.mark.hard_fence
@pytest.mark.parametrize("fence", ["soft", "hard"])
def test_the_default_finds_the_hard_fence_and_remembers_it_on_the_target(
    measure: Callable[..., Run], server: Backdoor, history: dict[int, str], fenced_history: dict[int, str], dags: Any,
    fence: str,
) -> None:
    """``hard_fence="auto"`` (the default): a target that carries the hard fence gets its cheaper path
    without asking; one without it costs one read beside the staging branch's creation, once. Each
    publication vouches in its metadata for what it found (the fence's version, or none), so the next
    day's run on it reads nothing."""
    first_input = (fenced_history if fence == "hard" else history)[1]
    day1 = measure(dags.hf_default_dag, first_input, Scenario(objects=0, files_by_try={1: {"out/a.txt": "day 1"}}))
    assert day1.dag_run.state == "success" and day1.xcom["decision"] == "merge"
    published = day1.xcom["output_ref"]
    assert server.get_commit(day1.target).id == published
    vouched = str(HARD_FENCE_VERSION) if fence == "hard" else "0"
    assert server.get_commit(published).metadata[FENCE_KEY] == vouched
    # Day 1 on the installer's merge (it vouches), or on a user's commit without the fence (one read).
    day1_before = _BEFORE_OFF if fence == "hard" else _BEFORE
    assert_hard_fence_row(day1.attempts[1], "merge", fence, retry=False, uploads=1, before=day1_before)
    # Day 2 builds on day 1's publication: the fence (or its absence) is known from its metadata.
    day2 = measure(
        dags.hf_default_dag,
        published,
        Scenario(objects=0, target_from=published, files_by_try={1: {"out/a.txt": "day 2"}}),
    )
    assert day2.dag_run.state == "success" and day2.xcom["decision"] == "merge"
    assert server.get_commit(day2.xcom["output_ref"]).parents[0] == published
    assert_hard_fence_row(day2.attempts[1], "merge", fence, retry=False, uploads=1)


#: The benchmark's path (benchmarks/publish_latency.py): the default ``hard_fence="auto"`` on an
#: input that carries the fence, direct mode without ``output_prefixes``. The job may have written
#: under ``_lakefs_actions/``, so a diff of that directory between the input and the staged commit
#: goes beside the merge (one round trip for both); the merge is read back only when it changed.
DIRECT_HARD_FENCE_AFTER = {"commit": 1, "mergeIntoBranch": 1, "diffRefs": 1, "deleteBranch": 1, **_RECORD}
#: job rewrote the action file -> serial round trips after the job: commit, merge beside the diff,
#: record beside the delete (and beside the verifying read, when the job rewrote the file).
DIRECT_HARD_FENCE_SERIAL = {False: 3, True: 3}


@pytest.mark.hard_fence
@pytest.mark.parametrize("rewrites", [False, True], ids=["job-elsewhere", "job-rewrites-the-action-file"])
def test_direct_mode_diffs_the_actions_directory_beside_the_merge(
    measure: Callable[..., Run], server: Backdoor, fenced_history: dict[int, str], dags: Any, rewrites: bool
) -> None:
    """Direct mode without ``output_prefixes`` on a fenced input: 7 calls in 5 round trips (the diff
    proves the action file kept: lakeFS's fence checked the merge), 8 in 5 when the job rewrote it
    (the merge's verifying read goes beside the record)."""
    run = measure(dags.direct_dag, fenced_history[1], Scenario(objects=1, rewrite_action_file=rewrites))
    assert run.dag_run.state == "success" and run.xcom["decision"] == "merge"
    head = server.get_commit(run.target)
    assert head.id == run.xcom["output_ref"] and head.parents == [run.input_commit, run.xcom["staged_commit"]]
    assert head.metadata[EXPECTED_HEAD_KEY] == run.input_commit
    attempt = run.attempts[1]
    assert attempt.before == _BEFORE_OFF  # the installer's merge vouches for the fence: no read
    assert attempt.after == plus(DIRECT_HARD_FENCE_AFTER, {"getCommit": 1} if rewrites else {})
    assert (attempt.rounds_before, attempt.rounds_after) == (2, DIRECT_HARD_FENCE_SERIAL[rewrites])
    assert_fence_cost(attempt)


# -- the scoped fence (docs/howto/many-writers.md) ---------------------------------------------

#: Commits between the input and the target's HEAD that the scoped cost must be flat in.
SCOPED_MOVES = (1, 100, 1000)
#: A first try of a scoped publish (one write prefix) onto a target that moved past the input outside
#: the scope: before the job, the merge base proves the input an ancestor of the target (where the
#: branch-wide fence refuses before the job); after it, the soft fence reads the target and asks one
#: diff per fenced prefix, the hard fence v2 sends the merge at once (lakeFS checks the scope). The
#: workspace's one upload, and the listing of what the input holds under the declared output prefix
#: (``output_mode="replace"``, as in the branch-wide mode with ``output_prefixes``), are the job's.
_SCOPED_OUTPUT = {"uploadObject": 1}
#: ``output_mode="replace"`` lists what the input holds under the declared prefix before the job.
_SCOPED_LISTING = {"listObjects": 1}
#: fence -> serial round trips (before the job, from the staged commit on).
SCOPED_SERIAL = {"soft": (4, 5), "hard": (4, 2)}
SCOPED_CONTRACT: dict[str, tuple[dict[str, int], dict[str, int]]] = {
    "soft": (
        {**_BEFORE_OFF, "findMergeBase": 1, **_SCOPED_LISTING},
        plus(CONTRACT["merge"][1], {"diffRefs": 1}, _SCOPED_OUTPUT, _RECORD),
    ),
    "hard": (
        {**HF_BEFORE["hard"], "getObject": 1, "findMergeBase": 1, **_SCOPED_LISTING},  # a moved HEAD: no vouch
        plus(HARD_FENCE_CONTRACT[("merge", "hard")], _SCOPED_OUTPUT, _RECORD),
    ),
}


@pytest.fixture(scope="module")
def scoped_fenced_line(server: Backdoor, history: dict[int, str]) -> tuple[str, str]:
    """A branch whose first commit above the creation carries the hard fence, then 999 empty commits;
    returns (the fenced input, the branch's tip)."""
    server.create_branch("scoped-fenced", history[1])
    fenced = server.install_hard_fence("scoped-fenced")
    for n in range(max(SCOPED_MOVES) - 1):
        server.commit("scoped-fenced", f"moved {n}")
    return fenced, server.get_commit("scoped-fenced").id


@pytest.mark.scoped
@pytest.mark.parametrize("fence", ["soft", "hard"])
@pytest.mark.parametrize("moves", SCOPED_MOVES)
def test_scoped_publish_onto_a_moved_target_costs_one_diff_per_prefix(
    measure: Callable[..., Run],
    server: Backdoor,
    history: dict[int, str],
    scoped_fenced_line: tuple[str, str],
    dags: Any,
    fence: str,
    moves: int,
) -> None:
    """``moves`` commits between the input and the target's HEAD (the last one another writer's
    partition): the same calls at 1, 100 and 1,000."""
    if fence == "soft":
        tip = history[MAX_DEPTH]
        input_commit = server.get_commit(f"{tip}~{moves - 1}").id
        dag = dags.scoped_off_dag
    else:
        input_commit, tip = scoped_fenced_line
        tip = server.get_commit(f"{tip}~{max(SCOPED_MOVES) - moves}").id
        dag = dags.scoped_require_dag
    scenario = Scenario(
        objects=0, target_from=tip, disjoint_commit_on_target=True, files_by_try={1: {"out/a.txt": "mine"}}
    )
    run = measure(dag, input_commit, scenario)
    assert run.dag_run.state == "success" and list(run.attempts) == [1]
    assert run.xcom["decision"] == "merge" and run.xcom["input_ref"] == input_commit
    head = server.get_commit(run.target)
    assert head.id == run.xcom["output_ref"] and head.parents[0] == run.foreign[0]
    assert server.count_objects(head.id, "out/") == 1 and server.count_objects(head.id, "other/") == 1
    before, after = SCOPED_CONTRACT[fence]
    assert (run.attempts[1].before, run.attempts[1].after) == (before, after)
    assert (run.attempts[1].rounds_before, run.attempts[1].rounds_published) == SCOPED_SERIAL[fence]
