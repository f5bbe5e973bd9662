"""The scoped publish fence through the engine: many writers on one branch, fenced by their prefixes.

Every scenario runs the real :class:`~airflow_lakefence.core.engine.PublishEngine` with a stand-in
attempt fence, against lakeFS over HTTP through the real adapter (the local server and real lakeFS,
per ``--lakefs-backend``). Concurrent
publications run in threads, each with its own adapter, started together at a barrier. Outcomes are
asserted on the target's objects, its commits and the branches left behind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.engine import AttemptLocations, PublishEngine, PublishRequest
from airflow_lakefence.core.fences.hard import SCOPE_COUNT_KEY, forget_checks
from airflow_lakefence.core.fences.scope import RACE_REVERT_KEY, surviving
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.records.run_state import MemoryRunState
from airflow_lakefence.exceptions import (
    InvalidInputError,
    PublishFenceError,
    PublishRaceError,
    ScopeOverlapError,
)
from airflow_lakefence.hardfence import install_hard_fence
from airflow_lakefence.triggers.probes import probe_abandoned
from tests.conftest import fresh_dag_module
from tests.integration.core import test_engine
from tests.integration.core.test_engine import Reported, StandInFence, World, adapter
from tests.integration.helpers import (
    commit_files,
    die_after_publishing,
    python_task,
    read_text,
    run_dag,
    run_together,
    staging_branches,
    xcoms,
)
from tests.integration.lossy_port import LossyPort

pytestmark = pytest.mark.scoped

TABLE = "tables/t/"
DIMS = "dims/d/"


def day(n: int) -> str:
    return f"{TABLE}date=2026-01-{n:02d}/"


def key(n: int, task: str = "publish") -> PublicationKey:
    return PublicationKey("daily", f"scheduled__2026-01-{n:02d}", task)


class Crash(BaseException):
    """The worker dying after publishing: no ``except Exception`` catches it."""


def crash() -> None:
    raise Crash


world = test_engine.world  # the fixture: a new repository on the session's lakeFS


def publish(
    world: World,
    attempt: AttemptId,
    files: dict[str, str],
    prefixes: Sequence[str],
    *,
    input_ref: str | None = None,
    input_prefixes: Sequence[str] | None = None,
    hard_fence: str = "off",
    port: Any = None,
    during_job: Callable[[], None] | None = None,
    allow_empty: bool = False,
) -> Any:
    """Run one scoped publish attempt writing ``files`` (workspace mode); return its result."""

    def job(locations: AttemptLocations) -> None:
        assert locations.workspace is not None
        for path, text in files.items():
            target = locations.workspace / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        if during_job is not None:
            during_job()

    request = PublishRequest(
        repository=world.repository,
        target_branch="main",
        input_ref=input_ref or world.input,
        output_prefixes=list(prefixes),
        input_prefixes=input_prefixes,
        fence_scope="prefixes",
        hard_fence=hard_fence,
        allow_empty_workspace=allow_empty,
    )
    engine = PublishEngine(port or world.port, StandInFence(attempt), request, run_state=MemoryRunState())
    return engine.run(job, Reported([]))


def under(world: World, prefix: str, ref: str = "main") -> dict[str, str]:
    return {path: text for path, text in world.tree(ref).items() if path.startswith(prefix)}


def fenced_input(world: World) -> str:
    """Install the hard fence (v2) on ``main``; return the new HEAD (the input carrying it)."""
    forget_checks()
    result = install_hard_fence(world.client, world.repository, "main")
    return str(result.head)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"output_prefixes": None}, "needs output_prefixes"),
        ({"output_prefixes": ["tables/t/", "tables/t/date=1/"]}, "overlap"),
        ({"input_prefixes": ["s3://bucket/dims/"]}, "URI"),
        ({"input_prefixes": ["../dims/"]}, "'..'"),
        ({"input_prefixes": "dims/"}, "not a string"),
        ({"fence_scope": "table"}, "'branch' or 'prefixes'"),
        ({"fence_scope": "branch", "input_prefixes": ["dims/"]}, "branch-wide fence"),
    ],
)
def test_bad_scopes_are_refused_before_any_write(world: World, options: dict[str, Any], message: str) -> None:
    request = PublishRequest(
        **{
            "repository": world.repository,
            "target_branch": "main",
            "input_ref": world.input,
            "output_prefixes": [day(1)],
            "fence_scope": "prefixes",
            **options,
        }
    )
    with pytest.raises(InvalidInputError, match=message):
        PublishEngine(world.port, StandInFence(AttemptId(key(1), 1, "ti")), request)
    assert world.port.calls == {}


# -- disjoint and overlapping writers ----------------------------------------------------------


def test_a_publication_lands_on_a_target_that_moved_outside_its_scope(world: World) -> None:
    other = world.write("main", {day(2) + "part-0": "other writer", "elsewhere/x": "x"}, "other writer")
    result = publish(world, AttemptId(key(1), 1, "ti-1"), {day(1) + "part-0": "mine"}, [day(1)])
    head = world.head()
    assert (result.decision, result.output_ref, result.input_ref) == ("merge", head.id, world.input)
    assert head.parents == (other, result.staged_commit)
    assert SCOPE_COUNT_KEY in head.metadata and decode_metadata(head.metadata).attempt.key == key(1)  # type: ignore[union-attr]
    assert under(world, TABLE) == {day(1) + "part-0": "mine", day(2) + "part-0": "other writer"}
    assert world.tree("main")["elsewhere/x"] == "x"
    assert world.branches() == []


def test_the_branch_mode_still_refuses_a_moved_target(world: World) -> None:
    world.write("main", {day(2) + "part-0": "other writer"}, "other writer")
    request = PublishRequest(
        repository=world.repository, target_branch="main", input_ref=world.input, output_prefixes=[day(1)]
    )
    engine = PublishEngine(world.port, StandInFence(AttemptId(key(1), 1, "ti-1")), request)
    with pytest.raises(PublishFenceError, match="before the job"):
        engine.run(lambda _locations: None, Reported([]))


@pytest.mark.parametrize("fence", ["soft", "hard"])
def test_eight_disjoint_publications_started_together_all_land(world: World, fence: str) -> None:
    base = fenced_input(world) if fence == "hard" else world.input
    days = range(1, 9)

    def one(n: int) -> Callable[[], Any]:
        def call() -> Any:
            port = LossyPort(adapter(world.server))
            attempt = AttemptId(key(n), 1, f"ti-{n}")
            files = {day(n) + "part-0": f"day {n}", day(n) + "part-1": f"day {n} again"}
            return publish(world, attempt, files, [day(n)], input_ref=base, port=port, hard_fence=_mode(fence))

        return call

    results = run_together([one(n) for n in days])
    assert all(not isinstance(r, BaseException) for r in results), results
    assert {r.decision for r in results} == {"merge"}
    for n in days:
        assert under(world, day(n)) == {day(n) + "part-0": f"day {n}", day(n) + "part-1": f"day {n} again"}
    # One merge per publication on main's first-parent line, each naming its own key.
    line = list(world.repo.branch("main").log(first_parent=True, max_amount=9))
    published = [decode_metadata(c.metadata) for c in line[:8]]
    assert sorted(r.attempt.key.run_id for r in published if r is not None) == sorted(key(n).run_id for n in days)
    assert line[8].id == base
    assert world.branches() == []


def _mode(fence: str) -> str:
    return "require" if fence == "hard" else "off"


@pytest.mark.parametrize("fence", ["soft", "hard"])
def test_overlapping_scopes_started_together_exactly_one_lands(world: World, fence: str) -> None:
    """Four writers of one partition (one file name, as a rerun of one date writes): one lands, three fail closed."""
    base = fenced_input(world) if fence == "hard" else world.input

    def one(n: int) -> Callable[[], Any]:
        def call() -> Any:
            port = LossyPort(adapter(world.server))
            attempt = AttemptId(key(1, f"writer{n}"), 1, f"ti-{n}")
            return publish(
                world,
                attempt,
                {day(1) + "part-0": f"writer {n}"},
                [day(1)],
                input_ref=base,
                port=port,
                hard_fence=_mode(fence),
            )

        return call

    results = run_together([one(n) for n in range(4)])
    landed = [n for n, r in enumerate(results) if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(landed) == 1, results
    assert all(isinstance(r, ScopeOverlapError) for r in refused), refused
    [winner] = landed
    assert under(world, day(1)) == {day(1) + "part-0": f"writer {winner}"}
    # Every refused writer's staging branch is kept as evidence.
    kept = world.branches()
    assert sorted(r.staging_branch for r in refused) == sorted(kept)


@pytest.mark.parametrize(
    ("fence", "window"), [("soft", "released"), ("soft", "held"), ("hard", "released")], ids=lambda v: str(v)
)
def test_three_writers_of_one_partition_with_their_own_file_names_exactly_one_output_lands(
    world: World, fence: str, window: str
) -> None:
    """Three runs writing one date partition with per-run file names (Spark's part-<uuid>), so their
    merges never conflict. ``released``: started together; ``held``: all three held after their scan
    until each has scanned, so every one merges onto a HEAD it did not probe (the soft fence's
    window, forced). Exactly one run's files end in the partition; the others fail closed with
    ScopeOverlapError and keep their staging branches; the latest commit under the partition stands
    for the winner (what the sensor judges)."""
    base = fenced_input(world) if fence == "hard" else world.input
    if window == "held":
        scanned = threading.Barrier(3, timeout=60)
        failpoints.arm("after_publish_read", scanned.wait)

    def one(n: int) -> Callable[[], Any]:
        def call() -> Any:
            port = LossyPort(adapter(world.server))
            attempt = AttemptId(key(1, f"run{n}"), 1, f"ti-{n}")
            files = {day(1) + f"part-{n}-a": f"run {n}", day(1) + f"part-{n}-b": f"run {n}"}
            return publish(world, attempt, files, [day(1)], input_ref=base, port=port, hard_fence=_mode(fence))

        return call

    results = run_together([one(n) for n in range(3)])
    failpoints.disarm_all()
    landed = [n for n, r in enumerate(results) if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(landed) == 1, results
    assert all(isinstance(r, ScopeOverlapError) for r in refused), refused
    [winner] = landed
    assert under(world, day(1)) == {
        day(1) + f"part-{winner}-a": f"run {winner}",
        day(1) + f"part-{winner}-b": f"run {winner}",
    }
    assert sorted(r.staging_branch for r in refused) == sorted(world.branches())
    # What the sensor judges: the newest commit under the partition once race take-backs are left out.
    latest = surviving(world.client.log_commits(world.repository, "main", prefixes=[day(1)], amount=20))[0]
    record = decode_metadata(latest.metadata)
    assert record is not None and record.attempt.key.task_id == f"run{winner}"
    if window == "held":
        assert all("taken back" in str(r) for r in refused), refused
        # The sensor's probe (Airflow answering "the winner succeeded with its merge") judges the
        # winner's publication settled: one more log call past the take-backs, only in this case.
        winner_out = results[winner].output_ref
        view = _WinnerView(f"run{winner}", winner_out)
        judged = probe_abandoned(
            world.client,
            view,
            repository=world.repository,
            branch="main",
            scope=None,
            staging_prefix="lakefence",
            output_prefixes=(day(1),),
        )
        assert (judged.verdict.value, judged.head, judged.publication) == ("settled", latest.id, winner_out)


class _WinnerView:
    """Airflow as the probe asks it: the winner's task instance succeeded with ``output_ref``."""

    def __init__(self, task_id: str, output_ref: str) -> None:
        self.task_id, self.ref = task_id, output_ref

    def task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str] | None = None) -> Any:
        return {run: {self.task_id: "success"} for run in run_ids or []}

    def output_ref(self, key: PublicationKey) -> Any:
        return self.ref

    def supersedes(self, key: PublicationKey) -> Any:
        return None

    def evidence(self, key: PublicationKey) -> Any:
        return None


