"""Asset events, extra links and OpenLineage of the fenced operator, end to end under dag.test()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.exceptions import PublishFenceError
from tests.conftest import DAGS_FOLDER
from tests.integration.helpers import branches, commit_files, die_after_publishing, publish_conf, run_dag, xcoms

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")

URI = "lakefs://lakefence-assets/main/out"


@pytest.fixture
def asset_repo(
    lakefence_client: lakefs.Client, lakefence_server: Any, tmp_path: Path
) -> Iterator[tuple[lakefs.Repository, str]]:
    # Asset URIs cannot be templated, so the repository name is fixed. It is kept for the session and
    # each test seeds a new input commit: real lakeFS refuses to recreate a name it deleted moments ago
    # (409 "not unique" while its repository cache still holds it).
    repo = lakefs.Repository("lakefence-assets", client=lakefence_client)
    repo.create(
        storage_namespace=f"{lakefence_server.storage_namespace}/assets-{tmp_path.name}",
        default_branch="main",
        exist_ok=True,
    )
    yield repo, commit_files(repo, "main", {"in/data.txt": f"input {tmp_path.name}"}, f"seed input {tmp_path.name}")


def asset_events() -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == URI)
        )
        return [dict(row.extra) for row in rows.order_by(AssetEvent.id)]


def test_event_only_when_published_with_the_exact_commit(dags: Any, asset_repo: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = asset_repo
    before = len(asset_events())
    dr = run_dag(dags.assets_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success"
    head = repo.branch("main").get_commit()
    events = asset_events()[before:]
    assert events == [
        {
            "output_ref": head.id,
            "input_ref": input_commit,
            "staged_commit": head.parents[1],
            "decision": "merge",
            "commit_uri": f"lakefs://lakefence-assets/{head.id}/out",
        }
    ]
    # Nothing changed: a no-op publishes nothing, so no event.
    dr = run_dag(dags.assets_dag, publish_conf(repo, head.id, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "success" and xcoms(dr, "publish")["decision"] == "noop"
    assert len(asset_events()) == before + 1
    # A fail-closed publish emits nothing either.
    commit_files(repo, "main", {"other.txt": "x"}, "foreign")
    dr = run_dag(dags.assets_dag, publish_conf(repo, head.id, {"files": {"out/b.txt": "B"}}))
    assert dr.state == "failed" and isinstance(dags.FAILURES[("lf_test_assets", 2)], PublishFenceError)
    assert len(asset_events()) == before + 1


def test_links_follow_the_try(
    dags: Any, asset_repo: tuple[lakefs.Repository, str], lakefs_conn: dict[str, str]
) -> None:
    repo, input_commit = asset_repo
    die_after_publishing()
    dr = run_dag(dags.assets_dag, publish_conf(repo, input_commit, {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    base = lakefs_conn["host"].removesuffix("/api/v1")
    assert values["decision"] == "replace"
    assert values["_link_LakeFSCommitLink"] == f"{base}/repositories/lakefence-assets/commits/{values['output_ref']}"
    # The staging branch is gone after the publish: the link shows the staged commit instead.
    assert values["_link_LakeFSStagingLink"] == (
        f"{base}/repositories/lakefence-assets/commits/{values['staged_commit']}"
    )
    assert repo.commit(values["staged_commit"]).get_commit().id == values["staged_commit"]
    assert "-t2-" in values["staging_branch"]


def test_staging_link_is_empty_when_the_try_kept_no_branch(
    dags: Any, asset_repo: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = asset_repo
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}, "fail": True}))
    assert dr.state == "failed"
    values = xcoms(dr, "publish")
    assert values["staging_branch"] is None  # created, then deleted when the job failed
    assert branches(repo) == ["main"]
    assert values["_link_LakeFSStagingLink"] == "" and values["_link_LakeFSCommitLink"] == ""


def test_the_task_is_the_declared_producer_of_its_lakefs_asset(
    dags: Any, asset_repo: tuple[lakefs.Repository, str]
) -> None:
    """The Assets view's "Producing tasks" comes from the outlets Airflow stored for the DAG, and its
    graph from the serialized DAG: the lakefs:// Asset itself, no AssetAlias node in between."""
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    repo, input_commit = asset_repo
    assert run_dag(dags.assets_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}})).state == "success"
    with create_session() as session:
        asset = session.query(AssetModel).filter(AssetModel.uri == URI).one()
        producers = session.query(TaskOutletAssetReference).filter_by(asset_id=asset.id).all()
        assert [(p.dag_id, p.task_id) for p in producers] == [("lf_test_assets", "publish")]
        stored = SerializedDagModel.get("lf_test_assets", session=session)
        assert stored is not None and stored.data is not None
        data = stored.data["dag"]
    (task,) = [t["__var"] for t in data["tasks"] if t["__var"]["task_id"] == "publish"]
    assert [(o["__type"], o["__var"]["uri"]) for o in task["outlets"]] == [("asset", URI)]
    # The dependency graph (what the Assets view draws): DAG -> the Asset, with no alias in between.
    (dependency,) = data["dag_dependencies"]
    assert (dependency["source"], dependency["dependency_type"]) == ("lf_test_assets", "asset")
    assert json.loads(dependency["dependency_id"])["uri"] == URI
    assert "alias" not in json.dumps(data).lower()


