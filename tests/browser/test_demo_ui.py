"""The README's UI path, as a newcomer takes it: ``run_demo.py --ui``, then a browser.

One demo serves the module (tests run in file order): its servers listen on loopback only, Airflow
is prepared as the README says (connection, pool, the form's Test button, the DAG paused), and a
headless Chromium switches the DAG (and its asset consumer) on, triggers it, waits for the fenced
task's success and opens its "lakeFS commit" extra link, which shows the published commit and its
lakefence record; the consumer then runs on the publication's asset event.
"""

from __future__ import annotations

import ipaddress
import json
import time
import urllib.parse
from collections.abc import Callable

import psutil
import pytest

from tests.browser.conftest import DAG_ID, Demo, get_json
from tests.conftest import TIER_FIGURES_PROPERTY

pytestmark = [pytest.mark.scheduler, pytest.mark.spark]



def _off_loopback(listening: dict[int, str]) -> dict[int, str]:
    """The listeners not on a loopback address (Java's IPv4-mapped ``::ffff:127.0.0.1`` is loopback)."""
    off = {}
    for port, ip in listening.items():
        address = ipaddress.ip_address(ip)
        mapped = getattr(address, "ipv4_mapped", None)
        if not (mapped or address).is_loopback:
            off[port] = ip
    return off

CONSUMER_ID = "lakefence_example_daily_counts_consumer"


def _listening(demo: Demo) -> dict[int, str]:
    """Every listening TCP socket of the demo and its descendants: {port: address}."""
    root = psutil.Process(demo.process.pid)
    found: dict[int, str] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            connections = process.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue  # ended since it was listed
        for conn in connections:
            if conn.status == psutil.CONN_LISTEN:
                found[conn.laddr.port] = conn.laddr.ip
    return found


def test_the_demos_servers_listen_on_loopback_only(demo: Demo) -> None:
    """The UI has no login and makes every visitor an admin: nothing of the demo may be reachable from outside."""
    assert "Every server of the demo listens on 127.0.0.1 only" in demo.text()
    listening = _listening(demo)
    lakefs_port = urllib.parse.urlsplit(demo.lakefs_url()).port
    assert demo.port in listening and lakefs_port in listening, (listening, demo.port, lakefs_port)
    assert _off_loopback(listening) == {}, listening


def test_the_demo_prepares_airflow_as_the_readme_says(demo: Demo) -> None:
    """The connection (its form's Test button works), the 1-slot pool, the DAG listed and paused."""
    conn = get_json(f"{demo.api}/connections/lakefs_default")
    assert conn["conn_type"] == "lakefs" and json.loads(conn["extra"]) == {"verify_ssl": True}
    assert get_json(f"{demo.api}/pools/lakefs_example-repo_main")["slots"] == 1
    body = {"connection_id": "lakefs_default", "conn_type": "lakefs"}
    tested = get_json(f"{demo.api}/connections/test", "POST", body)
    assert tested["status"] is True and tested["message"].startswith("Connected to lakeFS at http://127.0.0.1:")
    # New DAGs start paused: the README says so.
    assert get_json(f"{demo.api}/dags/{DAG_ID}")["is_paused"] is True
    # The consumer's file may be parsed a moment after the producer's.
    consumer = demo.wait_for("the consumer DAG in the UI", lambda: get_json(f"{demo.api}/dags/{CONSUMER_ID}"), 120)
    assert consumer["is_paused"] is True