# -- crashes, lost answers, the read set -------------------------------------------------------


def test_a_crashed_publication_under_others_is_replaced_and_the_others_stay(world: World) -> None:
    scope = [day(1)]
    failpoints.arm("after_verify", crash)
    with pytest.raises(Crash):
        publish(world, AttemptId(key(1), 1, "ti-1"), {day(1) + "part-0": "try 1", day(1) + "only1": "x"}, scope)
    failpoints.disarm_all()
    dead = world.head().id
    # Other writers publish disjoint partitions on top of the dead try's publication.
    publish(world, AttemptId(key(2), 1, "o-2"), {day(2) + "part-0": "two"}, [day(2)])
    publish(world, AttemptId(key(3), 1, "o-3"), {day(3) + "part-0": "three"}, [day(3)])
    result = publish(world, AttemptId(key(1), 2, "ti-2"), {day(1) + "part-0": "try 2"}, scope)
    assert result.decision == "replace" and result.output_ref == world.head().id
    assert under(world, TABLE) == {day(1) + "part-0": "try 2", day(2) + "part-0": "two", day(3) + "part-0": "three"}
    assert dead in _ancestry(world)  # nothing rewound: the dead try's publication stays in history
    assert world.branches() == []  # staging and temporary branches gone
    # A third try that writes nothing relocates only its own scope back to the input.
    again = publish(world, AttemptId(key(1), 3, "ti-3"), {}, scope, allow_empty=True)
    assert again.decision == "relocate"
    assert under(world, TABLE) == {day(2) + "part-0": "two", day(3) + "part-0": "three"}
    # And a fourth try that writes nothing either: the scope already holds the input's content.
    last = publish(world, AttemptId(key(1), 4, "ti-4"), {}, scope, allow_empty=True)
    assert (last.decision, last.output_ref) == ("noop", world.input)


