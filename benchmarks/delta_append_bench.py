"""Rows per second of a Delta append through lakeFS's S3 gateway: bare vs through a staging branch.

One local SparkSession (Delta + S3A, as the Delta tier sets it up) against a real lakeFS:

- **bare**: ``df.write.format("delta").mode("append")`` straight into a branch
  (``s3a://<repo>/bare/tables/events``): no staging branch, no commit, no check, no merge;
- **staged**: what a fenced publish of the same append does around the write: a hidden staging
  branch from main's HEAD, the write (with the attempt's ``txnAppId``/``txnVersion``), a commit,
  lakeFS's two-dot diff of input → staged commit and a listing of the input's ``_delta_log/``,
  :func:`airflow_lakefence.core.staging.delta_tables.check_delta_changes`, the merge into main, the branch's
  deletion. (The operator's own steps — attempt fences, XCom — are not included: see
  docs/performance.md for those.)

- **fenced**: the same append through the package's own :class:`~airflow_lakefence.core.engine.PublishEngine`
  (the code the operators run: input pin, staging branch, stage commit, the Delta check, the publish
  fence's decision, merge, verification, clean-up) over the lakeFS SDK adapter, with a stand-in
  attempt fence that is always current (no Airflow: its fences cost metadata-DB reads, not lakeFS
  calls); the job is the write with the attempt's txn options.

Both tables start from the same version 0; the variants alternate (bare first), ``--runs`` each.
A third variant, **bare+txn**, is the bare append with ``txnAppId``/``txnVersion`` (Delta then
reads the table's transaction records before writing), and **staged: write** is the Delta write
alone inside the staged variant: together they split the staged variant's cost between Delta and
the lakeFS steps.

    python benchmarks/delta_append_bench.py [--endpoint URL] [--rows 1000000] [--runs 1]

Without ``--endpoint`` it launches real lakeFS from the project's build
(:mod:`tests.tools.real_lakefs`); with it, ``LAKEFS_ACCESS_KEY_ID`` /
``LAKEFS_SECRET_ACCESS_KEY`` must be set. Needs the Delta environment (``tox -e delta``'s deps).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The real-lakeFS launcher is the repository's (tests/tools), not the package's.
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

TABLE_ROOT = "tables/events"


@dataclasses.dataclass
class CurrentAttempt:
    """The attempt fence port of a try that stays current (the benchmark has no Airflow)."""

    attempt: Any

    def arm(self) -> None:
        """Nothing to record."""

    def stale_reason(self) -> str | None:
        """Always current."""
        return None

    def was_killed(self) -> bool:
        """Never killed."""
        return False

    def fail(self, where: str, reason: str) -> Any:
        """Never called: the attempt is never stale."""
        raise AssertionError(f"{where}: {reason}")


@contextlib.contextmanager
def lakefs_endpoint(endpoint: str | None) -> Iterator[tuple[str, str, str]]:
    """(url, key id, secret) of the given lakeFS, or of one launched for the run."""
    if endpoint:
        yield (
            endpoint.rstrip("/").removesuffix("/api/v1"),
            os.environ["LAKEFS_ACCESS_KEY_ID"],
            os.environ["LAKEFS_SECRET_ACCESS_KEY"],
        )
        return
    from tests.tools.real_lakefs import RealLakeFS, ensure_lakefs_binary

    with (
        tempfile.TemporaryDirectory(prefix="lakefence-delta-bench-") as tmp,
        RealLakeFS(ensure_lakefs_binary(), Path(tmp)) as real,
    ):
        yield real.url, real.access_key_id, real.secret_access_key


def spark_session() -> Any:
    from delta import configure_spark_with_delta_pip
    from pyspark.sql import SparkSession

    from airflow_lakefence.spark import COMMITTER_SETTINGS, hadoop_aws_coordinate
    from airflow_lakefence.spark.delta import with_delta

    builder = with_delta(
        SparkSession.builder.master("local[2]")
        .appName("lakefence-delta-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.driver.host", "127.0.0.1")
    )
    for key, value in COMMITTER_SETTINGS.items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    spark = configure_spark_with_delta_pip(builder, extra_packages=[hadoop_aws_coordinate()]).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--endpoint", help="a running lakeFS (default: launch real lakeFS)")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()

    import lakefs

    from airflow_lakefence.core.engine import PublishEngine, PublishRequest
    from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
    from airflow_lakefence.core.names.locations import AttemptLocations
    from airflow_lakefence.core.staging.delta_tables import (
        DeltaTableOutput,
        PathChange,
        check_delta_changes,
        latest_version,
    )
    from airflow_lakefence.lakefs_adapter.client import LakeFSClient
    from airflow_lakefence.spark import configure_s3a
    from airflow_lakefence.spark.delta import delta_table

    table = DeltaTableOutput(TABLE_ROOT)
    with lakefs_endpoint(args.endpoint) as (url, key, secret):
        client = lakefs.Client(host=url, username=key, password=secret)  # type: ignore[no-untyped-call]
        port = LakeFSClient(url, key, secret)
        name = f"delta-bench-{uuid.uuid4().hex[:8]}"
        repo = lakefs.Repository(name, client=client).create(storage_namespace=f"local://{name}")
        spark = spark_session()
        env = {"LAKEFS_ACCESS_KEY_ID": key, "LAKEFS_SECRET_ACCESS_KEY": secret}
        main_branch = repo.branch("main")

        def batch(run: int) -> Any:
            return spark.range(args.rows).selectExpr(f"'2026-11-{10 + run:02d}' as day", "id", f"{run} as run")

        # Version 0 on main, then a branch "bare" from it: both variants append to the same table.
        seed = AttemptLocations(
            repository=repo.id,
            target_branch=None,
            input_commit=main_branch.get_commit().id,
            staging_branch="main",
            workspace=None,
            write_mode="direct",
            endpoint=url,
        )
        configure_s3a(spark, seed, env)
        batch(0).limit(10).write.format("delta").partitionBy("day").save(delta_table(table, seed).uri)
        main_branch.commit("version 0")
        repo.branch("bare").create("main")
        bare_uri = f"s3a://{repo.id}/bare/{TABLE_ROOT}"

        timings: dict[str, list[float]] = {
            "bare": [],
            "bare+txn": [],
            "staged": [],
            "staged: write": [],
            "fenced": [],
            "fenced: write": [],
        }
        for run in range(1, args.runs + 1):
            started = time.monotonic()
            batch(run).write.format("delta").mode("append").save(bare_uri)
            timings["bare"].append(time.monotonic() - started)

            # The same bare append with idempotent-write options: Delta then reads the table's txn
            # records (its snapshot state) before writing.
            started = time.monotonic()
            batch(run).write.format("delta").mode("append").options(txnAppId=f"bench-bare-{run}", txnVersion="0").save(
                bare_uri
            )
            timings["bare+txn"].append(time.monotonic() - started)

            started = time.monotonic()
            input_commit = main_branch.get_commit().id
            staging = f"lakefence-bench-t{run}-{uuid.uuid4().hex[:8]}"
            branch = repo.branch(staging).create(input_commit, hidden=True)
            locations = AttemptLocations(
                repository=repo.id,
                target_branch=None,
                input_commit=input_commit,
                staging_branch=staging,
                workspace=None,
                write_mode="direct",
                endpoint=url,
            )
            configure_s3a(spark, locations, env)
            target = delta_table(table, locations)
            write_started = time.monotonic()
            batch(run).write.format("delta").mode("append").options(**target.write_options("bench")).save(target.uri)
            timings["staged: write"].append(time.monotonic() - write_started)
            staged = branch.commit("stage").get_commit().id
            changes = [PathChange(c.path, c.type) for c in repo.ref(input_commit).diff(staged, type="two_dot")]
            log = [o.path for o in repo.ref(input_commit).objects(prefix=table.log_prefix)]
            [change] = check_delta_changes(changes, [table], {table.root: latest_version(log, table)})
            assert len(change.new_versions) == 1
            branch.merge_into(main_branch, message="publish")
            branch.delete()
            timings["staged"].append(time.monotonic() - started)

            # The engine the operators run, around the same append.
            written: list[float] = []

            def job(locations: AttemptLocations, run: int = run, written: list[float] = written) -> None:
                s3a = dataclasses.replace(locations, endpoint=url)
                configure_s3a(spark, s3a, env)
                target = delta_table(table, s3a)
                write_started = time.monotonic()
                batch(run).write.format("delta").mode("append").options(**target.write_options("bench")).save(
                    target.uri
                )
                written.append(time.monotonic() - write_started)

            started = time.monotonic()
            key = PublicationKey("delta_bench", f"run-{run}-{uuid.uuid4().hex[:8]}", "append")
            request = PublishRequest(
                repository=repo.id,
                target_branch="main",
                input_ref="main",
                write_mode="direct",
                output_tables=[table],
            )
            result = PublishEngine(port, CurrentAttempt(AttemptId(key, 1, uuid.uuid4().hex)), request).run(job)
            assert result.decision == "merge" and result.delta_versions == {table.prefix: 2 * run}, result
            timings["fenced"].append(time.monotonic() - started)
            timings["fenced: write"].append(written[0])

        for variant, values in timings.items():
            median = statistics.median(values)
            print(
                f"{variant:14s} rows={args.rows} runs={len(values)} median_s={median:.2f} "
                f"rows_per_s={args.rows / median:,.0f} all_s={[round(v, 2) for v in values]}"
            )
        print(f"load average after the run: {os.getloadavg()}")
        spark.stop()
        repo.delete()


if __name__ == "__main__":
    main()
