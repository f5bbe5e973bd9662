"""What surrounds a scoped publication follows its scope, end to end under ``dag.test()``.

The abandoned-publication sensor and the settled gate judge *the latest publication touching the
write set*, not the target's HEAD: other writers' publications stacked on top of a scoped one
neither hide an abandoned publication nor unsettle a settled one, and finding it costs one lakeFS
``log`` call whatever lies on top. The extra links, asset events and OpenLineage datasets of a
scoped publication name its prefixes. Publications come from the Spark operator (fake
spark-submit), the Python operator and ``@task.lakefs_publish``, all scoped.
"""

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
from airflow_lakefence.core.fences.scope import SCOPED_REVERTS_KEY
from airflow_lakefence.core.records.metadata import OUTPUT_PREFIXES_KEY
from airflow_lakefence.exceptions import LakeFSUnavailableError, PublishFenceError
from tests.conftest import DAGS_FOLDER, fresh_dag_module
from tests.integration.helpers import commit_files, die_after_publishing, run_dag, xcoms
from tests.integration.sensor_helpers import after, sensor_waits, waited_how

pytestmark = [pytest.mark.scoped, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]

TABLE = "tables/t/"


def day(n: int) -> str:
    return f"{TABLE}date=2026-01-{n:02d}/"


@pytest.fixture
def scoped_dags() -> Any:
    return fresh_dag_module("testdags/scoped_dags.py")


@pytest.fixture
def around() -> Any:
    return fresh_dag_module("testdags/scoped_surroundings_dags.py")


def conf(repo: lakefs.Repository, input_ref: str, n: int, files: dict[str, str] | None = None) -> dict[str, Any]:
    """The run conf of scoped_dags.py: write ``files`` into date partition ``n`` on ``input_ref``."""
    return {
        "repository": repo.id,
        "target": "main",
        "input_ref": input_ref,
        "day": f"2026-01-{n:02d}",
        "files": files if files is not None else {day(n) + "part-0": f"day {n}"},
    }


def sense(dag: Any, repo: lakefs.Repository, n: int, publisher: str) -> tuple[Any, dict[str, Any]]:
    """Run a scoped sensor DAG watching date partition ``n`` of ``publisher``; its run and judgement."""
    run = run_dag(dag, {"repository": repo.id, "watch": day(n), "publisher_dag_id": publisher})
    return run, xcoms(run, "sense").get("return_value", {})


