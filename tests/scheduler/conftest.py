"""Fixtures of the real-scheduler tests: one full Airflow stack per module, logs dumped on failure.

The stack and its life cycle are the tiers' shared base (tests/stack): Airflow's metadata database
on the session's throw-away PostgreSQL cluster, the LocalExecutor, the session's lakeFS.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import lakefs
import pytest

from tests.dags.scheduler_dags import TARGETS
from tests.stack import tier
from tests.stack.airflow_stack import AirflowStack, wait_for
from tests.stack.scenarios import Executor
from tests.stack.tier import HeadRecorder, Signals

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


class LocalExecutor(Executor):
    """The shared scenarios (tests/stack/scenarios.py) under the LocalExecutor: task processes forked on this machine.

    A try acts on itself at a protocol point through ``dag_run.conf`` (tests/dags/scheduler_dags.py).

    :param lakefence_server: the session's lakeFS.
    """

    mark_at_fence = True

    def __init__(
        self, stack: AirflowStack, figures: dict[str, Any], dags: Mapping[str, tuple[str, str]], lakefence_server: Any
    ) -> None:
        super().__init__(stack, figures, dags)
        self.server = lakefence_server

    def repository(self, name: str) -> lakefs.Repository:
        return tier.repository(self.server.client(), name)

    def trigger_cleared_after_job(self, dag_id: str, conf: dict[str, Any], signals: Signals) -> str:
        # Try 1 clears itself through the REST API right after its job, before attempt fence #1.
        run_id = self.api.trigger(dag_id, {**conf, "after_job": {"publish": "clear"}})
        wait_for("try 1's job to end", lambda: signals.done(**{"try": 1}), 120)
        return run_id

    def kill_after_publishing(
        self, dag_id: str, conf: dict[str, Any], signals: Signals, heads: HeadRecorder
    ) -> tuple[str, dict[str, Any]]:
        # The DAG arms the after_verify=exit failpoint in try 1: its task process exits right after
        # the merge, and Airflow retries the task on its own.
        run_id = self.api.trigger(dag_id, conf)
        run = self.api.wait_run(dag_id, run_id, {"success", "failed"}, timeout=180)
        assert run["state"] == "success", self.log(dag_id, run_id, "publish", 2)[-3000:]
        return run_id, self.api.task_instance(dag_id, run_id, "publish")


#: The shared scenarios' DAGs and repositories in tests/dags/scheduler_dags.py.
SCENARIO_DAGS = {
    "clear": ("lf_sched_clear", "lf-sched-clear"),
    "mark": ("lf_sched_mark", "lf-sched-mark"),
    "retry": ("lf_sched_retry", "lf-sched-retry"),
}


@pytest.fixture
def executor(airflow_stack: AirflowStack, lakefence_server: Any, request: pytest.FixtureRequest) -> LocalExecutor:
    """The shared scenarios' view of this tier; the figures go to the test module's ``FIGURES``."""
    return LocalExecutor(airflow_stack, request.module.FIGURES, SCENARIO_DAGS, lakefence_server)
