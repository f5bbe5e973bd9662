"""The partitioned example (dags_examples/example_partitioned_publish.py) is a test: a backfill of it
runs its dates at once, each publishing its own date partition with the scoped fence."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.records.metadata import decode_metadata
from tests.conftest import DAGS_FOLDER, REPO, load_dag_module
from tests.integration.dag_test_process import BARRIER_ENV, copy_metadata_db
from tests.integration.helpers import staging_branches

pytestmark = [pytest.mark.usefixtures("airflow_db", "lakefs_conn"), pytest.mark.scoped]

#: The logical dates of the backfill: the seeded events cover 2026-11-01 to 2026-11-07.
DATES = ("2026-11-01", "2026-11-02", "2026-11-03")
ROWS = 700
TABLE = "tables/events_per_day/"


def _seed(client: lakefs.Client, repository: str, tmp_path: Path) -> str:
    spec = importlib.util.spec_from_file_location("lakefence_run_demo", REPO / "dags_examples" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return str(demo.seed_events(client, repository, ROWS, tmp_path))


def _expected(day: str) -> tuple[int, int]:
    """(events, distinct users) of ``day`` in what run_demo.seed_events wrote."""
    rows = [n for n in range(ROWS) if f"2026-11-{1 + n % 7:02d}" == day]
    return len(rows), len({n % 97 for n in rows})


def run_dates_at_once(
    dag_file: Path,
    dates: tuple[str, ...],
    tmp_path: Path,
    *,
    attribute: str = "dag",
    confs: tuple[dict[str, Any], ...] | None = None,
    meet_at: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``dag_file``'s DAG (the module's ``attribute``) under ``dag.test()`` for every date at once,
    one process each (see tests/integration/dag_test_process.py), each date with its run conf from
    ``confs``; their outcomes, in order. ``meet_at``: a failpoint where every run waits for the others
    (so they overlap there however long each process took to start)."""
    database = Path(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///"))
    meeting = {} if meet_at is None else {BARRIER_ENV: f"{meet_at}:{len(dates)}:{tmp_path / 'barrier'}"}
    procs, logs = [], []
    for n, day in enumerate(dates):
        copy = tmp_path / f"airflow-{n}.db"
        copy_metadata_db(database, copy)
        env = {
            **os.environ,
            **meeting,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{copy}",
            "PYTHONPATH": str(REPO),
        }
        # Each process's output goes to a file, not a pipe: waiting on the processes one after the
        # other, a pipe nobody reads yet fills (64 KiB of task log) and blocks its writer, and with
        # ``meet_at`` the first process then waits at the barrier for a blocked one without end.
        logs.append(tmp_path / f"dag-test-{n}.log")
        with logs[-1].open("w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.integration.dag_test_process", str(dag_file), day]
                    + ([] if confs is None else [attribute, json.dumps(confs[n])]),
                    env=env,
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    outcomes = []
    for proc, log_file in zip(procs, logs, strict=True):
        proc.wait(timeout=600)
        out = log_file.read_text()
        lines = [line for line in out.splitlines() if line.startswith("LAKEFENCE-OUTCOME ")]
        assert proc.returncode == 0 and lines, out[-3000:]
        outcomes.append(json.loads(lines[-1].removeprefix("LAKEFENCE-OUTCOME ")))
    return outcomes


def test_a_backfill_of_the_partitioned_example_publishes_every_date_at_once(
    lakefence_client: lakefs.Client, example_repository: str, tmp_path: Path
) -> None:
    import pandas as pd

    dag = load_dag_module("examples/example_partitioned_publish.py").dag
    # What the docs promise of the example: no pool shared by the branch, no depends_on_past.
    for task in dag.tasks:
        assert task.pool == "default_pool" and not task.depends_on_past, task.task_id
    publisher = dag.get_task("events_per_day")
    assert publisher.fence_scope == "prefixes" and publisher.input_ref == "main"
    assert publisher.max_active_tis_per_dag is None  # many writers: the dates publish side by side
    input_commit = _seed(lakefence_client, example_repository, tmp_path)

    # A backfill: every date's run started together (what max_active_runs=8 lets the scheduler do),
    # each dag.test() in its own process with its own copy of the migrated metadata DB.
    # They meet after their jobs (each pinned main as its input before), then publish in any order.
    runs = run_dates_at_once(
        DAGS_FOLDER / "examples" / "example_partitioned_publish.py", DATES, tmp_path, meet_at="after_job"
    )
    assert [r["state"] for r in runs] == ["success"] * len(DATES), [r["state"] for r in runs]

    repo = lakefs.Repository(example_repository, client=lakefence_client)
    head = repo.branch("main").get_commit()
    history = {c.id for c in repo.branch("main").log(max_amount=100)}
    outcomes = [r["xcoms"]["events_per_day"] for r in runs]
    for day, run, outcome in zip(DATES, runs, outcomes, strict=True):
        # Every date's publication landed and stays on main.
        assert outcome["decision"] == "merge", (day, outcome["reason"])
        assert outcome["output_ref"] in history
        record = decode_metadata(repo.commit(outcome["output_ref"]).get_commit().metadata)
        assert record is not None and record.attempt.key.run_id == run["run_id"]
        # The settled gate judged this date's own publication, whatever landed on top of it.
        gate = run["xcoms"]["partition_settled"]["return_value"]
        assert gate["verdict"] == "settled" and gate["publication"] == outcome["output_ref"], gate
        assert gate["head"] == outcome["staged_commit"] and gate["run_id"] == run["run_id"]
        assert gate["output_prefixes"] == [f"{TABLE}date={day}/"]
        events, users = _expected(day)
        assert run["xcoms"]["report"]["return_value"] == {"events": events, "users": users}
    # Each date's partition holds exactly its own output, at HEAD.
    objects = sorted(o.path for o in repo.ref(head.id).objects(prefix=TABLE))
    assert objects == [f"{TABLE}date={day}/part-00000.parquet" for day in DATES]
    for day in DATES:
        with repo.ref(head.id).object(f"{TABLE}date={day}/part-00000.parquet").reader(mode="rb", pre_sign=False) as fd:
            table = pd.read_parquet(io.BytesIO(fd.read()))
        assert table.to_dict("records") == [{"day": day, "events": _expected(day)[0], "users": _expected(day)[1]}]
    # They ran at once: publications merged onto a main that other dates had moved since their input
    # (run one after another, each would find main at its own input).
    moved = [o for o in outcomes if repo.commit(o["output_ref"]).get_commit().parents[0] != o["input_ref"]]
    assert moved, [(o["input_ref"], o["output_ref"]) for o in outcomes]
    assert {o["input_ref"] for o in outcomes} <= {input_commit} | {o["output_ref"] for o in outcomes}
    assert staging_branches(repo) == []


def test_many_writers_page_quotes_the_partitioned_example() -> None:
    """docs/howto/many-writers.md includes the example between its markers (Sphinx -W fails on a missing one)."""
    source = (REPO / "dags_examples" / "example_partitioned_publish.py").read_text()
    marker = "lakefence_partitioned_example"
    assert f"# [START {marker}]\n" in source and f"# [END {marker}]" in source
    docs = (REPO / "docs" / "howto" / "many-writers.md").read_text()
    assert "../../dags_examples/example_partitioned_publish.py" in docs
    assert f'"[START {marker}]"' in docs and f'"[END {marker}]"' in docs
    assert "recommended setup for partitioned outputs" in docs
    assert "many-writers.md" in (REPO / "docs" / "howto" / "one-writer-per-target.md").read_text()
