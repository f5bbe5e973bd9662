"""The "lakeFS publications" view on Airflow 2.11's webserver (the real Flask app, Flask AppBuilder's
login and roles), after a real scenario under ``dag.test()`` on lakeFS: a try that failed closed and
kept its staging branch as evidence, a first-try merge, a worker killed after publishing whose retry
replaced its publication, and a success cleared and run again. Users: a viewer (every DAG), a user
who may read one DAG only, and no login at all. On Airflow 3 these tests are skipped (test_app.py).
"""

from __future__ import annotations

import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any

import lakefs
import pytest

from airflow_lakefence.ui.reader import calls_bound
from tests.conftest import AIRFLOW_2, REPO
from tests.integration.helpers import publish_conf, run_dag, run_existing, xcoms
from tests.integration.ui.fab_support import VISIBLE_DAG, login, webserver_app
from tests.integration.ui.publications_support import HIDDEN_DAG, NARROW_USER, deploy, publications_scenario

airflow_2_only = pytest.mark.skipif(not AIRFLOW_2, reason="Airflow 2.11's webserver view (Airflow 3: test_app.py)")
API = "/lakefence/api/publications"


@pytest.fixture
def webserver() -> Iterator[Any]:
    """Airflow 2.11's webserver app with users."""
    yield webserver_app()


@pytest.fixture
def scenario(dags: Any, seeded: tuple[lakefs.Repository, str]) -> dict[str, Any]:
    """See :func:`publications_scenario`."""
    return publications_scenario(dags, seeded)


def _client(app: Any, user: str | None) -> Any:
    client = app.test_client()
    if user is not None:
        login(client, user)
    return client


@airflow_2_only
@pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")
def test_the_webserver_view_shows_each_publication_its_links_and_only_readable_dags(
    webserver: Any, scenario: dict[str, Any], lakefs_conn: dict[str, str]
) -> None:
    repo, merged, failed, replaced = scenario["repo"], scenario["merged"], scenario["failed"], scenario["replaced"]
    viewer = _client(webserver, "viewer")

    # The task's history: the merge (live, its commits and links) and the try that failed closed.
    answer = viewer.get(API, query_string={"dag_id": VISIBLE_DAG, "task_id": "publish"})
    assert answer.status_code == 200, answer.data[:500]
    page = answer.get_json()
    rows = {(r["run_id"], r["try_number"]): r for r in page["rows"] if r["repository"] == repo.id}
    assert set(rows) == {(merged.run_id, 1), (failed.run_id, 1)}
    assert [r["run_id"] for r in page["rows"][:2]] == [merged.run_id, failed.run_id]  # newest run first
    merge, values = rows[(merged.run_id, 1)], xcoms(merged, "publish")
    assert (merge["decision"], merge["output_ref"], merge["staged_commit"], merge["input_commit"]) == (
        "merge",
        values["output_ref"],
        values["staged_commit"],
        values["input_ref"],
    )
    assert merge["judgement_label"] == "live"
    ui = lakefs_conn["host"].rstrip("/").removesuffix("/api/v1")
    assert merge["links"]["output_ref"] == f"{ui}/repositories/{repo.id}/commits/{values['output_ref']}"
    closed, error = rows[(failed.run_id, 1)], scenario["error"]
    assert closed["decision"] == "fail_closed" and closed["output_ref"] is None
    assert [(e["branch"], e["error"], e["kept"]) for e in closed["evidence"]] == [
        (error.staging_branch, "PublishFenceError", True)
    ]
    # The cost contract holds here too: one task instance, its records and its one publication.
    one = viewer.get(API, query_string={"dag_id": VISIBLE_DAG, "run_id": merged.run_id, "task_id": "publish"})
    assert one.get_json()["lakefs_calls"] == 2 <= one.get_json()["lakefs_calls_bound"] == calls_bound(1, 1)
    assert lakefs_conn["password"] not in answer.text and lakefs_conn["login"] not in answer.text

    # The killed worker's task instance: try 2 replaced the abandoned publication.
    killed = viewer.get(API, query_string={"dag_id": HIDDEN_DAG, "run_id": replaced.run_id, "map_index": "-1"})
    assert [(r["try_number"], r["decision"]) for r in killed.get_json()["rows"]] == [(2, "replace"), (1, "unreported")]

    # The extra link, as the webserver computes it for the grid, opens that task instance's page,
    # which is Airflow's own page (its menu) around the rows.
    link = viewer.get(
        "/extra_links",
        query_string={
            "dag_id": HIDDEN_DAG,
            "task_id": "publish",
            "execution_date": replaced.execution_date.isoformat(),
            "map_index": -1,
            "link_name": "lakeFS publications",
        },
    )
    assert link.status_code == 200, link.data[:500]
    query = {"dag_id": HIDDEN_DAG, "run_id": replaced.run_id, "task_id": "publish", "map_index": -1}
    assert link.get_json()["url"] == f"/lakefence/view?{urllib.parse.urlencode(query)}"
    page_html = viewer.get(link.get_json()["url"]).text
    assert page_html.count("class='publication'") == 2 and "data-decision='replace'" in page_html
    assert "navbar" in page_html and "id='lakefence-scope'" in page_html
    assert f"/lakefence/view?dag_id={HIDDEN_DAG}&amp;task_id=publish" in page_html  # the task's runs
    for bad in ({"limit": 0}, {"limit": 101}, {"offset": -1}, {"map_index": "x"}):
        assert viewer.get("/lakefence/view", query_string={"dag_id": VISIBLE_DAG, **bad}).status_code == 422, bad

    # A user who may read one DAG only: refused the other, which never shows in the list of all DAGs.
    narrow = _client(webserver, NARROW_USER)
    assert narrow.get(API, query_string={"dag_id": HIDDEN_DAG}).status_code == 403
    assert narrow.get("/lakefence/view", query_string={"dag_id": HIDDEN_DAG}).status_code == 403
    seen = {r["dag_id"] for r in narrow.get(API, query_string={"limit": 100}).get_json()["rows"]}
    assert VISIBLE_DAG in seen and HIDDEN_DAG not in seen
    assert {VISIBLE_DAG, HIDDEN_DAG} <= {r["dag_id"] for r in viewer.get(API, query_string={"limit": 100}).json["rows"]}


