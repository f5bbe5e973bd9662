"""The "lakeFS publications" view on the real Airflow API server app (FastAPI's TestClient on
``airflow.api_fastapi.app.create_app()``, the plugin loaded through the provider info), after a real
scenario under ``dag.test()`` on lakeFS: a first-try merge, a fail-closed overlap that kept its
staging branch as evidence, and a worker killed after publishing whose retry replaced its publication.
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


def test_a_killed_worker_is_replaced_by_its_retry(api: Any, scenario: dict[str, Any]) -> None:
    replaced = scenario["replaced"]
    answer = api.get(
        "/lakefence/api/publications",
        params={"dag_id": HIDDEN_DAG, "run_id": replaced.run_id, "task_id": "publish", "map_index": -1},
        headers=_token(api, "admin"),
    )
    assert answer.status_code == 200, answer.text
    rows = answer.json()["rows"]
    assert [(r["try_number"], r["decision"]) for r in rows] == [(2, "replace"), (1, "unreported")]
    assert rows[0]["output_ref"] == xcoms(replaced, "publish")["output_ref"]
    assert rows[0]["judgement_label"] == "live"


def test_the_html_view_lists_the_rows(api: Any, scenario: dict[str, Any]) -> None:
    params = {"dag_id": "lf_py_workspace", "limit": 2}  # the newest two: this test's runs
    answer = api.get("/lakefence/view", params=params, headers=_token(api, "viewer"))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    assert answer.text.count("class='publication'") == 2
    assert "data-decision='merge'" in answer.text and "data-decision='fail_closed'" in answer.text
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


def test_the_ui_lists_the_external_views(api: Any) -> None:
    answer = api.get("/api/v2/plugins", headers=_token(api, "admin"))
    assert answer.status_code == 200, answer.text
    views = [
        v for p in answer.json()["plugins"] for v in p.get("external_views", []) if v["name"] == "lakeFS publications"
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
