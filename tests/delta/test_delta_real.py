"""A Delta table published through staging branches on real lakeFS, written by real PySpark through S3A.

Each publish is what the fenced operator does, done here with the lakeFS SDK directly: a staging
branch from the input commit, the Delta write into it through the S3 gateway, a commit, the
pre-publish Delta check of :mod:`airflow_lakefence.core.delta` on lakeFS's diff, and a merge into
``main`` (or, for an abandoned publication, a hard reset to the retry's staged commit).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import lakefs
import pytest
from lakefs.exceptions import ConflictException

from airflow_lakefence.core.delta import (
    DeltaTableChange,
    DeltaTableOutput,
    PathChange,
    check_delta_changes,
    latest_version,
)
from airflow_lakefence.core.locations import AttemptLocations
from airflow_lakefence.delta import DeltaTableLocation, delta_table
from airflow_lakefence.exceptions import DeltaLogError
from airflow_lakefence.spark import configure_s3a
from tests.conftest import TIER_FIGURES_PROPERTY

pytest.importorskip("delta", reason="the Delta tier needs delta-spark (tox -e delta)")

pytestmark = [
    pytest.mark.delta,
    pytest.mark.spark,
    pytest.mark.s3a,
    pytest.mark.real_lakefs,
    pytest.mark.usefixtures("gateway_lakefs"),
]

TABLE = DeltaTableOutput("tables/events")
DAYS = ["2026-11-01", "2026-11-02", "2026-11-03"]
ROWS_PER_DAY = 1_000
FIGURES: dict[str, float] = {}


@pytest.fixture(autouse=True)
def _report_figures(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's wall time, shown in the run's summary (not asserted)."""
    started = time.monotonic()
    yield
    FIGURES[f"{request.node.name} s"] = time.monotonic() - started
    spark = request.getfixturevalue("delta_spark")
    FIGURES["SparkSession start (with Ivy resolution) s"] = spark.lakefence_start_seconds
    request.node.user_properties.append((f"{TIER_FIGURES_PROPERTY}delta tier", json.dumps(FIGURES)))


def rows(spark: Any, day: str, run: int, count: int = ROWS_PER_DAY) -> Any:
    return spark.createDataFrame([(day, i, run) for i in range(count)], "day string, id long, run int")


@dataclass
class Staged:
    """One attempt's staged Delta change."""

    branch: lakefs.Branch
    input_commit: str
    commit: str
    change: DeltaTableChange


def stage(
    spark: Any,
    server: Any,
    repo: lakefs.Repository,
    input_commit: str,
    name: str,
    job: Callable[[DeltaTableLocation], None],
) -> Staged:
    """A staging branch from ``input_commit``, the job's Delta writes, a commit, and the Delta check."""
    branch = repo.branch(name).create(input_commit, hidden=True)
    locations = AttemptLocations(
        repository=repo.id,
        target_branch=None,
        input_commit=input_commit,
        staging_branch=name,
        workspace=None,
        write_mode="direct",
        endpoint=server.url,
    )
    # What lakefence_spark_session does inside a job, for a session shared by the module's attempts.
    configure_s3a(
        spark,
        locations,
        {"LAKEFS_ACCESS_KEY_ID": server.access_key_id, "LAKEFS_SECRET_ACCESS_KEY": server.secret_access_key},
    )
    job(delta_table(TABLE, locations))
    staged = branch.commit(f"stage {name}", metadata={"lakefence.role": "stage"}).get_commit().id
    changes = [PathChange(c.path, c.type) for c in repo.ref(input_commit).diff(staged, type="two_dot")]
    input_log = [o.path for o in repo.ref(input_commit).objects(prefix=TABLE.log_prefix)]
    [change] = check_delta_changes(
        changes, [TABLE], {TABLE.root: latest_version(input_log, TABLE)}, staging_branch=name
    )
    return Staged(branch, input_commit, staged, change)


def publish(repo: lakefs.Repository, staged: Staged) -> str:
    """Merge the staging branch into main if main is still the input (the publish fence's merge row)."""
    main = repo.branch("main")
    assert main.get_commit().id == staged.input_commit
    merged = staged.branch.merge_into(main, message="publish")
    assert repo.commit(merged).get_commit().parents == [staged.input_commit, staged.commit]
    staged.branch.delete()
    return merged


def head(repo: lakefs.Repository) -> str:
    return repo.branch("main").get_commit().id


def table_at(spark: Any, repo: lakefs.Repository, ref: str, **options: str) -> Any:
    """The table as a plain Delta reader sees it at a lakeFS commit."""
    return spark.read.format("delta").options(**options).load(f"s3a://{repo.id}/{ref}/{TABLE.root}")


