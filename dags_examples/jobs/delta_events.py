"""PySpark job of the Delta example DAG: one day of events into the Delta table ``tables/events``.

The job writes through Delta on the attempt's staging branch (``s3a://<repository>/<staging
branch>/tables/events``), so the new version is numbered on from the table's latest version at the
input commit. A daily run appends its day; a re-run of a past day (``spark.events.rerun=true``)
rewrites that day only, with ``replaceWhere``, as one new version. The first run creates the table.

Confs (set by the DAG): ``spark.events.day`` (YYYY-MM-DD), ``spark.events.rerun`` (true/false),
``spark.events.rows`` (rows per day), ``spark.events.tag`` (a label stored in every row).
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_lakefence.spark import lakefence_spark_session
from airflow_lakefence.spark.delta import DeltaTableLocation, delta_table, with_delta

TABLE = "tables/events"


def table_exists(spark: SparkSession, uri: str) -> bool:
    """Whether the input holds the table (Delta's jar only: no delta-spark Python package needed)."""
    try:
        spark.read.format("delta").load(uri).schema  # noqa: B018 - reading the schema reads the log
    except AnalysisException:
        return False
    return True


def write_day(spark: SparkSession, events: DeltaTableLocation, day: str, rerun: bool, rows: int, tag: str) -> str:
    """Write one day of events into the table as one new Delta version; say what was done.

    :param spark: a session with Delta and S3A for the attempt.
    :param events: the table's locations for the attempt (:func:`airflow_lakefence.spark.delta.delta_table`).
    :param day: the day (YYYY-MM-DD).
    :param rerun: rewrite the day (``replaceWhere``) instead of appending it.
    :param rows: rows for the day.
    :param tag: a label stored in every row.
    """
    df = spark.range(rows).select(F.lit(day).alias("day"), F.col("id"), F.lit(tag).alias("tag"))
    writer = df.write.format("delta")
    if not table_exists(spark, events.uri):
        # The first publication creates the table, partitioned by day.
        writer = writer.mode("append").partitionBy("day").options(**events.write_options("create"))
        what = "created"
    elif rerun:
        # A re-run of a past day: that day's rows are replaced, inside one new Delta version.
        writer = writer.mode("overwrite").option("replaceWhere", f"day = '{day}'")
        writer = writer.options(**events.write_options(f"rerun-{day}"))
        what = "rewrote"
    else:
        writer = writer.mode("append").options(**events.write_options(f"append-{day}"))
        what = "appended"
    writer.save(events.uri)
    version = spark.sql(f"DESCRIBE HISTORY delta.`{events.uri}` LIMIT 1").collect()[0]["version"]
    return f"{what} day {day} ({rows} rows, tag {tag!r}) as Delta version {version} on {events.uri}"


def main() -> None:
    with lakefence_spark_session("lakefence-delta-events", builder=with_delta(SparkSession.builder)) as job:
        spark = job.spark
        day = spark.conf.get("spark.events.day")
        rerun = spark.conf.get("spark.events.rerun", "false").lower() == "true"
        rows = int(spark.conf.get("spark.events.rows", "1000"))
        tag = spark.conf.get("spark.events.tag", "")
        events = delta_table(TABLE)  # the attempt's locations, from the environment the operator set
        print(write_day(spark, events, day, rerun, rows, tag))


if __name__ == "__main__":
    main()
