"""Delta tables declared as outputs of the publish engine: the checks of steps 1 and 7, over HTTP.

The job plays Delta with plain objects (``_delta_log/<v>.json`` and data files) on the session's
lakeFS backend; real Delta writes through Spark are tests/delta's.
Outcomes are asserted on the target's HEAD, the staging branches left and the engine's result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.engine import PublishRequest
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.exceptions import (
    DeltaLogError,
    DeltaOutputModeError,
    InvalidInputError,
    OutputPrefixError,
    PublishFenceError,
)
from tests.integration.core import test_engine
from tests.integration.core.test_engine import Crash, Run, World, crash

world = test_engine.world  # the fixture: a new repository on the session's lakeFS

EVENTS = "tables/events"


def log(version: int, root: str = EVENTS) -> str:
    return f"{root}/_delta_log/{version:020d}.json"


@dataclass
class DeltaRun(Run):
    """An engine run declaring Delta tables (direct mode: Delta appends to the log on the staging branch)."""

    write_mode: str = "direct"
    tables: list[Any] = field(default_factory=lambda: [DeltaTableOutput(EVENTS)])
    output_mode: str = "replace"
    ran: int = 0

    def job(self, locations: Any) -> None:
        self.ran += 1
        super().job(locations)

    def request(self, **more: Any) -> PublishRequest:
        return super().request(output_mode=self.output_mode, output_tables=self.tables, **more)


def with_table(world: World, versions: int = 1) -> str:
    """Commit a table of ``versions`` versions on main; it becomes the world's input."""
    files = {log(v): f"commit {v}" for v in range(versions)}
    files.update({f"{EVENTS}/day=1/part-{v}.parquet": f"rows {v}" for v in range(versions)})
    world.input = world.write("main", files, "table")
    return world.input


def test_a_first_publish_creates_the_table_at_version_0(world: World) -> None:
    run = DeltaRun(world, files={log(0): "commit 0", f"{EVENTS}/part-0.parquet": "rows"})
    result = run()
    assert result.decision == "merge" and world.head().id == result.output_ref
    assert result.delta_versions == {"tables/events/": 0}
    assert "Delta table tables/events/ at version 0" in result.summary()
    assert world.tree("main")[log(0)] == "commit 0"
    assert world.branches() == []


def test_an_append_publishes_the_next_version_at_the_cost_of_one_diff_and_one_listing(world: World) -> None:
    with_table(world, versions=2)
    run = DeltaRun(world, files={log(2): "commit 2", f"{EVENTS}/day=2/part-2.parquet": "rows 2"})
    result = run()
    assert result.decision == "merge" and result.delta_versions == {"tables/events/": 2}
    # The Delta check's own calls: one two-dot diff (input -> staged) and one log listing per table.
    assert world.port.calls.get("diff_refs", 0) == 1
    assert world.port.calls.get("list_objects", 0) == 1


def test_nothing_written_is_a_noop_reporting_the_input_version(world: World) -> None:
    with_table(world, versions=3)
    result = DeltaRun(world, files={})()
    assert result.decision == "noop" and result.delta_versions == {"tables/events/": 2}
    assert world.port.calls.get("diff_refs", 0) == 0


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({log(0): "rewritten"}, "version 0.*was changed"),
        ({log(1): "commit 1", log(3): "commit 3"}, "not contiguous"),
        ({f"{EVENTS}/day=2/part-9.parquet": "orphan"}, "no Delta commit was"),
    ],
    ids=["rewritten-commit", "gap", "files-without-commit"],
)
def test_a_staged_change_that_is_not_delta_commits_on_from_the_input_fails_closed(
    world: World, files: dict[str, str], match: str
) -> None:
    with_table(world, versions=1)
    with pytest.raises(DeltaLogError, match=match) as info:
        DeltaRun(world, files=files)()
    assert world.head().id == world.input
    assert world.branches() == [info.value.staging_branch]  # the evidence
    assert world.head(info.value.staging_branch).metadata["lakefence.evidence"] == "DeltaLogError"


def test_a_foreign_delta_commit_on_the_target_during_the_job_fails_closed(world: World) -> None:
    with_table(world, versions=1)
    run = DeltaRun(world, files={log(1): "ours"})
    failpoints.arm("after_job", lambda: world.write("main", {log(1): "foreign"}))
    with pytest.raises(PublishFenceError) as info:
        run()
    assert world.tree("main")[log(1)] == "foreign"
    assert world.branches() == [info.value.staging_branch]
    assert world.tree(info.value.staging_branch)[log(1)] == "ours"  # the evidence


def test_paths_outside_the_tables_and_prefixes_fail_closed(world: World) -> None:
    declared = r"outside output_prefixes \[\] and output_tables \['tables/events'\]"
    with pytest.raises(OutputPrefixError, match=declared):
        DeltaRun(world, files={log(0): "commit 0", "elsewhere/x.txt": "x"})()
    assert world.head().id == world.input and len(world.branches()) == 1


