"""Packaging: the server subpackage and its pytest plugin import without Airflow; production installs
carry neither werkzeug nor a costly plugin (the `testing` extra brings the server)."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

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


# -- the server and its plugin stay out of production installs ------------------------------------

# Run in a subprocess where importing werkzeug fails, as in an install without the `testing` extra:
# the package, its provider info and a whole pytest collection (with the pytest11 plugin) must work.
_WITHOUT_WERKZEUG = """
import importlib.abc
import sys


class NoWerkzeug(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "werkzeug" or name.startswith("werkzeug."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, NoWerkzeug())

import pytest

import airflow_lakefence

assert airflow_lakefence.get_provider_info()["package-name"] == "airflow-provider-lakefence"


class Seen:
    plugin = None

    def pytest_collection_finish(self, session):
        Seen.plugin = session.config.pluginmanager.get_plugin("lakefence")


code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[1]], plugins=[Seen()])
assert code == pytest.ExitCode.NO_TESTS_COLLECTED, code
assert Seen.plugin is not None, "the pytest11 plugin was not registered"
assert Seen.plugin.__name__ == "airflow_lakefence.testing.lakefs_server.pytest_plugin"
heavy = sorted(
    m for m in sys.modules if m.split(".")[0] in {"werkzeug", "lakefs", "lakefs_sdk", "airflow", "pyspark"}
    or m.startswith("airflow_lakefence.testing.lakefs_server._")
)
assert not heavy, heavy
print("OK")
"""


def test_pytest_plugin_costs_nothing_without_the_testing_extra(tmp_path: Path) -> None:
    """An environment without werkzeug: ``pytest --co`` in an empty directory loads the plugin and nothing heavy."""
    empty = tmp_path / "empty"
    empty.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_WERKZEUG, str(empty)],
        capture_output=True,
        text=True,
        cwd=empty,
        check=False,
    )
    assert result.returncode == 0 and result.stdout.rstrip().endswith("OK"), result.stdout + result.stderr


def _setup_cfg() -> configparser.ConfigParser:
    parser = configparser.ConfigParser()
    parser.read(Path(__file__).resolve().parents[2] / "setup.cfg")
    return parser


def _requirements(text: str) -> set[str]:
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.add(re.split(r"[<>=!~\[ ;]", line, maxsplit=1)[0].lower())
    return names


def test_werkzeug_is_an_extra_not_a_runtime_dependency() -> None:
    cfg = _setup_cfg()
    runtime = _requirements(cfg["options"]["install_requires"])
    extras = {name: _requirements(value) for name, value in cfg["options.extras_require"].items()}
    assert "werkzeug" not in runtime
    assert {"werkzeug", "pytest"} <= extras["testing"]
    assert extras["testing"] <= extras["test"]  # the project's own suite has everything DAG authors get
    # The example DAGs' imports (dags_examples/*.py, jobs/) are in the extra the docs tell users to install.
    assert {"pyspark", "lakefs-spec", "pyarrow", "pandas", "werkzeug"} <= extras["examples"]
    plugins = cfg["options.entry_points"]["pytest11"]
    assert "lakefence = airflow_lakefence.testing.lakefs_server.pytest_plugin" in plugins

