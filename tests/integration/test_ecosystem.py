"""How the provider fits Airflow: provider info, the connection form, the CLI listings, exports."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

import airflow_lakefence


def test_provider_info_matches_airflows_schema() -> None:
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(airflow_lakefence.get_provider_info(), schema)


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


@pytest.mark.usefixtures("airflow_db")
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (["providers", "list"], "airflow-provider-lakefence"),
        (["providers", "hooks"], "airflow_lakefence.hooks.lakefs.LakeFSHook"),
        (["providers", "links"], "airflow_lakefence.links.LakeFSCommitLink"),
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
        "airflow_lakefence.testing.lakefs_server",
    ],
)
def test_all_exports_resolve(module: str) -> None:
    mod = importlib.import_module(module)
    names = mod.__all__
    assert len(names) == len(set(names))
    for name in names:
        assert getattr(mod, name) is not None, f"{module}.{name}"
