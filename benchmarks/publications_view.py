"""Serve the "lakeFS publications" task view with 1,000 publications in the task's history.

One real fenced publication under ``dag.test()`` (benchmarks/_publications_dag.py), then its Airflow
rows (the DAG run, the task instance, its rendered fields and XComs) cloned into 999 more runs, each
with its own publication in lakeFS as the operator leaves it: a commit on ``main`` carrying the
``lakefence.*`` publish record and a ``published`` run-state record on the run-state branch. Then the
Airflow API server's app (the plugin loaded, SimpleAuthManager with a user) answers the task view
``GET /lakefence/view?dag_id=pubview&task_id=publish`` through FastAPI's TestClient, in-process:

* cold: the view's cache emptied before each request (every request reads lakeFS);
* warm: repeated within the cache's 15 s;
* deep: the oldest page (offset 980), cold: the cost does not grow with the history's depth.

It prints p50/p95 latencies and the lakeFS calls per page, as the view counts them and as the lakeFS
server (or, with ``--lakefs-backend real``, the counting proxy in front of real lakeFS) counted them.

    python benchmarks/publications_view.py [--lakefs-backend local|real] [--publications 1000] [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, add_backend_arguments, backend_label, lakefs_process, machine, setup_airflow, temp_home


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _clone_runs(count: int) -> list[tuple[str, str]]:
    """Clone the one real run's rows ``count`` times; return ``(run_id, ti id)`` of the clones."""
    import sqlalchemy as sa
    from airflow.settings import engine

    meta = sa.MetaData()
    dag_run = sa.Table("dag_run", meta, autoload_with=engine)
    ti = sa.Table("task_instance", meta, autoload_with=engine)
    rtif = sa.Table("rendered_task_instance_fields", meta, autoload_with=engine)
    xcom = sa.Table("xcom", meta, autoload_with=engine)
    clones = []
    with engine.begin() as conn:
        run = dict(conn.execute(sa.select(dag_run).where(dag_run.c.dag_id == "pubview")).mappings().one())
        ti_row = dict(conn.execute(sa.select(ti).where(ti.c.run_id == run["run_id"])).mappings().one())
        rtif_row = dict(conn.execute(sa.select(rtif).where(rtif.c.run_id == run["run_id"])).mappings().one())
        xcom_rows = [dict(r) for r in conn.execute(sa.select(xcom).where(xcom.c.run_id == run["run_id"])).mappings()]
        for n in range(count):
            run_id = f"bench__{n:05d}"
            shift = __import__("datetime").timedelta(minutes=n + 1)
            new_run = {k: v for k, v in run.items() if k != "id"}
            new_run.update(run_id=run_id, logical_date=run["logical_date"] - shift, run_after=run["run_after"] - shift)
            dag_run_id = conn.execute(sa.insert(dag_run).values(**new_run)).inserted_primary_key[0]
            ti_id = str(uuid.uuid4())
            conn.execute(sa.insert(ti).values(**{**ti_row, "id": ti_id, "run_id": run_id}))
            conn.execute(sa.insert(rtif).values(**{**rtif_row, "run_id": run_id}))
            for row in xcom_rows:
                conn.execute(sa.insert(xcom).values(**{**row, "run_id": run_id, "dag_run_id": dag_run_id}))
            clones.append((run_id, ti_id))
    return clones


