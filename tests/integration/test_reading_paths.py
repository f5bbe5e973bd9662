"""The reading paths of docs/architecture.md, measured on real runs: from the operator's ``execute``
to lakeFS's merge, from a sensor's ``poke`` to its lakeFS read, and from the cleaner's ``execute`` to
its branch delete, each at most 10 frames of the package's own code (down to the adapter's one SDK
call) and none of them a closure or a
lambda (a maintainer reads them top to bottom, as the page draws them).

The stack is taken where the lakeFS adapter makes the SDK call, under ``dag.test()`` (tasks run in
this process), so a path that grows a frame or hides a step in a nested function fails here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import lakefs
import pytest

from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from tests.integration.helpers import die_after_publishing, leave_branch_at, publish_conf, run_dag, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")

#: The most frames a reading path may take, its first and last included.
MOST_FRAMES = 10


class Path:
    """The package's frames from the frame running ``entry`` down to the SDK call of ``operation``."""

    def __init__(self, entry: str, operation: str) -> None:
        self.entry, self.operation = entry, operation
        self.frames: list[str] | None = None

    def take(self) -> None:
        frame = sys._getframe(2)  # the adapter's method that made the SDK call, then its callers
        names: list[str] = []
        while frame is not None:
            code = frame.f_code
            if frame.f_globals.get("__name__", "").startswith("airflow_lakefence."):
                names.append(f"{frame.f_globals['__name__']}:{code.co_qualname}")
                if code.co_qualname == self.entry:
                    self.frames = list(reversed(names))
                    return
            frame = frame.f_back


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Path]]:
    """Paths by operation: the first SDK call of each operation records its stack."""
    paths: dict[str, Path] = {}
    call_once = LakeFSClient._call_once

    def recording(operation: str, what: str, fn: Any) -> Any:
        path = paths.get(operation)
        if path is not None and path.frames is None:
            path.take()
        return call_once(operation, what, fn)

    monkeypatch.setattr(LakeFSClient, "_call_once", staticmethod(recording))
    yield paths


def assert_straight(path: Path, first: str, last: str) -> None:
    """``first`` to the adapter's one SDK call, through ``last`` (the adapter's method)."""
    assert path.frames is not None, f"no {path.operation} call under {path.entry}"
    frames = path.frames
    assert frames[0].endswith(f":{first}"), frames
    names = [f.split(":")[1] for f in frames]
    assert names[-1] == "LakeFSClient._call" and last in names, frames
    assert len(frames) <= MOST_FRAMES, "\n".join(frames)
    hidden = [f for f in frames if "<locals>" in f or "<lambda>" in f]
    assert hidden == [], hidden


def test_the_operator_reaches_the_merge_in_ten_frames_without_closures(
    dags: Any, seeded: tuple[lakefs.Repository, str], taken: dict[str, Path]
) -> None:
    repo, input_commit = seeded
    taken["merge"] = Path("FencedPublishOperatorBase.execute", "merge")
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success" and xcoms(dr, "publish")["decision"] == "merge"
    assert_straight(taken["merge"], "FencedPublishOperatorBase.execute", "LakeFSClient.merge")
    # The steps the page names, in its order.
    steps = [f.split(":")[1] for f in taken["merge"].frames or []]
    assert steps[:3] == ["FencedPublishOperatorBase.execute", "PublishEngine.run", "BranchPublish.publish"]


def test_a_sensor_poke_reaches_its_read_in_ten_frames_without_closures(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str], taken: dict[str, Path]
) -> None:
    repo, input_commit = seeded
    die_after_publishing()
    assert run_dag(publishers.workspace_dag, publish_conf(repo, input_commit)).state == "failed"
    taken["get_commit"] = Path("LakeFSBaseSensor.poke", "get_commit")
    dr = run_dag(sensors.detect_dag, {"repository": repo.id})
    assert dr.state == "success" and xcoms(dr, "sense")["return_value"]["verdict"] == "abandoned"
    assert_straight(taken["get_commit"], "LakeFSBaseSensor.poke", "LakeFSClient.get_commit")


def test_the_cleaner_reaches_its_delete_in_ten_frames_without_closures(
    publishers: Any,
    cleaners: Any,
    seeded: tuple[lakefs.Repository, str],
    lakefence_controls: Any,
    taken: dict[str, Path],
) -> None:
    repo, input_commit = seeded
    leave_branch_at("after_job", lakefence_controls)
    assert run_dag(publishers.workspace_dag, publish_conf(repo, input_commit)).state == "failed"
    lakefence_controls.reset()
    taken["delete_branch"] = Path("LakeFSStagingCleanupOperator.execute", "delete_branch")
    dr = run_dag(cleaners.clean_dag, {"repository": repo.id})
    assert dr.state == "success" and len(xcoms(dr, "clean")["return_value"]["deleted"]) == 1
    assert_straight(taken["delete_branch"], "LakeFSStagingCleanupOperator.execute", "LakeFSClient.delete_branch")
