"""The "lakeFS publications" view in a browser, on the Airflow API server app (the UI included) served
over loopback HTTP by uvicorn, after a real scenario under ``dag.test()``: a try that failed closed
and kept its staging branch as evidence, a first-try merge, and a worker killed after publishing
whose retry replaced its publication. A headless Chromium logs in as a viewer (SimpleAuthManager
with users) and opens the React view (the plugin's ``react_apps``, drawn by Airflow's own UI) on the
task instance, the task, the DAG and the Browse page: it finds each row with its decision, commits
and links, filters and pages, follows the links into lakeFS's pages, checks the server-rendered page
kept for Airflow 3.0 and saves the screenshots docs/publications-view.md and the README show.

It runs on Airflow 3.3 (``tox -e py``) and 3.1 (``tox -e airflow31``).
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest
from packaging.version import Version

from tests.browser.conftest import RETAKE_ENV, free_port
from tests.browser.lakefs_ui import open_lakefs_page
from tests.conftest import REPO
from tests.integration.conftest import dags, seeded  # noqa: F401 - the scenario's fixtures
from tests.integration.helpers import xcoms
from tests.integration.ui.publications_support import (
    HIDDEN_DAG,
    NARROW_USER,
    PASSWORDS,
    api_server_app,
    publications_scenario,
)

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]

IMAGES = REPO / "docs" / "images"
NEWEST_AIRFLOW = Version(importlib.metadata.version("apache-airflow")).release[:2] >= (3, 3)


@pytest.fixture
def scenario(dags: Any, seeded: tuple[lakefs.Repository, str]) -> dict[str, Any]:  # noqa: F811
    """See :func:`publications_scenario`."""
    return publications_scenario(dags, seeded)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scenario: dict[str, Any]) -> Iterator[str]:
    """The API server's app on a free loopback port (uvicorn in a thread); its base URL."""
    import uvicorn
    from airflow.api_fastapi import app as api_app

    port = free_port()
    served = uvicorn.Server(
        uvicorn.Config(api_server_app(tmp_path, monkeypatch), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not served.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the API server did not start"
        time.sleep(0.1)  # polling the server's start flag, bounded by the deadline
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        served.should_exit = True
        thread.join(timeout=30)
        api_app.purge_cached_app()


def _login(chromium: Any, base: str, user: str) -> None:
    """Log in as SimpleAuthManager's form does: its token in the UI's cookie."""
    import json

    body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
    request = urllib.request.Request(
        f"{base}/auth/token", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        token = json.loads(answer.read())["access_token"]
    chromium.get(f"{base}/api/v2/version")  # the cookie's origin
    chromium.add_cookie({"name": "_token", "value": token, "path": "/"})


ROWS = "[data-testid=lakefence-publications] tr.publication"


def _rows(chromium: Any, wait: Any, expected: int | None = None) -> list[Any]:
    """The React view's rows once it has drawn them (and, with ``expected``, that many)."""
    from selenium.webdriver.common.by import By

    def drawn(driver: Any) -> list[Any] | None:
        summary = driver.find_elements(By.CSS_SELECTOR, "[data-testid=lakefence-publications] .lf-summary")
        if not summary or "loading" in summary[0].text:
            return None
        found = driver.find_elements(By.CSS_SELECTOR, ROWS)
        return found if found and (expected is None or len(found) == expected) else None

    return list(wait.until(drawn))


def _follow_into_lakefs(chromium: Any, link: Any, url: str, expect: str, lakefs_conn: dict[str, str]) -> str | None:
    """Click a link of the view (it opens a new tab) and return the lakeFS page's text once it shows
    ``expect``; the driver is left on that tab.

    The local server draws lakeFS's UI routes itself. Real lakeFS, built with its web UI, asks for its
    preferences and a login first: ``open_lakefs_page`` answers both, as an operator would. Built
    without it (no npm outside CI: tests/tools/real_lakefs.py) it answers "lakeFS UI Not Built": there
    the tab must have reached ``url``, and ``None`` is returned; under CI that fails.
    """
    from selenium.webdriver.common.by import By

    assert link.get_attribute("href") == url
    before = set(chromium.window_handles)
    link.click()
    deadline = time.monotonic() + 30
    while not (set(chromium.window_handles) - before):
        assert time.monotonic() < deadline, "the link opened no tab"
        time.sleep(0.1)  # polling the browser's tabs, bounded by the deadline
    chromium.switch_to.window((set(chromium.window_handles) - before).pop())
    text = " ".join(chromium.find_element(By.TAG_NAME, "body").text.split())
    if expect in text:
        return text
    return open_lakefs_page(
        chromium, url, access_key_id=lakefs_conn["login"], secret_access_key=lakefs_conn["password"], expect=expect
    )


def _picture(chromium: Any, name: str, folder: Path) -> None:
    time.sleep(1)  # let the UI finish drawing around the view before the picture
    folder.mkdir(exist_ok=True)
    chromium.save_screenshot(str(folder / name))


def test_the_react_view_shows_each_publication_and_its_links(
    server: str,
    scenario: dict[str, Any],
    chromium: Any,
    lakefs_conn: dict[str, str],
    tmp_path: Path,
    dags: Any,  # noqa: F811
    seeded: tuple[lakefs.Repository, str],  # noqa: F811
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    repo, merged, failed, replaced = scenario["repo"], scenario["merged"], scenario["failed"], scenario["replaced"]
    _login(chromium, server, "viewer")
    chromium.set_window_size(1920, 900)  # the view's table is wide: the pictures show it whole
    # The UI's first page load compiles nothing but fetches a lot: give it time on a loaded machine.
    wait = WebDriverWait(chromium, 60)
    ui = lakefs_conn["host"].rstrip("/").removesuffix("/api/v1")
    main_tab = chromium.current_window_handle
    # The docs show Airflow 3.3's UI, retaken on request: any other run keeps its pictures out of the tree.
    images = IMAGES if NEWEST_AIRFLOW and os.environ.get(RETAKE_ENV) == "1" else tmp_path / "images"

    # The killed worker's task instance: its "lakeFS publications" tab, drawn by Airflow's UI itself.
    run = urllib.parse.quote(replaced.run_id, safe="")
    chromium.get(f"{server}/dags/lf_py_retry/runs/{run}/tasks/publish/plugin/lakefence_publications_task_instance")
    rows = _rows(chromium, wait)
    assert not chromium.find_elements(By.TAG_NAME, "iframe"), "the React view, not the page in a frame"
    assert [(r.get_attribute("data-try"), r.get_attribute("data-decision")) for r in rows] == [
        ("2", "replace"),
        ("1", "unreported"),
    ]
    output = xcoms(replaced, "publish")["output_ref"]
    assert rows[0].get_attribute("data-output") == output
    # "replaced an abandoned publication", or, where the server names it, "... the abandoned publication of try 1".
    assert "abandoned publication" in rows[0].find_element(By.CSS_SELECTOR, "td.replaced").text
    assert rows[0].find_element(By.CSS_SELECTOR, "td.judgement").text == "live"
    published = rows[0].find_element(By.CSS_SELECTOR, "td.published a")
    assert published.get_attribute("href") == f"{ui}/repositories/{repo.id}/commits/{output}"
    _picture(chromium, "publications-task-instance.png", images)

    # The task's view across its runs (the two newest, from the URL): the merge and the try that failed
    # closed, with its evidence.
    chromium.get(f"{server}/dags/lf_py_workspace/tasks/publish/plugin/lakefence_publications_task?lf_limit=2")
    rows = {r.get_attribute("data-run"): r for r in _rows(chromium, wait)}
    assert rows[merged.run_id].get_attribute("data-decision") == "merge"
    assert rows[failed.run_id].get_attribute("data-decision") == "fail_closed"
    staging = scenario["error"].staging_branch
    evidence = rows[failed.run_id].find_element(By.CSS_SELECTOR, "td.evidence a")
    assert evidence.text == staging
    assert evidence.get_attribute("href") == f"{ui}/repositories/{repo.id}/objects?ref={staging}"
    assert "PublishFenceError" in rows[failed.run_id].text
    values = xcoms(merged, "publish")
    merge = rows[merged.run_id]
    assert merge.find_element(By.CSS_SELECTOR, "td.published a").get_attribute("href") == (
        f"{ui}/repositories/{repo.id}/commits/{values['output_ref']}"
    )
    assert merge.find_element(By.CSS_SELECTOR, "td.staged a").get_attribute("href") == (
        f"{ui}/repositories/{repo.id}/commits/{values['staged_commit']}"
    )
    compare = merge.find_element(By.CSS_SELECTOR, "td.published a.compare").get_attribute("href")
    assert compare == (
        f"{ui}/repositories/{repo.id}/compare?ref={values['input_ref']}&compareRef={values['output_ref']}"
    )
    assert merge.find_element(By.CSS_SELECTOR, "td.judgement").text == "live"
    _picture(chromium, "publications-task.png", images)

    # The links open lakeFS's pages in a new tab: the published commit's (with its lakefence record) and
    # the evidence branch's.
    commit_page = f"{ui}/repositories/{repo.id}/commits/{values['output_ref']}"
    link = merge.find_element(By.CSS_SELECTOR, "td.published a")
    page = _follow_into_lakefs(chromium, link, commit_page, values["output_ref"], lakefs_conn)
    if page is not None:  # None: real lakeFS built without its web UI, outside CI only
        assert "lakefence.role" in page and "publish" in page, page[:500]
    chromium.close()
    chromium.switch_to.window(main_tab)
    failed_row = next(r for r in _rows(chromium, wait) if r.get_attribute("data-run") == failed.run_id)
    branch_page = f"{ui}/repositories/{repo.id}/objects?ref={staging}"
    _follow_into_lakefs(
        chromium, failed_row.find_element(By.CSS_SELECTOR, "td.evidence a"), branch_page, staging, lakefs_conn
    )
    chromium.close()
    chromium.switch_to.window(main_tab)

    # Filters: the decision "fail closed" leaves the failed run's row; the URL keeps the filter.
    view = chromium.find_element(By.CSS_SELECTOR, "[data-testid=lakefence-publications]")
    Select(view.find_element(By.CSS_SELECTOR, "select[name=decision]")).select_by_value("fail_closed")
    view.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: {r.get_attribute("data-decision") for r in _rows(d, wait)} == {"fail_closed"})
    assert failed.run_id in {r.get_attribute("data-run") for r in _rows(chromium, wait)}
    assert "lf_decision=fail_closed" in chromium.current_url

    # Pagination: one task instance a page, newest run first, "Older" steps back one run.
    chromium.get(f"{server}/dags/lf_py_workspace/tasks/publish/plugin/lakefence_publications_task?lf_limit=1")
    assert {r.get_attribute("data-run") for r in _rows(chromium, wait)} == {merged.run_id}
    summary = chromium.find_element(By.CSS_SELECTOR, ".lf-summary")
    assert summary.text.startswith("Task instances 1-1 of ")
    older = next(b for b in chromium.find_elements(By.CSS_SELECTOR, ".lf-bar button") if b.text == "Older")
    older.click()
    wait.until(lambda d: {r.get_attribute("data-run") for r in _rows(d, wait)} == {failed.run_id})
    assert "lf_offset=1" in chromium.current_url
    assert chromium.find_element(By.CSS_SELECTOR, ".lf-summary").text.startswith("Task instances 2-2 of ")

    # The DAG's view and the Browse page (every DAG the viewer may read).
    chromium.get(f"{server}/dags/lf_py_retry/plugin/lakefence_publications_dag")
    tries = {(r.get_attribute("data-try"), r.get_attribute("data-decision")) for r in _rows(chromium, wait)}
    assert ("2", "replace") in tries
    chromium.get(f"{server}/plugin/lakefence_publications?lf_repository={repo.id}")
    rows = _rows(chromium, wait)
    assert {r.get_attribute("data-run") for r in rows} >= {merged.run_id, failed.run_id, replaced.run_id}
    assert {r.find_element(By.CSS_SELECTOR, "td").text for r in rows} >= {"lf_py_workspace", "lf_py_retry"}
    _picture(chromium, "publications-browse.png", images)

    if "abandoned" in scenario:
        # Where the scenario names the dead try's abandoned publication: its row shows the commit, judged
        # abandoned, and the retry's row links it.
        chromium.get(f"{server}/dags/lf_py_retry/runs/{run}/tasks/publish/plugin/lakefence_publications_task_instance")
        retry, dead = _rows(chromium, wait, 2)
        assert dead.get_attribute("data-output") == scenario["abandoned"]
        assert dead.find_element(By.CSS_SELECTOR, "td.judgement").text == "abandoned"
        assert retry.find_element(By.CSS_SELECTOR, "td.replaced a").get_attribute("href") == (
            f"{ui}/repositories/{repo.id}/commits/{scenario['abandoned']}"
        )
    if "run" in scenario:
        # A run-branch publication: the run branch and the run's task inside it, with its commits' links.
        run_branch = xcoms(scenario["run"], "run_branch")["return_value"]
        written = xcoms(scenario["run"], "write")
        branch_run = urllib.parse.quote(scenario["run"].run_id, safe="")
        chromium.get(
            f"{server}/dags/lf_run_branch/runs/{branch_run}/tasks/publish/plugin/lakefence_publications_task_instance"
        )
        (row,) = _rows(chromium, wait, 1)
        assert row.get_attribute("data-decision") == "merge"
        link = row.find_element(By.CSS_SELECTOR, ".run > a")
        assert (link.text, link.get_attribute("href")) == (
            run_branch,
            f"{ui}/repositories/{repo.id}/objects?ref={run_branch}",
        )
        task = row.find_element(By.CSS_SELECTOR, ".run-task[data-task=write][data-try='1']")
        assert f"{ui}/repositories/{repo.id}/commits/{written['output_ref']}" in {
            a.get_attribute("href") for a in task.find_elements(By.TAG_NAME, "a")
        }

    # A UI clear of a successful run (a day re-run, on a branch of its own: main has moved on): its second
    # try replaces the first try's publication on purpose, and the first try's row says it was superseded.
    from airflow.models.taskinstance import TaskInstance, clear_task_instances
    from airflow.utils.session import create_session

    from tests.integration.helpers import publish_conf, run_dag, run_existing

    repo.branch("ui-clear").create(source_reference=seeded[1])
    first = run_dag(dags.py_workspace_dag, publish_conf(repo, "ui-clear", target="ui-clear"))
    assert first.state == "success"
    before = xcoms(first, "publish")["output_ref"]
    with create_session() as session:
        clear_task_instances(
            session.query(TaskInstance).filter_by(dag_id=first.dag_id, run_id=first.run_id).all(), session
        )
    again = run_existing(dags.py_workspace_dag, first.run_id)
    assert again.state == "success"
    after = xcoms(again, "publish")["output_ref"]
    cleared = urllib.parse.quote(first.run_id, safe="")
    chromium.get(
        f"{server}/dags/lf_py_workspace/runs/{cleared}/tasks/publish/plugin/lakefence_publications_task_instance"
    )
    second, first = _rows(chromium, wait, 2)
    assert [(r.get_attribute("data-try"), r.get_attribute("data-decision")) for r in (second, first)] == [
        ("2", "replace"),
        ("1", "merge"),
    ]
    assert (second.get_attribute("data-output"), first.get_attribute("data-output")) == (after, before)
    assert second.find_element(By.CSS_SELECTOR, "td.replaced a").get_attribute("href") == (
        f"{ui}/repositories/{repo.id}/commits/{before}"
    )
    assert "superseded by try 2" in first.find_element(By.CSS_SELECTOR, "td.replaced").text
    assert second.find_element(By.CSS_SELECTOR, "td.judgement").text == "live"

    # The server-rendered page (what Airflow 3.0's extra link opens) still shows the same rows.
    chromium.get(f"{server}/lakefence/view?dag_id=lf_py_retry&run_id={run}&task_id=publish")
    page_rows = chromium.find_elements(By.CSS_SELECTOR, "tr.publication")
    assert [(r.get_attribute("data-try"), r.get_attribute("data-decision")) for r in page_rows] == [
        ("2", "replace"),
        ("1", "unreported"),
    ]

    # Airflow's permissions hold in the browser: a user who may not read lf_py_retry never sees its rows,
    # and asking for that DAG is refused (the API's 403, shown by the view).
    chromium.delete_all_cookies()
    _login(chromium, server, NARROW_USER)
    chromium.get(f"{server}/plugin/lakefence_publications?lf_repository={repo.id}")
    seen = {r.find_element(By.CSS_SELECTOR, "td").text for r in _rows(chromium, wait)}
    assert "lf_py_workspace" in seen and HIDDEN_DAG not in seen
    chromium.get(f"{server}/plugin/lakefence_publications?lf_dag_id={HIDDEN_DAG}")
    alert = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=lakefence-publications] [role=alert]"))
    assert alert[0].text.startswith("403: ") and HIDDEN_DAG in alert[0].text
    assert not chromium.find_elements(By.CSS_SELECTOR, ROWS)
