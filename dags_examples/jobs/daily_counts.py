"""PySpark job of the example DAG: count events per day from the pinned input commit.

Locally (no hadoop-aws jars) the input is read on the driver through lakefs-spec; on a cluster set
``LAKEFENCE_EXAMPLE_READ=s3a`` to read it with Spark through the lakeFS S3 gateway.
"""

from __future__ import annotations

import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_lakefence.spark import LakefenceLocations, configure_s3a, lakefence_locations

INPUT = "events/"
OUTPUT = "tables/daily_counts/"


def read_input(spark: SparkSession, loc: LakefenceLocations) -> DataFrame:
    if os.environ.get("LAKEFENCE_EXAMPLE_READ") == "s3a":
        configure_s3a(spark, loc)
        return spark.read.parquet(loc.input_uri(INPUT))
    import pyarrow.parquet as pq
    from lakefs_spec import LakeFSFileSystem

    fs = LakeFSFileSystem(
        host=loc.endpoint,
        username=os.environ["LAKEFS_ACCESS_KEY_ID"],
        password=os.environ["LAKEFS_SECRET_ACCESS_KEY"],
    )
    table = pq.read_table(f"{loc.repository}/{loc.input_commit}/{INPUT}", filesystem=fs)
    return spark.createDataFrame(table.to_pandas())


def main() -> None:
    loc = lakefence_locations()
    spark = SparkSession.builder.appName("lakefence-daily-counts").getOrCreate()
    try:
        events = read_input(spark, loc)
        daily = events.groupBy(F.col("day")).agg(F.count("*").alias("events")).orderBy("day")
        daily.coalesce(1).write.mode("overwrite").parquet(loc.output_uri(OUTPUT))
        print(f"wrote {daily.count()} days from input commit {loc.input_commit}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
