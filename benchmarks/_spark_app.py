"""The PySpark application of overhead_vs_spark_submit.py (not a benchmark itself).

A small aggregation in Spark whose result the driver writes into lakeFS with the SDK: into the
attempt's staging branch when started by FencedSparkPublishOperator (direct mode), else into the
branch named by ``BENCH_BRANCH`` (the bare SparkSubmitOperator). Same Spark work either way.
"""

from __future__ import annotations

import os

import lakefs
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def main() -> None:
    spark = SparkSession.builder.appName("lakefence-bench").getOrCreate()
    try:
        rows = (
            spark.range(100_000).select((F.col("id") % 7).alias("day")).groupBy("day").count().orderBy("day").collect()
        )
    finally:
        spark.stop()
    body = "day,count\n" + "".join(f"{row['day']},{row['count']}\n" for row in rows)
    repository = os.environ.get("LAKEFENCE_REPOSITORY") or os.environ["BENCH_REPOSITORY"]
    branch = os.environ.get("LAKEFENCE_STAGING_BRANCH") or os.environ["BENCH_BRANCH"]
    client = lakefs.Client(
        host=os.environ["LAKEFS_ENDPOINT"],
        username=os.environ["LAKEFS_ACCESS_KEY_ID"],
        password=os.environ["LAKEFS_SECRET_ACCESS_KEY"],
    )
    lakefs.Repository(repository, client=client).branch(branch).object("tables/counts.csv").upload(
        body.encode(), pre_sign=False
    )
    print(f"wrote {len(rows)} rows to {repository}/{branch}")


if __name__ == "__main__":
    main()
