"""A Delta table published through the fenced operators: real Airflow (``dag.test()``), real lakeFS,
real PySpark in local mode writing through the S3 gateway with Delta's jar from Maven.

Most scenarios run the example's write (``write_day`` of dags_examples/jobs/delta_events.py)
through ``FencedPythonPublishOperator`` on the tier's one SparkSession (tests/delta/conftest.py):
one JVM for every try, the same engine and checks around it. The retry after a death runs
``FencedSparkPublishOperator``: each try a ``spark-submit`` of the example's job with
``--packages``. The test process reads every published table back with plain
``spark.read.format("delta")`` at the published commit.
"""

from __future__ import annotations

import importlib.util
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.names.locations import AttemptLocations
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.exceptions import DeltaOutputModeError, PublishFenceError
from airflow_lakefence.spark import configure_s3a
from airflow_lakefence.spark.delta import delta_package
from tests.conftest import DAGS_FOLDER, TIER_FIGURES_PROPERTY
from tests.integration.helpers import die_after_publishing, read_text, spark_task, staging_branches, xcoms

pytest.importorskip("delta", reason="the Delta tier needs delta-spark (tox -e delta)")

pytestmark = [
    pytest.mark.delta,
    pytest.mark.spark,
    pytest.mark.s3a,
    pytest.mark.real_lakefs,
    pytest.mark.usefixtures("airflow_db", "lakefs_conn", "gateway_lakefs"),
]

TABLE = DeltaTableOutput("tables/events")
ROWS = 200
D1, D2, D3 = "2026-11-01", "2026-11-02", "2026-11-03"
FIGURES: dict[str, float] = {}