@airflow_2_only
@pytest.mark.usefixtures("airflow_db")
def test_no_login_is_sent_to_the_login_page_and_the_api_refuses_it(webserver: Any) -> None:
    anonymous = _client(webserver, None)
    answer = anonymous.get("/lakefence/view", query_string={"dag_id": VISIBLE_DAG})
    assert answer.status_code == 302 and "/login/" in answer.headers["Location"]
    assert anonymous.get(API).status_code == 401
    assert anonymous.get(API, query_string={"dag_id": VISIBLE_DAG}).status_code == 401
    # The admin finds the view under Browse.
    home = _client(webserver, "admin").get("/home").text
    assert "lakeFS publications" in home and "/lakefence/view" in home


@airflow_2_only
@pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")
def test_a_cleared_success_shows_its_superseded_publication(
    webserver: Any, dags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    """A successful run cleared and run again (a day re-run): try 2 replaced try 1's publication on
    purpose, and try 1's row says so."""
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    repo, _ = seeded
    deploy(dags.py_workspace_dag)
    first = run_dag(dags.py_workspace_dag, publish_conf(repo, "main", {"files": {"out/d.txt": "D"}}))
    assert first.state == "success"
    before = xcoms(first, "publish")["output_ref"]
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=first.dag_id, run_id=first.run_id).all()
        clear_task_instances(tis, session)
    again = run_existing(dags.py_workspace_dag, first.run_id)
    assert again.state == "success"
    after = xcoms(again, "publish")["output_ref"]
    params = {"dag_id": VISIBLE_DAG, "run_id": first.run_id, "task_id": "publish"}
    rows = _client(webserver, "viewer").get(API, query_string=params).get_json()["rows"]
    assert [(r["try_number"], r["decision"], r["output_ref"]) for r in rows] == [
        (2, "replace", after),
        (1, "merge", before),
    ]
    assert rows[0]["replaced"] == {"output_ref": before, "try_number": 1} and rows[1]["superseded_by"] == 2


def test_the_plugin_imports_only_its_own_airflow_s_web_stack() -> None:
    """Airflow 2.11 loads the plugin in every process: it must not reach for Airflow 3's modules (nor
    Airflow 3 for Flask AppBuilder, which it may not have)."""
    probe = (
        "import sys, airflow_lakefence.ui.plugin as p; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'flask_appbuilder'}), "
        "'airflow.api_fastapi' in sys.modules, len(p.LakeFencePublicationsPlugin.appbuilder_views), "
        "len(p.LakeFencePublicationsPlugin.fastapi_apps))"
    )
    found = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    if AIRFLOW_2:
        assert found.stdout.split("\n")[-2] == "['flask_appbuilder'] False 1 0", found.stdout
    else:
        assert found.stdout.split("\n")[-2].endswith("True 0 1"), found.stdout
        assert "flask_appbuilder" not in found.stdout.split("\n")[-2], found.stdout


@airflow_2_only
def test_the_extra_link_keeps_the_webserver_s_path_and_drops_its_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a path (``base_url = https://host/airflow``) the view is under that path; the host is the
    one the user reached the UI by, so the link names none."""
    from airflow.models.taskinstancekey import TaskInstanceKey

    from airflow_lakefence.links.lakefs import LakeFSPublicationsLink

    monkeypatch.setenv("AIRFLOW__WEBSERVER__BASE_URL", "https://airflow.example.org/airflow")
    key = TaskInstanceKey("d", "t", "r 1", 1, 3)
    assert LakeFSPublicationsLink().get_link(None, ti_key=key) == (
        "/airflow/lakefence/view?dag_id=d&run_id=r+1&task_id=t&map_index=3"
    )
