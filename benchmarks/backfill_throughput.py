"""Backfill throughput on real lakeFS: today's one-writer setup vs the scoped fence, 4 and 8 dates at once.

A 16-date backfill of one daily table (benchmarks/_backfill_dags.py), each date's job a fake
spark-submit that sleeps ``--job-seconds`` (default 20: a remote cluster's job of fixed duration,
long enough that Airflow's own CPU per task on a small machine does not dominate) and writes one
file into its date's partition. Three backfills in one run, each into a repository of its own:

* **one writer** (docs/howto/one-writer-per-target.md): the branch-wide fence, a 1-slot pool for the
  target branch, ``max_active_tis_per_dag=1``, ``depends_on_past`` (and ``wait_for_downstream`` on
  the resolve task): the dates publish one after the other;
* **scoped at 4** and **scoped at 8** (docs/howto/many-writers.md): ``fence_scope="prefixes"``, the
  write set ``tables/daily/date={{ ds }}/``, no pool, no ``depends_on_past``; the backfill's
  ``max_active_runs`` is 4 or 8.

The stack is the real-scheduler tier's (tests/stack/airflow_stack.py): api-server, scheduler with the
LocalExecutor, dag-processor and triggerer, Airflow's metadata database on a throw-away PostgreSQL;
the backfills are created through Airflow's backfill API (``POST /api/v2/backfills``). lakeFS is
real lakeFS (its KV store on PostgreSQL unless ``--real-kv local``) behind the project's proxy,
which counts the calls (``--lakefs-backend local``: the project's local server, for a quick check).

Per backfill: the wall time from the backfill's creation to its last run's success, the speed-up
over the one-writer backfill, the most jobs that ran at once (from the jobs' own start and end
times), the publish latency (each try's ``after_job`` → ``after_verify`` failpoints: fence checks,
upload, staging commit, merge and its verification) and the merge step alone (``after_fence_2`` →
``after_verify``) as p50 / p99 over the 16 publishes (p99 of 16 is their maximum), the lakeFS calls
per publish (the workspace uploads and the resolve task's one ``getCommit`` per date excluded) and
the machine's load while it ran (1-minute load average and CPU busy share, sampled every 2 s). Each
backfill's outcome is checked: every partition holds exactly one file, one publication per date.

Run::

    python benchmarks/backfill_throughput.py [--job-seconds 20] [--widths 4 8] [--skip-one-writer]
        [--lakefs-backend real|local] [--real-kv postgres|local] [--calls-by-endpoint] [--preload]

``--preload`` preloads the task's modules in the LocalExecutor's fork server (:data:`PRELOAD`,
settings a deployment makes the same way); by default Airflow's own start method, where every
task process imports them itself.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _backfill_dags import DAYS, ONE_WRITER_POOL, REPOSITORIES, START, TIMED_POINTS
from _common import add_backend_arguments, backend_label, lakefs_process, machine, print_table, temp_home

DAG_FILE = Path(__file__).resolve().parent / "_backfill_dags.py"
#: ``--preload``: what a deployment can set so that each task process does not import the DAG file's
#: heavy modules anew (Airflow 3.3, ``[core] mp_start_method`` and ``mp_forkserver_preload``): the
#: LocalExecutor's workers start from a fork server that imported them once, and every task process,
#: forked from a worker, inherits them (the task's DAG parse then takes ~10 ms; the lakeFS SDK alone
#: takes ~0.7 s to import, the Spark provider with OpenLineage ~0.7 s). Measured slower here all the
#: same (docs/performance.md, section 9): with a start method other than ``fork`` the LocalExecutor
#: starts its workers one at a time, as tasks queue, instead of all at once.
PRELOAD = {
    "AIRFLOW__CORE__MP_START_METHOD": "forkserver",
    "AIRFLOW__CORE__MP_FORKSERVER_PRELOAD": ",".join(
        (
            "airflow.sdk",
            "airflow.sdk.execution_time.task_runner",
            "airflow.providers.apache.spark.operators.spark_submit",
            "lakefs",
            "airflow_lakefence.operators",
        )
    ),
}
#: Calls that are not the publish's: the job's output upload (one per file) and the resolve task's read.
UPLOAD_CALLS = ("uploadObject",)
RESOLVE_CALLS_PER_DATE = {"getCommit": 1}


class LoadSampler:
    """Sample the 1-minute load average and the CPU busy share every ``interval`` seconds."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval = interval
        self.loads: list[float] = []
        self.busy: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _cpu() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields) - idle, sum(fields)

    def _run(self) -> None:
        busy, total = self._cpu()
        while not self._stop.wait(self.interval):
            self.loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
            busy2, total2 = self._cpu()
            if total2 > total:
                self.busy.append((busy2 - busy) / (total2 - total))
            busy, total = busy2, total2

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def summary(self) -> str:
        """``load min–max (mean), CPU busy mean %``."""
        if not self.loads:
            return "n/a"
        return (
            f"{min(self.loads):.1f}–{max(self.loads):.1f} (mean {statistics.mean(self.loads):.1f}); "
            f"CPU {100 * statistics.mean(self.busy):.0f}% busy"
        )


