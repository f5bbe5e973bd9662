"""Fixtures of the Celery tier: one real lakeFS and one Celery stack per session, figures in the summary.

The stack (Redis, api-server, scheduler with CeleryExecutor, dag-processor, triggerer, two Celery
workers) boots once for the tier's modules (package-scoped fixtures); each scenario uses a DAG and
target branches of its own (tests/dags/celery_dags.py). lakeFS is the tier's own real lakeFS
(:class:`tests.tools.real_lakefs.RealLakeFS`), not the session's shared one, because a
scenario restarts it. The tier needs ``redis-server`` (Debian package) and the lakeFS binary (built
from tests/real_lakefs); without them it is skipped, or fails when ``CI`` is set.
"""

from __future__ import annotations

import os
import secrets
import string
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lakefs
import pytest

from tests.dags.celery_dags import TARGETS
from tests.stack import tier
from tests.stack.celery import CeleryStack, redis_server_binary, settings_summary
from tests.tools.real_lakefs import GoToolchainMissingError, RealLakeFS, ensure_lakefs_binary

DAG_FILE = Path(__file__).resolve().parent.parent / "dags" / "celery_dags.py"
#: The settings that bound the stale window, as the tier runs them (docs/howto/executors.md).
STACK_SETTINGS = {
    # A worker that died is noticed after this many seconds without a heartbeat (default 300).
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    # The supervisor's heartbeat, which also delivers clears and marks as a kill (the default).
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "5",
    # A task a killed worker had taken but not yet started stays "queued", where no heartbeat
    # timeout applies: the scheduler re-queues it after this many seconds (default 600, longer than
    # the scenarios wait).
    "AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT": "180",
}

#: Figures the scenarios measured (not asserted), printed in the terminal summary by tests/conftest.py.
FIGURES: dict[str, Any] = {}


pytest_runtest_makereport, _dump_logs_on_failure = tier.stack_tier_hooks(
    "Celery tier", lambda item: FIGURES, "celery_stack", session_wide=True
)


def _unavailable(message: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
        pytest.fail(f"the Celery tier is mandatory on CI: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="package")
def real_lakefs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealLakeFS]:
    """A real lakeFS of the tier's own (a scenario restarts it), with credentials made up for the session."""
    try:
        binary = ensure_lakefs_binary()
    except GoToolchainMissingError as exc:
        _unavailable(f"real lakeFS unavailable: {exc}")
    alphabet = string.ascii_uppercase + string.digits
    server = RealLakeFS(
        binary,
        tmp_path_factory.mktemp("celery-lakefs"),
        access_key_id="AKIALF" + "".join(secrets.choice(alphabet) for _ in range(14)),
        secret_access_key=secrets.token_urlsafe(30),
        log_level="WARN",
    )
    with server:
        yield server


def celery_executor_problem() -> str | None:
    """Why Airflow cannot load the CeleryExecutor here (in a clean process), or ``None`` if it can.

    E.g. the Celery provider is missing, or Celery 5.7 with provider 3.26 (``cannot import name 'retry'``).
    """
    with tempfile.TemporaryDirectory(prefix="lakefence-celery-check-") as home:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        probe = subprocess.run(
            [sys.executable, "-c", "import airflow.providers.celery.executors.celery_executor"],
            env={**env, "AIRFLOW_HOME": home},
            capture_output=True,
            text=True,
            check=False,
        )
    if probe.returncode == 0:
        return None
    lines = probe.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {probe.returncode}"


@pytest.fixture(scope="package")
def celery_stack(real_lakefs: RealLakeFS, request: pytest.FixtureRequest) -> Iterator[CeleryStack]:
    """The stack with the tier's DAGs parsed, both workers answering, connections and pools created."""
    if redis_server_binary() is None:
        _unavailable("redis-server is not installed (apt-get install -y redis-server)")
    problem = celery_executor_problem()
    if problem:
        _unavailable(f"the CeleryExecutor does not load: {problem}")
    client = lakefs.Client(host=real_lakefs.url, username=real_lakefs.access_key_id,
                           password=real_lakefs.secret_access_key)
    tier.create_repositories(client, "local://lakefence-celery", TARGETS)
    stack = CeleryStack(
        dag_files=[DAG_FILE],
        connections=tier.lakefs_connection(
            real_lakefs.endpoint, real_lakefs.access_key_id, real_lakefs.secret_access_key
        ),
        pools=tier.one_slot_pools(TARGETS),
        extra_config=STACK_SETTINGS,
    )
    booting = time.monotonic()
    with tier.running_stack(stack, [*TARGETS, "lf_cel_watch"], lambda: request.session.stash.get(tier.FAILED, False)):
        FIGURES["stack_boot_s"] = time.monotonic() - booting
        FIGURES["db_migrate_s"] = stack.migrate_seconds
        FIGURES["components_healthy_s"] = stack.boot_seconds
        FIGURES["workers_ready_s"] = stack.workers_ready_seconds
        FIGURES["settings"] = settings_summary(stack.environment())
        yield stack
