"""``airflow_lakefence.core`` (the protocol, the engine, the decision tables) imports neither Airflow
nor lakeFS, and the Spark job-side helper (which runs inside the Spark driver, where Airflow is not
installed) imports neither Airflow, lakeFS nor pyspark until a session is asked for: checked in a
fresh interpreter, where such an import would show in ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
import airflow_lakefence.core as core
names = [m.name for m in pkgutil.walk_packages(core.__path__, "airflow_lakefence.core.")]
for name in [*names, "airflow_lakefence.exceptions", "airflow_lakefence.spark", "airflow_lakefence.spark.submit",
             "airflow_lakefence.spark.delta"]:
    importlib.import_module(name)
banned = sorted(
    m for m in sys.modules if m.split(".")[0] in ("airflow", "lakefs", "lakefs_sdk", "urllib3", "pyspark")
)
print(json.dumps({"modules": names, "banned": banned}))
"""


def test_core_and_the_job_helper_import_neither_airflow_nor_lakefs() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert "airflow_lakefence.core.engine" in result["modules"]
    assert "airflow_lakefence.core.ports" in result["modules"]
    assert "airflow_lakefence.core.names.locations" in result["modules"]
    assert "airflow_lakefence.core.fences.hard" in result["modules"]
    assert result["banned"] == []


def test_the_probe_would_see_an_airflow_import() -> None:
    """The check can fail: importing an adapter does pull in Airflow and lakeFS."""
    core_import = "import airflow_lakefence.core as core\n"
    probe = PROBE.replace(core_import, "import airflow_lakefence.operators.fenced_spark\n" + core_import)
    assert probe != PROBE
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    banned = json.loads(out.strip().splitlines()[-1])["banned"]
    assert "airflow" in banned and "lakefs" in banned