def counts(df: Any) -> Counter[tuple[str, int]]:
    return Counter({(r["day"], r["run"]): r["count"] for r in df.groupBy("day", "run").count().collect()})


def log_versions(repo: lakefs.Repository, ref: str) -> list[int]:
    names = [o.path.rsplit("/", 1)[1] for o in repo.ref(ref).objects(prefix=TABLE.log_prefix)]
    return sorted(int(n.removesuffix(".json")) for n in names if n.endswith(".json") and n[:20].isdigit())


def create_table(spark: Any, server: Any, repo: lakefs.Repository) -> str:
    """Publish version 0 (three days) on main; return the publication."""

    def job(table: DeltaTableLocation) -> None:
        df = rows(spark, DAYS[0], 0).union(rows(spark, DAYS[1], 0)).union(rows(spark, DAYS[2], 0))
        df.write.format("delta").partitionBy("day").options(**table.write_options("create")).save(table.uri)

    staged = stage(spark, server, repo, head(repo), "lakefence-events-create-t1-00000000", job)
    assert staged.change.input_version is None and staged.change.new_versions == (0,)
    assert staged.change.data_files_added >= 3  # at least one file per day partition
    return publish(repo, staged)


def test_daily_append_and_three_reruns_of_a_past_day(
    delta_spark: Any, gateway_lakefs: Any, lakefs_repo: lakefs.Repository
) -> None:
    spark, repo = delta_spark, lakefs_repo
    first = create_table(spark, gateway_lakefs, repo)

    def append(table: DeltaTableLocation) -> None:
        rows(spark, "2026-11-04", 0).write.format("delta").mode("append").options(
            **table.write_options("append-2026-11-04")
        ).save(table.uri)

    staged = stage(spark, gateway_lakefs, repo, first, "lakefence-events-append-t1-00000000", append)
    assert (staged.change.input_version, staged.change.new_versions) == (0, (1,))
    appended = publish(repo, staged)

    publications = [appended]
    bookkeeping: list[str] = list(staged.change.bookkeeping)
    for run in (1, 2, 3):

        def rerun(table: DeltaTableLocation, run: int = run) -> None:
            rows(spark, DAYS[1], run).write.format("delta").mode("overwrite").option(
                "replaceWhere", f"day = '{DAYS[1]}'"
            ).options(**table.write_options("rerun-2026-11-02")).save(table.uri)

        staged = stage(spark, gateway_lakefs, repo, head(repo), f"lakefence-events-rerun-t{run}-00000000", rerun)
        # Each re-run is one Delta version on from the then-HEAD's: 2, 3, 4.
        assert (staged.change.input_version, staged.change.new_versions) == (run, (run + 1,))
        bookkeeping += staged.change.bookkeeping
        publications.append(publish(repo, staged))

    final = publications[-1]
    # Plain Delta readers at the published commit: the re-run day's rows exactly once (the last
    # run's), every other day untouched.
    expected = Counter({(DAYS[0], 0): ROWS_PER_DAY, (DAYS[1], 3): ROWS_PER_DAY, (DAYS[2], 0): ROWS_PER_DAY,
                        ("2026-11-04", 0): ROWS_PER_DAY})  # fmt: skip
    assert counts(table_at(spark, repo, final)) == expected
    assert log_versions(repo, final) == [0, 1, 2, 3, 4]
    # Delta's checkpoints (every 2 versions here) and its _last_checkpoint rewrites passed the check.
    names = {p.rsplit("/", 1)[1] for p in bookkeeping}
    assert {f"{2:020d}.checkpoint.parquet", f"{4:020d}.checkpoint.parquet", "_last_checkpoint"} <= names, names
    # Time travel inside the published commit, and the earlier publications' commits, agree.
    assert counts(table_at(spark, repo, final, versionAsOf="0")) == Counter({(d, 0): ROWS_PER_DAY for d in DAYS})
    assert counts(table_at(spark, repo, final, versionAsOf="2"))[(DAYS[1], 1)] == ROWS_PER_DAY
    assert counts(table_at(spark, repo, publications[1])) == counts(table_at(spark, repo, final, versionAsOf="2"))
    assert counts(table_at(spark, repo, first)) == Counter({(d, 0): ROWS_PER_DAY for d in DAYS})
    assert [b.id for b in repo.branches(prefix="lakefence", show_hidden=True)] == []


