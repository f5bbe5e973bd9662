"""The "lakeFS publications" view on the real Airflow API server app (FastAPI's TestClient on
``airflow.api_fastapi.app.create_app()``, the plugin loaded through the provider info), after a real
scenario under ``dag.test()`` on lakeFS: a first-try merge, a fail-closed overlap that kept its
staging branch as evidence, a worker killed after publishing whose retry replaced its publication, a
run-branch publication and a try killed after publishing with no retry left (see
:func:`~tests.integration.ui.publications_support.publications_scenario`). Each row's decision,
reason, commits, links and judgement are checked, and the lakeFS calls of a page exactly.
The auth manager has users (SimpleAuthManager with a per-DAG rule): anonymous requests are refused and
a user without read access to a DAG never sees its publications.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.publication.history import DECISION_REASONS, DIED_BEFORE_REPORTING
from airflow_lakefence.core.records.run_state import bounded_message
from airflow_lakefence.ui.plugin import SHOWS_VIEWS
from airflow_lakefence.ui.reader import calls_bound
from tests.integration.helpers import xcoms
from tests.integration.ui.publications_support import (
    HIDDEN_DAG,
    NARROW_USER,
    PASSWORDS,
    api_server_app,
    publications_scenario,
)

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")


@pytest.fixture
def scenario(dags: Any, seeded: tuple[lakefs.Repository, str]) -> dict[str, Any]:
    """See :func:`publications_scenario`."""
    return publications_scenario(dags, seeded)


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The Airflow API server's app with users, through FastAPI's TestClient."""
    from airflow.api_fastapi import app as api_app
    from fastapi.testclient import TestClient

    with TestClient(api_server_app(tmp_path, monkeypatch), base_url="http://127.0.0.1") as client:
        yield client
    api_app.purge_cached_app()


def _token(api: Any, user: str) -> dict[str, str]:
    answer = api.post("/auth/token", json={"username": user, "password": PASSWORDS[user]})
    assert answer.status_code == 201, answer.text
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


def _ui(lakefs_conn: dict[str, str]) -> str:
    return lakefs_conn["host"].rstrip("/").removesuffix("/api/v1")


def _commit_link(lakefs_conn: dict[str, str], repo: Any, commit: str) -> str:
    return f"{_ui(lakefs_conn)}/repositories/{repo.id}/commits/{commit}"


def _compare_link(lakefs_conn: dict[str, str], repo: Any, base: str, output: str) -> str:
    return f"{_ui(lakefs_conn)}/repositories/{repo.id}/compare?ref={base}&compareRef={output}"


def test_the_task_view_shows_each_publication_with_its_decision_commits_and_links(
    api: Any, scenario: dict[str, Any], lakefs_conn: dict[str, str]
) -> None:
    repo, merged, failed = scenario["repo"], scenario["merged"], scenario["failed"]
    headers = _token(api, "viewer")
    answer = api.get(
        "/lakefence/api/publications", params={"dag_id": "lf_py_workspace", "task_id": "publish"}, headers=headers
    )
    assert answer.status_code == 200, answer.text
    page = answer.json()
    # The session's database holds earlier tests' runs too: this test's are the two newest.
    rows = {(r["run_id"], r["try_number"]): r for r in page["rows"] if r["repository"] == repo.id}
    assert set(rows) == {(merged.run_id, 1), (failed.run_id, 1)}
    assert [r["run_id"] for r in page["rows"][:2]] == [merged.run_id, failed.run_id]
    merge = rows[(merged.run_id, 1)]
    values = xcoms(merged, "publish")
    assert (merge["decision"], merge["output_ref"], merge["staged_commit"]) == (
        "merge",
        values["output_ref"],
        values["staged_commit"],
    )
    assert merge["input_commit"] == values["input_ref"] and merge["input_ref"] == "main"
    assert merge["judgement_label"] == "live" and merge["current"] is True
    # The task's extra link "lakeFS publications" opens this view of the task instance.
    query = urllib.parse.urlencode(
        {"dag_id": "lf_py_workspace", "run_id": merged.run_id, "task_id": "publish", "map_index": -1}
    )
    assert values["_link_LakeFSPublicationsLink"] == f"/lakefence/view?{query}"
    ui = lakefs_conn["host"].rstrip("/").removesuffix("/api/v1")
    assert merge["links"]["output_ref"] == f"{ui}/repositories/{repo.id}/commits/{values['output_ref']}"
    assert merge["links"]["compare"] == (
        f"{ui}/repositories/{repo.id}/compare?ref={values['input_ref']}&compareRef={values['output_ref']}"
    )
    closed = rows[(failed.run_id, 1)]
    error = scenario["error"]
    assert closed["decision"] == "fail_closed" and closed["output_ref"] is None
    assert [(e["branch"], e["error"], e["kept"]) for e in closed["evidence"]] == [
        (error.staging_branch, "PublishFenceError", True)
    ]
    # The error's message, as the run state kept it (redacted, bounded), beside its class.
    assert closed["evidence"][0]["message"] == bounded_message(str(error))
    assert closed["reason"] == f"{DECISION_REASONS['fail_closed']} (PublishFenceError)"
    assert merge["reason"] == DECISION_REASONS["merge"]
    assert closed["links"][f"evidence:{error.staging_branch}"].endswith(f"/objects?ref={error.staging_branch}")
    # One task instance at a time: its records, then its one reported publication (a finished task
    # instance without evidence needs no staging-branch listing) or its staging branches (evidence).
    for run_id, published in ((merged.run_id, 1), (failed.run_id, 0)):
        one = api.get(
            "/lakefence/api/publications",
            params={"dag_id": "lf_py_workspace", "run_id": run_id, "task_id": "publish"},
            headers=headers,
        ).json()
        assert one["lakefs_calls"] == 2 <= one["lakefs_calls_bound"] == calls_bound(1, published)
    # Credentials stay in the server.
    assert lakefs_conn["password"] not in answer.text and lakefs_conn["login"] not in answer.text


