"""A bare Spark job vs the fenced operator, writing the same parquet dataset into real lakeFS.

The dataset (``--rows``, at least 2,000,000, in ``--files`` parquet files) is committed once as
``events/`` on ``main``. Every run reads it with Spark through lakeFS's S3 gateway (S3A) at the
input commit and writes it back out as parquet, under ``dag.test()``:

- **bare**: ``SparkSubmitOperator``, the job writing straight into a fresh branch through S3A
  (no staging branch, no commit, no fence);
- **fenced direct**: ``FencedSparkPublishOperator`` in direct mode (the job writes its staging
  branch through S3A; the operator commits, fences, merges, verifies, cleans up);
- **fenced workspace**: the same in workspace mode (the job writes a local directory; the
  operator uploads it through the lakeFS API).

All traffic goes through the project's counting proxy in front of lakeFS: reported are the task
wall time and the requests lakeFS served, split into API calls (by swagger operationId) and S3
gateway requests (by method), side by side, with the fenced overhead over the bare job.

Run against a real lakeFS (its S3 gateway is needed; the embedded local server has none)::

    python benchmarks/spark_s3a_bench.py --endpoint http://127.0.0.1:18000 \\
        [--rows 2000000] [--files 4] [--runs 1]

with ``LAKEFS_ACCESS_KEY_ID`` / ``LAKEFS_SECRET_ACCESS_KEY`` in the environment. The script is
also the Spark application it submits (``python spark_s3a_bench.py job`` inside spark-submit).
"""

from __future__ import annotations

import argparse
import atexit
import io
import os
import shutil
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
OUTPUT = "tables/bench/"


# -- the Spark application ------------------------------------------------------------------


def run_job() -> None:
    """Read ``events/`` at the input commit through S3A and write it to the output as parquet."""
    from airflow_lakefence.spark import lakefence_spark_session

    partitions = int(os.environ.get("BENCH_OUTPUT_FILES", "4"))
    with lakefence_spark_session("lakefence-s3a-bench") as job:
        events = job.spark.read.parquet(job.input_uri("events/"))
        events.repartition(partitions).write.mode("overwrite").parquet(job.output_uri(OUTPUT))


# -- the benchmark --------------------------------------------------------------------------


def _build_dags(job: str, files: int) -> dict[str, Any]:
    """The three DAGs (built when this file is imported from the dags folder, not run as a script)."""
    from datetime import timedelta

    import pendulum
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from airflow.sdk import DAG

    from airflow_lakefence.operators import FencedSparkPublishOperator
    from airflow_lakefence.spark import s3a_submit_options

    s3a = s3a_submit_options(
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.log.level": "WARN",
            "spark.pyspark.python": sys.executable,
            "spark.driver.memory": "2g",
        }
    )
    common: dict[str, Any] = {
        "task_id": "write",
        "conn_id": "spark_local",
        "application": job,
        "application_args": ["job"],
        "packages": s3a.packages,
        "conf": s3a.conf,
    }
    env = {"BENCH_OUTPUT_FILES": str(files), "SPARK_LOCAL_IP": "127.0.0.1"}

    def dag(dag_id: str) -> DAG:
        return DAG(dag_id, schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)

    dags: dict[str, Any] = {}
    with dag("s3a_bench_bare") as dags["bare"]:
        # The bare job gets the same locations the operator hands out, pointing at a plain branch;
        # the credentials come from this process's environment, which spark-submit inherits.
        SparkSubmitOperator(
            env_vars={
                **env,
                "LAKEFS_ENDPOINT": "{{ dag_run.conf['endpoint'] }}",
                "LAKEFENCE_REPOSITORY": "{{ dag_run.conf['repository'] }}",
                "LAKEFENCE_INPUT_COMMIT": "{{ dag_run.conf['input_ref'] }}",
                "LAKEFENCE_STAGING_BRANCH": "{{ dag_run.conf['target'] }}",
                "LAKEFENCE_WRITE_MODE": "direct",
            },
            **common,
        )
    for mode in ("direct", "workspace"):
        with dag(f"s3a_bench_fenced_{mode}") as dags[mode]:
            FencedSparkPublishOperator(
                env_vars=env,
                repository="{{ dag_run.conf['repository'] }}",
                target_branch="{{ dag_run.conf['target'] }}",
                input_ref="{{ dag_run.conf['input_ref'] }}",
                write_mode=mode,
                output_prefixes=[OUTPUT],
                execution_timeout=timedelta(minutes=30),
                **common,
            )
    return dags