def _ancestry(world: World) -> set[str]:
    seen, todo = set(), [world.head().id]
    while todo:
        commit = todo.pop()
        if commit not in seen:
            seen.add(commit)
            todo.extend(world.port.inner.get_commit(world.repository, commit).parents)
    return seen


def test_a_lost_merge_answer_with_others_on_top_is_idempotent(world: World) -> None:
    port = world.port
    other: list[str] = []

    def others_publish() -> None:
        other.append(world.write("main", {day(2) + "part-0": "two"}, "another writer"))

    # The merge lands, its answer is lost; before the engine reads the target again, another writer lands.
    port.lose("merge", landed=True)
    port.before["merge"] = lambda: port.before.__setitem__("log_commits", others_publish)
    result = publish(world, AttemptId(key(1), 1, "ti-1"), {day(1) + "part-0": "mine"}, [day(1)], port=port)
    head = world.head()
    assert head.id == other[0]
    # The output is this attempt's own merge commit (the one whose second parent is its staged commit),
    # below the other writer's commit: what the sensor ties the publication to.
    assert (result.decision, result.output_ref) == ("idempotent", head.parents[0])
    merged = world.port.inner.get_commit(world.repository, result.output_ref)
    assert merged.parents[1] == result.staged_commit
    assert decode_metadata(merged.metadata).attempt == AttemptId(key(1), 1, "ti-1")  # type: ignore[union-attr]
    assert port.calls["merge"] == 1  # never merged twice
    assert under(world, TABLE) == {day(1) + "part-0": "mine", day(2) + "part-0": "two"}
    assert world.branches() == []