def test_a_killed_worker_is_replaced_by_its_retry(
    api: Any, scenario: dict[str, Any], lakefs_conn: dict[str, str]
) -> None:
    repo, replaced, abandoned = scenario["repo"], scenario["replaced"], scenario["abandoned"]
    answer = api.get(
        "/lakefence/api/publications",
        params={"dag_id": HIDDEN_DAG, "run_id": replaced.run_id, "task_id": "publish", "map_index": -1},
        headers=_token(api, "admin"),
    )
    assert answer.status_code == 200, answer.text
    page = answer.json()
    rows = page["rows"]
    assert [(r["try_number"], r["decision"]) for r in rows] == [(2, "replace"), (1, "unreported")]
    values = xcoms(replaced, "publish")
    retry, dead = rows
    assert (retry["output_ref"], retry["staged_commit"], retry["input_commit"]) == (
        values["output_ref"],
        values["staged_commit"],
        values["input_ref"],
    )
    assert retry["reason"] == DECISION_REASONS["replace"] and retry["judgement_label"] == "live"
    # The dead try's abandoned publication, named by the retry's record and judged by the sensor's judge().
    assert retry["replaced"] == {"output_ref": abandoned, "try_number": 1, "abandoned": True}
    assert retry["links"]["replaced"] == _commit_link(lakefs_conn, repo, abandoned)
    assert (dead["output_ref"], dead["found_by"], dead["superseded_by"]) == (abandoned, "replacing try", 2)
    assert dead["reason"] == DIED_BEFORE_REPORTING and dead["judgement_label"] == "abandoned"
    assert dead["input_commit"] == values["input_ref"] and dead["staged_commit"] not in (None, abandoned)
    assert dead["links"]["output_ref"] == _commit_link(lakefs_conn, repo, abandoned)
    assert dead["links"]["compare"] == _compare_link(lakefs_conn, repo, values["input_ref"], abandoned)
    # Its records, the retry's output and the commit it replaced: 3 calls.
    assert page["lakefs_calls"] == 3 <= page["lakefs_calls_bound"] == calls_bound(1, 2)


def test_a_try_killed_with_no_retry_left_names_the_publication_it_abandoned_on_the_target(
    api: Any, scenario: dict[str, Any], lakefs_conn: dict[str, str]
) -> None:
    """No later try replaced it: the abandoned sensor's probe of the target finds it at HEAD."""
    repo, died, head = scenario["repo"], scenario["died"], scenario["died_head"]
    params = {"dag_id": "lf_py_direct", "run_id": died.run_id, "task_id": "publish"}
    page = api.get("/lakefence/api/publications", params=params, headers=_token(api, "viewer")).json()
    (row,) = page["rows"]
    assert repo.branch("main").get_commit().id == head
    assert (row["try_number"], row["decision"], row["reason"]) == (1, "unreported", DIED_BEFORE_REPORTING)
    assert (row["output_ref"], row["found_by"], row["judgement"]) == (head, "target", "abandoned")
    assert "its task instance is failed" in row["judgement_reason"]
    assert row["staged_commit"] and row["input_commit"]
    assert row["links"]["output_ref"] == _commit_link(lakefs_conn, repo, head)
    assert row["links"]["compare"] == _compare_link(lakefs_conn, repo, row["input_commit"], head)
    # Its records, and one probe of main (getCommit; the task instance is not running: no listing).
    assert page["lakefs_calls"] == 2 <= page["lakefs_calls_bound"] == calls_bound(1, 0, probes=1)


