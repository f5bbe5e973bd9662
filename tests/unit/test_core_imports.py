"""``airflow_lakefence.core`` (the protocol, the engine, the decision tables) imports neither Airflow
nor lakeFS: it runs in a fresh interpreter where importing either would show in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
import airflow_lakefence.core as core
names = [f"airflow_lakefence.core.{m.name}" for m in pkgutil.iter_modules(core.__path__)]
for name in names:
    importlib.import_module(name)
banned = sorted(m for m in sys.modules if m.split(".")[0] in ("airflow", "lakefs", "lakefs_sdk", "urllib3"))
print(json.dumps({"modules": names, "banned": banned}))
"""


def test_core_imports_neither_airflow_nor_lakefs() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert "airflow_lakefence.core.engine" in result["modules"]
    assert "airflow_lakefence.core.ports" in result["modules"]
    assert result["banned"] == []


def test_the_probe_would_see_an_airflow_import() -> None:
    """The check can fail: importing an adapter does pull in Airflow and lakeFS."""
    probe = PROBE.replace("for name in names:", "import airflow_lakefence.operators.fenced_spark\nfor name in names:")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    banned = json.loads(out.strip().splitlines()[-1])["banned"]
    assert "airflow" in banned and "lakefs" in banned
