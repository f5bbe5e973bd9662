"""Adoption on a real standalone Spark cluster in cluster deploy mode, under ``dag.test()``.

The job is a small Java application (tests/durable/jobs) that sleeps, then writes one object into
its staging branch through the lakeFS API; the master's driver list counts the submissions and
the job's own log counts its runs. A try's death mid-job is played by an exception at the
``mid_job`` failpoint (after the provider stored the job's id, while it waits for the job): the
driver keeps running on the cluster, as when the worker is killed. What dag.test() cannot play
(a SIGKILLed worker skips its ``finally`` blocks; a zombie's return) is proven at the engine level
(tests/integration/core/test_engine_adoption.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.staging.adoption import ADOPTED_BY_KEY, ADOPTED_FROM_KEY, ADOPTED_JOB_KEY
from tests.durable.cluster import DurableCluster
from tests.integration.helpers import read_text, staging_branches, ti_state, xcoms

pytestmark = [
    pytest.mark.durable,
    pytest.mark.spark,
    pytest.mark.spark_cluster,
    pytest.mark.real_lakefs,
    pytest.mark.usefixtures("airflow_db", "lakefs_conn", "gateway_lakefs", "clean_failpoints"),
]

JOB_SECONDS = 6


@pytest.fixture
def gateway_lakefs(lakefence_server: Any) -> Any:
    """Real lakeFS only: its drivers write over HTTP from another JVM (the local server serves this process)."""
    if lakefence_server.is_local:
        pytest.skip("the durable tier runs against real lakeFS (--lakefs-backend=real)")
    return lakefence_server


def _seed(repo: lakefs.Repository) -> str:
    branch = repo.branch("main")
    branch.object("in/data.txt").upload(b"input", pre_sign=False)
    return branch.commit("seed").get_commit().id


def _run(dag: Any, repo: lakefs.Repository, cluster: DurableCluster, tmp_path: Path, **conf: Any) -> Any:
    run_conf = {
        "repository": repo.id,
        "input_ref": conf.pop("input_ref"),
        "jar": str(cluster.jar),
        "seconds": JOB_SECONDS,
        "runs_log": str(tmp_path / "runs.log"),
        **conf,
    }
    return dag.test(run_conf=run_conf)


def _runs(tmp_path: Path) -> list[str]:
    path = tmp_path / "runs.log"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def _die_once(cluster: DurableCluster, before: int, state: str) -> list[float]:
    """Arm ``mid_job``: the first try waits until its driver is ``state``, then dies; returns when it died."""
    died: list[float] = []

    def die() -> None:
        if not died:
            died.append(0.0)  # the first try dies, whatever the wait below does
            cluster.wait_for_driver(state, before + 1 if state == "FINISHED" else 1)
            died[0] = time.monotonic()
            raise RuntimeError("the worker died mid-job")

    failpoints.arm("mid_job", die)
    return died


def _assert_adopted(repo: lakefs.Repository, dr: Any, input_commit: str, driver_id: str) -> None:
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "publish")
    assert values["decision"] == "merge" and head.id == values["output_ref"] and head.parents[0] == input_commit
    assert head.metadata[ADOPTED_JOB_KEY] == driver_id
    assert (head.metadata[ADOPTED_FROM_KEY], head.metadata[ADOPTED_BY_KEY]) == ("1", "2")
    record = decode_metadata(head.metadata)
    assert record is not None and record.attempt.try_number == 2
    # The output is try 1's job's, published once: one object, one publication on the input.
    assert sorted(o.path for o in repo.ref(head.id).objects(prefix="out/")) == ["out/result.txt"]
    text = read_text(repo, head.id, "out/result.txt")
    assert "-t1-" in text and values["staging_branch"] in text
    assert head.parents == [input_commit, values["staged_commit"]]  # one publication, on the input
    assert staging_branches(repo) == []


def _new_drivers(cluster: DurableCluster, before: int) -> list[dict[str, Any]]:
    drivers = sorted(cluster.drivers(), key=lambda d: str(d.get("id")))
    return drivers[before:]


def test_a_retry_adopts_the_job_of_a_try_that_died_mid_job(
    durable_dags: Any, durable_conn: DurableCluster, lakefence_repo: lakefs.Repository, tmp_path: Path
) -> None:
    input_commit = _seed(lakefence_repo)
    before = len(durable_conn.drivers())
    _die_once(durable_conn, before, "RUNNING")
    dr = _run(durable_dags.durable_dag, lakefence_repo, durable_conn, tmp_path, input_ref=input_commit)
    assert dr.state == "success", durable_dags.FAILURES
    assert ti_state(dr, "publish") == ("success", 2)
    drivers = _new_drivers(durable_conn, before)
    assert len(drivers) == 1 and drivers[0]["state"] == "FINISHED", drivers  # one submission
    assert _runs(tmp_path) == ["start", "done"]  # the job ran once
    _assert_adopted(lakefence_repo, dr, input_commit, drivers[0]["id"])


def test_a_job_that_finished_before_the_retry_is_published_at_once(
    durable_dags: Any, durable_conn: DurableCluster, lakefence_repo: lakefs.Repository, tmp_path: Path
) -> None:
    input_commit = _seed(lakefence_repo)
    before = len([d for d in durable_conn.drivers() if d.get("state") == "FINISHED"])
    died = _die_once(durable_conn, before, "FINISHED")
    dr = _run(durable_dags.durable_dag, lakefence_repo, durable_conn, tmp_path, input_ref=input_commit)
    published = time.monotonic()
    assert dr.state == "success", durable_dags.FAILURES
    assert ti_state(dr, "publish") == ("success", 2)
    drivers = _new_drivers(durable_conn, len(durable_conn.drivers()) - 1)
    assert _runs(tmp_path) == ["start", "done"]  # no second job
    _assert_adopted(lakefence_repo, dr, input_commit, drivers[0]["id"])
    # From try 1's death to the publication: try 2's start and its fenced publish, no job.
    assert published - died[0] < 20, published - died[0]
    print(f"durable: finished job published {published - died[0]:.1f}s after the try died")


def test_a_failed_job_is_run_again_not_adopted(
    durable_dags: Any, durable_conn: DurableCluster, lakefence_repo: lakefs.Repository, tmp_path: Path
) -> None:
    input_commit = _seed(lakefence_repo)
    before = len(durable_conn.drivers())
    dr = _run(
        durable_dags.durable_dag,
        lakefence_repo,
        durable_conn,
        tmp_path,
        input_ref=input_commit,
        seconds=1,
        fail_once=str(tmp_path / "failed-once"),
    )
    assert dr.state == "success", durable_dags.FAILURES
    assert ti_state(dr, "publish") == ("success", 2)
    drivers = _new_drivers(durable_conn, before)
    assert sorted(d["state"] for d in drivers) == ["FAILED", "FINISHED"], drivers  # two submissions
    assert _runs(tmp_path) == ["start", "fail", "start", "done"]
    head = lakefence_repo.branch("main").get_commit()
    assert ADOPTED_JOB_KEY not in head.metadata
    assert "-t2-" in read_text(lakefence_repo, head.id, "out/result.txt")  # try 2's own job's output
    assert staging_branches(lakefence_repo) == []


def test_durable_false_runs_the_job_again(
    durable_dags: Any, durable_conn: DurableCluster, lakefence_repo: lakefs.Repository, tmp_path: Path
) -> None:
    input_commit = _seed(lakefence_repo)
    before = len(durable_conn.drivers())
    _die_once(durable_conn, before, "RUNNING")
    dr = _run(durable_dags.not_durable_dag, lakefence_repo, durable_conn, tmp_path, input_ref=input_commit)
    assert dr.state == "success", durable_dags.FAILURES
    assert len(_new_drivers(durable_conn, before)) == 2  # today's behaviour: a new job per try
    head = lakefence_repo.branch("main").get_commit()
    assert ADOPTED_JOB_KEY not in head.metadata
    assert "-t2-" in read_text(lakefence_repo, head.id, "out/result.txt")