def test_a_write_into_the_read_set_during_the_job_fails_closed_naming_the_commit(world: World) -> None:
    world.input = world.write("main", {DIMS + "v": "1"}, "dimension table")
    foreign: list[str] = []

    def hand_fix() -> None:
        foreign.append(world.write("main", {DIMS + "v": "2"}, "hand fix of the dimension"))

    with pytest.raises(ScopeOverlapError) as info:
        publish(
            world,
            AttemptId(key(1), 1, "ti-1"),
            {day(1) + "part-0": "mine"},
            [day(1)],
            input_prefixes=[DIMS],
            during_job=hand_fix,
        )
    text = str(info.value)
    assert foreign[0] in text and f"{DIMS}v" in text and "hand fix" in text and "read prefix" in text
    assert world.head().id == foreign[0]
    assert under(world, TABLE) == {}
    staging = staging_branch_name(AttemptId(key(1), 1, "ti-1"), "lakefence")
    assert info.value.staging_branch == staging and world.branches() == [staging]


def test_a_write_by_another_key_into_the_write_set_fails_closed(world: World) -> None:
    foreign = world.write("main", {day(1) + "part-9": "someone"}, "someone else's fix")
    with pytest.raises(ScopeOverlapError) as info:
        publish(world, AttemptId(key(1), 1, "ti-1"), {day(1) + "part-0": "mine"}, [day(1)])
    assert foreign in str(info.value) and "write prefix" in str(info.value)
    assert world.head().id == foreign