def _publish_clones(client: Any, clones: list[tuple[str, str]]) -> None:
    """Give each clone its publication in lakeFS and point its ``output_ref`` XCom at it."""
    import sqlalchemy as sa
    from airflow.models.xcom import XComModel
    from airflow.settings import engine

    from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
    from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, encode_metadata
    from airflow_lakefence.core.records.run_state import record_publication
    from airflow_lakefence.lakefs_adapter.run_state_store import LakeFSRunState

    outputs = {}
    for run_id, ti_id in clones:
        key = PublicationKey("pubview", run_id, "publish", -1)
        head = client.get_commit("pubview", "main").id
        client.upload_bytes("pubview", "main", f"out/{run_id}.txt", run_id.encode())
        record = LakeFenceRecord(AttemptId(key, 1, ti_id), ROLE_PUBLISH, head, head)
        output = client.commit("pubview", "main", f"publish {run_id}", encode_metadata(record)).id
        record_publication(LakeFSRunState(client, "pubview", key, source_branch="main", fresh=True), output, 1, "merge")
        outputs[run_id] = output
    xcom = sa.Table("xcom", sa.MetaData(), autoload_with=engine)
    with engine.begin() as conn:
        for run_id, output in outputs.items():
            conn.execute(
                sa.update(xcom)
                .where(xcom.c.run_id == run_id, xcom.c.key.in_(["output_ref", "return_value"]))
                .values(value=XComModel.serialize_value(output))
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_arguments(parser)
    parser.add_argument("--publications", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    home = temp_home("lakefence-pubview-")
    with lakefs_process(args.lakefs_backend, home / "lakefs", args.real_kv) as server:
        setup_airflow(
            home,
            [REPO / "benchmarks" / "_publications_dag.py"],
            f"{server.url}/api/v1",
            server.access_key_id,
            server.secret_access_key,
        )
        import lakefs

        from airflow_lakefence.hooks.lakefs import LakeFSHook

        sdk = server.sdk()
        lakefs.Repository("pubview", client=sdk).create(
            storage_namespace=f"local://{home}/pubview", default_branch="main"
        )
        sys.path.insert(0, str(home / "dags"))
        import _publications_dag as module

        started = time.monotonic()
        assert module.dag.test().state == "success"
        client = LakeFSHook().client
        _publish_clones(client, _clone_runs(args.publications - 1))
        seeded = time.monotonic() - started

        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({"viewer": "viewer-pw"}))
        import os

        os.environ.update(
            AIRFLOW__CORE__AUTH_MANAGER="airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="viewer:viewer",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(passwords),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        )
        from airflow import plugins_manager, settings
        from airflow.api_fastapi.app import create_app
        from fastapi.testclient import TestClient

        from airflow_lakefence.ui import app as view

        settings.LAZY_LOAD_PROVIDERS = False  # the provider info's plugins, whatever the install's entry points
        for cached in ("_get_plugins", "_get_ui_plugins"):
            getattr(getattr(plugins_manager, cached, None), "cache_clear", lambda: None)()
        api = TestClient(create_app(), base_url="http://127.0.0.1")
        token = api.post("/auth/token", json={"username": "viewer", "password": "viewer-pw"}).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        controls = server.controls

        def serve(offset: int, cold: bool) -> tuple[float, int, int, int]:
            if cold:
                view.reader()[0]._cache.clear()
            controls.reset_counts()
            t0 = time.perf_counter()
            answer = api.get(
                "/lakefence/api/publications",
                params={"dag_id": "pubview", "task_id": "publish", "offset": offset, "limit": 20},
                headers=headers,
            )
            elapsed = time.perf_counter() - t0
            assert answer.status_code == 200, answer.text
            page = answer.json()
            assert len(page["rows"]) == 20 and page["total_task_instances"] == args.publications, page
            counted = sum(v for k, v in controls.counts().items() if not k.startswith("_"))
            return elapsed, page["lakefs_calls"], page["lakefs_calls_bound"], counted

        serve(0, True)  # the first request imports and connects
        results = {}
        for name, offset, cold in (
            ("cold, newest page", 0, True),
            ("warm, newest page", 0, False),
            ("cold, oldest page", args.publications - 20, True),
        ):
            samples = [serve(offset, cold) for _ in range(args.requests)]
            times = [s[0] for s in samples]
            results[name] = (
                statistics.median(times),
                _p(times, 0.95),
                samples[0][1],
                samples[0][2],
                max(s[3] for s in samples),
            )
    print(f"publications view, {args.publications} publications in the task's history, pages of 20 task instances")
    print(f"lakeFS: {backend_label(args)}; {machine()}; seeding took {seeded:.0f} s")
    print(f"{'request':<20} {'p50 ms':>8} {'p95 ms':>8} {'calls (view)':>13} {'bound':>6} {'calls (server)':>15}")
    for name, (p50, p95, calls, bound, counted) in results.items():
        print(f"{name:<20} {p50 * 1000:8.1f} {p95 * 1000:8.1f} {calls:13d} {bound:6d} {counted:15d}")


if __name__ == "__main__":
    main()