def _seed(repo: Any, rows: int, files: int) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    main = repo.branch("main")
    per_file = -(-rows // files)
    for index, start in enumerate(range(0, rows, per_file)):
        stop = min(rows, start + per_file)
        table = pa.table(
            {
                "id": pa.array(range(start, stop), pa.int64()),
                "day": pa.array([f"2026-11-{1 + n % 28:02d}" for n in range(start, stop)]),
                "user": pa.array([f"u{n % 9973}" for n in range(start, stop)]),
                "value": pa.array([float(n % 1000) / 7 for n in range(start, stop)]),
            }
        )
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        main.object(f"events/part-{index:05d}.parquet").upload(buffer.getvalue(), pre_sign=False)
    return str(main.commit(f"{rows} events").get_commit().id)


def _count_gateway_requests() -> None:
    """Make the proxy count S3 gateway requests too, as ``s3:<METHOD>`` (it counts API calls only)."""
    from lakefence_testing import proxy

    api_operation = proxy.operation_of

    def operation_of(method: str, path: str) -> str | None:
        operation = api_operation(method, path)
        if operation is None and not path.startswith(proxy.CONTROL_PREFIX):
            return f"s3:{method}"
        return operation

    proxy.operation_of = operation_of  # type: ignore[assignment]


def _rows_at(repo: Any, ref: str) -> tuple[int, int]:
    import pyarrow.parquet as pq

    files = rows = 0
    for obj in repo.ref(ref).objects(prefix=OUTPUT):
        files += 1
        if not obj.path.endswith(".parquet"):
            raise SystemExit(f"unexpected object {obj.path} at {ref}")
        with repo.ref(ref).object(obj.path).reader(mode="rb", pre_sign=False) as fd:
            rows += pq.read_metadata(io.BytesIO(fd.read())).num_rows
    return files, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", default="bench", choices=["bench", "job"])
    parser.add_argument("--endpoint", default=os.environ.get("LAKEFS_ENDPOINT", "http://127.0.0.1:18000"))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=4, help="parquet files in the input and in each output")
    parser.add_argument("--runs", type=int, default=1, help="runs of each variant (the table shows medians)")
    parser.add_argument("--storage-namespace", default="local://", help="prefix of the bench repository's namespace")
    args = parser.parse_args(argv)
    if args.mode == "job":
        run_job()
        return 0
    if args.rows < 2_000_000:
        parser.error("--rows must be at least 2,000,000")
    if not (os.environ.get("LAKEFS_ACCESS_KEY_ID") and os.environ.get("LAKEFS_SECRET_ACCESS_KEY")):
        raise SystemExit("set LAKEFS_ACCESS_KEY_ID and LAKEFS_SECRET_ACCESS_KEY (the lakeFS key pair)")

    from _common import load_module, machine, median, print_table, setup_airflow, temp_home

    from lakefence_testing.proxy import FaultProxy

    home = temp_home("lakefence-s3a-bench-").resolve()
    atexit.register(shutil.rmtree, home, True)
    _count_gateway_requests()
    key, secret = os.environ["LAKEFS_ACCESS_KEY_ID"], os.environ["LAKEFS_SECRET_ACCESS_KEY"]
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    with FaultProxy(args.endpoint) as lakefs_proxy:
        dags_folder = setup_airflow(home, [Path(__file__).resolve()], lakefs_proxy.url, key, secret)
        import lakefs

        client = lakefs.Client(host=lakefs_proxy.url, username=key, password=secret)
        name = f"s3a-bench-{uuid.uuid4().hex[:8]}"
        prefix = args.storage_namespace
        namespace = prefix + name if prefix.endswith("://") else f"{prefix.rstrip('/')}/{name}"
        repo = lakefs.Repository(name, client=client).create(storage_namespace=namespace)
        started = time.perf_counter()
        input_commit = _seed(repo, args.rows, args.files)
        print(f"seeded {args.rows:,} rows in {args.files} files in {time.perf_counter() - started:.1f} s", flush=True)
        os.environ["BENCH_OUTPUT_FILES"] = str(args.files)
        dags = load_module(dags_folder / Path(__file__).name, "lakefence_s3a_bench_dags").DAGS
        results: dict[str, list[tuple[float, Counter[str]]]] = {"bare": [], "direct": [], "workspace": []}
        order = ["bare", "direct", "workspace"]
        for n in range(args.runs):
            for variant in order if n % 2 == 0 else order[::-1]:
                target = f"{variant}-{n}"
                repo.branch(target).create(input_commit)
                conf = {"repository": name, "target": target, "input_ref": input_commit, "endpoint": lakefs_proxy.url}
                lakefs_proxy.controls.reset_counts()
                started = time.perf_counter()
                dag_run = dags[variant].test(run_conf=conf)
                wall = time.perf_counter() - started
                counts = Counter(lakefs_proxy.controls.counts())
                if str(dag_run.state) not in ("success", "DagRunState.SUCCESS"):
                    raise SystemExit(f"{variant} failed: {dag_run.state}")
                files, rows = _rows_at(repo, target)
                if rows != args.rows:
                    raise SystemExit(f"{variant}: {rows} rows in {target}, expected {args.rows}")
                results[variant].append((wall, counts))
                api = sum(v for k, v in counts.items() if not k.startswith("s3:"))
                gateway = sum(v for k, v in counts.items() if k.startswith("s3:"))
                print(
                    f"run {n + 1} {variant}: {wall:.1f} s, {files} files / {rows:,} rows in {target}, "
                    f"{api} API calls, {gateway} S3 requests",
                    flush=True,
                )
        try:
            repo.delete()
        except Exception as exc:  # the numbers are printed below either way
            print(f"could not delete {name}: {exc}")
    print(f"load average after: {os.getloadavg()[0]:.1f}\n")

    def summary(variant: str) -> tuple[float, float, float, Counter[str]]:
        walls = [w for w, _ in results[variant]]
        last = results[variant][-1][1]
        api = median([sum(v for k, v in c.items() if not k.startswith("s3:")) for _, c in results[variant]])
        gateway = median([sum(v for k, v in c.items() if k.startswith("s3:")) for _, c in results[variant]])
        return median(walls), api, gateway, last

    bare_wall, bare_api, bare_s3, _ = summary("bare")
    rows_out = []
    for variant, label in (("bare", "bare SparkSubmitOperator"), ("direct", "fenced, direct"),
                           ("workspace", "fenced, workspace")):  # fmt: skip
        wall, api, s3, last = summary(variant)
        top = ", ".join(f"{k} {v}" for k, v in last.most_common() if not k.startswith("s3:"))
        s3_methods = ", ".join(f"{k[3:]} {v}" for k, v in sorted(last.items()) if k.startswith("s3:"))
        overhead = (
            "—"
            if variant == "bare"
            else f"{wall - bare_wall:+.1f} s, {api - bare_api:+.0f} API, {s3 - bare_s3:+.0f} S3"
        )
        rows_out.append([label, f"{wall:.1f}", f"{api:.0f}", f"{s3:.0f}", overhead, top or "—", s3_methods or "—"])
    print_table(
        ["variant", "task wall s", "lakeFS API calls", "S3 gateway requests", "overhead vs bare",
         "API calls (last run)", "S3 requests by method (last run)"],
        rows_out,
    )  # fmt: skip
    print(f"\n{args.rows:,} rows, {args.files} parquet files in and out, {args.runs} run(s) each (medians).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
else:
    # Imported from the dags folder by main(): dag.test() wants the DAGs' file inside it.
    DAGS = _build_dags(str(Path(__file__).resolve()), int(os.environ.get("BENCH_OUTPUT_FILES", "4")))
