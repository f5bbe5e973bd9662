"""Test set-up: a throw-away Airflow home on SQLite, connections to the session's lakeFS.

Airflow reads its configuration at import time, so the environment is set here, before any test
module imports it. The lakeFS fixtures (``lakefence_server``, ``lakefence_repo``, ...) come from the
opt-in pytest plugin of ``lakefence_testing`` (``lakefence_testing.pytest_plugin``, asked for below):
``--lakefs-backend=local|real|both`` picks the local server, real lakeFS (built from the Go module
in ``tests/real_lakefs`` and started by :func:`lakefence_real_lakefs`), or both.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

#: The package's lakeFS fixtures: loaded here only (the plugin is not an entry point), for every run of the suite.
pytest_plugins = ["lakefence_testing.pytest_plugin"]

REPO = Path(__file__).resolve().parent.parent
_HOME = Path(tempfile.mkdtemp(prefix="lakefence-airflow-"))
DAGS_FOLDER = _HOME / "dags"
DAGS_FOLDER.mkdir()
# dag.test() needs the DAG file inside the configured dags folder (a bundle).
(DAGS_FOLDER / "examples").symlink_to(REPO / "dags_examples")
(DAGS_FOLDER / "testdags").symlink_to(REPO / "tests" / "dags")

os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
        "AIRFLOW_CONN_SPARK_LOCAL": json.dumps({"conn_type": "spark", "host": "local[2]"}),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
)
#: Airflow 2 (2.11) runs the protocol tiers too (tox -e airflow211): where its dag.test() differs.
AIRFLOW_2 = importlib.metadata.version("apache-airflow").startswith("2.")
if AIRFLOW_2:
    # Airflow 2 refuses its LocalExecutor (the unit-test configuration's) on SQLite where a task asks
    # for the executor (a sensor in reschedule mode); dag.test() runs the tasks itself either way.
    os.environ["AIRFLOW__CORE__EXECUTOR"] = "SequentialExecutor"
# The Spark provider runs `spark-submit` from PATH: use this interpreter's environment's.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
# Real lakeFS is built from the project's pinned wrapper module (go.mod/go.sum checked in).
os.environ.setdefault("LAKEFENCE_LAKEFS_GO_MODULE", str(REPO / "tests" / "real_lakefs"))

#: Tests too slow to run twice: under --lakefs-backend=both they run on real lakeFS only.
ONE_BACKEND_MARKERS = ("spark", "scheduler", "celery", "spark_cluster", "browser", "delta")

# Which backend proves what, under --lakefs-backend=both (what CI runs; docs/backends.md):
# - the protocol tiers (PROTOCOL_TIERS) test the product against lakeFS: real lakeFS, the reference,
#   is the one that counts, so they run there only (marker REFERENCE_ONLY_MARKER, added below);
# - the local server is proven to answer as lakeFS does by its own conformance tier
#   (tests/lakefs_server, on both backends) and the differential fidelity tier (tests/fidelity), and
#   DAG authors' path through it by LOCAL_SMOKE: every decision of the protocol through the operator
#   (merge, noop, replace, relocate, idempotent, read_only, fail closed, stale), the examples, the
#   operator's usability and the hard fence's operator, on both backends;
# - --lakefs-backend=local (or real) alone still runs every test on that one backend.
PROTOCOL_TIERS = ("tests/integration/", "tests/examples/", "tests/real_lakefs/", "tests/reliability/")
LOCAL_SMOKE = (
    # merge, noop, replace, relocate, read_only, fail closed with evidence, stale and cleared attempts
    "tests/integration/operators/test_fenced_spark.py::",
    # idempotent: a merge whose answer was lost is found, not repeated
    "tests/integration/operators/test_fenced_spark_faults.py::test_merge_answer_lost_is_not_repeated",
    "tests/examples/test_examples.py::",
    "tests/examples/test_example_python.py::",
    "tests/examples/test_example_monitoring.py::",
    "tests/integration/operators/test_fenced_spark_usability.py::",
    "tests/integration/operators/test_fenced_spark_hard_fence.py::",
    # the scoped hard fence (Lua diff_refs inside the merge) as DAG authors' local server runs it
    "tests/integration/core/fences/test_hard_scoped.py::",
    # many writers on one branch: the scoped fence through the engine and the operators, and its cost
    "tests/integration/core/test_engine_scoped.py::",
    "tests/integration/cost/test_cost_contract.py::test_scoped_publish_onto_a_moved_target_costs_one_diff_per_prefix",
    # a branch per run and airflow-provider-lakefs's operators, as DAG authors migrating run them
    "tests/integration/operators/test_run_branch.py::",
    "tests/integration/cost/test_run_branch_cost.py::",
    "tests/integration/operators/test_lakefs.py::",
    "tests/examples/test_example_branch_per_run.py::",
)
#: Added to protocol-tier tests outside LOCAL_SMOKE: under ``both`` they run on real lakeFS only.
REFERENCE_ONLY_MARKER = "lakefs_reference_only"


def pytest_configure(config: pytest.Config) -> None:
    """Run the slowest tiers, and the protocol tiers outside the local smoke, on one backend under ``both``."""
    for marker in (*ONE_BACKEND_MARKERS, REFERENCE_ONLY_MARKER):
        config.addinivalue_line("lakefs_one_backend_markers", marker)
    config.addinivalue_line(
        "markers",
        f"{REFERENCE_ONLY_MARKER}: a protocol-tier test outside the local smoke (real lakeFS only under both)",
    )


def reference_only(nodeid: str) -> bool:
    """Whether a test (by node id) runs on real lakeFS only under ``--lakefs-backend=both``.

    :param nodeid: e.g. ``tests/reliability/test_bad_input.py::test_x``.
    """
    return nodeid.startswith(PROTOCOL_TIERS) and not any(
        nodeid == smoke or (smoke.endswith("::") and nodeid.startswith(smoke)) for smoke in LOCAL_SMOKE
    )


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Mark reference-only tests before the plugin parametrizes ``lakefence_backend`` (it reads the marker)."""
    if "lakefence_backend" in metafunc.fixturenames and reference_only(metafunc.definition.nodeid.split("[")[0]):
        metafunc.definition.add_marker(REFERENCE_ONLY_MARKER)