def test_a_retry_replaces_an_abandoned_publication_with_one_next_version(world: World) -> None:
    with_table(world, versions=1)
    failpoints.arm("after_verify", crash)
    with pytest.raises(Crash):
        DeltaRun(world, files={log(1): "try 1", f"{EVENTS}/day=2/a.parquet": "try 1"})()
    failpoints.disarm_all()
    abandoned = world.head()
    assert abandoned.parents[0] == world.input
    result = DeltaRun(world, try_number=2, files={log(1): "try 2", f"{EVENTS}/day=2/b.parquet": "try 2"})()
    assert result.decision == "replace" and result.delta_versions == {"tables/events/": 1}
    tree = world.tree("main")
    assert tree[log(1)] == "try 2" and f"{EVENTS}/day=2/a.parquet" not in tree
    assert sorted(p for p in tree if "/_delta_log/" in p) == [log(0), log(1)]


@pytest.mark.parametrize("prefix", [EVENTS, "tables/", "tables/events/day=1"], ids=["root", "above", "inside"])
def test_replace_declared_on_a_table_root_is_refused_before_any_write(world: World, prefix: str) -> None:
    run = DeltaRun(world, files={log(0): "x"}, prefixes=(prefix,))
    with pytest.raises(DeltaOutputModeError, match="output_mode='replace' would delete"):
        run()
    assert run.ran == 0 and world.branches() == [] and world.port.calls.get("create_branch", 0) == 0


def test_an_undeclared_table_under_a_replaced_prefix_is_refused_before_any_write(world: World) -> None:
    with_table(world, versions=1)
    run = DeltaRun(world, tables=[], files={"tables/new.txt": "x"}, prefixes=("tables/",))
    with pytest.raises(DeltaOutputModeError, match=r"holds Delta table\(s\) \['tables/events/'\]"):
        run()
    assert run.ran == 0 and world.branches() == [] and world.port.calls.get("create_branch", 0) == 0
    # With upsert the same prefix publishes beside the table (nothing of it is deleted).
    result = DeltaRun(world, tables=[], files={"tables/new.txt": "x"}, prefixes=("tables/",), output_mode="upsert")()
    assert result.decision == "merge" and world.tree("main")[log(0)] == "commit 0"


def test_workspace_mode_with_tables_is_refused_before_any_write(world: World) -> None:
    run = DeltaRun(world, write_mode="workspace")
    with pytest.raises(InvalidInputError, match="need write_mode='direct'"):
        run()
    assert run.ran == 0 and world.branches() == []


def test_a_plain_prefix_beside_a_table_is_replaced_and_the_table_appended(world: World) -> None:
    with_table(world, versions=1)
    world.input = world.write("main", {"reports/old.txt": "old"}, "report")
    files = {log(1): "commit 1", "reports/new.txt": "new"}
    result = DeltaRun(world, files=files, prefixes=("reports/",))()
    tree = world.tree("main")
    assert result.delta_versions == {"tables/events/": 1}
    assert "reports/old.txt" not in tree and tree["reports/new.txt"] == "new" and tree[log(0)] == "commit 0"


def test_without_tables_the_engine_makes_no_delta_call(world: World) -> None:
    result = DeltaRun(world, tables=[], files={"t/p.txt": "1"}, prefixes=("t/",))()
    assert result.delta_versions == {} and world.port.calls.get("diff_refs", 0) == 0


def test_the_commit_sensor_waits_for_a_new_table_version(lakefence_repo: Any, lakefence_server: Any) -> None:
    """``LakeFSCommitSensor(prefix="<root>/_delta_log/")`` fires on a new Delta version, not on other commits."""
    from airflow_lakefence.sensors import LakeFSCommitSensor
    from airflow_lakefence.triggers.probes import probe_new_commit

    lake = test_engine.World(lakefence_repo, lakefence_server)
    client = lake.client
    since = with_table(lake, versions=1)
    sensor = LakeFSCommitSensor(
        task_id="new_version",
        repository=lakefence_repo.id,
        branch="main",
        since_ref=since,
        prefix=f"{EVENTS}/_delta_log/",
    )

    def probe() -> str | None:
        return probe_new_commit(
            client, repository=lakefence_repo.id, branch="main", since_ref=since, prefix=sensor.prefix
        )

    assert probe() is None
    lake.write("main", {"reports/other.txt": "x", f"{EVENTS}/day=9/stray.parquet": "x"})
    assert probe() is None  # HEAD moved, but no new log entry: no new table version
    version_1 = lake.write("main", {log(1): "commit 1"})
    assert probe() == version_1