def test_a_run_branch_publication_lists_the_runs_tasks(
    api: Any, scenario: dict[str, Any], lakefs_conn: dict[str, str]
) -> None:
    repo, run = scenario["repo"], scenario["run"]
    params = {"dag_id": "lf_run_branch", "run_id": run.run_id, "task_id": "publish"}
    page = api.get("/lakefence/api/publications", params=params, headers=_token(api, "viewer")).json()
    (row,) = page["rows"]
    published, written = xcoms(run, "publish"), xcoms(run, "write")
    run_branch = xcoms(run, "run_branch")["return_value"]
    assert (row["decision"], row["reason"], row["judgement_label"]) == ("merge", DECISION_REASONS["merge"], "live")
    assert (row["output_ref"], row["staged_commit"], row["input_commit"]) == (
        published["output_ref"],
        published["staged_commit"],
        published["input_ref"],
    )
    assert (row["run_branch"], row["run_head"], row["run_tasks_truncated"]) == (
        run_branch,
        written["output_ref"],
        False,
    )
    # The run's one task, with the commits it wrote into the run branch (its staged commit and its merge).
    assert [(t["dag_id"], t["run_id"], t["task_id"], t["map_index"], t["try_number"]) for t in row["run_tasks"]] == [
        ("lf_run_branch", run.run_id, "write", -1, 1)
    ]
    (task,) = row["run_tasks"]
    assert (task["output_ref"], task["staged_commit"]) == (written["output_ref"], written["staged_commit"])
    assert set(task["commits"]) == {written["output_ref"], written["staged_commit"]}
    links = row["links"]
    assert links["run_branch"] == f"{_ui(lakefs_conn)}/repositories/{repo.id}/objects?ref={run_branch}"
    assert links[f"run_task:{written['output_ref']}"] == _commit_link(lakefs_conn, repo, written["output_ref"])
    assert links["compare"] == _compare_link(lakefs_conn, repo, published["input_ref"], published["output_ref"])
    # Records, the output, its staged commit (it names the run's HEAD), one log of the run branch.
    assert page["lakefs_calls"] == 4 <= page["lakefs_calls_bound"] == calls_bound(1, 1, run_publications=1)
    html = api.get("/lakefence/view", params=params, headers=_token(api, "viewer")).text
    assert "class='run-task' data-task='write' data-try='1'" in html


def test_the_filters_apply_before_the_page_is_cut(api: Any, scenario: dict[str, Any]) -> None:
    repo, failed, merged = scenario["repo"], scenario["failed"], scenario["merged"]
    headers = _token(api, "viewer")
    # By decision: the newest task instance with a fail_closed row, although a merge is newer.
    params = {"dag_id": "lf_py_workspace", "task_id": "publish", "decision": "fail_closed", "limit": 1}
    page = api.get("/lakefence/api/publications", params=params, headers=headers).json()
    assert [(r["run_id"], r["decision"]) for r in page["rows"]] == [(failed.run_id, "fail_closed")]
    assert page["scanned_task_instances"] == 2 and page["next_offset"] in (2, None)
    # By repository: each task instance by where it published (other tests' runs used other repositories).
    params = {"dag_id": "lf_py_workspace", "repository": repo.id}
    page = api.get("/lakefence/api/publications", params=params, headers=headers).json()
    assert page["total_task_instances"] == 2
    assert {r["run_id"] for r in page["rows"]} == {failed.run_id, merged.run_id}
    elsewhere = api.get(
        "/lakefence/api/publications", params={**params, "branch": "not-main"}, headers=headers
    ).json()
    assert elsewhere["total_task_instances"] == 0 and elsewhere["rows"] == []
    # A task instance whose rendered fields Airflow pruned is matched by its task's newest ones.
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        session.query(RenderedTaskInstanceFields).filter_by(dag_id=failed.dag_id, run_id=failed.run_id).delete()
    pruned = api.get("/lakefence/api/publications", params={**params, "offset": 1}, headers=headers).json()
    assert pruned["total_task_instances"] == 2
    assert [(r["run_id"], r["repository"]) for r in pruned["rows"]] == [(failed.run_id, repo.id)]


