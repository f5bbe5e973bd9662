"""The React view's bundle: the plugin registers it as React apps on the task instance, the task, the
DAG and the navigation, the API server serves it under its content's digest, the HTML page stays
available (``[lakefence] publications_view = html``), and the committed bundle is exactly what
``npm ci && npm run build`` makes from the lock file (marker ``ui_bundle``; skipped without Node.js
20.19+ and npm: about 5 s with npm's cache cold, 2 s of them for ``npm ci``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_lakefence.ui.bundle import BUNDLE, bundle_name, bundle_url
from tests.integration.ui.publications_support import PASSWORDS, api_server_app

WWW = BUNDLE.parent.parent / "www"
DESTINATIONS = {"task_instance", "task", "dag", "nav"}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, airflow_db: Path) -> Iterator[Any]:
    """The Airflow API server's app with users, through FastAPI's TestClient."""
    from airflow.api_fastapi import app as api_app
    from fastapi.testclient import TestClient

    with TestClient(api_server_app(tmp_path, monkeypatch), base_url="http://127.0.0.1") as client:
        yield client
    api_app.purge_cached_app()


def test_the_ui_loads_the_react_view_from_the_bundle_the_app_serves(api: Any) -> None:
    token = api.post("/auth/token", json={"username": "viewer", "password": PASSWORDS["viewer"]}).json()
    plugins = api.get("/api/v2/plugins", headers={"Authorization": f"Bearer {token['access_token']}"})
    assert plugins.status_code == 200, plugins.text
    mine = [p for p in plugins.json()["plugins"] if p["name"] == "lakefence_publications"]
    assert len(mine) == 1
    apps = mine[0]["react_apps"]
    assert {a["destination"] for a in apps} == DESTINATIONS and not mine[0]["external_views"]
    assert {a["bundle_url"] for a in apps} == {bundle_url()}
    assert {a["name"] for a in apps} == {"lakeFS publications"}
    url = apps[0]["bundle_url"]
    digest = hashlib.sha256(BUNDLE.read_bytes()).hexdigest()[:16]
    assert url == f"/lakefence/static/publications.{digest}.js"

    served = api.get(url)  # no login: the bundle is code, the data behind it is what is guarded
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("text/javascript")
    assert "immutable" in served.headers["cache-control"]
    assert served.content == BUNDLE.read_bytes()
    # The UMD wrapper sets the global the UI reads, from the host's React and JSX runtime.
    assert b"AirflowPlugin" in served.content and b"ReactJSXRuntime" in served.content
    assert b"lakefence" in served.content and b"api/publications" in served.content
    assert api.get("/lakefence/static/publications.0000000000000000.js").status_code == 404
    assert api.get("/lakefence/static/publications.js").status_code == 404


def test_the_html_page_in_frames_instead_when_asked_or_without_a_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_lakefence.ui import bundle, plugin

    assert plugin.ui_slots()[1] and not plugin.ui_slots()[0]
    monkeypatch.setenv("AIRFLOW__LAKEFENCE__PUBLICATIONS_VIEW", "html")
    views, apps = plugin.ui_slots()
    assert not apps and {v["destination"] for v in views} == DESTINATIONS
    assert all(v["href"].startswith("/lakefence/view") for v in views)
    monkeypatch.delenv("AIRFLOW__LAKEFENCE__PUBLICATIONS_VIEW")
    monkeypatch.setattr(bundle, "BUNDLE", BUNDLE.with_name("absent.js"))
    bundle.bundle_name.cache_clear()
    try:
        views, apps = plugin.ui_slots()
        assert not apps and {v["destination"] for v in views} == DESTINATIONS
    finally:
        monkeypatch.undo()
        bundle.bundle_name.cache_clear()
    assert bundle_name() is not None


@pytest.mark.ui_bundle
def test_the_committed_bundle_is_what_the_lock_file_builds(tmp_path: Path, record_property: Any) -> None:
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("rebuilding the React view's bundle needs Node.js (>= 20.19, Vite's floor) and npm")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    if tuple(int(part) for part in version.lstrip("v").split(".")[:2]) < (20, 19):
        pytest.skip(f"rebuilding the React view's bundle needs Node.js >= 20.19 (Vite's floor), found {version}")
    sources = tmp_path / "www"
    shutil.copytree(WWW, sources, ignore=shutil.ignore_patterns("node_modules"))
    out = tmp_path / "out"
    env = {**os.environ, "LAKEFENCE_BUNDLE_OUT": str(out)}
    started = time.monotonic()
    for command in (
        [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"],
        [npm, "run", "build"],
    ):
        done = subprocess.run(command, cwd=sources, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{' '.join(command[1:])}:\n{done.stdout}\n{done.stderr}"
    record_property("ui bundle rebuild seconds", round(time.monotonic() - started, 1))
    assert sorted(p.name for p in out.iterdir()) == ["publications.js"]
    assert (out / "publications.js").read_bytes() == BUNDLE.read_bytes(), (
        "the committed bundle differs from a build of airflow_lakefence/ui/www: run `npm ci && npm run build` there "
        "and commit airflow_lakefence/ui/static/publications.js"
    )
