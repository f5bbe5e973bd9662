"""Adoption under the real scheduler (LocalExecutor on PostgreSQL) on a standalone cluster in cluster
deploy mode: the worker running the task is SIGKILLed mid-job (no ``finally``, no ``on_kill``), the
scheduler fails the try on its missing heartbeats and retries it; the retry adopts the job. Also a
job that finished before the retry, and a frozen worker that comes back after the adoption.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.core.staging.adoption import ADOPTED_BY_KEY, ADOPTED_FROM_KEY, ADOPTED_JOB_KEY
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from tests.durable.cluster import DurableCluster, spark_connection
from tests.durable.stack_scenario import DAG_FILE, DAG_IDS, STACK_CONFIG, run_with_a_dead_worker, thaw
from tests.integration.helpers import read_text, staging_branches
from tests.stack.airflow_stack import AirflowStack, wait_for
from tests.stack.tier import lakefs_connection, running_stack

pytestmark = [pytest.mark.durable, pytest.mark.scheduler, pytest.mark.spark_cluster, pytest.mark.real_lakefs]


@pytest.fixture(scope="module")
def durable_stack(lakefence_server: Any, durable_cluster: DurableCluster) -> Iterator[AirflowStack]:
    """The full Airflow stack with the tier's DAGs and the ``spark_durable`` connection."""
    if lakefence_server.is_local:
        pytest.skip("the durable tier runs against real lakeFS (--lakefs-backend=real)")
    connections = lakefs_connection(
        lakefence_server.endpoint, lakefence_server.access_key_id, lakefence_server.secret_access_key
    )
    connections["spark_durable"] = spark_connection(durable_cluster)
    stack = AirflowStack(dag_files=[DAG_FILE], connections=connections, extra_config=STACK_CONFIG)
    with running_stack(stack, DAG_IDS, lambda: False) as running:
        for dag_id in DAG_IDS:
            running.api.unpause(dag_id)
        yield running


def _client(server: Any) -> LakeFSClient:
    return LakeFSClient(server.endpoint, server.access_key_id, server.secret_access_key)


def _conf(repo: lakefs.Repository, cluster: DurableCluster, tmp_path: Path, seconds: float) -> dict[str, Any]:
    branch = repo.branch("main")
    branch.object("in/data.txt").upload(b"input", pre_sign=False)
    input_commit = branch.commit("seed").get_commit().id
    return {
        "repository": repo.id,
        "input_ref": input_commit,
        "jar": str(cluster.jar),
        "seconds": seconds,
        "runs_log": str(tmp_path / "runs.log"),
    }


def _assert_published_once_by_try_2(repo: lakefs.Repository, conf: dict[str, Any], driver_id: str) -> None:
    head = repo.branch("main").get_commit()
    assert head.parents[0] == conf["input_ref"]
    assert head.metadata[ADOPTED_JOB_KEY] == driver_id
    assert (head.metadata[ADOPTED_FROM_KEY], head.metadata[ADOPTED_BY_KEY]) == ("1", "2")
    record = decode_metadata(head.metadata)
    assert record is not None and record.attempt.try_number == 2
    assert sorted(o.path for o in repo.ref(head.id).objects(prefix="out/")) == ["out/result.txt"]
    assert "-t1-" in read_text(repo, head.id, "out/result.txt")  # try 1's job's output
    assert staging_branches(repo) == []


def test_the_worker_killed_mid_job_the_retry_adopts_the_job(
    durable_stack: AirflowStack,
    durable_cluster: DurableCluster,
    lakefence_repo: lakefs.Repository,
    lakefence_server: Any,
    tmp_path: Path,
) -> None:
    conf = _conf(lakefence_repo, durable_cluster, tmp_path, seconds=30)
    outcome = run_with_a_dead_worker(
        durable_stack, durable_cluster, "lf_durable", conf, kill_after=4, lakefs_client=_client(lakefence_server)
    )
    assert outcome.state == "success" and outcome.tries == 2, outcome
    assert len(outcome.drivers) == 1 and outcome.drivers[0][1] == "FINISHED", outcome.drivers  # one submission
    assert [event for event, _ in outcome.runs] == ["start", "done"]
    _assert_published_once_by_try_2(lakefence_repo, conf, outcome.drivers[0][0])
    log = durable_stack.api.task_log("lf_durable", outcome.run_id, "publish", 2)
    assert "(adopt_running)" in log, log[-3000:]
    print(f"durable: killed at {outcome.killed_at:.1f}s, run done at {outcome.wall:.1f}s")


def test_a_job_that_finished_before_the_retry_is_published_without_a_second_job(
    durable_stack: AirflowStack,
    durable_cluster: DurableCluster,
    lakefence_repo: lakefs.Repository,
    lakefence_server: Any,
    tmp_path: Path,
) -> None:
    conf = _conf(lakefence_repo, durable_cluster, tmp_path, seconds=3)
    outcome = run_with_a_dead_worker(
        durable_stack, durable_cluster, "lf_durable", conf, kill_after=1, lakefs_client=_client(lakefence_server)
    )
    assert outcome.state == "success" and outcome.tries == 2, outcome
    assert len(outcome.drivers) == 1, outcome.drivers
    assert [event for event, _ in outcome.runs] == ["start", "done"]
    _assert_published_once_by_try_2(lakefence_repo, conf, outcome.drivers[0][0])
    log = durable_stack.api.task_log("lf_durable", outcome.run_id, "publish", 2)
    assert "(adopt_finished)" in log, log[-3000:]
    try_2 = durable_stack.api.tries("lf_durable", outcome.run_id, "publish")[-1]
    print(f"durable: try 2 of a finished job took {try_2.get('duration')}s")
    assert try_2.get("duration") is not None and float(try_2["duration"]) < 15, try_2


def test_a_frozen_worker_that_comes_back_after_the_adoption_publishes_nothing_and_kills_nothing(
    durable_stack: AirflowStack,
    durable_cluster: DurableCluster,
    lakefence_repo: lakefs.Repository,
    lakefence_server: Any,
    tmp_path: Path,
) -> None:
    conf = _conf(lakefence_repo, durable_cluster, tmp_path, seconds=30)
    api = durable_stack.api

    def come_back_after_the_adoption(ids: dict[str, Any]) -> None:
        def adopted() -> bool | None:
            ti = api.task_instance(ids["dag_id"], ids["run_id"], "publish")
            if ti.get("try_number") != 2 or ti.get("state") != "running":
                return None
            return "(adopt_running)" in api.task_log(ids["dag_id"], ids["run_id"], "publish", 2) or None

        wait_for("try 2 to adopt the job", adopted, 90)
        thaw(durable_stack, ids["ti_id"])  # the zombie's supervisor heartbeats, is refused, SIGTERMs it

    outcome = run_with_a_dead_worker(
        durable_stack,
        durable_cluster,
        "lf_durable",
        conf,
        kill_after=3,
        freeze=True,
        lakefs_client=_client(lakefence_server),
        after_kill=come_back_after_the_adoption,
    )
    assert outcome.state == "success" and outcome.tries == 2, outcome
    # The zombie's on_kill left the adopted job alone: it finished, once.
    assert len(outcome.drivers) == 1 and outcome.drivers[0][1] == "FINISHED", outcome.drivers
    _assert_published_once_by_try_2(lakefence_repo, conf, outcome.drivers[0][0])
    zombie_log = api.task_log("lf_durable", outcome.run_id, "publish", 1)
    print("durable: the zombie's log ends with", zombie_log[-1500:])
    assert "Not killing the Spark job: try 2 adopted it" in zombie_log, zombie_log[-3000:]
