"""The server subpackage and its pytest plugin import without Airflow."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
import airflow_lakefence.testing.lakefs_server.pytest_plugin
assert "airflow_lakefence.testing.lakefs_server._store" not in sys.modules, "plugin import must stay cheap"
import airflow_lakefence.testing.lakefs_server
airflow = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
assert not airflow, airflow
"""


def test_imports_without_airflow() -> None:
    result = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, env=None, check=False)
    assert result.returncode == 0, result.stderr
