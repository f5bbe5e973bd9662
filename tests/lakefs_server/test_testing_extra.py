"""A production install (no ``testing`` extra) that asks for the local lakeFS server is told what to install."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
sys.modules["werkzeug"] = None  # as if not installed
try:
    from lakefence_testing.lakefs_server import LakeFSServer
except ModuleNotFoundError as exc:
    print(exc.name, "|", exc)
"""


def test_local_server_without_werkzeug_names_the_extra() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    name, _, message = out.strip().partition(" | ")
    assert name == "werkzeug"
    assert "pip install 'airflow-provider-lakefence[testing]'" in message