#: A report's user property carrying a tier's measured figures (JSON); the rest of the name is the tier.
TIER_FIGURES_PROPERTY = "tier figures: "
#: The figures reports carried, by tier (filled in the process that prints the terminal summary).
_TIER_FIGURES: dict[str, dict[str, Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Collect the measured figures a report carries, from this process or from an xdist worker."""
    for name, value in report.user_properties:
        if name.startswith(TIER_FIGURES_PROPERTY):
            _TIER_FIGURES.setdefault(name.removeprefix(TIER_FIGURES_PROPERTY), {}).update(json.loads(value))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each slow tier's measured figures (seconds, not asserted), when it ran."""
    for tier, figures in _TIER_FIGURES.items():
        terminalreporter.section(f"{tier}: measured (not asserted)")
        for key, value in figures.items():
            shown = round(value, 2) if isinstance(value, float) else value
            terminalreporter.write_line(f"{key}: {json.dumps(shown)}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for pytest-xdist's ``--dist loadgroup`` (what ``tox -e py`` runs, two workers).

    The slow tiers (Spark, the scheduler and Celery stacks) form one group: one worker runs them
    one after the other, so two JVM-heavy stacks never compete for the two cores and Spark's Ivy
    cache has one user. Every other module runs whole on one worker per backend, so its module
    fixtures (a 1,000-commit history, test DAGs) are built once. Without xdist the marks are inert.
    Tries first: xdist reads the marks in its own collection hook.
    """
    for item in items:
        if any(item.get_closest_marker(marker) for marker in ONE_BACKEND_MARKERS):
            group = "slow-tiers"
        else:
            backend = getattr(getattr(item, "callspec", None), "params", {}).get("lakefence_backend", "none")
            group = f"{item.module.__name__ if item.module else item.path.stem}-{backend}"
        item.add_marker(pytest.mark.xdist_group(group))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the session's throw-away PostgreSQL cluster (the Airflow stacks' and real lakeFS's), if one started."""
    from tests.tools.postgres import stop_shared_cluster

    stop_shared_cluster()


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Migrate the session's SQLite metadata DB once (a few seconds)."""
    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return _HOME


@pytest.fixture(scope="session")
def lakefence_real_lakefs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The real backend's lakeFS: built from ``tests/real_lakefs`` (cached), started for the session."""
    from lakefence_testing.pytest_plugin import real_lakefs_unavailable
    from tests.tools.real_lakefs import GoToolchainMissingError, RealLakeFS, ensure_lakefs_binary

    try:
        binary = ensure_lakefs_binary()
    except GoToolchainMissingError as exc:
        real_lakefs_unavailable(str(exc))
    with RealLakeFS(binary, tmp_path_factory.mktemp("real-lakefs")) as real:
        yield real


@pytest.fixture
def lakefs_conn(lakefence_server: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Point the ``lakefs_default`` Airflow connection at the test lakeFS server."""
    conn = {
        "conn_type": "lakefs",
        "host": lakefence_server.endpoint,
        "login": lakefence_server.access_key_id,
        "password": lakefence_server.secret_access_key,
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKEFS_DEFAULT", json.dumps(conn))
    return conn


def load_dag_module(relative: str) -> ModuleType:
    """Import a DAG file through its path inside the dags folder (so fileloc lies in the bundle).

    :param relative: e.g. ``testdags/fenced_test_dags.py``.
    """
    path = DAGS_FOLDER / relative
    name = "lakefence_dag_" + relative.replace("/", "_").removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fresh_dag_module(relative: str, *records: str) -> Any:
    """:func:`load_dag_module`, with what earlier tests recorded in the module forgotten.

    :param relative: e.g. ``testdags/fenced_test_dags.py``.
    :param records: the module's collections to clear (default: its ``FAILURES``).
    """
    module = load_dag_module(relative)
    for name in records or ("FAILURES",):
        getattr(module, name).clear()
    return module


@pytest.fixture
def clean_failpoints() -> Iterator[None]:
    """Disarm every in-process failpoint after the test."""
    from airflow_lakefence import failpoints

    yield
    failpoints.disarm_all()