def test_v1_hard_fence_refuses_a_scoped_merge_with_an_upgrade_message(world: World) -> None:
    from airflow_lakefence.core.fences import hard as hf

    forget_checks()
    v1 = world.write("main", {hf.ACTION_PATH: hf.render_action(1)}, "install the hard fence v1")
    world.write("main", {day(2) + "part-0": "two"}, "another writer")
    with pytest.raises(PublishFenceError) as info:
        publish(
            world, AttemptId(key(1), 1, "ti-1"), {day(1) + "part-0": "mine"}, [day(1)], input_ref=v1, hard_fence="auto"
        )
    assert "version 1" in str(info.value) and hf.INSTALL_COMMAND in str(info.value)
    assert not isinstance(info.value, (PublishRaceError, ScopeOverlapError))  # an installation to upgrade


# -- through the operators (dag.test(): real Airflow, real task execution) --------------------


@pytest.fixture
def scoped_dags(airflow_db: Any, lakefs_conn: Any, clean_failpoints: Any) -> Any:
    return fresh_dag_module("testdags/scoped_dags.py")


def _conf(repo: Any, input_ref: str, n: int, files: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"repository": repo.id, "target": "main", "input_ref": input_ref, "day": f"2026-01-{n:02d}", **extra} | (
        {"files": files} if files else {}
    )


def test_operators_publish_disjoint_partitions_onto_a_moved_target(scoped_dags: Any, seeded: Any) -> None:
    """The Spark operator, the Python operator and @task.lakefs_publish, all on one input: each lands."""
    repo, input_commit = seeded
    spark = run_dag(
        scoped_dags.spark_dag,
        _conf(repo, input_commit, 1, {}) | {"job": {"files": {day(1) + "part-0": "spark"}}},
    )
    python = run_dag(scoped_dags.python_dag, _conf(repo, input_commit, 2, {day(2) + "part-0": "python"}))
    decorated = run_dag(scoped_dags.decorated_dag, _conf(repo, input_commit, 3, {day(3) + "part-0": "decorated"}))
    assert [r.state for r in (spark, python, decorated)] == ["success"] * 3
    outcomes = [xcoms(r, "publish") for r in (spark, python, decorated)]
    assert [x["decision"] for x in outcomes] == ["merge"] * 3
    assert {x["input_ref"] for x in outcomes} == {input_commit}
    head = repo.branch("main").get_commit()
    assert outcomes[-1]["output_ref"] == head.id
    assert {o.path: read_text(repo, "main", o.path) for o in repo.ref("main").objects(prefix=TABLE)} == {
        day(1) + "part-0": "spark",
        day(2) + "part-0": "python",
        day(3) + "part-0": "decorated",
    }
    assert staging_branches(repo) == []


