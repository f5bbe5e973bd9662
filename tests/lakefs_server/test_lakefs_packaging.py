"""Packaging: lakefence_testing (the server, the proxy and the pytest plugin) imports without Airflow;
production installs carry no werkzeug and load no plugin into pytest (the plugin is opt-in; the
`testing` extra brings the server); the tools only this repository's tests use are not in the package."""

from __future__ import annotations

import configparser
import re
import subprocess
import sys
from pathlib import Path

import lakefence_testing

_CHECK = """
import sys
import lakefence_testing.pytest_plugin
assert "lakefence_testing.lakefs_server" not in sys.modules, "plugin import must stay cheap"
import lakefence_testing.lakefs_server._server
import lakefence_testing.proxy
airflow = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
assert not airflow, airflow
"""


def test_imports_without_airflow() -> None:
    result = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, env=None, check=False)
    assert result.returncode == 0, result.stderr


# -- the server and its plugin stay out of production installs ------------------------------------

# Run in a subprocess where importing werkzeug fails, as in an install without the `testing` extra:
# the package and its provider info work, a pytest collection loads no plugin of the package unless
# asked to (-p), and the opted-in plugin loads nothing heavy until a test asks for a fixture.
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

from airflow_lakefence.provider_info import get_provider_info

assert get_provider_info()["package-name"] == "airflow-provider-lakefence"


class Seen:
    plugins = None

    def pytest_collection_finish(self, session):
        Seen.plugins = [
            getattr(p, "__name__", "") for p in session.config.pluginmanager.get_plugins()
            if getattr(p, "__name__", "").startswith(("airflow_lakefence", "lakefence_testing"))
        ]


def collect(*options):
    code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *options, sys.argv[1]], plugins=[Seen()])
    assert code == pytest.ExitCode.NO_TESTS_COLLECTED, code
    return Seen.plugins


assert collect() == [], Seen.plugins
assert collect("-p", "lakefence_testing.pytest_plugin") == ["lakefence_testing.pytest_plugin"]
heavy = sorted(
    m for m in sys.modules if m.split(".")[0] in {"werkzeug", "lakefs", "lakefs_sdk", "airflow", "pyspark"}
    or m.startswith("lakefence_testing.lakefs_server")
)
assert not heavy, heavy
print("OK")
"""


def test_pytest_plugin_is_opt_in_and_costs_nothing_without_the_testing_extra(tmp_path: Path) -> None:
    """Without werkzeug, ``pytest --co`` in an empty directory loads no plugin of ours; with ``-p``, nothing heavy."""
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


_OLD_NAMES = """
import warnings

def test_old_name(lakefs_repo, lakefence_repo):
    assert lakefs_repo is lakefence_repo
"""


def test_old_fixture_names_only_through_the_deprecated_opt_in(tmp_path: Path) -> None:
    """``lakefs_repo`` is no fixture of the plugin; the old module, asked for, gives it with a warning."""
    (tmp_path / "test_old.py").write_text(_OLD_NAMES)

    def run(plugin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:lakefence", "-p", plugin,
             "-W", "error::DeprecationWarning", "-q", "--lakefs-backend=local", str(tmp_path)],
            capture_output=True, text=True, cwd=tmp_path, check=False,
        )  # fmt: skip

    new = run("lakefence_testing.pytest_plugin")
    assert new.returncode == 1 and "fixture 'lakefs_repo' not found" in new.stdout, new.stdout + new.stderr
    old = run("airflow_lakefence.testing.lakefs_server.pytest_plugin")
    assert old.returncode == 1 and "the pytest fixture 'lakefs_repo' is deprecated" in old.stdout, old.stdout


def test_repository_only_tools_are_not_in_the_package() -> None:
    """The real-lakeFS builder and the PostgreSQL launcher are the repository's (tests/tools), not the wheel's."""
    package = Path(lakefence_testing.__file__).resolve().parent
    assert not (package / "real_lakefs.py").exists()
    assert not (package / "postgres.py").exists()


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
    assert "pytest11" not in cfg["options.entry_points"]  # opt-in: -p lakefence_testing.pytest_plugin

