"""Fixtures of the real-scheduler tests: one full Airflow stack per module, logs dumped on failure."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TIER_FIGURES_PROPERTY
from tests.dags.scheduler_dags import TARGETS, pool_name
from tests.scheduler.harness import AirflowStack

#: Set to keep the Airflow home (logs, SQLite DB) after a passing module too.
KEEP_HOME_ENV = "LAKEFENCE_TEST_KEEP_AIRFLOW_HOME"
DAG_FILE = Path(__file__).resolve().parent.parent / "dags" / "scheduler_dags.py"
_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_FAILED = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``scheduler`` marker."""
    config.addinivalue_line("markers", "scheduler: boots a full Airflow stack (real scheduler; a few minutes)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """Keep each phase's report on the item, so a fixture can tell whether its test failed."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    figures = getattr(item.module, "FIGURES", None)
    if figures:  # printed by tests/conftest.py's terminal summary
        report.user_properties.append((f"{TIER_FIGURES_PROPERTY}real-scheduler tier", json.dumps(figures)))
    return report


def _create_repositories(lakefs_server: Any) -> None:
    import lakefs
    from lakefs.exceptions import NotFoundException

    client = lakefs_server.client()
    for repository, targets in TARGETS.values():
        repo = lakefs.Repository(repository, client=client)
        try:
            repo.delete()  # a real lakeFS may keep one from an earlier session
        except NotFoundException:
            pass
        namespace = f"{lakefs_server.storage_namespace.rstrip('/')}/{repository}-{uuid.uuid4().hex[:8]}"
        repo.create(storage_namespace=namespace, default_branch="main")
        for target in targets:
            if target != "main":
                repo.branch(target).create(source_reference="main")


@pytest.fixture(scope="module")
def airflow_stack(lakefs_server: Any, request: pytest.FixtureRequest) -> Iterator[AirflowStack]:
    """The full Airflow stack (api-server, scheduler, dag-processor, triggerer) with the test DAGs parsed.

    Connections ``lakefs_default`` (the session's lakeFS) and ``spark_local``, and one 1-slot pool
    per target of :data:`TARGETS`, are created through the REST API. The home directory is kept
    (and its path printed) when a test of the module failed, or with ``LAKEFENCE_TEST_KEEP_AIRFLOW_HOME`` set.
    """
    _create_repositories(lakefs_server)
    pools = {pool_name(repo, target): 1 for repo, targets in TARGETS.values() for target in targets}
    stack = AirflowStack(
        dag_files=[DAG_FILE],
        connections={
            "lakefs_default": {
                "conn_type": "lakefs",
                "host": lakefs_server.endpoint,
                "login": lakefs_server.access_key_id,
                "password": lakefs_server.secret_access_key,
            },
            "spark_local": {"conn_type": "spark", "host": "local[2]"},
        },
        pools=pools,
    )
    try:
        stack.start()
        stack.wait_for_dags(TARGETS)
    except BaseException:
        stack.dump_logs()
        stack.stop(remove_home=False)
        raise
    print(
        f"Airflow stack: db migrate {stack.migrate_seconds:.1f}s, components healthy {stack.boot_seconds:.1f}s "
        f"later, at {stack.base_url}, home {stack.home}"
    )
    try:
        yield stack
    finally:
        keep = request.node.stash.get(_FAILED, False) or bool(os.environ.get(KEEP_HOME_ENV))
        if keep:
            print(f"keeping the Airflow home {stack.home}")
        stopping = time.monotonic()
        late = stack.stop(remove_home=not keep)
        print(f"Airflow stack stopped in {time.monotonic() - stopping:.1f}s")
        if late:
            print(f"killed after the components stopped: {late}")
    leftovers = stack.marked_processes()
    assert not leftovers, f"processes survived the stack's teardown: {leftovers}"


@pytest.fixture(autouse=True)
def _dump_logs_on_failure(request: pytest.FixtureRequest, airflow_stack: AirflowStack) -> Iterator[None]:
    yield
    reports = request.node.stash.get(_REPORTS, {})
    if any(report.failed for report in reports.values()):
        request.node.parent.stash[_FAILED] = True
        airflow_stack.dump_logs()