def test_staging_link_of_a_try_that_failed_closed(dags: Any, asset_repo: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = asset_repo
    # Content unique to the test: the session's repository may already hold other.txt from another test.
    failpoints.arm("after_job", lambda: commit_files(repo, "main", {"racer.txt": input_commit}, "racer"))
    dr = run_dag(dags.workspace_dag, publish_conf(repo, input_commit, {"files": {"out/a.txt": "A"}}))
    assert dr.state == "failed"
    values = xcoms(dr, "publish")
    error = dags.FAILURES[("lf_test_workspace", 1)]
    assert values["_link_LakeFSStagingLink"].endswith(f"objects?ref={error.staging_branch}")
    assert values["_link_LakeFSCommitLink"] == ""  # nothing was published


def test_openlineage_events_through_the_file_transport(
    asset_repo: tuple[lakefs.Repository, str], lakefs_conn: dict[str, str], tmp_path: Path
) -> None:
    pytest.importorskip("airflow.providers.openlineage")
    repo, input_commit = asset_repo
    log_file = tmp_path / "lineage.jsonl"
    # The OpenLineage listener registers when Airflow loads its plugins: a fresh process with the
    # transport configured, on the same metadata DB.
    dag_file = str(DAGS_FOLDER / "testdags" / "fenced_test_dags.py")
    # The DAG file imports the tests' helpers: reach them through a folder holding only ``tests``. The
    # repository's root would also show the editable install's egg-info, a second copy of the
    # distribution, and with it the view's plugin twice: Airflow 3.3's Task SDK then stops registering
    # entry-point plugins at the second copy, OpenLineage's listener among them.
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "tests").symlink_to(Path(__file__).resolve().parents[2])
    script = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        sys.path.insert(0, {str(helpers)!r})
        spec = importlib.util.spec_from_file_location("lineage_dags", {dag_file!r})
        module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
        conf = {{"repository": "lakefence-assets", "target": "main", "input_ref": {input_commit!r},
                 "job": {{"files": {{"out/x.txt": "X"}}}}, "output_prefixes": ["out/"]}}
        print("STATE", module.workspace_dag.test(run_conf=conf).state)
        """
    )
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(log_file), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "lakefence-tests",
    }
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "STATE success" in result.stdout, result.stdout[-2000:] + result.stderr[-4000:]
    events = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
    complete = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".publish")]
    assert complete, [e["eventType"] for e in events]
    head = repo.branch("main").get_commit()
    namespace = "lakefs://" + lakefs_conn["host"].removeprefix("http://").split("/")[0]
    (event,) = complete
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [(namespace, f"lakefence-assets/{input_commit}")]
    assert event["inputs"][0]["facets"]["version"]["datasetVersion"] == input_commit
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [(namespace, "lakefence-assets/main/out")]
    assert event["outputs"][0]["facets"]["version"]["datasetVersion"] == head.id
    assert lakefs_conn["password"] not in log_file.read_text()