def percentile(values: Sequence[float], q: int) -> float:
    """The ``q``-th percentile (inclusive method: p99 of 16 values is close to their maximum)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def max_overlap(windows: Sequence[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    events = sorted([(start, 1) for start, _ in windows] + [(end, -1) for _, end in windows])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def run_backfill(stack: Any, server: Any, dag_id: str, width: int, job_seconds: float, signals: Path) -> dict[str, Any]:
    """One backfill of the 16 dates; return its figures."""
    from tests.stack.airflow_stack import wait_for

    api = stack.api
    signals.mkdir(parents=True, exist_ok=True)
    job = {"sleep": job_seconds, "signal_dir": str(signals)}
    last = START.add(days=DAYS - 1)
    server.controls.reset_counts()
    with LoadSampler() as load:
        created = time.monotonic()
        api.create_backfill(
            dag_id,
            START.to_iso8601_string(),
            last.to_iso8601_string(),
            max_active_runs=width,
            reprocess_behavior="failed",  # Airflow requires one for DAGs with depends_on_past tasks
            dag_run_conf={"job": job},
        )
        api.unpause(dag_id)

        def finished() -> list[dict[str, Any]] | None:
            runs = api.dag_runs(dag_id)
            if any(r["state"] == "failed" for r in runs):
                raise RuntimeError(f"a run of {dag_id} failed: {runs}")
            return runs if len(runs) == DAYS and all(r["state"] == "success" for r in runs) else None

        runs = wait_for(f"{dag_id}'s backfill", finished, DAYS * (job_seconds + 90), interval=1)
        makespan = time.monotonic() - created
    counts = Counter(server.controls.counts())
    publish_counts = Counter({k: v for k, v in counts.items() if k not in UPLOAD_CALLS})
    publish_counts.subtract({k: v * DAYS for k, v in RESOLVE_CALLS_PER_DATE.items()})

    latency, merge = [], []
    for run in runs:
        day = run["logical_date"][:10]
        times = {p: json.loads((signals / f"{dag_id}.{day}.t1.{p}").read_text()) for p in TIMED_POINTS}
        latency.append(times["after_verify"] - times["after_job"])
        merge.append(times["after_verify"] - times["after_fence_2"])
    done = {p.name.removesuffix(".done"): json.loads(p.read_text()) for p in signals.glob("*.done")}
    windows = [
        (json.loads(p.read_text())["time"], done[p.name.removesuffix(".started")]["time"])
        for p in signals.glob("*.started")
        if p.name.removesuffix(".started") in done
    ]
    tis = [api.task_instance(dag_id, r["dag_run_id"], t) for r in runs for t in ("resolve_input", "publish")]
    from datetime import datetime

    stamps = [datetime.fromisoformat(t["start_date"]).timestamp() for t in tis] + [
        datetime.fromisoformat(t["end_date"]).timestamp() for t in tis
    ]
    check_outcome(server, REPOSITORIES[dag_id])
    return {
        "dag_id": dag_id,
        "width": width,
        "makespan_s": makespan,
        "first_start_to_last_end_s": max(stamps) - min(stamps),
        "jobs_at_once": max_overlap(windows),
        "latency": latency,
        "merge": merge,
        "calls_per_publish": sum(publish_counts.values()) / DAYS,
        "calls_by_endpoint": {k: v / DAYS for k, v in sorted(publish_counts.items()) if v},
        "uploads": counts.get("uploadObject", 0),
        "load": load.summary(),
    }


def check_outcome(server: Any, repository: str) -> None:
    """Every date's partition holds one file, and the target has one publication per date."""
    import lakefs

    from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, decode_metadata

    repo = lakefs.Repository(repository, client=server.sdk())
    paths = [o.path for o in repo.branch("main").objects(prefix="tables/daily/")]
    by_day = Counter(p.split("date=")[1].split("/")[0] for p in paths)
    if len(by_day) != DAYS or set(by_day.values()) != {1}:
        raise RuntimeError(f"{repository}: partitions {dict(by_day)}")
    records = [decode_metadata(c.metadata) for c in repo.branch("main").log()]
    published = [r for r in records if r is not None and r.role == ROLE_PUBLISH]
    if len(published) != DAYS:
        raise RuntimeError(f"{repository}: {len(published)} publications for {DAYS} dates")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job-seconds", type=float, default=20.0)
    parser.add_argument("--widths", type=int, nargs="+", default=[4, 8], choices=[4, 8])
    parser.add_argument("--skip-one-writer", action="store_true")
    parser.add_argument("--calls-by-endpoint", action="store_true")
    parser.add_argument(
        "--preload",
        action="store_true",
        help="preload the task's modules in the LocalExecutor's fork server (PRELOAD); default: Airflow's own "
        "start method, every task process imports them itself",
    )
    add_backend_arguments(parser)
    parser.set_defaults(lakefs_backend="real")
    args = parser.parse_args(argv)

    import lakefs

    from tests.stack.airflow_stack import AirflowStack
    from tests.stack.tier import create_repositories, lakefs_connection, running_stack

    home = temp_home("lakefence-backfill-bench-")
    print(f"machine: {machine()}")
    print(f"lakeFS: {backend_label(args)}; Airflow: LocalExecutor, metadata DB on PostgreSQL")
    print(f"job: fake spark-submit sleeping {args.job_seconds:.0f} s; {DAYS} dates per backfill")
    with lakefs_process(args.lakefs_backend, home / "lakefs", args.real_kv) as server:
        client = lakefs.Client(host=server.url, username=server.access_key_id, password=server.secret_access_key)
        create_repositories(client, "local://backfill-bench", {d: (r, ["main"]) for d, r in REPOSITORIES.items()})
        stack = AirflowStack(
            [DAG_FILE],
            connections=lakefs_connection(f"{server.url}/api/v1", server.access_key_id, server.secret_access_key),
            pools={ONE_WRITER_POOL: 1},
            home=home / "airflow",
            parallelism=32,
            # Eight task processes importing the DAG file at once on a loaded 2-core machine can take
            # longer than Airflow's default 30 s import timeout (seen at load ~18): not what is measured.
            extra_config={"AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180", **(PRELOAD if args.preload else {})},
        )
        results = []
        with running_stack(stack, list(REPOSITORIES), lambda: False):
            plan = [] if args.skip_one_writer else [("bf_one_writer", 1)]
            plan += [(f"bf_scoped_{w}", w) for w in args.widths]
            for dag_id, width in plan:
                result = run_backfill(stack, server, dag_id, width, args.job_seconds, home / "signals" / dag_id)
                print(json.dumps(result))
                results.append(result)
    shutil.rmtree(home, ignore_errors=True)  # kept after a failure: the Airflow logs are in it
    one = next((r for r in results if r["dag_id"] == "bf_one_writer"), None)
    rows = []
    for r in results:
        setup = "one writer (1-slot pool, depends_on_past)" if r["width"] == 1 else f"scoped, {r['width']} at once"
        rows.append(
            [
                setup,
                f"{r['makespan_s']:.0f}",
                f"{one['makespan_s'] / r['makespan_s']:.2f}×" if one else "–",
                r["jobs_at_once"],
                f"{percentile(r['latency'], 50):.2f} / {percentile(r['latency'], 99):.2f}",
                f"{percentile(r['merge'], 50):.2f} / {percentile(r['merge'], 99):.2f}",
                f"{r['calls_per_publish']:.1f}",
                r["load"],
            ]
        )
    print_table(
        [
            "setup",
            "backfill wall time (s)",
            "speed-up",
            "jobs at once (max)",
            "publish latency p50 / p99 (s)",
            "merge step p50 / p99 (s)",
            "lakeFS calls per publish",
            "machine load during the run",
        ],
        rows,
    )
    if args.calls_by_endpoint:
        for r in results:
            print(r["dag_id"], json.dumps(r["calls_by_endpoint"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
