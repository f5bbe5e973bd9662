"""Overhead of FencedSparkPublishOperator over a bare SparkSubmitOperator, with real PySpark.

The same PySpark application (benchmarks/_spark_app.py: a small aggregation in Spark, its result
written into lakeFS by the driver) runs under ``dag.test()`` with ``SparkSubmitOperator`` (the job
writes straight into the target branch: no staging, no commit, no fence) and with
``FencedSparkPublishOperator`` in direct mode (staging branch, attempt fences, commit, publish
fence, merge, verification, cleanup), alternately, ``--runs`` times each. Reported: the median
task wall time (pre_execute → post_execute) and the median ``dag.test()`` wall time of each, and
their ratio; and, measured inside the fenced task (failpoints around the Spark step), the
fenced operator's own time outside Spark, which the Spark run's noise does not blur. Local
Spark (``local[2]``) starts a JVM per run (~9 s), so expect minutes.

lakeFS is the local lakeFS server (``--lakefs-backend local``) or real lakeFS, its KV store on
PostgreSQL unless ``--real-kv local``, behind the fault-injecting proxy (``real``);
``--latency-ms`` adds a delay to every lakeFS request (a network round-trip).

Run::

    python benchmarks/overhead_vs_spark_submit.py [--runs 5] [--home DIR] [--latency-ms 0]
        [--lakefs-backend local|real] [--real-kv postgres|local]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    add_backend_arguments,
    backend_label,
    lakefs_process,
    load_module,
    machine,
    median,
    print_table,
    setup_airflow,
    temp_home,
)

REPOSITORY = "spark-overhead-bench"
DAG_FILE = Path(__file__).resolve().parent / "_bench_dags.py"


def _succeeded(dag_run: Any) -> bool:
    return str(dag_run.state) in ("success", "DagRunState.SUCCESS")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="runs of each operator (median); at least 5")
    parser.add_argument("--home", type=Path, default=None, help="Airflow home and lakeFS data (default: temp)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay added to every lakeFS request")
    add_backend_arguments(parser)
    args = parser.parse_args(argv)
    if shutil.which("spark-submit", path=str(Path(sys.executable).parent)) is None:
        raise SystemExit(f"no spark-submit next to {sys.executable}: pip install pyspark")
    home = (args.home or temp_home("lakefence-spark-bench-")).resolve()
    if args.home is None:
        atexit.register(shutil.rmtree, home, True)
    (home / "lakefs").mkdir(parents=True, exist_ok=True)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    print(f"lakeFS: {backend_label(args)}; injected latency {args.latency_ms:g} ms per request")
    with lakefs_process(args.lakefs_backend, home / "lakefs", args.real_kv) as server:
        os.environ.update(  # read by the bare DAG's env_vars at parse time
            {
                "BENCH_LAKEFS_ENDPOINT": server.url,
                "BENCH_LAKEFS_ACCESS_KEY_ID": server.access_key_id,
                "BENCH_LAKEFS_SECRET_ACCESS_KEY": server.secret_access_key,
            }
        )
        dags_folder = setup_airflow(home, [DAG_FILE], server.url, server.access_key_id, server.secret_access_key)
        dags = load_module(dags_folder / DAG_FILE.name, "lakefence_bench_dags")
        import lakefs

        repo = lakefs.Repository(REPOSITORY, client=server.sdk()).create(storage_namespace=f"local://{REPOSITORY}")
        main_branch = repo.branch("main")
        main_branch.object("in/data.txt").upload(b"input", pre_sign=False)
        input_commit = main_branch.commit("seed input").get_commit().id
        server.controls.set_latency(args.latency_ms / 1000)

        from airflow_lakefence import failpoints

        failpoints.arm("after_staging_branch", lambda: dags.mark("spark_start"))
        failpoints.arm("after_job", lambda: dags.mark("spark_end"))

        def run(dag: Any) -> tuple[float, float, str]:
            target = f"t-{uuid.uuid4().hex[:12]}"
            repo.branch(target).create(input_commit)
            conf = {"repository": REPOSITORY, "target": target, "input_ref": input_commit}
            started = time.perf_counter()
            dag_run = dag.test(run_conf=conf)
            wall = time.perf_counter() - started
            if not _succeeded(dag_run):
                raise SystemExit(f"{dag.dag_id} failed: {dag_run.state}")
            marks = dags.MARKS[-1]
            return marks["end"] - marks["start"], wall, target

        # The first dag.test() of a process pays Airflow's one-time start-up: absorb it in a
        # run without a JVM, outside the measurement.
        dags.fenced_fake_dag.test(run_conf={"repository": REPOSITORY, "target": "main", "input_ref": "main", "job": {}})
        results: dict[str, list[tuple[float, float]]] = {"SparkSubmitOperator": [], "FencedSparkPublishOperator": []}
        protocol: list[float] = []  # the fenced task's time outside the Spark step
        spark_step: list[float] = []  # ...and inside it
        pair = [("SparkSubmitOperator", dags.bare_spark_dag), ("FencedSparkPublishOperator", dags.fenced_spark_dag)]
        for n in range(args.runs):
            # Alternate which goes first, so neither always runs on a warmer (or busier) machine.
            for name, dag in pair if n % 2 == 0 else pair[::-1]:
                task, wall, target = run(dag)
                results[name].append((task, wall))
                ref = repo.branch(target)
                if name == "FencedSparkPublishOperator":
                    marks = dags.MARKS[-1]
                    protocol.append((marks["spark_start"] - marks["start"]) + (marks["end"] - marks["spark_end"]))
                    spark_step.append(marks["spark_end"] - marks["spark_start"])
                    head = ref.get_commit()
                    assert head.parents[0] == input_commit, "the fenced run did not merge onto the input"
                    assert ref.object("tables/counts.csv").exists()
                else:
                    assert repo.branch(target).object("tables/counts.csv").exists()  # uncommitted
                print(f"run {n + 1}/{args.runs} {name}: task {task:.2f} s, dag.test {wall:.2f} s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    rows = []
    for name, samples in results.items():
        tasks = [t for t, _ in samples]
        walls = [w for _, w in samples]
        rows.append(
            [name, len(samples), f"{median(tasks):.2f}", f"{min(tasks):.2f}–{max(tasks):.2f}", f"{median(walls):.2f}"]
        )
    bare = median([t for t, _ in results["SparkSubmitOperator"]])
    fenced = median([t for t, _ in results["FencedSparkPublishOperator"]])
    bare_wall = median([w for _, w in results["SparkSubmitOperator"]])
    fenced_wall = median([w for _, w in results["FencedSparkPublishOperator"]])
    pairs = [
        f - b
        for (f, _), (b, _) in zip(results["FencedSparkPublishOperator"], results["SparkSubmitOperator"], strict=True)
    ]
    print_table(["operator", "runs", "task s (median)", "task s (range)", "dag.test s (median)"], rows)
    print(
        f"ratio fenced / bare: task {fenced / bare:.3f} ({fenced - bare:+.2f} s), "
        f"dag.test {fenced_wall / bare_wall:.3f} ({fenced_wall - bare_wall:+.2f} s); "
        f"median of paired differences {median(pairs):+.2f} s"
    )
    print(
        f"fenced task outside the Spark step: median {median(protocol):.3f} s "
        f"(range {min(protocol):.3f}–{max(protocol):.3f} s) = {median(protocol) / bare:.1%} of the bare task; "
        f"its Spark step: median {median(spark_step):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