@pytest.mark.browser
def test_the_readmes_ui_path_in_a_browser(
    demo: Demo, chromium: object, record_property: Callable[[str, object], None]
) -> None:
    """Switch the DAGs on, Trigger, wait for the fenced task's success, open its "lakeFS commit" link; the
    consumer DAG then runs on the publication's asset event and names the published commit."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(chromium, WebDriver)
    started = time.monotonic()
    wait = WebDriverWait(chromium, 60)
    # The consumer first (Airflow queues asset events only for DAGs that are on), then the producer.
    for dag_id in (CONSUMER_ID, DAG_ID):
        chromium.get(f"{demo.ui}/dags/{dag_id}")
        switch = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=toggle-pause]")))
        assert switch.get_attribute("data-state") == "unchecked"
        switch.click()
        wait.until(lambda _, switch=switch: switch.get_attribute("data-state") == "checked")
        dag_url = f"{demo.api}/dags/{dag_id}"
        demo.wait_for(f"{dag_id} to be on", lambda dag_url=dag_url: not get_json(dag_url)["is_paused"], 60)

    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "[data-testid=trigger-dag-button]"))).click()
    confirm = (By.XPATH, "//*[@role='dialog']//button[normalize-space()='Trigger']")
    wait.until(ec.element_to_be_clickable(confirm)).click()
    triggered = time.monotonic()
    runs = demo.wait_for("the triggered run", lambda: get_json(f"{demo.api}/dags/{DAG_ID}/dagRuns")["dag_runs"], 60)
    assert len(runs) == 1
    run_id = runs[0]["dag_run_id"]
    run_url = f"{demo.api}/dags/{DAG_ID}/dagRuns/{urllib.parse.quote(run_id, safe='')}"

    # The task's page, Details tab (where the README points): it refreshes itself while the task runs.
    details = f"{demo.ui}/dags/{DAG_ID}/runs/{urllib.parse.quote(run_id, safe='')}/tasks/daily_counts/details"
    chromium.get(details)
    task_state = f"{run_url}/taskInstances/daily_counts"
    # While the run goes on, every listener of the demo's processes (the task's Spark driver too).
    seen: dict[int, str] = {}

    def finished() -> str | None:
        seen.update(_listening(demo))
        state = get_json(task_state)["state"]
        return state if state in ("success", "failed", "upstream_failed") else None

    assert demo.wait_for("the fenced task to finish", finished, 900) == "success", demo.failure_report()
    assert _off_loopback(seen) == {}, seen
    assert len(seen) > len(_listening(demo)), "the task's own listeners (Spark's driver) were seen"
    # The README says to open the Details tab when the run is green: the page opened while the task
    # ran does not always fetch the extra links again after its last refresh.
    chromium.get(details)
    link = WebDriverWait(chromium, 120).until(
        ec.element_to_be_clickable((By.XPATH, "//a[normalize-space()='lakeFS commit']"))
    )
    succeeded = time.monotonic()
    output_ref = get_json(f"{run_url}/taskInstances/daily_counts/xcomEntries/output_ref")["value"]
    assert link.get_attribute("href") == f"{demo.lakefs_url()}/repositories/example-repo/commits/{output_ref}"

    # The link opens a new tab: the local lakeFS server's page of the published commit.
    before = set(chromium.window_handles)
    link.click()
    WebDriverWait(chromium, 30).until(lambda d: len(d.window_handles) == len(before) + 1)
    chromium.switch_to.window(next(iter(set(chromium.window_handles) - before)))
    record = WebDriverWait(chromium, 30).until(ec.presence_of_element_located((By.ID, "lakefence-record")))
    page = " ".join(chromium.find_element(By.TAG_NAME, "body").text.split())
    assert record.text == "lakefence record"
    assert f"Commit {output_ref}" in page and f"daily counts, run {run_id}" in page
    for shown in (
        "Role (lakefence.role) publish:",
        f"DAG (lakefence.dag_id) {DAG_ID}",
        f"Run (lakefence.run_id) {run_id}",
        "Task (lakefence.task_id) daily_counts",
        "Try (lakefence.try_number) 1",
        "added tables/daily_counts/",
    ):
        assert shown in page, (shown, page)

    # The run ends green, and nothing the run started listened beyond loopback.
    assert demo.wait_for("the run to finish", lambda: (s := get_json(run_url)["state"]) != "running" and s, 300) == (
        "success"
    ), demo.failure_report()
    assert _off_loopback(_listening(demo)) == {}

    # The publication's asset event ran the consumer, which names the exact commit.
    consumer_runs = f"{demo.api}/dags/{CONSUMER_ID}/dagRuns"
    consumed = demo.wait_for(
        "the consumer's run",
        lambda: [r for r in get_json(consumer_runs)["dag_runs"] if r["state"] in ("success", "failed")],
        300,
    )
    assert [r["state"] for r in consumed] == ["success"], demo.failure_report()
    consumer_run = f"{consumer_runs}/{urllib.parse.quote(consumed[0]['dag_run_id'], safe='')}"
    commits = get_json(f"{consumer_run}/taskInstances/published_commits/xcomEntries/return_value")["value"]
    assert commits == [output_ref]
    figures = {
        "ui_lists_dag_s": demo.listed - demo.started,
        "trigger_to_link_s": succeeded - triggered,
        "browser_test_s": time.monotonic() - started,
    }
    record_property(f"{TIER_FIGURES_PROPERTY}browser (the README's UI path)", json.dumps(figures))
