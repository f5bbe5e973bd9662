"""Run one DAG file's DAG under ``dag.test()`` in this process, for one logical date; print the outcome.

``python -m tests.integration.dag_test_process <dag file> <logical date> [<DAG attribute> <run conf JSON>]``:
the parent test sets the environment (Airflow home, a metadata DB of this process's own, the lakeFS
connection); the DAG is the module's ``dag`` unless named. Prints one
JSON line: ``{"state", "run_id", "xcoms": {task_id: {key: value}}, "tis": {task_id: [start, end]}}``.

``dag.test()`` is not thread-safe (its in-process task runner and the DAG bundle sync are
process-global), so runs that must overlap, as a backfill's do under the scheduler, run in processes
side by side.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def copy_metadata_db(database: Path, copy: Path) -> None:
    """Copy the live SQLite metadata DB ``database`` to ``copy`` through SQLite's backup API.

    Not with a plain file copy: closing any descriptor of the database file drops every POSIX lock
    this process holds on it (SQLite's own connections included), so the next process to close its
    connection believes it is the last one, checkpoints and deletes the -wal and -shm files under this
    process's open connections, and every later query here fails with "disk I/O error". The backup API
    opens the file through SQLite, which keeps such descriptors open while it holds locks, and copies
    what the WAL holds too.

    :param database: the metadata DB of this process (SQLite, WAL mode).
    :param copy: where the copy goes (replaced).
    """
    import contextlib
    import sqlite3

    with contextlib.closing(sqlite3.connect(database)) as source, contextlib.closing(sqlite3.connect(copy)) as target:
        source.backup(target)


#: ``<failpoint>:<parties>:<directory>``: the run waits at that failpoint until every party has reached it.
BARRIER_ENV = "LAKEFENCE_TEST_BARRIER"


def meet_the_others(spec: str) -> None:
    """Arm the failpoint of ``spec`` (see :data:`BARRIER_ENV`) with a barrier across processes (files)."""
    import os
    import time

    from airflow_lakefence import failpoints

    point, parties, directory = spec.split(":", 2)
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)

    def wait() -> None:
        (folder / str(os.getpid())).touch()
        deadline = time.monotonic() + 300
        while len(list(folder.iterdir())) < int(parties):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the other runs never reached {point}")
            time.sleep(0.1)

    failpoints.arm(point, wait)


def main(path: str, logical_date: str, attribute: str = "dag", run_conf: str | None = None) -> dict[str, Any]:
    """Run the DAG of ``path`` for ``logical_date``; return its outcome.

    :param path: the DAG file (inside the configured dags folder).
    :param logical_date: an ISO date.
    :param attribute: the module attribute holding the DAG.
    :param run_conf: the run's conf, as JSON.
    """
    import os

    import pendulum
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    if os.environ.get(BARRIER_ENV):
        meet_the_others(os.environ[BARRIER_ENV])
    spec = importlib.util.spec_from_file_location(f"lakefence_dag_{Path(path).stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    conf = None if run_conf is None else json.loads(run_conf)
    run = getattr(module, attribute).test(logical_date=pendulum.parse(logical_date), run_conf=conf)
    xcoms: dict[str, dict[str, Any]] = {}
    tis: dict[str, list[str | None]] = {}
    with create_session() as session:
        for row in session.query(XComModel).filter_by(dag_id=run.dag_id, run_id=run.run_id).all():
            xcoms.setdefault(row.task_id, {})[row.key] = XComModel.deserialize_value(row)
        for ti in session.query(TaskInstance).filter_by(dag_id=run.dag_id, run_id=run.run_id).all():
            tis[ti.task_id] = [
                None if ti.start_date is None else ti.start_date.isoformat(),
                None if ti.end_date is None else ti.end_date.isoformat(),
            ]
    return {"state": str(run.state), "run_id": run.run_id, "xcoms": xcoms, "tis": tis}


if __name__ == "__main__":
    outcome = main(*sys.argv[1:5])
    print("LAKEFENCE-OUTCOME " + json.dumps(outcome, default=str))