def test_operator_retry_replaces_its_crashed_publication_under_another(scoped_dags: Any, seeded: Any) -> None:
    repo, input_commit = seeded
    others: list[str] = []

    def another_writer() -> None:
        others.append(commit_files(repo, "main", {day(2) + "part-0": "other"}, "another writer"))

    abandoned = die_after_publishing(repo, also=another_writer)
    run = run_dag(
        scoped_dags.python_dag,
        _conf(repo, input_commit, 1, {}) | {"files": {day(1) + "part-0": "same text on both tries"}},
    )
    assert run.state == "success" and len(abandoned) == 1
    outcome = xcoms(run, "publish")
    assert outcome["decision"] == "replace"
    assert {o.path: read_text(repo, "main", o.path) for o in repo.ref("main").objects(prefix=TABLE)} == {
        day(1) + "part-0": "same text on both tries",
        day(2) + "part-0": "other",
    }
    line = [c.id for c in repo.branch("main").log(first_parent=True, max_amount=4)]
    assert line[:3] == [outcome["output_ref"], others[0], abandoned[0]]  # nothing rewound
    assert staging_branches(repo) == []


def test_operator_bad_scopes(scoped_dags: Any, seeded: Any) -> None:
    with pytest.raises(InvalidInputError, match="needs output_prefixes"):
        python_task(fence_scope="prefixes")
    with pytest.raises(InvalidInputError, match="overlap"):
        python_task(fence_scope="prefixes", output_prefixes=["a/"], input_prefixes=["d/", "d/e/"])
    with pytest.raises(InvalidInputError, match="branch-wide"):
        python_task(input_prefixes=["d/"])
    # Rendered per run: refused before any write.
    repo, input_commit = seeded
    run = run_dag(scoped_dags.nested_dag, _conf(repo, input_commit, 1, {}) | {"also": "tables/t/"})
    assert run.state == "failed"
    error = scoped_dags.FAILURES[("lf_scoped_nested", 1)]
    assert isinstance(error, InvalidInputError) and "overlap" in str(error)
    assert repo.branch("main").get_commit().id == input_commit and staging_branches(repo) == []


def test_hard_fence_require_refuses_a_scoped_publication_on_v1_before_the_job(world: World) -> None:
    from airflow_lakefence.core.fences import hard as hf
    from airflow_lakefence.exceptions import HardFenceMissingError

    forget_checks()
    v1 = world.write("main", {hf.ACTION_PATH: hf.render_action(1)}, "install the hard fence v1")
    ran: list[bool] = []
    with pytest.raises(HardFenceMissingError) as info:
        publish(
            world,
            AttemptId(key(1), 1, "ti-1"),
            {day(1) + "part-0": "mine"},
            [day(1)],
            input_ref=v1,
            hard_fence="require",
            during_job=lambda: ran.append(True),
        )
    assert "branch-wide publications only" in str(info.value) and hf.INSTALL_COMMAND in str(info.value)
    assert ran == [] and world.head().id == v1 and world.branches() == []


# -- the calls of each scoped path (the port's operations, counted by the LossyPort) -----------

