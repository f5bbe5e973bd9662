"""Run the DAG runs another DAG triggers, as the scheduler would: ``python -m
tests.integration.triggered_runner <dag file> <dag id> <count> <timeout>``.

``dag.test()`` runs only its own DAG's tasks; a ``TriggerDagRunOperator`` with
``wait_for_completion`` then waits for a run nobody executes. The parent test starts this process
beside its ``dag.test()`` (same environment, same metadata DB): it waits for a queued run of
``<dag id>``, runs it to its end (tests/integration/helpers.py ``run_existing``), ``<count>`` times,
and prints one JSON line per run: ``{"run_id", "state", "conf"}``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path


def main(path: str, dag_id: str, count: int, timeout: float) -> None:
    """Run ``count`` triggered runs of ``dag_id`` (from the DAG file ``path``), each once it is queued.

    :param path: the DAG file.
    :param dag_id: the triggered DAG.
    :param count: how many runs to wait for.
    :param timeout: seconds to wait in all.
    """
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    from tests.integration.helpers import run_existing

    spec = importlib.util.spec_from_file_location(f"lakefence_dag_{Path(path).stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    dag = next(v for v in vars(module).values() if getattr(v, "dag_id", None) == dag_id and hasattr(v, "task_dict"))
    deadline = time.monotonic() + timeout
    done = 0
    while done < count and time.monotonic() < deadline:
        with create_session() as session:
            queued = session.query(DagRun).filter_by(dag_id=dag_id, state=DagRunState.QUEUED).first()
            run_id = None if queued is None else queued.run_id
        if run_id is None:
            time.sleep(0.5)
            continue
        dr = run_existing(dag, run_id)
        print("LAKEFENCE-TRIGGERED " + json.dumps({"run_id": dr.run_id, "state": str(dr.state), "conf": dr.conf}))
        sys.stdout.flush()
        done += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
