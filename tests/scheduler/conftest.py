"""Fixtures of the real-scheduler tests: one full Airflow stack per module, logs dumped on failure.

The stack and its life cycle are the tiers' shared base (tests/stack): Airflow's metadata database
on the session's throw-away PostgreSQL cluster, the LocalExecutor, the session's lakeFS.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TIER_FIGURES_PROPERTY
from tests.dags.scheduler_dags import TARGETS, pool_name
from tests.stack.harness import AirflowStack
from tests.stack.tier import (
    FAILED,
    create_repositories,
    failed_so_far,
    lakefs_connection,
    remember_report,
    running_stack,
)

DAG_FILE = Path(__file__).resolve().parent.parent / "dags" / "scheduler_dags.py"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``scheduler`` marker."""
    config.addinivalue_line("markers", "scheduler: boots a full Airflow stack (real scheduler; a few minutes)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    """Keep each phase's report on the item; the module's figures ride on it to the terminal summary."""
    report = yield
    remember_report(item, report)
    figures = getattr(item.module, "FIGURES", None)
    if figures:  # printed by tests/conftest.py's terminal summary
        report.user_properties.append((f"{TIER_FIGURES_PROPERTY}real-scheduler tier", json.dumps(figures)))
    return report


@pytest.fixture(scope="module")
def airflow_stack(lakefence_server: Any, request: pytest.FixtureRequest) -> Iterator[AirflowStack]:
    """The full Airflow stack (api-server, scheduler, dag-processor, triggerer) with the test DAGs parsed.

    Connections ``lakefs_default`` (the session's lakeFS) and ``spark_local``, and one 1-slot pool
    per target of :data:`TARGETS`, are created through the REST API. The home directory is kept
    (and its path printed) when a test of the module failed, or with ``LAKEFENCE_TEST_KEEP_AIRFLOW_HOME`` set.
    """
    create_repositories(lakefence_server.client(), lakefence_server.storage_namespace, TARGETS)
    stack = AirflowStack(
        dag_files=[DAG_FILE],
        connections=lakefs_connection(
            lakefence_server.endpoint, lakefence_server.access_key_id, lakefence_server.secret_access_key
        ),
        pools={pool_name(repo, target): 1 for repo, targets in TARGETS.values() for target in targets},
    )
    with running_stack(stack, TARGETS, lambda: request.node.stash.get(FAILED, False)) as running:
        yield running


@pytest.fixture(autouse=True)
def _dump_logs_on_failure(request: pytest.FixtureRequest, airflow_stack: AirflowStack) -> Iterator[None]:
    yield
    if failed_so_far(request.node):
        request.node.parent.stash[FAILED] = True
        airflow_stack.dump_logs()
