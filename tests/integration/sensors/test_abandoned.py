"""AbandonedPublicationSensor end to end: real Airflow DB and ``dag.test()``, real HTTP to the local
lakeFS server. Publications come from FencedSparkPublishOperator runs (fake spark-submit) whose
worker "dies" after publishing (a failpoint raising after the publish was verified).
"""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from tests.integration.helpers import die_after_publishing, publish_conf, run_dag, ti_state, xcoms
from tests.integration.sensor_helpers import after, judge_now, sensor_waits, waited_how

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")


def abandoned_by_try_1(publishers: Any, repo: lakefs.Repository, input_commit: str) -> Any:
    """Try 1 publishes, then its worker dies; retries=0, so the task instance ends failed."""
    die_after_publishing()
    dr = run_dag(publishers.workspace_dag, publish_conf(repo, input_commit))
    assert dr.state == "failed"
    assert ti_state(dr, "publish") == ("failed", 1)
    return dr


def test_abandoned_publication_detected(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    publish_run = abandoned_by_try_1(publishers, repo, input_commit)
    head = repo.branch("main").get_commit()
    assert head.parents[0] == input_commit  # the publication stayed

    lakefence_controls.reset_counts()
    dr = run_dag(sensors.detect_dag, {"repository": repo.id})
    assert dr.state == "success"
    found = xcoms(dr, "sense")["return_value"]
    assert found["verdict"] == "abandoned"
    assert found["head"] == head.id
    assert (found["dag_id"], found["run_id"], found["task_id"]) == ("lf_test_workspace", publish_run.run_id, "publish")
    assert (found["try_number"], found["role"], found["state"]) == (1, "publish", "failed")
    assert found["input_ref"] == input_commit
    assert found["retry_pending"] is False and found["replacement_running"] is False
    # The first poke found it: one get_commit, no listing (the task instance is not running).
    assert lakefence_controls.counts() == {"getCommit": 1}


def test_not_reported_while_the_publishing_try_runs_nor_after_it_succeeded(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    seen: list[tuple[bool, dict[str, Any], bool, dict[str, int]]] = []

    def probe_while_running() -> None:
        lakefence_controls.reset_counts()
        detected, judgement = judge_now(repo.id, "detect")
        readable, _ = judge_now(repo.id, "settled")
        seen.append((detected, judgement, readable, lakefence_controls.counts()))

    # Right after the merge, before its verifying read goes out: the probes' calls are all counted.
    failpoints.arm("after_publish_action", probe_while_running)
    dr = run_dag(publishers.workspace_dag, publish_conf(repo, input_commit))
    assert dr.state == "success"
    detected, judgement, readable, counts = seen[0]
    assert not detected and not readable
    assert judgement["verdict"] == "in_flight" and judgement["state"] == "running"
    assert judgement["head"] == xcoms(dr, "publish")["output_ref"]
    # Two probes of at most two lakeFS calls each: get_commit, and the staging listing (running).
    assert counts == {"getCommit": 2, "listBranches": 2}

    # Succeeded with that output: settled (one get_commit, one XCom read), and never reported.
    lakefence_controls.reset_counts()
    settled = run_dag(sensors.settled_dag, {"repository": repo.id})
    assert settled.state == "success"
    value = xcoms(settled, "sense")["return_value"]
    assert value["verdict"] == "settled" and value["output_ref"] == value["head"] == judgement["head"]
    assert lakefence_controls.counts() == {"getCommit": 1}
    not_found = run_dag(sensors.detect_briefly_dag, {"repository": repo.id})
    assert not_found.state == "failed"  # the detect sensor timed out: nothing abandoned


def test_replacement_by_a_try_that_died_is_reported_again(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    during_try_2: list[tuple[bool, dict[str, Any], bool]] = []

    def probe_in_try_2() -> None:
        if repo.branch("main").get_commit().parents[0] == input_commit and len(during_try_2) == 0:
            record = judge_now(repo.id, "detect")
            if record[1]["try_number"] == 1:
                ignored, _ = judge_now(repo.id, "detect", ignore_repairs_underway=True)
                during_try_2.append((record[0], record[1], ignored))

    failpoints.arm("after_staging_branch", probe_in_try_2)
    die_after_publishing(times=2)
    dr = run_dag(publishers.retry_dag, publish_conf(repo, input_commit, {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "failed"
    assert ti_state(dr, "publish") == ("failed", 2)
    # While try 2 ran (its staging branch created), try 1's publication was abandoned, replacement running.
    detected, judgement, ignored = during_try_2[0]
    assert detected and judgement["verdict"] == "abandoned" and judgement["replacement_running"] is True
    assert not ignored

    head = repo.branch("main").get_commit()
    assert head.parents == [input_commit]  # try 2 replaced (hard reset to its staged commit)
    lakefence_controls.reset_counts()
    sensed = run_dag(sensors.detect_dag, {"repository": repo.id})
    found = xcoms(sensed, "sense")["return_value"]
    assert found["verdict"] == "abandoned" and found["head"] == head.id
    assert (found["try_number"], found["role"], found["state"]) == (2, "stage", "failed")
    assert lakefence_controls.counts() == {"getCommit": 1}


def test_settled_blocks_then_passes_after_the_retry_succeeds(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    blocked: list[tuple[bool, dict[str, Any]]] = []

    def probe_in_try_2() -> None:
        readable, judgement = judge_now(repo.id, "settled")
        if judgement.get("try_number") == 1:
            blocked.append((readable, judgement))

    failpoints.arm("after_staging_branch", probe_in_try_2)
    die_after_publishing()
    dr = run_dag(publishers.retry_dag, publish_conf(repo, input_commit, {"stamp_path": "out/stamp.txt"}))
    assert dr.state == "success"
    readable, judgement = blocked[0]
    assert not readable and judgement["verdict"] == "abandoned"

    sensed = run_dag(sensors.settled_dag, {"repository": repo.id})
    assert sensed.state == "success"
    value = xcoms(sensed, "sense")["return_value"]
    assert value["verdict"] == "settled" and value["try_number"] == 2
    assert value["head"] == xcoms(dr, "publish")["output_ref"] == repo.branch("main").get_commit().id


def test_settled_poke_mode_times_out_on_an_abandoned_head(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    abandoned_by_try_1(publishers, repo, input_commit)
    sensed = run_dag(sensors.settled_dag, {"repository": repo.id})
    assert sensed.state == "failed"
    assert xcoms(sensed, "sense").get("return_value") is None


def test_scope_limits_the_judgement(publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    abandoned_by_try_1(publishers, repo, input_commit)
    other = run_dag(sensors.settled_dag, {"repository": repo.id, "publisher_dag_id": "some_other_dag"})
    assert other.state == "success"
    assert xcoms(other, "sense")["return_value"]["verdict"] == "out_of_scope"
    scoped = {"repository": repo.id, "publisher_dag_id": "lf_test_workspace", "publisher_task_id": "publish"}
    same = run_dag(sensors.detect_dag, scoped)
    assert same.state == "success"
    assert xcoms(same, "sense")["return_value"]["verdict"] == "abandoned"


def test_deferred_detect_fires_in_the_triggerer(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    abandoned_by_try_1(publishers, repo, input_commit)
    abandoned = repo.branch("main").get_commit().id
    # A repair put main back on the input: nothing to detect when the sensor starts, so it defers...
    from airflow_lakefence.hooks.lakefs import LakeFSHook  # the high-level SDK has no hard reset

    client = LakeFSHook().client
    client.hard_reset(repo.id, "main", input_commit)
    # ...and the abandoned publication comes back while the trigger polls.
    waiting = sensor_waits("lf_sense_detect_deferred", "deferred")
    with after(0.2, lambda: client.hard_reset(repo.id, "main", abandoned), once=waiting) as errors:
        dr = run_dag(sensors.detect_deferred_dag, {"repository": repo.id})
    assert not errors
    assert dr.state == "success"
    found = xcoms(dr, "sense")["return_value"]
    assert found["verdict"] == "abandoned" and found["head"] == abandoned
    assert waited_how(dr)["deferred"]


@pytest.mark.parametrize("mode", ["deferred", "rescheduled"])
def test_settled_fires_deferred_in_the_triggerer_and_in_reschedule_mode(
    publishers: Any, sensors: Any, seeded: tuple[lakefs.Repository, str], mode: str
) -> None:
    repo, input_commit = seeded
    abandoned_by_try_1(publishers, repo, input_commit)
    from airflow_lakefence.hooks.lakefs import LakeFSHook

    client = LakeFSHook().client
    dag_id = "lf_sense_settled_deferred" if mode == "deferred" else "lf_sense_settled_reschedule"
    dag = sensors.settled_deferred_dag if mode == "deferred" else sensors.settled_reschedule_dag
    waiting = sensor_waits(dag_id, mode)
    with after(0.2, lambda: client.hard_reset(repo.id, "main", input_commit), once=waiting) as errors:
        dr = run_dag(dag, {"repository": repo.id})
    assert not errors
    assert dr.state == "success"
    value = xcoms(dr, "sense")["return_value"]
    assert value["head"] == input_commit
    if mode == "deferred":
        assert value["verdict"] == "not_a_publication"
        assert waited_how(dr)["deferred"]
    else:
        assert waited_how(dr)["reschedules"] >= 1