#: Every attempt: the target's HEAD (step 1), the staging branch, the stage commit, the listing of
#: what the input holds under the write set (output_mode="replace"), the workspace's upload.
_ATTEMPT = {"get_commit": 1, "create_branch": 1, "commit": 1, "list_objects": 1, "upload_tree": 2}
_MOVED = {**_ATTEMPT, "merge_base": 1}  # the target moved before the job: the input proven its ancestor
SCOPED_PATH_CALLS = {
    # the target read, one diff per fenced prefix, the merge, its verification, the staging branch's deletion
    "merge": {**_MOVED, "get_commit": 3, "diff_refs": 1, "merge": 1, "delete_branch": 1},
    # the staging branch's HEAD read ("no changes"), the target read, one diff
    "noop": {**_MOVED, "get_commit": 3, "diff_refs": 1, "delete_branch": 1, "upload_tree": 0},
    # two fenced prefixes (read and write), the commit naming the path, the evidence marker commit
    "fail_closed_read": {**_MOVED, "get_commit": 2, "diff_refs": 2, "log_commits": 1, "commit": 2},
    # the write set's history names the culprit: no second log
    "fail_closed_write": {**_MOVED, "get_commit": 2, "diff_refs": 1, "log_commits": 1, "commit": 2},
    # scan + content check, the write set's history, the temporary branch, revert, two merges, verify
    "replace": {
        **_MOVED,
        "list_branches": 1,
        "get_commit": 3,
        "diff_refs": 2,
        "log_commits": 1,
        "create_branch": 2,
        "revert": 1,
        "merge": 2,
        "delete_branch": 2,
    },
    "relocate": {
        **_MOVED,
        "list_branches": 1,
        "get_commit": 4,
        "diff_refs": 2,
        "log_commits": 1,
        "create_branch": 2,
        "revert": 1,
        "merge": 1,
        "delete_branch": 2,
        "upload_tree": 0,
    },
    # the lost merge, then the target's own line down to the input: this attempt's merge commit found
    # below another writer's commit, built on the input (nothing to verify)
    "idempotent": {**_ATTEMPT, "get_commit": 2, "merge": 1, "log_commits": 1, "delete_branch": 1},
}


def _calls(world: World, run: Callable[[], Any]) -> tuple[str, dict[str, int]]:
    world.port.calls.clear()
    try:
        outcome = run().decision
    except PublishFenceError as exc:
        outcome = type(exc).__name__
    return outcome, {k: v for k, v in world.port.calls.items() if v}


def _merge_path(w: World) -> dict[str, tuple[str, dict[str, int]]]:
    w.write("main", {day(2) + "x": "o"})
    return {"merge": _calls(w, lambda: publish(w, AttemptId(key(1), 1, "a"), {day(1) + "p": "1"}, [day(1)]))}


def _noop_path(w: World) -> dict[str, tuple[str, dict[str, int]]]:
    w.write("main", {day(2) + "x": "o"})
    return {"noop": _calls(w, lambda: publish(w, AttemptId(key(1), 1, "a"), {}, [day(1)], allow_empty=True))}


def _fail_closed_read_path(w: World) -> dict[str, tuple[str, dict[str, int]]]:
    w.input = w.write("main", {DIMS + "v": "1"})
    w.write("main", {DIMS + "v": "2"})
    return {
        "fail_closed_read": _calls(
            w, lambda: publish(w, AttemptId(key(1), 1, "a"), {day(1) + "p": "1"}, [day(1)], input_prefixes=[DIMS])
        )
    }


def _fail_closed_write_path(w: World) -> dict[str, tuple[str, dict[str, int]]]:
    w.write("main", {day(1) + "q": "o"})
    run = lambda: publish(w, AttemptId(key(1), 1, "a"), {day(1) + "p": "1"}, [day(1)])  # noqa: E731
    return {"fail_closed_write": _calls(w, run)}


def _replace_and_relocate_paths(w: World) -> dict[str, tuple[str, dict[str, int]]]:
    failpoints.arm("after_verify", crash)
    with pytest.raises(Crash):
        publish(w, AttemptId(key(1), 1, "a"), {day(1) + "p": "1"}, [day(1)])
    failpoints.disarm_all()
    w.write("main", {day(2) + "x": "o"})
    return {
        "replace": _calls(w, lambda: publish(w, AttemptId(key(1), 2, "b"), {day(1) + "p": "2"}, [day(1)])),
        "relocate": _calls(w, lambda: publish(w, AttemptId(key(1), 3, "c"), {}, [day(1)], allow_empty=True)),
    }


def _idempotent_path(w: World) -> dict[str, tuple[str, dict[str, int]]]:
    port = w.port
    port.lose("merge", landed=True)
    port.before["merge"] = lambda: port.before.__setitem__("log_commits", lambda: w.write("main", {day(2) + "x": "o"}))
    return {
        "idempotent": _calls(
            w, lambda: publish(w, AttemptId(key(1), 1, "a"), {day(1) + "p": "1"}, [day(1)], port=port)
        )
    }