@pytest.fixture(autouse=True)
def _figures_and_failpoints(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test's wall time in the run's summary; no failpoint outlives its test."""
    started = time.monotonic()
    try:
        yield
    finally:
        failpoints.disarm_all()
        FIGURES[f"{request.node.name} s"] = time.monotonic() - started
        if "delta_spark" in request.fixturenames:
            spark = request.getfixturevalue("delta_spark")
            FIGURES["SparkSession start (with Ivy resolution) s"] = spark.lakefence_start_seconds
        request.node.user_properties.append((f"{TIER_FIGURES_PROPERTY}delta tier", json.dumps(FIGURES)))


def table_at(spark: Any, repo: lakefs.Repository, ref: str, **options: str) -> Any:
    """The table as a plain Delta reader sees it at a lakeFS commit."""
    return spark.read.format("delta").options(**options).load(f"s3a://{repo.id}/{ref}/{TABLE.root}")


def counts(df: Any) -> Counter[tuple[str, str]]:
    return Counter({(r["day"], r["tag"]): r["count"] for r in df.groupBy("day", "tag").count().collect()})


def log_versions(repo: lakefs.Repository, ref: str) -> list[int]:
    names = [o.path.rsplit("/", 1)[1] for o in repo.ref(ref).objects(prefix=TABLE.log_prefix)]
    return sorted(int(n.removesuffix(".json")) for n in names if n.endswith(".json") and n[:20].isdigit())


def reader(spark: Any, server: Any, repo: lakefs.Repository) -> Any:
    """The tier's SparkSession pointed at the repository through the gateway (as a job would be)."""
    locations = AttemptLocations(
        repository=repo.id,
        target_branch="main",
        input_commit="main",
        staging_branch=None,
        workspace=None,
        write_mode="read_only",
        endpoint=server.url,
    )
    secrets = {"LAKEFS_ACCESS_KEY_ID": server.access_key_id, "LAKEFS_SECRET_ACCESS_KEY": server.secret_access_key}
    configure_s3a(spark, locations, secrets)
    return spark


def seed_table(spark: Any, repo: lakefs.Repository) -> str:
    """Version 0 of the table (days D1 and D2, tag ``seed``) written straight on main and committed."""
    df = spark.createDataFrame(
        [(d, i, "seed") for d in (D1, D2) for i in range(ROWS)], "day string, id long, tag string"
    )
    df.write.format("delta").partitionBy("day").save(f"s3a://{repo.id}/main/{TABLE.root}")
    return repo.branch("main").commit("seed the events table").get_commit().id


def asset_extras(uri: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        return [dict(r.extra) for r in rows.filter(AssetModel.uri == uri).order_by(AssetEvent.id)]


def test_the_example_dag_is_the_spark_operator_the_docs_show() -> None:
    """dags_examples/example_delta_events.py parses into the documented Delta task (no try: tests below run it)."""
    spec = importlib.util.spec_from_file_location(
        "lakefence_example_delta", DAGS_FOLDER / "examples" / "example_delta_events.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    task = example.dag.get_task("events")
    assert task.write_mode == "direct" and task.s3a and [t.root for t in task.output_tables] == [TABLE.root]
    assert delta_package() in task.packages and task.application.endswith("jobs/delta_events.py")


def run_py(dag: Any, repo: lakefs.Repository, input_ref: str, day: str, tag: str, **conf: Any) -> dict[str, Any]:
    """One run of a Python-adapter DAG (the example's write through the tier's SparkSession); its XComs."""
    conf = {"repository": repo.id, "input_ref": input_ref, "day": day, "rows": ROWS, "tag": tag, **conf}
    dr = dag.test(run_conf=conf)
    assert dr.state == "success", dr.state
    return xcoms(dr, "events")


@pytest.fixture
def story_repo(gateway_lakefs: Any, lakefence_client: Any, delta_dags: Any) -> Iterator[lakefs.Repository]:
    """The repository the story DAG's outlet names (a fixed name), created for the test and deleted after."""
    name = delta_dags.STORY_REPOSITORY
    namespace = f"{gateway_lakefs.storage_namespace.rstrip('/')}/{name}-{uuid.uuid4().hex[:8]}"
    repo = lakefs.Repository(name, client=lakefence_client).create(storage_namespace=namespace, default_branch="main")
    yield repo
    repo.delete()


def test_first_publish_a_daily_append_and_three_reruns_of_a_past_day(
    delta_spark: Any, gateway_lakefs: Any, story_repo: lakefs.Repository, delta_dags: Any
) -> None:
    """Create, append (its write repeated inside the try), three re-runs of one day: one Delta version each."""
    repo, dag = story_repo, delta_dags.py_story_dag

    def run(day: str, tag: str, **conf: Any) -> dict[str, Any]:
        values = run_py(dag, repo, repo.branch("main").get_commit().id, day, tag, **conf)
        assert values["output_ref"] == repo.branch("main").get_commit().id
        return values

    created = run(D1, "first")
    assert created["decision"] == "merge" and created["delta_versions"] == {"tables/events/": 0}
    # The append's write runs twice in the try (a driver re-run): Delta's per-attempt txn options
    # make the second a no-op, so the try stages one version.
    appended = run(D2, "first", repeat=2)
    assert appended["delta_versions"] == {"tables/events/": 1}
    reruns = [run(D1, f"rerun {n}", rerun=True) for n in (1, 2, 3)]
    assert [r["delta_versions"] for r in reruns] == [{"tables/events/": v} for v in (2, 3, 4)]
    # Each publication merged onto the previous one: the input of each is the HEAD the last left.
    assert [r["input_ref"] for r in reruns] == [appended["output_ref"], *(r["output_ref"] for r in reruns[:2])]

    spark = reader(delta_spark, gateway_lakefs, repo)
    final = reruns[-1]["output_ref"]
    # A plain Delta reader at the published commit: the re-run day's rows exactly once (the last
    # re-run's), the other day untouched; the log contiguous.
    assert counts(table_at(spark, repo, final)) == Counter(
        {(D1, "run rerun 3 try 1"): ROWS, (D2, "run first try 1"): ROWS}
    )
    assert log_versions(repo, final) == [0, 1, 2, 3, 4]
    # Delta's checkpoints (every 2 versions in this tier) and its _last_checkpoint rewrites passed the check.
    names = {o.path.rsplit("/", 1)[1] for o in repo.ref(final).objects(prefix=TABLE.log_prefix)}
    assert {f"{2:020d}.checkpoint.parquet", f"{4:020d}.checkpoint.parquet", "_last_checkpoint"} <= names, names
    # The repeated append left one txn record: the attempt's app id, at txnVersion 0.
    log1 = read_text(repo, final, f"{TABLE.log_prefix}{1:020d}.json")
    txn = [json.loads(line)["txn"] for line in log1.splitlines() if '"txn"' in line]
    assert [(t["appId"].startswith(f"lakefence-{appended['staging_branch']}-"), t["version"]) for t in txn] == [
        (True, 0)
    ], txn
    # Time travel inside the published commit: version 1 is the appended day, the re-run day's first rows.
    assert counts(table_at(spark, repo, final, versionAsOf="1")) == Counter(
        {(D1, "run first try 1"): ROWS, (D2, "run first try 1"): ROWS}
    )
    # The table's asset events name the commit and the Delta version.
    extras = asset_extras(f"lakefs://{repo.id}/main/{TABLE.root}")
    assert [(e["delta_table"], e["delta_version"], e["output_ref"]) for e in extras] == [
        (TABLE.root, v, r["output_ref"]) for v, r in enumerate([created, appended, *reruns])
    ]
    assert staging_branches(repo) == []


def test_a_retry_after_a_driver_died_having_published_leaves_one_version(
    delta_spark: Any, gateway_lakefs: Any, lakefence_repo: lakefs.Repository, delta_dags: Any
) -> None:
    """Try 1 publishes version 1 and dies before Airflow records it; try 2 replaces it: one version 1."""
    repo = lakefence_repo
    spark = reader(delta_spark, gateway_lakefs, repo)
    input_commit = seed_table(spark, repo)
    abandoned = die_after_publishing(repo)
    conf = {"repository": repo.id, "input_ref": input_commit, "day": D3, "rows": ROWS, "tag": "k"}
    dr = delta_dags.events_dag.test(run_conf=conf)
    assert dr.state == "success", delta_dags.FAILURES
    values = xcoms(dr, "events")
    head = repo.branch("main").get_commit()
    assert values["decision"] == "replace" and values["output_ref"] == head.id
    assert values["delta_versions"] == {"tables/events/": 1}
    assert len(abandoned) == 1 and abandoned[0] != head.id
    assert repo.commit(abandoned[0]).get_commit().parents[0] == input_commit  # try 1's publication, replaced
    assert log_versions(repo, head.id) == [0, 1]
    got = counts(table_at(spark, repo, head.id))
    # No duplicate rows: the day holds the retry's rows only.
    assert got == Counter({(D1, "seed"): ROWS, (D2, "seed"): ROWS, (D3, "run k try 2"): ROWS}), got
    assert staging_branches(repo) == []


def test_a_foreign_delta_commit_during_the_job_fails_closed_and_keeps_the_evidence(
    delta_spark: Any, gateway_lakefs: Any, lakefence_repo: lakefs.Repository, delta_dags: Any
) -> None:
    repo = lakefence_repo
    spark = reader(delta_spark, gateway_lakefs, repo)
    input_commit = seed_table(spark, repo)

    def foreign_writer() -> None:
        # Another writer appends version 1 of the table on main while our job ran.
        spark.createDataFrame([(D3, 0, "foreign")], "day string, id long, tag string").write.format("delta").mode(
            "append"
        ).save(f"s3a://{repo.id}/main/{TABLE.root}")
        repo.branch("main").commit("foreign Delta commit")

    failpoints.arm("after_job", foreign_writer)
    conf = {"repository": repo.id, "input_ref": input_commit, "day": D3, "rows": ROWS, "tag": "ours"}
    dr = delta_dags.py_events_dag.test(run_conf=conf)
    assert dr.state == "failed"
    error = delta_dags.FAILURES[("lf_delta_py_events", 1)]
    assert isinstance(error, PublishFenceError), error
    # Fail closed: main holds the foreign version 1 only, our staged version 1 is kept as evidence.
    head = repo.branch("main").get_commit().id
    assert counts(table_at(spark, repo, head)).get((D3, "foreign")) == 1
    assert log_versions(repo, head) == [0, 1]
    assert staging_branches(repo) == [error.staging_branch]
    evidence = repo.branch(error.staging_branch).get_commit().id
    assert counts(table_at(spark, repo, evidence)).get((D3, "run ours try 1")) == ROWS


def test_replace_declared_on_a_table_root_is_refused_before_the_job(
    lakefence_repo: lakefs.Repository, delta_dags: Any
) -> None:
    # Known at parse time: the DAG does not load.
    with pytest.raises(DeltaOutputModeError, match="is the table's root 'tables/events', and output_mode='replace'"):
        spark_task(write_mode="direct", output_prefixes=["tables/events/"], output_tables=[TABLE])
    # Known only at run time (a templated prefix above the table): the try fails before any write.
    head = lakefence_repo.branch("main").get_commit().id
    conf = {"repository": lakefence_repo.id, "input_ref": head, "day": D1, "prefix": "tables/"}
    dr = delta_dags.replace_templated_dag.test(run_conf=conf)
    assert dr.state == "failed"
    error = delta_dags.FAILURES[("lf_delta_replace_templated", 1)]
    assert isinstance(error, DeltaOutputModeError) and "contains the table 'tables/events'" in str(error)
    assert "delete every object there the job did not write" in str(error)
    assert lakefence_repo.branch("main").get_commit().id == head and staging_branches(lakefence_repo) == []
    assert xcoms(dr, "events").get("staging_branch") is None  # no staging branch was ever created


@pytest.mark.scoped
def test_scoped_writers_of_two_tables_on_one_branch_both_publish(
    delta_spark: Any, gateway_lakefs: Any, lakefence_repo: lakefs.Repository, delta_dags: Any
) -> None:
    """fence_scope="prefixes": each table root is its writer's write set; disjoint tables both land.

    Both runs take the same input commit, so the second publishes onto a HEAD the first moved
    during its job, as two DAGs running side by side do.
    """
    repo, dag = lakefence_repo, delta_dags.py_scoped_dag
    base = repo.branch("main").get_commit().id
    one = run_py(dag, repo, base, D1, "a", table="tables/a")
    two = run_py(dag, repo, base, D2, "b", table="tables/b")
    assert (one["decision"], two["decision"]) == ("merge", "merge")
    assert one["delta_versions"] == {"tables/a/": 0} and two["delta_versions"] == {"tables/b/": 0}
    head = repo.branch("main").get_commit()
    assert two["output_ref"] == head.id and head.parents[0] == one["output_ref"]  # merged onto the moved HEAD
    spark = reader(delta_spark, gateway_lakefs, repo)
    got = {
        t: counts(spark.read.format("delta").load(f"s3a://{repo.id}/{head.id}/{t}"))
        for t in ("tables/a", "tables/b")
    }
    assert got == {"tables/a": Counter({(D1, "run a try 1"): ROWS}), "tables/b": Counter({(D2, "run b try 1"): ROWS})}
    assert staging_branches(repo) == []


@pytest.mark.scoped
def test_scoped_writers_of_one_table_exactly_one_lands_the_other_fails_closed(
    delta_spark: Any, gateway_lakefs: Any, lakefence_repo: lakefs.Repository, delta_dags: Any
) -> None:
    """Both stage version 1 of one table from one input: the first lands, the second fails closed naming it."""
    repo = lakefence_repo
    spark = reader(delta_spark, gateway_lakefs, repo)
    input_commit = seed_table(spark, repo)
    dag = delta_dags.py_scoped_dag
    first = run_py(dag, repo, input_commit, D3, "first", table=TABLE.root)
    assert first["decision"] == "merge" and first["delta_versions"] == {"tables/events/": 1}
    conf = {"repository": repo.id, "input_ref": input_commit, "day": D3, "rows": ROWS, "tag": "second",
            "table": TABLE.root}  # fmt: skip
    dr = dag.test(run_conf=conf)
    assert dr.state == "failed"
    error = delta_dags.FAILURES[("lf_delta_py_scoped", 1)]
    assert isinstance(error, PublishFenceError), error
    message = str(error)
    # Which writer lost and why: the path under the table root, the commit that changed it, what to do.
    assert f"under the write prefix '{TABLE.prefix}' was changed" in message, message
    assert first["output_ref"] in message and "Nothing was published" in message, message
    head = repo.branch("main").get_commit().id
    assert head == first["output_ref"] and log_versions(repo, head) == [0, 1]
    assert counts(table_at(spark, repo, head)) == Counter(
        {(D1, "seed"): ROWS, (D2, "seed"): ROWS, (D3, "run first try 1"): ROWS}
    )
    # The loser's staged version 1 is kept as evidence.
    assert staging_branches(repo) == [error.staging_branch]
    evidence = repo.branch(error.staging_branch).get_commit().id
    assert counts(table_at(spark, repo, evidence)).get((D3, "run second try 1")) == ROWS


@pytest.mark.spark_cluster
def test_a_delta_append_through_the_standalone_cluster(
    delta_spark: Any, gateway_lakefs: Any, lakefence_repo: lakefs.Repository, delta_dags: Any, spark_cluster_conn: Any
) -> None:
    """The example's job submitted to a standalone master: the executors write the data files through
    the gateway with the credentials the job hands out, the driver commits the Delta log; one version."""
    repo = lakefence_repo
    spark = reader(delta_spark, gateway_lakefs, repo)
    input_commit = seed_table(spark, repo)
    conf = {"repository": repo.id, "input_ref": input_commit, "day": D3, "rows": ROWS, "tag": "cluster"}
    dr = delta_dags.events_cluster_dag.test(run_conf=conf)
    assert dr.state == "success", delta_dags.FAILURES
    values = xcoms(dr, "events")
    head = repo.branch("main").get_commit()
    assert values["decision"] == "merge" and values["output_ref"] == head.id
    assert values["delta_versions"] == {"tables/events/": 1}
    assert log_versions(repo, head.id) == [0, 1]
    got = counts(table_at(spark, repo, head.id))
    assert got == Counter({(D1, "seed"): ROWS, (D2, "seed"): ROWS, (D3, "run cluster try 1"): ROWS}), got
    # The executors ran in the worker's JVMs, which never saw the secret.
    daemons = spark_cluster_conn.daemon_text()
    assert "CoarseGrainedExecutorBackend" in daemons and gateway_lakefs.secret_access_key not in daemons
    assert staging_branches(repo) == []
