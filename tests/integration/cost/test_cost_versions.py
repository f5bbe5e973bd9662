"""The cost contract on every Airflow version the package supports: 2.11, 3.0 to 3.2, 3.3.

The lakeFS side is the same on every version (the run state lives in lakeFS, not in Airflow): each
try makes exactly the calls of the contract's row (``CONTRACT`` in test_cost_contract.py, plus the
run state's record for a try that reports), and a retry adds exactly one read of the run state. The
Airflow side is what the attempt fence's liveness check costs there
(airflow_lakefence/airflow_adapter/task_instances.py), pinned per version family in :data:`AIRFLOW_COST`:

* 3.3: the token in ``task_state_store``; Execution-API requests;
* 3.0 to 3.2: the token as the task's own XCom; Execution-API requests (``dag.test()`` runs the
  task in-process there too, so the same spy counts them; the token's XCom requests are told apart
  from the report's XComs by their key);
* 2.11: the task instance's row, read through the ORM; the SQL statements the package issues (an
  SQLAlchemy ``before_cursor_execute`` listener, counting a statement when a frame of the package
  is on the stack), by verb and table.

Three runs, depth-1 history and one object, on real lakeFS (and the local server on 3.3): a first
try that merges, a retry that replaces the publication of a try that died after publishing, and a
first try refused before the job. docs/performance.md tables the figures.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from airflow_lakefence.airflow_adapter.task_instances import TOKEN_XCOM_KEY
from airflow_lakefence.exceptions import PublishFenceError
from lakefence_testing.pytest_plugin import LakeFSServerInfo
from tests.integration.cost.cost_measure import (
    Attempt,
    Backdoor,
    Run,
    Scenario,
    execution_api_spy,
    plus,
    run_publish,
)
from tests.integration.cost.test_cost_contract import (
    ARM_FIRST_TRY,
    ARM_REFUSED,
    ARM_RETRY,
    FENCE_CHECK,
    FENCE_MESSAGES,
    REPORT_RECORD,
    RUN_STATE_READ,
    assert_contract,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")

REPOSITORY = f"cost-versions-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class FenceCost:
    """What the attempt fence costs on one Airflow version family, as counted there.

    :param unit: what the Airflow-side counter counts.
    :param messages: the counter's entries that are the fence's.
    :param arm: arming it, before the job, for a first try, a retry, and a try refused before the job.
    :param check: one liveness check of a current attempt.
    :param report: what the last check's span adds (it also holds the report's XCom pushes).
    :param retry_start: what Airflow sends for the token when the next try starts, before its
        ``pre_execute`` (3.0 to 3.2 delete every XCom of the earlier try, the token too).
    """

    unit: str
    messages: tuple[str, ...]
    arm: dict[str, dict[str, int]]
    check: dict[str, int]
    report: dict[str, int]
    retry_start: dict[str, int]


#: Per version family: the fence's Airflow-side cost (docs/performance.md, "The attempt fence on each version").
AIRFLOW_COST: dict[str, FenceCost] = {
    "3.3": FenceCost(
        unit="Execution-API requests",
        messages=FENCE_MESSAGES,
        arm={"first": ARM_FIRST_TRY, "retry": ARM_RETRY, "refused": ARM_REFUSED},
        check=FENCE_CHECK,
        report=REPORT_RECORD,
        retry_start={},  # the server archives the store with the try: no request
    ),
    "3.0-3.2": FenceCost(
        unit="Execution-API requests",
        messages=("SetXCom[token]", "GetXCom[token]", "DeleteXCom[token]", "GetTaskStates"),
        arm={case: {"SetXCom[token]": 1} for case in ("first", "retry", "refused")},
        check={"GetXCom[token]": 1, "GetTaskStates": 1},
        report={},
        # The task runner clears the earlier try's XComs (``xcom_keys_to_clear``); ``XCom.delete``
        # reads each one's reference first (custom backends purge it).
        retry_start={"GetXCom[token]": 1, "DeleteXCom[token]": 1},
    ),
    "2.11": FenceCost(
        unit="SQL statements",
        messages=("SELECT task_instance",),
        arm={case: {"SELECT task_instance": 1} for case in ("first", "retry", "refused")},
        check={"SELECT task_instance": 1},
        report={},
        retry_start={},  # nothing is stored: the row is Airflow's own
    ),
}


def version_family(version: str) -> str:
    """The :data:`AIRFLOW_COST` key of an Airflow version.

    :param version: e.g. ``"3.1.8"``.
    """
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    if major == 2:
        return "2.11"
    return "3.0-3.2" if minor < 3 else "3.3"


def airflow_family() -> str:
    """The family of the running Airflow."""
    import airflow

    return version_family(airflow.__version__)


# -- the Airflow-side counters -----------------------------------------------------------------


def _execution_api_label(msg: Any) -> str:
    """A request's message type; the attempt token's XCom requests are marked (the report's are not)."""
    name = type(msg).__name__
    return f"{name}[token]" if getattr(msg, "key", None) == TOKEN_XCOM_KEY else name


_PACKAGE_DIR = f"{os.sep}airflow_lakefence{os.sep}"
_TABLE = re.compile(r"^\s*(SELECT\b.*?\bFROM|INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.I | re.S)


def _statement_label(statement: str) -> str:
    """``<VERB> <first table>`` of one SQL statement."""
    found = _TABLE.match(statement)
    if found is None:
        return statement.split(None, 1)[0].upper() if statement.strip() else "?"
    return f"{found.group(1).split()[0].upper()} {found.group(2)}"


def _issued_by_the_package() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if _PACKAGE_DIR in frame.f_code.co_filename:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@pytest.fixture
def airflow_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """The Airflow-side counter of this version (:data:`AIRFLOW_COST`'s ``unit``)."""
    if airflow_family() != "2.11":
        yield execution_api_spy(monkeypatch, _execution_api_label)
        return
    from airflow import settings
    from sqlalchemy import event

    calls: Counter[str] = Counter()

    def before_cursor_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if _issued_by_the_package():
            calls[_statement_label(statement)] += 1

    engine = settings.engine
    event.listen(engine, "before_cursor_execute", before_cursor_execute)
    try:
        yield calls
    finally:
        event.remove(engine, "before_cursor_execute", before_cursor_execute)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(lakefence_server: LakeFSServerInfo) -> Backdoor:
    """This module's uncounted access to the session's lakeFS, with its repository created."""
    backdoor = Backdoor(lakefence_server, REPOSITORY)
    backdoor.create_repository()
    return backdoor


@pytest.fixture(scope="module")
def input_commit(server: Backdoor) -> str:
    """The input: ``main``'s only commit (history depth 1)."""
    return str(server.get_commit("main").id)


@pytest.fixture
def cost() -> FenceCost:
    return AIRFLOW_COST[airflow_family()]


@pytest.fixture
def measure(
    server: Backdoor, lakefence_controls: Any, airflow_calls: Counter[str], cost_dags: Any, cost: FenceCost
) -> Callable[..., Run]:
    def measure_(dag: Any, input_commit: str, scenario: Scenario) -> Run:
        run = run_publish(
            server,
            lakefence_controls,
            airflow_calls,
            cost_dags,
            dag,
            input_commit,
            scenario,
            fence_messages=cost.messages,
        )
        for number, attempt in run.attempts.items():  # the figures docs/performance.md tables
            print(
                f"[{airflow_family()}] try {number}: lakeFS {attempt.before} | {attempt.after}; "
                f"fence arm {attempt.fence_arm}, checks {attempt.fence_checks}"
            )
        return run

    return measure_


def assert_fence(attempt: Attempt, cost: FenceCost, arm: str, checks: int) -> None:
    """The attempt fence's Airflow-side cost of ``attempt``: arming it (``arm``: first, retry or
    refused), then ``checks`` checks, each exactly the version's (the last one of a reporting try
    with what it adds)."""
    assert attempt.fence_arm == cost.arm[arm]
    expected = [cost.check] * checks
    if checks == 3:
        expected[-1] = plus(cost.check, cost.report)
    assert attempt.fence_checks == expected


# -- the three runs ----------------------------------------------------------------------------


def test_a_first_try_that_merges(
    measure: Callable[..., Run], server: Backdoor, input_commit: str, cost_dags: Any, cost: FenceCost
) -> None:
    run = measure(cost_dags.direct_dag, input_commit, Scenario(objects=1))
    assert run.dag_run.state == "success" and list(run.attempts) == [1]
    head = server.get_commit(run.target)
    assert run.xcom["decision"] == "merge" and run.xcom["output_ref"] == head.id
    assert head.parents == [input_commit, run.xcom["staged_commit"]]
    assert server.count_objects(run.target) == 1
    assert_contract(run.attempts[1], "merge")
    assert_fence(run.attempts[1], cost, "first", checks=3)


def test_a_retry_that_replaces_a_dead_tries_publication(
    measure: Callable[..., Run], server: Backdoor, input_commit: str, cost_dags: Any, cost: FenceCost
) -> None:
    run = measure(cost_dags.direct_retry_dag, input_commit, Scenario(objects=1, die_after_publishing=True))
    assert run.dag_run.state == "success" and list(run.attempts) == [1, 2]
    head = server.get_commit(run.target)
    assert run.xcom["decision"] == "replace" and run.xcom["output_ref"] == head.id
    assert head.parents == [input_commit] and head.id != run.published_before_death[0]
    assert server.count_objects(run.target) == 1
    first, retry = run.attempts[1], run.attempts[2]
    assert_contract(first, "merge", recorded=False)  # it died after merging, before its record
    assert_contract(retry, "replace")
    # What the retry adds before the job: the earlier tries' staging branches, and one run-state read.
    added = Counter(retry.before)
    added.subtract(first.before)
    assert +added == {"listBranches": 1, "listObjects": RUN_STATE_READ}
    assert_fence(first, cost, "first", checks=2)  # died after its second check
    assert_fence(retry, cost, "retry", checks=3)
    # From the dead try's last mark to the retry's start: what Airflow sends for the token then.
    second = next(i for i, mark in enumerate(run.marks) if mark.label == "start" and mark.try_number == 2)
    between = run.marks[second].airflow - run.marks[second - 1].airflow
    assert {k: v for k, v in between.items() if k in cost.messages} == cost.retry_start


def test_a_first_try_refused_before_the_job(
    measure: Callable[..., Run], server: Backdoor, input_commit: str, cost_dags: Any, cost: FenceCost
) -> None:
    run = measure(cost_dags.direct_dag, input_commit, Scenario(foreign_commit_before_run=True))
    assert run.dag_run.state == "failed" and list(run.attempts) == [1]
    assert isinstance(cost_dags.FAILURES[("lf_cost_direct", 1)], PublishFenceError)
    assert server.get_commit(run.target).id == run.foreign[0]
    assert_contract(run.attempts[1], "fail_closed_before_job", recorded=False)  # nothing written
    assert_fence(run.attempts[1], cost, "refused", checks=0)


def test_version_families() -> None:
    assert [version_family(v) for v in ("2.11.0", "3.0.6", "3.1.8", "3.2.2", "3.3.0", "3.3.2")] == [
        "2.11",
        "3.0-3.2",
        "3.0-3.2",
        "3.0-3.2",
        "3.3",
        "3.3",
    ]