def test_an_abandoned_scoped_publication_is_found_under_other_writers(
    scoped_dags: Any, around: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    # Day 1 (@task.lakefs_publish, no retries) publishes and its worker dies: the task instance fails.
    abandoned = die_after_publishing(repo)
    dead = run_dag(scoped_dags.decorated_dag, conf(repo, input_commit, 1))
    assert dead.state == "failed" and len(abandoned) == 1
    publication = repo.commit(abandoned[0]).get_commit()
    staged = publication.parents[1]
    # Other writers publish on top of it: day 2 by the Spark operator, then a foreign commit.
    spark = run_dag(
        scoped_dags.spark_dag,
        conf(repo, input_commit, 2, {}) | {"job": {"files": {day(2) + "part-0": "spark"}}},
    )
    assert spark.state == "success"
    spark_out = xcoms(spark, "publish")
    assert spark_out["decision"] == "merge"
    foreign = commit_files(repo, "main", {"dims/other/x": "x"}, "a foreign commit")
    assert repo.branch("main").get_commit().id == foreign

    # The scoped detector finds day 1's publication below them: one log call, nothing else.
    lakefence_controls.reset_counts()
    run, found = sense(around.detect_dag, repo, 1, "lf_scoped_decorated")
    assert run.state == "success"
    assert found["verdict"] == "abandoned" and found["state"] == "failed"
    assert found["head"] == staged and found["role"] == "stage" and found["publication"] is None
    assert (found["dag_id"], found["run_id"], found["task_id"], found["try_number"]) == (
        "lf_scoped_decorated",
        dead.run_id,
        "publish",
        1,
    )
    assert found["output_prefixes"] == [day(1)] and found["input_ref"] == input_commit
    assert lakefence_controls.counts() == {"logCommits": 1}

    # The Spark publication of day 2 is settled, though a foreign commit lies on top of it: one log
    # call finds it, one get_commit ties its task instance's output_ref to it.
    lakefence_controls.reset_counts()
    run, settled = sense(around.settled_dag, repo, 2, "lf_scoped_spark")
    assert run.state == "success"
    assert settled["verdict"] == "settled" and settled["state"] == "success"
    assert settled["head"] == spark_out["staged_commit"]
    assert settled["publication"] == settled["output_ref"] == spark_out["output_ref"]
    assert lakefence_controls.counts() == {"logCommits": 1, "getCommit": 1}

    # The settled gate of day 1 does not pass while its publication is abandoned.
    run, _ = sense(around.settled_dag, repo, 1, "lf_scoped_decorated")
    assert run.state == "failed"
    # The staged commit names its write set (what the cleaner reports of a leftover branch).
    assert repo.commit(staged).get_commit().metadata[OUTPUT_PREFIXES_KEY] == json.dumps([day(1)])


def test_the_cleaner_names_the_write_set_of_a_scoped_evidence_branch(
    scoped_dags: Any, around: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    # Another writer changes day 1's partition after the input: the scoped publication of day 1
    # fails closed at publish time and keeps its staging branch as evidence.
    commit_files(repo, "main", {day(1) + "part-x": "someone else"}, "another writer in the partition")
    run = run_dag(scoped_dags.decorated_dag, conf(repo, input_commit, 1))
    assert run.state == "failed"
    error = scoped_dags.FAILURES[("lf_scoped_decorated", 1)]
    assert isinstance(error, PublishFenceError) and error.staging_branch
    cleaner = run_dag(around.clean_dag, {"repository": repo.id})
    assert cleaner.state == "success"
    report = xcoms(cleaner, "clean")["return_value"]
    assert report["deleted"] == []
    (kept,) = report["kept"]
    assert kept["branch"] == error.staging_branch and kept["evidence"] == "ScopeOverlapError"
    assert kept["output_prefixes"] == [day(1)] and kept["run_id"] == run.run_id


def test_a_settled_scoped_publication_stays_settled_and_the_check_stays_one_log_call(
    scoped_dags: Any, around: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    # Day 1 (the Python operator, one retry): try 1 publishes and dies, another writer publishes on
    # top, try 2 replaces its own publication by merges only.
    abandoned = die_after_publishing(
        repo, also=lambda: commit_files(repo, "main", {day(9) + "part-0": "other"}, "another writer")
    )
    run = run_dag(scoped_dags.python_dag, conf(repo, input_commit, 1))
    assert run.state == "success" and len(abandoned) == 1
    outcome = xcoms(run, "publish")
    assert outcome["decision"] == "replace"
    dead_staged = repo.commit(abandoned[0]).get_commit().parents[1]

    counts = []
    for depth in (0, 30):
        # Other writers' commits on top (other partitions): the judgement and its cost do not change.
        for i in range(depth):
            commit_files(repo, "main", {f"{TABLE}date=2027-01-{1 + i % 28:02d}/part-{i}": "x"}, f"writer {i}")
        lakefence_controls.reset_counts()
        gate, judged = sense(around.settled_dag, repo, 1, "lf_scoped_python")
        counts.append(lakefence_controls.counts())
        assert gate.state == "success"
        assert judged["verdict"] == "settled" and judged["try_number"] == 2 and judged["role"] == "stage"
        # The newest commit under day 1 is try 2's revert of try 1's staged commit (made after try 2
        # staged), and try 2's output_ref stands behind it.
        judged_commit = repo.commit(judged["head"]).get_commit()
        assert judged_commit.metadata[SCOPED_REVERTS_KEY] == dead_staged
        assert judged["publication"] == judged["output_ref"] == outcome["output_ref"]
    assert counts == [{"logCommits": 1, "getCommit": 1}] * 2

    # A partition nobody wrote: nothing to judge, readable.
    gate, judged = sense(around.settled_dag, repo, 5, "lf_scoped_python")
    assert gate.state == "success"
    assert judged["verdict"] == "not_a_publication" and judged["head"] is None


def test_a_lost_merge_answer_under_another_writer_is_settled_with_the_same_calls(
    scoped_dags: Any, around: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    """The merge lands, its answer is lost, another writer publishes on top before the next round."""
    repo, input_commit = seeded
    landed: list[str] = []

    def lose_the_answer() -> None:
        if not landed:
            landed.append(repo.branch("main").get_commit().id)
            commit_files(repo, "main", {day(2) + "part-0": "other"}, "another writer on top")
            raise LakeFSUnavailableError("connection reset after the merge ran", status=None, operation="merge")

    failpoints.arm("after_publish_action", lose_the_answer)
    run = run_dag(scoped_dags.python_dag, conf(repo, input_commit, 1))
    failpoints.disarm_all()
    assert run.state == "success" and len(landed) == 1
    outcome = xcoms(run, "publish")
    # The task reports its own merge commit, now below the other writer's commit, not the HEAD.
    assert outcome["decision"] == "idempotent" and outcome["output_ref"] == landed[0]
    head = repo.branch("main").get_commit()
    assert head.parents[0] == landed[0] and repo.commit(landed[0]).get_commit().parents[1] == outcome["staged_commit"]

    lakefence_controls.reset_counts()
    gate, judged = sense(around.settled_dag, repo, 1, "lf_scoped_python")
    assert lakefence_controls.counts() == {"logCommits": 1, "getCommit": 1}
    assert gate.state == "success"
    assert judged["verdict"] == "settled" and judged["head"] == outcome["staged_commit"]
    assert judged["publication"] == judged["output_ref"] == landed[0]
    assert not judged["retry_pending"] and not judged["replacement_running"]


def test_the_deferred_detector_fires_when_a_settled_scoped_publication_is_abandoned_later(
    scoped_dags: Any, around: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    """The trigger runs the same scoped probe in the triggerer."""
    repo, input_commit = seeded
    run = run_dag(scoped_dags.python_dag, conf(repo, input_commit, 1))
    assert run.state == "success"
    outcome = xcoms(run, "publish")
    commit_files(repo, "main", {day(2) + "part-0": "other"}, "another writer on top")

    def fail_the_publisher() -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = session.query(TaskInstance).filter_by(dag_id="lf_scoped_python", run_id=run.run_id).one()
            ti.state = "failed"  # marked failed in the UI: nobody stands behind its output any more

    with after(0.2, fail_the_publisher, once=sensor_waits("lf_scoped_sense_detect_deferred", "deferred")) as errors:
        detector, found = sense(around.detect_deferred_dag, repo, 1, "lf_scoped_python")
    assert not errors, errors
    assert detector.state == "success" and waited_how(detector)["deferred"]
    assert found["verdict"] == "abandoned" and found["state"] == "failed"
    assert found["head"] == outcome["staged_commit"] and found["output_prefixes"] == [day(1)]


@pytest.fixture
def outlet_repo(lakefence_client: lakefs.Client, lakefence_server: Any, tmp_path: Path) -> Iterator[lakefs.Repository]:
    # Asset URIs cannot be templated, so the repository name is fixed; kept for the session (real
    # lakeFS refuses to recreate a name it deleted moments ago).
    repo = lakefs.Repository("lakefence-scoped", client=lakefence_client)
    repo.create(
        storage_namespace=f"{lakefence_server.storage_namespace}/scoped-{tmp_path.name}",
        default_branch="main",
        exist_ok=True,
    )
    yield repo


def test_links_asset_events_and_lineage_name_the_write_set(
    around: Any, outlet_repo: lakefs.Repository, lakefs_conn: dict[str, str], tmp_path: Path
) -> None:
    """One scoped publication with two write prefixes and a read prefix, run with OpenLineage's file
    transport (the listener registers when Airflow loads its plugins: a fresh process)."""
    pytest.importorskip("airflow.providers.openlineage")
    repo = outlet_repo
    stamp = tmp_path.name[-12:]
    input_commit = commit_files(repo, "main", {f"dims/d/{stamp}": "dims"}, f"seed {stamp}")
    # Another writer moves main past the input (outside the scope): the publication merges onto it.
    commit_files(repo, "main", {f"elsewhere/{stamp}": "x"}, "another writer")
    n = 1 + sum(map(ord, stamp)) % 28  # a partition of its own in the session's repository
    partition = f"2026-02-{n:02d}"
    writes = [f"tables/t/date={partition}/", f"tables/u/date={partition}/"]
    log_file = tmp_path / "lineage.jsonl"
    dag_file = str(DAGS_FOLDER / "testdags" / "scoped_surroundings_dags.py")
    run_conf = {
        "repository": repo.id,
        "target": "main",
        "input_ref": input_commit,
        "day": partition,
        "files": {w + f"part-{stamp}": stamp for w in writes},
    }
    script = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        spec = importlib.util.spec_from_file_location("scoped_outlet_dags", {dag_file!r})
        module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)
        run = module.outlets_dag.test(run_conf={run_conf!r})
        print("STATE", run.state, run.run_id)
        """
    )
    env = {
        **os.environ,
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(log_file), "append": True}),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": "lakefence-tests",
    }
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stdout.splitlines() if line.startswith("STATE ")]
    assert lines and lines[-1].split()[1] == "success", result.stdout[-2000:] + result.stderr[-4000:]
    run_id = lines[-1].split()[2]

    values = _xcoms("lf_scoped_outlets", run_id, "publish")
    assert values["decision"] == "merge"
    output_ref = values["output_ref"]
    assert repo.commit(output_ref).get_commit().parents[0] != input_commit  # merged onto a moved main
    base = lakefs_conn["host"].removesuffix("/api/v1")
    # The links: the commit, and its objects opened at the directory holding the write set.
    assert values["_link_LakeFSCommitLink"] == f"{base}/repositories/{repo.id}/commits/{output_ref}"
    assert values["_link_LakeFSOutputLink"] == f"{base}/repositories/{repo.id}/objects?ref={output_ref}&path=tables%2F"

    # The asset event names the write set and where exactly it landed.
    event = _asset_event(run_id)
    assert event["output_ref"] == output_ref and event["decision"] == "merge"
    assert event["fence_scope"] == "prefixes"
    assert event["output_prefixes"] == writes and event["input_prefixes"] == ["dims/d/"]
    assert event["output_uris"] == [f"lakefs://{repo.id}/{output_ref}/{w.rstrip('/')}" for w in writes]
    # The keys of earlier releases, for consumers not yet moved (deprecated: removed in the next release).
    assert (event["write_prefixes"], event["read_prefixes"]) == (writes, ["dims/d/"])
    assert event["commit_uri"] == f"lakefs://{repo.id}/{output_ref}/tables/t"

    # OpenLineage: one input dataset per read prefix, one output dataset per write prefix.
    events = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
    (complete,) = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".publish")]
    namespace = "lakefs://" + lakefs_conn["host"].removeprefix("http://").split("/")[0]
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [
        (namespace, f"{repo.id}/{input_commit}/dims/d")
    ]
    assert [d["name"] for d in complete["outputs"]] == [f"{repo.id}/main/{w.rstrip('/')}" for w in writes]
    assert {d["facets"]["version"]["datasetVersion"] for d in complete["outputs"]} == {output_ref}
    assert lakefs_conn["password"] not in log_file.read_text()


def _xcoms(dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id, task_id=task_id).all()
        return {row.key: XComModel.deserialize_value(row) for row in rows}


def _asset_event(run_id: str) -> dict[str, Any]:
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        (event,) = session.query(AssetEvent).filter_by(source_dag_id="lf_scoped_outlets", source_run_id=run_id).all()
        return dict(event.extra)
