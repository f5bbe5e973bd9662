"""The "lakeFS publications" view in a browser, on the Airflow API server app (the UI included) served
over loopback HTTP by uvicorn, after a real scenario under ``dag.test()``: a try that failed closed
and kept its staging branch as evidence, a first-try merge, and a worker killed after publishing
whose retry replaced its publication. A headless Chromium logs in as a viewer (SimpleAuthManager
with users), opens the task instance's "lakeFS publications" tab in Airflow's UI, finds each row
with its decision, commits and links, follows the published commit's link into lakeFS's commit page,
and saves the screenshots docs/publications-view.md shows.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from tests.browser.conftest import free_port
from tests.conftest import REPO
from tests.integration.conftest import dags, seeded  # noqa: F401 - the scenario's fixtures
from tests.integration.helpers import xcoms
from tests.integration.ui.publications_support import PASSWORDS, api_server_app, publications_scenario

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]

IMAGES = REPO / "docs" / "images"


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


def test_the_publications_tab_shows_each_publication_and_its_links(
    server: str, scenario: dict[str, Any], chromium: Any, lakefs_conn: dict[str, str]
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    repo, merged, failed, replaced = scenario["repo"], scenario["merged"], scenario["failed"], scenario["replaced"]
    _login(chromium, server, "viewer")
    chromium.set_window_size(1920, 900)  # the view's table is wide: the pictures show it whole
    # The UI's first page load compiles nothing but fetches a lot: give it time on a loaded machine.
    wait = WebDriverWait(chromium, 60)
    ui = lakefs_conn["host"].rstrip("/").removesuffix("/api/v1")

    # The killed worker's task instance: its "lakeFS publications" tab in Airflow's UI (a frame).
    run = urllib.parse.quote(replaced.run_id, safe="")
    chromium.get(f"{server}/dags/lf_py_retry/runs/{run}/tasks/publish/plugin/lakefence_publications_task_instance")
    frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe")))
    assert "/lakefence/view?dag_id=lf_py_retry" in (frame.get_attribute("src") or "")
    chromium.switch_to.frame(frame)
    rows = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.publication") or None)
    assert [(r.get_attribute("data-try"), r.get_attribute("data-decision")) for r in rows] == [
        ("2", "replace"),
        ("1", "unreported"),
    ]
    output = xcoms(replaced, "publish")["output_ref"]
    assert rows[0].get_attribute("data-output") == output
    chromium.switch_to.default_content()
    time.sleep(1)  # let the UI finish drawing around the frame before the picture
    IMAGES.mkdir(exist_ok=True)
    chromium.save_screenshot(str(IMAGES / "publications-task-instance.png"))

    # The task's view across its runs: the merge and the try that failed closed with its evidence.
    chromium.get(f"{server}/lakefence/view?dag_id=lf_py_workspace&task_id=publish&limit=2")
    rows = {r.get_attribute("data-run"): r for r in chromium.find_elements(By.CSS_SELECTOR, "tr.publication")}
    assert rows[merged.run_id].get_attribute("data-decision") == "merge"
    assert rows[failed.run_id].get_attribute("data-decision") == "fail_closed"
    evidence = rows[failed.run_id].find_element(By.CSS_SELECTOR, "td.evidence a")
    assert evidence.text == scenario["error"].staging_branch
    assert (
        evidence.get_attribute("href") == f"{ui}/repositories/{repo.id}/objects?ref={scenario['error'].staging_branch}"
    )
    assert "PublishFenceError" in rows[failed.run_id].text
    values = xcoms(merged, "publish")
    published = rows[merged.run_id].find_element(By.CSS_SELECTOR, "td.published a")
    assert published.get_attribute("href") == f"{ui}/repositories/{repo.id}/commits/{values['output_ref']}"
    chromium.save_screenshot(str(IMAGES / "publications-task.png"))

    # The published commit's link opens lakeFS's page of that commit, with its lakefence record. Real
    # lakeFS built here from its Go module serves its UI routes without the compiled web UI ("UI Not
    # Built"): there the link reaches lakeFS's UI route, and the page's content is checked on the local
    # server, which draws the same route.
    href = published.get_attribute("href")
    chromium.get(href)
    page = " ".join(chromium.find_element(By.TAG_NAME, "body").text.split())
    if "lakeFS UI Not Built" in page:
        assert chromium.current_url == href
    else:
        assert f"Commit {values['output_ref']}" in page and "Role (lakefence.role) publish" in page
