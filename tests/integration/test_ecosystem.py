"""How the provider fits Airflow: provider info, the connection form, the CLI listings, exports."""

from __future__ import annotations

import http.server
import importlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from airflow_lakefence.provider_info import get_provider_info


def test_provider_info_matches_airflows_schema() -> None:
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


@pytest.mark.usefixtures("airflow_db")
def test_connection_form_metadata_through_the_rest_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the UI's connection form is built from: GET /ui/connections/hook_meta."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    response = TestClient(create_app("core")).get("/ui/connections/hook_meta")
    assert response.status_code == 200
    (meta,) = [m for m in response.json() if m["connection_type"] == "lakefs"]
    assert meta["hook_class_name"] == "airflow_lakefence.hooks.lakefs.LakeFSHook"
    fields = meta["standard_fields"]
    assert fields["host"]["title"] == "lakeFS endpoint URL"
    assert fields["login"]["title"] == "Access key id"
    assert fields["password"]["title"] == "Secret access key"
    assert fields["port"]["hidden"] and fields["url_schema"]["hidden"]
    assert meta["extra_fields"]["verify_ssl"]["schema"]["title"] == "Verify TLS"
    assert meta["extra_fields"]["ui_base_url"]["schema"]["title"] == "lakeFS UI base URL"
    # The switch is drawn from "value" (checked = !!value): on by default, like the hook's default.
    assert meta["extra_fields"]["verify_ssl"]["value"] is True
    assert meta["extra_fields"]["verify_ssl"]["schema"]["default"] is True
    assert meta["extra_fields"]["verify_ssl"]["schema"]["type"][0] == "boolean"