def test_a_repeated_write_in_one_attempt_is_a_no_op(
    delta_spark: Any, gateway_lakefs: Any, lakefs_repo: lakefs.Repository
) -> None:
    spark, repo = delta_spark, lakefs_repo
    published = create_table(spark, gateway_lakefs, repo)
    day = "2026-11-05"

    def job(table: DeltaTableLocation) -> None:
        options = table.write_options("append-2026-11-05")
        for _ in range(2):  # a driver re-run by the cluster manager repeats the same write
            rows(spark, day, 1).write.format("delta").mode("append").options(**options).save(table.uri)
        # The same data under another write name is a new write: the skip came from the txn options.
        rows(spark, day, 2).write.format("delta").mode("append").options(**table.write_options("something-else")).save(
            table.uri
        )

    staged = stage(spark, gateway_lakefs, repo, published, "lakefence-events-txn-t1-00000000", job)
    assert staged.change.new_versions == (1, 2)
    got = counts(table_at(spark, repo, staged.commit))
    assert got[(day, 1)] == ROWS_PER_DAY and got[(day, 2)] == ROWS_PER_DAY
    # The log records the attempt's two app ids, each at version 0.
    log = [repo.ref(staged.commit).object(f"{TABLE.log_prefix}{v:020d}.json").reader(mode="r").read() for v in (1, 2)]
    txn = [json.loads(line)["txn"] for text in log for line in text.splitlines() if '"txn"' in line]
    assert [(t["appId"].startswith("lakefence-lakefence-events-txn-t1-00000000-"), t["version"]) for t in txn] == [
        (True, 0),
        (True, 0),
    ]


def test_a_retry_replaces_an_abandoned_publication_with_one_version(
    delta_spark: Any, gateway_lakefs: Any, lakefs_repo: lakefs.Repository, lakefs_client: lakefs.Client
) -> None:
    """Try 1 published version 1 and died; try 2 starts from the same input and replaces it: one version 1."""
    spark, repo = delta_spark, lakefs_repo
    input_commit = create_table(spark, gateway_lakefs, repo)
    day = "2026-11-06"

    def job_of(run: int) -> Callable[[DeltaTableLocation], None]:
        def job(table: DeltaTableLocation) -> None:
            rows(spark, day, run).write.format("delta").mode("append").options(
                **table.write_options("append-2026-11-06")
            ).save(table.uri)

        return job

    abandoned = publish(repo, stage(spark, gateway_lakefs, repo, input_commit, "lakefence-events-d-t1-aaaaaaaa",
                                    job_of(1)))  # fmt: skip
    retry = stage(spark, gateway_lakefs, repo, input_commit, "lakefence-events-d-t2-bbbbbbbb", job_of(2))
    # Checked against the input, as the publish step does for a replacement: one new version 1.
    assert (retry.change.input_version, retry.change.new_versions) == (0, (1,))
    assert repo.commit(abandoned).get_commit().parents[0] == input_commit
    lakefs_client.sdk_client.experimental_api.hard_reset_branch(repo.id, "main", retry.commit, force=False)
    assert head(repo) == retry.commit
    assert log_versions(repo, head(repo)) == [0, 1]
    got = counts(table_at(spark, repo, head(repo)))
    assert got[(day, 2)] == ROWS_PER_DAY and (day, 1) not in got  # no duplicate rows, the retry's version


def test_two_writers_of_one_table_exactly_one_lands(
    delta_spark: Any, gateway_lakefs: Any, lakefs_repo: lakefs.Repository
) -> None:
    """Both stage version 1 of the table from one base; the second merge conflicts on _delta_log/...1.json."""
    spark, repo = delta_spark, lakefs_repo
    base = create_table(spark, gateway_lakefs, repo)

    def job_of(day: str) -> Callable[[DeltaTableLocation], None]:
        def job(table: DeltaTableLocation) -> None:
            rows(spark, day, 7).write.format("delta").mode("append").save(table.uri)

        return job

    one = stage(spark, gateway_lakefs, repo, base, "lakefence-events-w1-t1-00000000", job_of("2026-11-07"))
    two = stage(spark, gateway_lakefs, repo, base, "lakefence-events-w2-t1-00000000", job_of("2026-11-08"))
    assert one.change.new_versions == two.change.new_versions == (1,)
    publish(repo, one)
    with pytest.raises(ConflictException):
        two.branch.merge_into(repo.branch("main"), message="publish")
    assert counts(table_at(spark, repo, head(repo)))[("2026-11-07", 7)] == ROWS_PER_DAY
    assert log_versions(repo, head(repo)) == [0, 1]
    # Checked against the new HEAD instead, the loser's change is no longer an append from it.
    changes = [PathChange(c.path, c.type) for c in repo.ref(head(repo)).diff(two.commit, type="two_dot")]
    with pytest.raises(DeltaLogError):
        check_delta_changes(changes, [TABLE], {TABLE.root: 1})
