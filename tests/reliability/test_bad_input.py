"""The bad-input catalogue: every case a named exception, nothing written.

Two kinds of bad input:

* arguments that can never work are refused when the DAG file is parsed (the operator's
  constructor), before any task runs;
* values known only at run time (templated from ``dag_run.conf``, an upstream XCom, the connections)
  are refused by the running task under ``dag.test()``, against the local lakeFS server.

For each case: the exact exception class; the target branch's HEAD and the repository's branches
(hidden ones included) unchanged; the lakeFS *write* calls the server saw, exactly (none when the
input is refused before the first write; a staging branch created and deleted again when the
problem only shows once the input is resolved or the job ran); and neither the secret nor the
wrong secret in the exception, its causes, its traceback or the task's output.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import lakefs
import pytest

from airflow_lakefence.exceptions import (
    InputRefError,
    InvalidInputError,
    LakeFenceError,
    LakeFSAuthError,
    LakeFSConnectionError,
    OutputPrefixError,
    PublishBudgetError,
    SparkJobError,
    WorkspaceError,
)
from airflow_lakefence.operators import FencedSparkPublishOperator, PublishOptions
from tests.integration.helpers import SPARK_TASK, branches, commit_files, run_dag

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")

#: lakeFS operations that change state (swagger operationIds).
WRITE_OPERATIONS = frozenset(
    {
        "createBranch", "deleteBranch", "commit", "mergeIntoBranch", "hardResetBranch", "resetBranch",
        "revertBranch", "cherryPick", "uploadObject", "deleteObject", "deleteObjects", "copyObject",
        "createTag", "deleteTag", "createRepository", "deleteRepository", "updateObjectUserMetadata",
    }
)  # fmt: skip
CREATED_AND_DELETED = {"createBranch": 1, "deleteBranch": 1}
WRONG_SECRET = "wrong-secret-0123456789abcdef"
JOB = {"files": {"out/a.txt": "A"}}


@dataclass(frozen=True)
class World:
    """The repository a case runs against."""

    repo: lakefs.Repository
    input_commit: str
    side_commit: str  # a commit on another branch, not on the target's history
    conn: dict[str, str]


@dataclass(frozen=True)
class Case:
    """One runtime bad input.

    :param conf: ``dag_run.conf`` overrides, given the world.
    :param error: the exact exception class the task raises.
    :param writes: the write calls the server sees.
    :param dag: which DAG of tests/dags/reliability_dags.py runs it.
    :param env: connection changes, given the monkeypatch and the world.
    :param evidence: the staging branch is kept (a fail-closed publish keeps it as evidence).
    """

    conf: Callable[[World], dict[str, Any]]
    error: type[LakeFenceError]
    writes: dict[str, int] = field(default_factory=dict)
    dag: str = "workspace_dag"
    env: Callable[[pytest.MonkeyPatch, World], None] | None = None
    evidence: bool = False


def _conn(**changes: Any) -> Callable[[pytest.MonkeyPatch, World], None]:
    def apply(monkeypatch: pytest.MonkeyPatch, world: World) -> None:
        conn = {k: v for k, v in {**world.conn, **changes}.items() if v is not None}
        monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_DEFAULT", json.dumps(conn))

    return apply


def _without(variable: str) -> Callable[[pytest.MonkeyPatch, World], None]:
    def apply(monkeypatch: pytest.MonkeyPatch, world: World) -> None:
        monkeypatch.delenv(variable)

    return apply


RUNTIME: dict[str, Case] = {
    "unknown repository": Case(lambda w: {"repository": "no-such-repository"}, InvalidInputError),
    "unknown target branch": Case(lambda w: {"target": "no-such-branch"}, InvalidInputError),
    # Resolved (or, for a commit id, checked by one merge-base read) before any write.
    "unknown input ref": Case(lambda w: {"input_ref": "no-such-ref"}, InputRefError),
    "unknown input commit id": Case(lambda w: {"input_ref": "f" * 64}, InputRefError),
    "input ref past the history (not a commit)": Case(lambda w: {"input_ref": "main~50"}, InputRefError),
    "input ref not a string (wrong XCom)": Case(lambda w: {"input_ref": {"commit": w.input_commit}}, InputRefError),
    "input ref missing (no upstream XCom)": Case(lambda w: {"input_ref": None}, InputRefError),
    "input ref with whitespace": Case(lambda w: {"input_ref": "main branch"}, InputRefError),
    "input ref not on the target's history": Case(lambda w: {"input_ref": w.side_commit}, InputRefError),
    "invalid branch characters": Case(lambda w: {"target": "feature/new data"}, InvalidInputError),
    "empty target branch": Case(lambda w: {"target": ""}, InvalidInputError),
    "oversized target branch": Case(lambda w: {"target": "b" * 300}, InvalidInputError),
    "empty repository name": Case(lambda w: {"repository": ""}, InvalidInputError),
    "oversized repository name": Case(lambda w: {"repository": "r" * 70}, InvalidInputError),
    "invalid repository characters": Case(lambda w: {"repository": "My_Repo"}, InvalidInputError),
    "wrong credentials": Case(lambda w: {}, LakeFSAuthError, env=_conn(password=WRONG_SECRET)),
    "unreachable endpoint": Case(lambda w: {}, LakeFSConnectionError, env=_conn(host="http://127.0.0.1:9")),
    "lakeFS connection missing": Case(lambda w: {}, InvalidInputError, env=_without("AIRFLOW_CONN_LAKEFS_DEFAULT")),
    "lakeFS connection without secret": Case(lambda w: {}, InvalidInputError, env=_conn(password=None)),
    "lakeFS timeout extra not a number": Case(lambda w: {}, InvalidInputError, env=_conn(extra='{"timeout": "x"}')),
    "Spark connection missing (no silent yarn)": Case(
        lambda w: {}, InvalidInputError, env=_without("AIRFLOW_CONN_SPARK_LOCAL")
    ),
    "Spark job failure": Case(lambda w: {"job": {"fail": True}}, SparkJobError, CREATED_AND_DELETED),
    "empty workspace": Case(lambda w: {"job": {}}, WorkspaceError, CREATED_AND_DELETED),
    "files outside output prefixes (workspace)": Case(
        lambda w: {"job": {"files": {"out/a.txt": "A", "other/b.txt": "B"}}, "output_prefixes": ["out/"]},
        OutputPrefixError,
        # The offending workspace is uploaded and kept as evidence, recorded in the run state (the
        # repository's first record: a refused upload, the run-state branch, the upload) and marked
        {"createBranch": 1 + 1, "uploadObject": 2 + 2, "commit": 1},
        evidence=True,
    ),
    "files outside output prefixes (direct)": Case(
        lambda w: {"job": {"files": {"out/a.txt": "A", "other/b.txt": "B"}}, "output_prefixes": ["out/"]},
        OutputPrefixError,
        # the job's own writes into its staging branch, the run state's evidence record (as above),
        # then the evidence marker on the kept branch
        {"createBranch": 1 + 1, "uploadObject": 2 + 2, "commit": 1},
        dag="direct_dag",
        evidence=True,
    ),
    "output prefixes as a string": Case(lambda w: {"output_prefixes": "out/"}, InvalidInputError),
    "empty output prefix": Case(lambda w: {"output_prefixes": ["/"]}, InvalidInputError),
    "reserved commit metadata key": Case(lambda w: {"metadata": {"lakefence.role": "x"}}, InvalidInputError),
    "commit metadata value not a string": Case(lambda w: {"metadata": {"owner": 7}}, InvalidInputError),
    "publish budget larger than the time left": Case(
        lambda w: {"job": {**JOB, "sleep": 1.5}},
        PublishBudgetError,
        {"createBranch": 1, "uploadObject": 1, "commit": 1, "deleteBranch": 1},  # staged privately, dropped
        dag="budget_dag",
    ),
}

BASE: dict[str, Any] = SPARK_TASK
PARSE_TIME: dict[str, tuple[dict[str, Any], type[LakeFenceError]]] = {
    "negative publish budget": ({"options": PublishOptions(publish_budget=-1)}, InvalidInputError),
    "negative stale grace period": ({"options": PublishOptions(stale_grace_period=-5)}, InvalidInputError),
    "publish budget not below execution_timeout": (
        {"options": PublishOptions(publish_budget=timedelta(minutes=5)), "execution_timeout": timedelta(minutes=5)},
        PublishBudgetError,
    ),
    "read_only with output prefixes": ({"read_only": True, "output_prefixes": ["a/"]}, InvalidInputError),
    "read_only with commit metadata": ({"read_only": True, "commit_metadata": {"a": "b"}}, InvalidInputError),
    "read_only with a publish budget": (
        {"read_only": True, "options": PublishOptions(publish_budget=10)},
        InvalidInputError,
    ),
    "unknown write mode": ({"write_mode": "s3"}, InvalidInputError),
    "misspelt output mode": ({"output_mode": "replcae"}, InvalidInputError),
    "misspelt hard fence mode": ({"options": PublishOptions(hard_fence="requir")}, InvalidInputError),
    "unknown fence scope": ({"fence_scope": "prefix"}, InvalidInputError),
    "reserved commit metadata key": ({"commit_metadata": {"lakefence.role": "x"}}, InvalidInputError),
    "output prefixes as a string": ({"output_prefixes": "out/"}, InvalidInputError),
    "invalid repository name": ({"repository": "My_Repo"}, InvalidInputError),
    "input ref with whitespace": ({"input_ref": "main branch"}, InputRefError),
    "invalid staging prefix": ({"options": PublishOptions(staging_branch_prefix="bad prefix")}, InvalidInputError),
    "empty staging prefix": ({"options": PublishOptions(staging_branch_prefix="")}, InvalidInputError),
    "oversized staging prefix": ({"options": PublishOptions(staging_branch_prefix="p" * 40)}, InvalidInputError),
    "the old spelling of a knob, misspelt": ({"hard_fence": "requir"}, InvalidInputError),
}


def test_the_catalogue_is_complete() -> None:
    assert len(RUNTIME) + len(PARSE_TIME) >= 15
    assert len(RUNTIME) >= 15  # the run-time half alone has the fifteen cases the catalogue promises


@pytest.fixture
def world(lakefence_repo: lakefs.Repository, lakefs_conn: dict[str, str]) -> World:
    input_commit = commit_files(lakefence_repo, "main", {"in/data.txt": "input"}, "seed input")
    side = lakefence_repo.branch("side").create("main")
    side_commit = commit_files(lakefence_repo, "side", {"side.txt": "x"}, "not on main")
    assert side.get_commit().id == side_commit
    return World(lakefence_repo, input_commit, side_commit, dict(lakefs_conn))


def _texts(error: BaseException) -> str:
    """Every text an error carries: its message, repr, causes and traceback."""
    parts = []
    seen: BaseException | None = error
    while seen is not None:
        parts += [str(seen), repr(seen)]
        seen = seen.__cause__ or seen.__context__
    parts.append("".join(traceback.format_exception(error)))
    return "\n".join(parts)


@pytest.mark.parametrize("name", sorted(RUNTIME))
def test_runtime_bad_input(
    dags: Any,
    world: World,
    lakefence_controls: Any,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    name: str,
) -> None:
    case = RUNTIME[name]
    repo = world.repo
    before = sorted(branches(repo))
    if case.env is not None:
        case.env(monkeypatch, world)
    conf = {"repository": repo.id, "target": "main", "input_ref": world.input_commit, "job": JOB}
    conf.update(case.conf(world))
    dag = getattr(dags, case.dag)
    lakefence_controls.reset_counts()
    dr = run_dag(dag, conf)
    assert dr.state == "failed"
    error = dags.FAILURES[(dag.dag_id, 1)]
    assert type(error) is case.error, repr(error)

    writes = {op: n for op, n in lakefence_controls.counts().items() if op in WRITE_OPERATIONS and n}
    assert writes == case.writes
    assert repo.branch("main").get_commit().id == world.input_commit
    after = sorted(branches(repo))
    if case.evidence:
        (kept,) = set(after) - set(before)
        assert kept == getattr(error, "staging_branch", None)
    else:
        assert after == before

    out, err = capfd.readouterr()
    for secret in (world.conn["password"], WRONG_SECRET):
        assert secret not in _texts(error)
        assert secret not in out + err


@pytest.mark.parametrize("name", sorted(PARSE_TIME))
def test_parse_time_bad_input(lakefence_controls: Any, lakefs_conn: dict[str, str], name: str) -> None:
    kwargs, expected = PARSE_TIME[name]
    lakefence_controls.reset_counts()
    with pytest.raises(expected) as info:
        FencedSparkPublishOperator(**{**BASE, **kwargs})
    assert type(info.value) is expected
    assert lakefence_controls.counts() == {}  # refused before anything talked to lakeFS
    assert lakefs_conn["password"] not in _texts(info.value)