def test_the_html_view_lists_the_rows(api: Any, scenario: dict[str, Any]) -> None:
    params = {"dag_id": "lf_py_workspace", "limit": 2}  # the newest two: this test's runs
    answer = api.get("/lakefence/view", params=params, headers=_token(api, "viewer"))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    assert answer.text.count("class='publication'") == 2
    assert "data-decision='merge'" in answer.text and "data-decision='fail_closed'" in answer.text
    # The evidence's class and message.
    assert "<b>PublishFenceError</b><div class='message'>" in answer.text
    # The page's bounds are checked before anything is read.
    for bad in ({"limit": 0}, {"limit": 101}, {"offset": -1}):
        refused = api.get("/lakefence/view", params={**params, **bad}, headers=_token(api, "viewer"))
        assert refused.status_code == 422, (bad, refused.status_code)


def test_anonymous_requests_are_refused(api: Any) -> None:
    for path in ("/lakefence/api/publications", "/lakefence/view?dag_id=lf_py_workspace"):
        answer = api.get(path)
        assert answer.status_code in (401, 403), (path, answer.status_code)
    bad = api.get("/lakefence/api/publications", headers={"Authorization": "Bearer not-a-token"})
    assert bad.status_code in (401, 403)


def test_a_user_without_access_to_a_dag_never_sees_its_publications(api: Any, scenario: dict[str, Any]) -> None:
    narrow = _token(api, NARROW_USER)
    refused = api.get("/lakefence/api/publications", params={"dag_id": HIDDEN_DAG}, headers=narrow)
    assert refused.status_code == 403
    # Across DAGs (the metadata DB also holds other tests' runs): the hidden DAG's rows only for the viewer.
    everything = api.get("/lakefence/api/publications", params={"limit": 100}, headers=narrow).json()["rows"]
    assert "lf_py_workspace" in {r["dag_id"] for r in everything}
    assert HIDDEN_DAG not in {r["dag_id"] for r in everything}
    viewer = _token(api, "viewer")
    seen_by_viewer = api.get("/lakefence/api/publications", params={"limit": 100}, headers=viewer).json()["rows"]
    assert {"lf_py_workspace", HIDDEN_DAG} <= {r["dag_id"] for r in seen_by_viewer}


def test_the_ui_lists_the_views(api: Any) -> None:
    answer = api.get("/api/v2/plugins", headers=_token(api, "admin"))
    assert answer.status_code == 200, answer.text
    # React apps, or external views where the HTML page is asked for (tests/integration/ui/test_bundle.py).
    views = [
        v
        for p in answer.json()["plugins"]
        for v in [*p.get("external_views", []), *p.get("react_apps", [])]
        if v["name"] == "lakeFS publications"
    ]
    # Airflow 3.0 has no external views: there the extra link opens the app's page.
    expected = {"task_instance", "task", "dag", "nav"} if SHOWS_VIEWS else set()
    assert {v["destination"] for v in views} == expected


def test_a_ui_clear_of_a_success_shows_the_superseded_publication(
    api: Any, dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    """A successful run cleared and run again (a day re-run): try 2 replaces try 1's publication on
    purpose, and try 1's row says so."""
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    from tests.integration.helpers import publish_conf, run_dag, run_existing

    repo, _ = seeded
    first = run_dag(dags.py_workspace_dag, publish_conf(repo, "main", {"files": {"out/d.txt": "D"}}))
    assert first.state == "success"
    before = xcoms(first, "publish")["output_ref"]
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=first.dag_id, run_id=first.run_id).all()
        clear_task_instances(tis, session)
    again = run_existing(dags.py_workspace_dag, first.run_id)
    assert again.state == "success"
    after = xcoms(again, "publish")["output_ref"]
    params = {"dag_id": "lf_py_workspace", "run_id": first.run_id, "task_id": "publish"}
    rows = api.get("/lakefence/api/publications", params=params, headers=_token(api, "viewer")).json()["rows"]
    assert [(r["try_number"], r["decision"], r["output_ref"]) for r in rows] == [
        (2, "replace", after),
        (1, "merge", before),
    ]
    assert rows[0]["replaced"] == {"output_ref": before, "try_number": 1} and rows[0]["judgement_label"] == "live"
    assert rows[1]["superseded_by"] == 2
    assert rows[0]["links"]["replaced"].endswith(f"/commits/{before}")
