"""The operator's hard-fence options end to end: real Airflow DB and ``dag.test()``, the Python
adapter of the engine (no Spark), the session's lakeFS over HTTP (local server or real lakeFS)."""

from __future__ import annotations

from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.fences import hard as hf
from airflow_lakefence.exceptions import HardFenceMissingError
from airflow_lakefence.hardfence import install_hard_fence
from tests.conftest import fresh_dag_module, load_dag_module
from tests.integration.hard_fence_helpers import CountingClient, commit_on, head, protect
from tests.integration.helpers import die_after_publishing, run_dag, ti_state, xcoms

pytestmark = [pytest.mark.hard_fence, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]


@pytest.fixture
def dags() -> Any:
    return fresh_dag_module("testdags/hard_fence_dags.py", "FAILURES", "RUNS")


def conf(repo: lakefs.Repository, input_ref: str, **files: str) -> dict[str, Any]:
    return {"repository": repo.id, "target": "main", "input_ref": input_ref, "files": files}


def read(repo: lakefs.Repository, ref: str, path: str) -> str:
    return repo.ref(ref).object(path).reader().read().decode()


def test_required_fence_missing_fails_before_the_function(dags: Any, lakefence_repo: lakefs.Repository) -> None:
    input_commit = commit_on(lakefence_repo, "main", {"in/data.txt": b"input"}, "input")
    dr = run_dag(dags.required_dag, conf(lakefence_repo, input_commit))
    assert dr.state == "failed"
    error = dags.FAILURES[("lf_hf_required", 1)]
    assert isinstance(error, HardFenceMissingError) and "hardfence install" in str(error)
    assert dags.RUNS.get("lf_hf_required", 0) == 0 and head(lakefence_repo) == input_commit


def test_required_fence_present_publishes_with_the_expected_head(
    dags: Any, adapter: CountingClient, lakefence_repo: lakefs.Repository
) -> None:
    commit_on(lakefence_repo, "main", {"in/data.txt": b"input"}, "input")
    input_commit = install_hard_fence(adapter, lakefence_repo.id, "main").head
    dr = run_dag(dags.required_dag, conf(lakefence_repo, input_commit, **{"out/a.txt": "a"}))
    assert dr.state == "success"
    values = xcoms(dr, "publish")
    merged = lakefence_repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == merged.id
    assert merged.parents[0] == input_commit and merged.metadata[hf.EXPECTED_HEAD_KEY] == input_commit
    assert read(lakefence_repo, "main", "out/a.txt") == "a"


@pytest.mark.parametrize("protected", [False, True], ids=["plain", "protected"])
def test_retry_replaces_the_abandoned_publication_by_merges(
    dags: Any,
    adapter: CountingClient,
    lakefence_client: lakefs.Client,
    lakefence_repo: lakefs.Repository,
    protected: bool,
) -> None:
    commit_on(lakefence_repo, "main", {"in/data.txt": b"input"}, "input")
    input_commit = install_hard_fence(adapter, lakefence_repo.id, "main").head
    if protected:
        protect(lakefence_client, lakefence_repo, "main")
    seen = die_after_publishing(lakefence_repo)
    dag = dags.merge_only_retry_dag if not protected else dags.required_retry_dag
    dr = run_dag(dag, conf(lakefence_repo, input_commit, **{"out/a.txt": "a"}))
    assert dr.state == "success" and ti_state(dr, "publish") == ("success", 2)
    values = xcoms(dr, "publish")
    link = lakefence_repo.branch("main").get_commit()
    assert values["decision"] == "replace" and values["output_ref"] == link.id
    assert link.parents[0] == seen[0] and hf.is_chain_link(link.metadata, seen[0])
    assert read(lakefence_repo, "main", "out/try.txt") == "2"
    assert adapter.list_branches(lakefence_repo.id, "lakefence") == []  # hidden ones included
    # The sensor reads a chain link as the publication of try 2, which succeeded with it: settled.
    sensors = load_dag_module("testdags/sensor_test_dags.py")
    sensed = run_dag(sensors.settled_dag, {"repository": lakefence_repo.id})
    judgement = xcoms(sensed, "sense")["return_value"]
    assert sensed.state == "success", judgement
    assert judgement["verdict"] == "settled" and judgement["head"] == link.id and judgement["try_number"] == 2
