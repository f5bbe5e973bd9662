"""Fixtures of the real-scheduler tests: one full Airflow stack per module, logs dumped on failure.

The stack and its life cycle are the tiers' shared base (tests/stack): Airflow's metadata database
on the session's throw-away PostgreSQL cluster, the LocalExecutor, the session's lakeFS.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dags.scheduler_dags import TARGETS
from tests.stack import tier
from tests.stack.harness import AirflowStack

DAG_FILE = Path(__file__).resolve().parent.parent / "dags" / "scheduler_dags.py"


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``scheduler`` marker."""
    config.addinivalue_line("markers", "scheduler: boots a full Airflow stack (real scheduler; a few minutes)")


# The module's figures (tests/scheduler/test_real_scheduler.py's FIGURES) ride on each report.
pytest_runtest_makereport, _dump_logs_on_failure = tier.stack_tier_hooks(
    "real-scheduler tier", lambda item: getattr(item.module, "FIGURES", None), "airflow_stack", session_wide=False
)


@pytest.fixture(scope="module")
def airflow_stack(lakefence_server: Any, request: pytest.FixtureRequest) -> Iterator[AirflowStack]:
    """The full Airflow stack (api-server, scheduler, dag-processor, triggerer) with the test DAGs parsed.

    Connections ``lakefs_default`` (the session's lakeFS) and ``spark_local``, and one 1-slot pool
    per target of :data:`TARGETS`, are created through the REST API. The home directory is kept
    (and its path printed) when a test of the module failed, or with ``LAKEFENCE_TEST_KEEP_AIRFLOW_HOME`` set.
    """
    tier.create_repositories(lakefence_server.client(), lakefence_server.storage_namespace, TARGETS)
    stack = AirflowStack(
        dag_files=[DAG_FILE],
        connections=tier.lakefs_connection(
            lakefence_server.endpoint, lakefence_server.access_key_id, lakefence_server.secret_access_key
        ),
        pools=tier.one_slot_pools(TARGETS),
    )
    with tier.running_stack(stack, TARGETS, lambda: request.node.stash.get(tier.FAILED, False)) as running:
        yield running