@pytest.mark.parametrize(
    "paths",
    [_merge_path, _noop_path, _fail_closed_read_path, _fail_closed_write_path, _replace_and_relocate_paths,
     _idempotent_path],
)
def test_the_calls_of_each_scoped_path(world: World, paths: Callable[[World], dict[str, Any]]) -> None:
    measured = paths(world)
    expected = {
        path: ("ScopeOverlapError" if path.startswith("fail") else path, {k: v for k, v in calls.items() if v})
        for path, calls in SCOPED_PATH_CALLS.items()
    }
    assert measured == {path: expected[path] for path in measured}


def test_soft_fence_a_writer_slipping_into_the_scope_before_the_merge_is_taken_back_after_it(world: World) -> None:
    """The soft fence's window: another writer's file lands in the partition between the scan and the
    merge (no conflict: another file name). lakeFS merges onto it; the verification sees the merge
    computed on an unprobed HEAD, probes the scope again, takes its own merge back with a revert
    commit and raises loudly with the evidence kept: the partition ends as if it had failed closed."""
    world.write("main", {day(2) + "x": "moved"}, "another partition")  # the target moved: a scan happens
    slipped: list[str] = []
    world.port.before["merge"] = lambda: slipped.append(world.write("main", {day(1) + "theirs": "t"}, "slipped in"))
    with pytest.raises(ScopeOverlapError) as info:
        publish(world, AttemptId(key(1), 1, "ti-1"), {day(1) + "mine": "m"}, [day(1)])
    assert slipped[0] in str(info.value) and day(1) in str(info.value) and "taken back" in str(info.value)
    head = world.head()
    merge = world.port.inner.get_commit(world.repository, head.parents[0])
    assert merge.parents[0] == slipped[0]  # it landed on the other writer's commit: detected after the merge
    assert head.metadata[RACE_REVERT_KEY] == merge.id  # and taken back by a revert, merges and reverts only
    assert under(world, TABLE) == {day(1) + "theirs": "t", day(2) + "x": "moved"}
    assert info.value.staging_branch in world.branches()


@pytest.mark.parametrize("landed", [True, False])
def test_a_take_back_whose_answer_is_lost_is_never_sent_twice(world: World, landed: bool) -> None:
    """The loser's revert answers with an error: it reads the target's line; a revert that landed is
    not sent again, one that did not is sent again. Either way the partition ends with the other's file."""
    world.write("main", {day(2) + "x": "moved"}, "another partition")
    world.port.before["merge"] = lambda: world.write("main", {day(1) + "theirs": "t"}, "slipped in")
    world.port.lose("revert", landed=landed)
    with pytest.raises(ScopeOverlapError, match="taken back"):
        publish(world, AttemptId(key(1), 1, "ti-1"), {day(1) + "mine": "m"}, [day(1)])
    assert world.port.calls["revert"] == (1 if landed else 2)
    assert under(world, TABLE) == {day(1) + "theirs": "t", day(2) + "x": "moved"}
    assert RACE_REVERT_KEY in world.head().metadata


def test_hard_fence_a_writer_slipping_into_the_scope_before_the_merge_is_refused(world: World) -> None:
    base = fenced_input(world)
    slipped: list[str] = []
    world.port.before["merge"] = lambda: slipped.append(world.write("main", {day(1) + "theirs": "t"}, "slipped in"))
    with pytest.raises(ScopeOverlapError) as info:
        publish(
            world, AttemptId(key(1), 1, "ti-1"), {day(1) + "mine": "m"}, [day(1)], input_ref=base, hard_fence="require"
        )
    assert slipped[0] in str(info.value)
    assert world.head().id == slipped[0]  # refused by lakeFS: nothing of this publication landed
    assert under(world, TABLE) == {day(1) + "theirs": "t"}
