"""The old import paths of lakefence_testing (``airflow_lakefence.testing...``) and the old fixture
names keep working for one release, each with a DeprecationWarning, and each old fixture has the
scope of its new namesake: a suite's session-scoped fixture may use ``lakefs_server`` as before."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

OLD_FIXTURES = ("lakefs_backend", "lakefs_server", "lakefs_client", "lakefs_repo", "lakefs_controls")

# Each old module path, what it must give, and the new path its warning names.
_IMPORTS = """
import warnings

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import airflow_lakefence.testing
    import airflow_lakefence.testing.lakefs_server as old_server
    from airflow_lakefence.testing.lakefs_server import Controls, Fault, LakeFSServer, RemoteControls
    import airflow_lakefence.testing.lakefs_server.controls as old_controls
    import airflow_lakefence.testing.proxy as old_proxy
    import airflow_lakefence.testing.pytest_plugin as old_plugin
    import airflow_lakefence.testing.lakefs_server.pytest_plugin as old_fixtures

import lakefence_testing.controls
import lakefence_testing.lakefs_server
import lakefence_testing.proxy
import lakefence_testing.pytest_plugin

OLD_PATH_WARNINGS = [
    str(w.message) for w in caught if issubclass(w.category, DeprecationWarning) and w.filename == __file__
]
# The very modules and classes, not copies: isinstance checks and monkeypatching keep working.
assert old_controls is lakefence_testing.controls and old_proxy is lakefence_testing.proxy
assert LakeFSServer is lakefence_testing.lakefs_server.LakeFSServer is old_server.LakeFSServer
assert (Controls, Fault, RemoteControls) == (
    lakefence_testing.controls.Controls, lakefence_testing.controls.Fault, lakefence_testing.controls.RemoteControls
)
assert old_plugin.LakeFSServerInfo is lakefence_testing.pytest_plugin.LakeFSServerInfo
assert old_plugin.real_lakefs_unavailable is lakefence_testing.pytest_plugin.real_lakefs_unavailable
"""

# A conftest as suites wrote it before the move: the deprecated plugin, the old names, used from a
# session-scoped fixture of the suite's own.
_CONFTEST = (
    _IMPORTS
    + """
import pytest

pytest_plugins = ["airflow_lakefence.testing.lakefs_server.pytest_plugin"]


@pytest.fixture(scope="session")
def suite_lakefs(lakefs_server, lakefs_backend):
    return lakefs_server, lakefs_backend
"""
)

_TESTS = """
import lakefs

from conftest import OLD_PATH_WARNINGS


def test_each_old_path_warned_naming_the_new_one():
    assert OLD_PATH_WARNINGS == [
        "airflow_lakefence.testing is deprecated: import lakefence_testing",
        "airflow_lakefence.testing.lakefs_server is deprecated: import lakefence_testing.lakefs_server",
        "airflow_lakefence.testing.lakefs_server.controls is deprecated: import lakefence_testing.controls",
        "airflow_lakefence.testing.proxy is deprecated: import lakefence_testing.proxy",
        "airflow_lakefence.testing.pytest_plugin is deprecated: import lakefence_testing.pytest_plugin",
        "airflow_lakefence.testing.lakefs_server.pytest_plugin is deprecated: "
        "-p lakefence_testing.pytest_plugin and its lakefence_* fixtures",
    ], OLD_PATH_WARNINGS


def test_a_session_fixture_uses_the_old_session_names(suite_lakefs, lakefence_server, lakefence_backend):
    server, backend = suite_lakefs
    assert server is lakefence_server and backend == lakefence_backend == "local"


def test_the_old_function_names_are_the_new_values(
    lakefs_client, lakefs_repo, lakefs_controls, lakefence_repo, lakefence_controls
):
    assert lakefs_repo is lakefence_repo and lakefs_controls is lakefence_controls
    assert isinstance(lakefs_client, lakefs.Client)
    branch = lakefs.Repository(lakefs_repo.id, client=lakefs_client).branch("main")
    branch.object("a.txt").upload(b"old names")
    assert branch.commit("through the old names").get_commit().message == "through the old names"
    assert lakefs_controls.counts()["commit"] == 1
"""


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        check=False,
    )


def test_old_paths_and_fixture_names_from_a_session_scoped_conftest(tmp_path: Path) -> None:
    """Every old path imports with its warning; the old fixtures serve a session fixture and a test, each warning."""
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_old.py").write_text(_TESTS)
    result = _pytest("-q", "-rA", "-W", "default::DeprecationWarning", "--lakefs-backend=local", str(tmp_path),
                     cwd=tmp_path)  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "3 passed" in output and "ScopeMismatch" not in output, output
    for old in OLD_FIXTURES:
        new = old.replace("lakefs_", "lakefence_", 1)
        assert f"the pytest fixture {old!r} is deprecated: use {new!r}" in output, (old, output)


def _scopes(listing: str) -> dict[str, str]:
    """Fixture name -> scope, from ``pytest --fixtures`` (it prints ``name [session scope]``, no tag for function)."""
    found = re.findall(r"^(\w+)(?: \[(\w+) scope\])?(?: --|$)", listing, flags=re.MULTILINE)
    return {name: scope or "function" for name, scope in found}


def test_each_old_fixture_has_the_scope_of_its_new_namesake(tmp_path: Path) -> None:
    result = _pytest("--fixtures", "-p", "airflow_lakefence.testing.lakefs_server.pytest_plugin", str(tmp_path),
                     cwd=tmp_path)  # fmt: skip
    scopes = _scopes(result.stdout)
    assert result.returncode in (0, 5), result.stdout + result.stderr
    for old in OLD_FIXTURES:
        new = old.replace("lakefs_", "lakefence_", 1)
        assert scopes[old] == scopes[new], (old, scopes)
    assert scopes["lakefs_server"] == "session" and scopes["lakefs_repo"] == "function"


def test_the_old_command_lines_run_the_new_ones_with_a_warning() -> None:
    """``python -m airflow_lakefence.testing.lakefs_server`` and ``... .proxy``, as the docs printed them."""
    for old, new in (
        ("airflow_lakefence.testing.lakefs_server", "lakefence_testing.lakefs_server"),
        ("airflow_lakefence.testing.proxy", "lakefence_testing.proxy"),
    ):
        result = subprocess.run([sys.executable, "-m", old, "--help"], capture_output=True, text=True, check=False)
        assert result.returncode == 0, result.stderr
        assert f"usage: python -m {new}" in result.stdout
        assert f"DeprecationWarning: python -m {old} is deprecated: python -m {new}" in result.stderr