# -- the connection as the UI saves it ------------------------------------------------------------


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The Airflow API server app (what the UI talks to), every user an admin."""
    from airflow.api_fastapi.app import create_app
    from fastapi.testclient import TestClient

    monkeypatch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "True")
    return TestClient(create_app("core"))


def _ui_form_extra(api: Any, **touched: Any) -> str:
    """The extra JSON the UI's connection form saves: every extra field's value, untouched ones included.

    The form (FlexibleForm over hook_meta's ``extra_fields``) keeps one value per field, starting at
    the field's ``value``, and writes ``JSON.stringify({name: value}, null, 2)`` into *extra*.
    """
    (meta,) = [m for m in api.get("/ui/connections/hook_meta").json() if m["connection_type"] == "lakefs"]
    values = {name: field["value"] for name, field in meta["extra_fields"].items()}
    values.update(touched)
    return json.dumps(values, indent=2)


def _ui_connection_body(conn_id: str, lakefs_conn: dict[str, str], extra: str) -> dict[str, Any]:
    """The body of the UI's POST /api/v2/connections (empty standard fields are left out)."""
    return {
        "connection_id": conn_id,
        "conn_type": "lakefs",
        "host": lakefs_conn["host"],
        "login": lakefs_conn["login"],
        "password": lakefs_conn["password"],
        "extra": extra,
    }


_PROBE_DAG = """
from airflow.sdk import DAG, get_current_context, task

from airflow_lakefence.hooks.lakefs import LakeFSHook

with DAG("lakefence_connection_probe", schedule=None) as dag:

    @task
    def probe() -> dict:
        conf = get_current_context()["dag_run"].conf
        hook = LakeFSHook(conf["conn_id"])
        head = hook.client.get_commit(conf["repository"], "main").id
        return {"verify_ssl": hook.settings["verify_ssl"], "head": head, "test": list(hook.test_connection())}

    probe()
"""


@pytest.fixture
def probe_dag() -> Any:
    """A one-task DAG reading a stored connection the way every task does (through the task runner)."""
    from tests.conftest import DAGS_FOLDER, load_dag_module

    # Its own folder: dag.test() parses the DAG file's folder, and nothing else should be in it.
    (DAGS_FOLDER / "ecosystem").mkdir(exist_ok=True)
    (DAGS_FOLDER / "ecosystem" / "connection_probe.py").write_text(_PROBE_DAG)
    return load_dag_module("ecosystem/connection_probe.py").dag


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize(
    ("form", "verify_ssl"),
    [
        ("untouched", None),  # what Airflow 3.3's form saved before the schema default: "verify_ssl": null
        ("defaults", "form"),  # today's form: the switch starts on, saves true
        ("switched_off", False),
    ],
)
def test_connection_saved_from_the_ui_form_works_in_a_task(
    api: Any, lakefs_conn: dict[str, str], lakefence_repo: Any, probe_dag: Any, form: str, verify_ssl: Any
) -> None:
    """Save the connection as the UI does (REST API, the form's extra), then use it from a real task."""
    from tests.integration.helpers import xcoms

    touched = {} if verify_ssl == "form" else {"verify_ssl": verify_ssl}
    extra = _ui_form_extra(api, **touched)
    assert '"ui_base_url": null' in extra and '"timeout": null' in extra
    conn_id = f"lakefs_ui_{form}"
    api.delete(f"/api/v2/connections/{conn_id}")
    created = api.post("/api/v2/connections", json=_ui_connection_body(conn_id, lakefs_conn, extra))
    assert created.status_code == 201, created.text
    assert json.loads(created.json()["extra"])["verify_ssl"] == (True if verify_ssl == "form" else verify_ssl)

    dag_run = probe_dag.test(run_conf={"conn_id": conn_id, "repository": lakefence_repo.id})
    assert dag_run.state == "success"
    result = xcoms(dag_run, "probe")["return_value"]
    assert result["verify_ssl"] is (verify_ssl is not False)
    assert result["head"] == lakefence_repo.branch("main").get_commit().id
    assert result["test"][0] is True, result["test"][1]


@pytest.mark.usefixtures("airflow_db")
def test_the_ui_test_button_through_the_rest_api(
    api: Any, lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /api/v2/connections/test is what the UI's Test button calls; Airflow disables it by default."""
    body = _ui_connection_body("lakefs_ui_test_button", lakefs_conn, _ui_form_extra(api))
    monkeypatch.delenv("AIRFLOW__CORE__TEST_CONNECTION", raising=False)
    assert api.post("/api/v2/connections/test", json=body).status_code == 403  # docs/troubleshooting.md

    monkeypatch.setenv("AIRFLOW__CORE__TEST_CONNECTION", "Enabled")
    answer = api.post("/api/v2/connections/test", json=body).json()
    assert answer["status"] is True and lakefs_conn["host"].removesuffix("/api/v1") in answer["message"]

    wrong = api.post("/api/v2/connections/test", json={**body, "password": "not-the-secret"}).json()
    assert wrong["status"] is False
    assert wrong["message"].startswith("Authentication failed at lakeFS ")
    assert "not-the-secret" not in wrong["message"] and "list_branches" not in wrong["message"]


# -- the connection test's messages ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def not_lakefs() -> Iterator[str]:
    """A plain HTTP server on loopback that is not lakeFS (404 for everything)."""

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404, "File not found")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join()


def _test_conn(monkeypatch: pytest.MonkeyPatch, conn: dict[str, Any]) -> tuple[bool, str]:
    from airflow_lakefence.hooks.lakefs import LakeFSHook

    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_PROBE", json.dumps(conn))
    return LakeFSHook("lakefs_probe").test_connection()


def test_connection_test_names_a_wrong_secret(lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = lakefs_conn["host"].removesuffix("/api/v1")
    ok, message = _test_conn(monkeypatch, {**lakefs_conn, "password": "wrong-secret-123"})
    assert not ok
    assert message.startswith(f"Authentication failed at lakeFS {endpoint} (HTTP 401: ")
    assert "secret access key" in message and "wrong-secret-123" not in message
    assert "list_branches" not in message and "get_repository" not in message

    ok, message = _test_conn(monkeypatch, {**lakefs_conn, "login": "AKIANOSUCHKEY"})
    assert not ok and message.startswith("Authentication failed") and "'AKIANOSUCHKEY'" in message


def test_connection_test_names_an_unreachable_host_and_port(
    lakefs_conn: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    port = _free_port()  # nothing listens there any more: connection refused
    ok, message = _test_conn(monkeypatch, {**lakefs_conn, "host": f"http://127.0.0.1:{port}"})
    assert not ok
    assert message.startswith(f"Cannot reach lakeFS at 127.0.0.1:{port} (http://127.0.0.1:{port}): ")
    assert "connection refused" in message

    ok, message = _test_conn(monkeypatch, {**lakefs_conn, "host": "http://no-such-host.invalid:8000"})
    assert not ok and message.startswith("Cannot reach lakeFS at no-such-host.invalid:8000 ")


def test_connection_test_names_an_endpoint_that_is_not_lakefs(
    lakefs_conn: dict[str, str], not_lakefs: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok, message = _test_conn(monkeypatch, {**lakefs_conn, "host": not_lakefs})
    assert not ok
    assert message.startswith(f"{not_lakefs} answered 404 to a lakeFS API call") and "endpoint URL" in message


def test_connection_test_reports_a_malformed_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = _test_conn(monkeypatch, {"conn_type": "lakefs", "host": "http://x", "login": "a"})
    assert not ok and "secret access key" in message


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["providers", "list"], "airflow-provider-lakefence"),
        (["providers", "hooks"], "airflow_lakefence.hooks.lakefs.LakeFSHook"),
        (["providers", "links"], "airflow_lakefence.links.lakefs.LakeFSCommitLink"),
        (["providers", "triggers"], '"class": "airflow_lakefence.triggers.lakefs"'),
    ],
)
def test_airflow_cli_lists_the_provider(command: list[str], expected: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "airflow", *command, "--output", "json"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    assert expected in result.stdout


@pytest.mark.parametrize(
    "module",
    [
        "airflow_lakefence",
        "airflow_lakefence.core",
        "airflow_lakefence.exceptions",
        "airflow_lakefence.hooks",
        "airflow_lakefence.operators",
        "airflow_lakefence.sensors",
        "airflow_lakefence.triggers",
        "airflow_lakefence.spark",
        "airflow_lakefence.spark.submit",
        "airflow_lakefence.airflow_adapter.task_instances",
        "airflow_lakefence.core.names.locations",
        "lakefence_testing.lakefs_server",
    ],
)
def test_all_exports_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    names = mod.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(mod, name) is not None, f"{module}.{name}"
