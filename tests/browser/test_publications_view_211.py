"""The "lakeFS publications" view in a browser on Airflow 2.11: the webserver's real Flask app served
over loopback HTTP (Werkzeug's server in a thread), after a real scenario under ``dag.test()``: a try
that failed closed and kept its staging branch as evidence, a first-try merge, and a worker killed
after publishing whose retry replaced its publication. A headless Chromium logs in through Flask
AppBuilder's form as a viewer, opens the killed worker's task instance in the grid, follows its
extra link "lakeFS publications" to the view inside Airflow's page, finds each row with its
decision, commits and links, follows the published commit's link into lakeFS, and saves the
screenshot docs/publications-view.md shows. Skipped on Airflow 3 (test_publications_view.py).
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from tests.browser.conftest import RETAKE_ENV, free_port
from tests.browser.lakefs_ui import open_lakefs_page
from tests.conftest import AIRFLOW_2, REPO
from tests.integration.conftest import dags, seeded  # noqa: F401 - the scenario's fixtures
from tests.integration.helpers import xcoms
from tests.integration.ui.fab_support import VISIBLE_DAG, webserver_app
from tests.integration.ui.publications_support import HIDDEN_DAG, PASSWORDS, publications_scenario

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not AIRFLOW_2, reason="Airflow 2.11's webserver view (Airflow 3: test_publications_view.py)"),
    pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints"),
]

IMAGE = REPO / "docs" / "images" / "publications-airflow-2.11.png"


@pytest.fixture
def scenario(dags: Any, seeded: tuple[lakefs.Repository, str]) -> dict[str, Any]:  # noqa: F811
    """See :func:`publications_scenario`."""
    return publications_scenario(dags, seeded)


@pytest.fixture
def server(scenario: dict[str, Any]) -> Iterator[str]:
    """Airflow 2.11's webserver app (CSRF on) on a free loopback port; its base URL."""
    from werkzeug.serving import make_server

    served = make_server("127.0.0.1", free_port(), webserver_app(csrf=True), threaded=True)
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{served.server_port}"
    finally:
        served.shutdown()
        thread.join(timeout=30)


def test_the_extra_link_opens_the_publications_view_with_each_row_and_link(
    server: str, scenario: dict[str, Any], chromium: Any, lakefs_conn: dict[str, str], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    repo, merged, failed, replaced = scenario["repo"], scenario["merged"], scenario["failed"], scenario["replaced"]
    chromium.set_window_size(1920, 900)  # the view's table is wide: the picture shows it whole
    wait = WebDriverWait(chromium, 60)  # the grid's first load fetches a lot on a loaded machine
    ui = lakefs_conn["host"].rstrip("/").removesuffix("/api/v1")

    # Flask AppBuilder's login form, as a viewer.
    chromium.get(f"{server}/login/")
    chromium.find_element(By.NAME, "username").send_keys("viewer")
    chromium.find_element(By.NAME, "password").send_keys(PASSWORDS["viewer"])
    chromium.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
    wait.until(lambda d: "/login" not in d.current_url)

    # The killed worker's task instance in the grid: its extra link opens the view of that task instance.
    query = urllib.parse.urlencode({"dag_run_id": replaced.run_id, "task_id": "publish", "tab": "details"})
    chromium.get(f"{server}/dags/{HIDDEN_DAG}/grid?{query}")
    # Airflow 2's React grid draws in a shadow root (its styles kept apart from the page's).
    grid = wait.until(ec.presence_of_element_located((By.ID, "root"))).shadow_root

    def extra_link(_: Any) -> Any:
        found = [a for a in grid.find_elements(By.CSS_SELECTOR, "a") if a.text.strip() == "lakeFS publications"]
        return found[0] if found and found[0].get_attribute("href") else None

    link = wait.until(extra_link)
    assert "/lakefence/view?" in (link.get_attribute("href") or "")
    link.click()
    rows = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr.publication") or None)
    assert [(r.get_attribute("data-try"), r.get_attribute("data-decision")) for r in rows] == [
        ("2", "replace"),
        ("1", "unreported"),
    ]
    assert rows[0].get_attribute("data-output") == xcoms(replaced, "publish")["output_ref"]
    assert chromium.find_elements(By.CSS_SELECTOR, ".navbar"), "the view is inside Airflow's page"

    # From there to the task's runs of the other DAG: the merge and the try that failed closed.
    chromium.get(f"{server}/lakefence/view?dag_id={VISIBLE_DAG}&task_id=publish&limit=2")
    rows = {r.get_attribute("data-run"): r for r in chromium.find_elements(By.CSS_SELECTOR, "tr.publication")}
    assert rows[merged.run_id].get_attribute("data-decision") == "merge"
    assert rows[failed.run_id].get_attribute("data-decision") == "fail_closed"
    staging = scenario["error"].staging_branch
    evidence = rows[failed.run_id].find_element(By.CSS_SELECTOR, "td.evidence a")
    assert evidence.text == staging
    assert evidence.get_attribute("href") == f"{ui}/repositories/{repo.id}/objects?ref={staging}"
    assert "PublishFenceError" in rows[failed.run_id].text
    values = xcoms(merged, "publish")
    published = rows[merged.run_id].find_element(By.CSS_SELECTOR, "td.published a")
    assert published.get_attribute("href") == f"{ui}/repositories/{repo.id}/commits/{values['output_ref']}"
    # The docs' picture is retaken on request; any other run keeps it out of the tree.
    image = IMAGE if os.environ.get(RETAKE_ENV) == "1" else tmp_path / IMAGE.name
    image.parent.mkdir(exist_ok=True)
    chromium.save_screenshot(str(image))

    # The published commit's link opens lakeFS's page of that commit, with its lakefence record (on real
    # lakeFS its own web UI, logged in as an operator would).
    page = open_lakefs_page(
        chromium,
        published.get_attribute("href"),
        access_key_id=lakefs_conn["login"],
        secret_access_key=lakefs_conn["password"],
        expect=values["output_ref"],
    )
    if page is not None:  # None: real lakeFS built without its web UI, outside CI only
        assert "lakefence.role" in page and "publish" in page, page[:500]
