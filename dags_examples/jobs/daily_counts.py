"""PySpark job of the example DAG: count events per day from the pinned input commit.

With S3A (the DAG passes ``airflow_lakefence.spark.s3a_submit_options()``: hadoop-aws matching
Spark's Hadoop) the job reads the input commit with ``spark.read`` through the lakeFS S3 gateway
and, in direct mode, writes into the staging branch with Spark's own writer. Without it (the
embedded demo: its local lakeFS server has no S3 gateway) the input is read on the driver through
lakefs-spec and the output goes to the workspace.
"""

from __future__ import annotations

import os

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from airflow_lakefence.spark import LakeFenceJob, lakefence_spark_session

INPUT = "events/"
OUTPUT = "tables/daily_counts/"


def read_input(job: LakeFenceJob) -> DataFrame:
    if job.s3a:
        return job.spark.read.parquet(job.input_uri(INPUT))
    import pyarrow.parquet as pq
    from lakefs_spec import LakeFSFileSystem

    loc = job.locations
    fs = LakeFSFileSystem(
        host=loc.endpoint,
        username=os.environ["LAKEFS_ACCESS_KEY_ID"],
        password=os.environ["LAKEFS_SECRET_ACCESS_KEY"],
    )
    table = pq.read_table(f"{loc.repository}/{loc.input_commit}/{INPUT}", filesystem=fs)
    return job.spark.createDataFrame(table.to_pandas())


def main() -> None:
    with lakefence_spark_session("lakefence-daily-counts") as job:
        daily = read_input(job).groupBy(F.col("day")).agg(F.count("*").alias("events")).orderBy("day")
        daily.coalesce(1).write.mode("overwrite").parquet(job.output_uri(OUTPUT))
        days = daily.count()
        via = "s3a" if job.s3a else "driver"
        print(f"wrote {days} days from input commit {job.locations.input_commit} (input read via {via})")


if __name__ == "__main__":
    main()
