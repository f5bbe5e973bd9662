"""The job-side helper and the S3A submit options: locations, hadoop-aws, credentials by reference."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from airflow_lakefence.core.names.locations import JOB_ENVIRONMENT
from airflow_lakefence.exceptions import InvalidInputError, LakeFenceError
from airflow_lakefence.spark import (
    COMMITTER_SETTINGS,
    AttemptLocations,
    JobEnvironmentError,
    LakeFenceJob,
    S3AConfigError,
    configure_s3a,
    directory_marker_candidates,
    hadoop_aws_coordinate,
    kubernetes_secret_conf,
    lakefence_locations,
    lakefence_spark_session,
    pyspark_hadoop_version,
    s3a_enabled,
    s3a_hadoop_options,
    s3a_packages,
    s3a_submit_options,
    yarn_credential_provider_conf,
)

ENV = {
    "LAKEFS_ENDPOINT": "http://lakefs:8000",
    "LAKEFENCE_REPOSITORY": "repo",
    "LAKEFENCE_INPUT_COMMIT": "c" * 64,
    "LAKEFENCE_STAGING_BRANCH": "lakefence-t-0123456789abcdef-t1-01234567",
}
CREDS = {"LAKEFS_ACCESS_KEY_ID": "AKIAKEY", "LAKEFS_SECRET_ACCESS_KEY": "s3cr3t/value"}


def test_direct_mode_uris() -> None:
    loc = lakefence_locations({**ENV, "LAKEFENCE_WRITE_MODE": "direct"})
    assert loc.input_uri("/events/") == f"s3a://repo/{'c' * 64}/events/"
    assert loc.output_uri("out/") == "s3a://repo/lakefence-t-0123456789abcdef-t1-01234567/out/"
    assert (
        lakefence_locations({**ENV, "LAKEFENCE_WRITE_MODE": "direct"}, scheme="lakefs")
        .output_uri("x")
        .startswith("lakefs://repo/lakefence-")
    )
    with pytest.raises(RuntimeError, match="workspace mode"):
        loc.output_path("x")


def test_endpoint_is_the_gateway_url_even_with_the_api_suffix() -> None:
    assert (
        lakefence_locations({**ENV, "LAKEFS_ENDPOINT": "http://lakefs:8000/api/v1/"}).endpoint == "http://lakefs:8000"
    )


def test_workspace_mode_paths(tmp_path: Path) -> None:
    loc = lakefence_locations({**ENV, "LAKEFENCE_WRITE_MODE": "workspace", "LAKEFENCE_WORKSPACE_DIR": str(tmp_path)})
    assert loc.output_path("a/b.parquet") == tmp_path / "a" / "b.parquet"
    assert loc.output_uri("a/") == (tmp_path / "a").as_uri()


def test_read_only_has_no_output() -> None:
    loc = lakefence_locations(
        {k: v for k, v in ENV.items() if k != "LAKEFENCE_STAGING_BRANCH"} | {"LAKEFENCE_WRITE_MODE": "read_only"}
    )
    assert loc.staging_branch is None
    with pytest.raises(JobEnvironmentError, match="writes nothing"):
        loc.output_uri("x")


def test_not_started_by_the_operator() -> None:
    with pytest.raises(JobEnvironmentError, match="LAKEFENCE_REPOSITORY") as err:
        lakefence_locations({"LAKEFS_ENDPOINT": "x", "LAKEFENCE_INPUT_COMMIT": "c"})
    assert isinstance(err.value, LakeFenceError) and isinstance(err.value, RuntimeError)
    with pytest.raises(ValueError):
        lakefence_locations(ENV, scheme="hdfs")


def test_the_job_reads_back_the_locations_the_operator_writes(tmp_path: Path) -> None:
    """One type and one table of names on both sides: what the Spark operator puts in the job's
    environment is what the job-side helper returns, field for field."""
    sent = AttemptLocations(
        repository="repo",
        target_branch="main",
        input_commit="c" * 64,
        staging_branch="lakefence-t-0123456789abcdef-t1-01234567",
        workspace=tmp_path,
        write_mode="workspace",
        endpoint="http://lakefs:8000",
    )
    env = sent.to_environment()
    assert set(env) == set(JOB_ENVIRONMENT.values())
    assert lakefence_locations(env) == sent
    assert lakefence_locations(env, scheme="lakefs") == dataclasses.replace(sent, scheme="lakefs")
    read_only = dataclasses.replace(sent, staging_branch=None, workspace=None, write_mode="read_only")
    assert set(read_only.to_environment()) == set(env) - {"LAKEFENCE_STAGING_BRANCH", "LAKEFENCE_WORKSPACE_DIR"}
    assert lakefence_locations(read_only.to_environment()) == read_only


def test_the_spark_operator_hands_its_locations_to_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_lakefence.hooks.lakefs import LakeFSHook
    from airflow_lakefence.operators import FencedSparkPublishOperator

    monkeypatch.setattr(LakeFSHook, "endpoint", property(lambda self: "http://lakefs:8000"))
    op = FencedSparkPublishOperator(
        task_id="publish", application="job.py", repository="repo", target_branch="main", input_ref="c" * 64
    )
    engine_side = AttemptLocations("repo", "main", "c" * 64, "lakefence-x", tmp_path, "workspace")
    assert lakefence_locations(op.job_environment(engine_side)) == dataclasses.replace(
        engine_side, endpoint="http://lakefs:8000"
    )


def test_the_old_spellings_still_import_with_a_warning() -> None:
    import airflow_lakefence.core.records.metadata as metadata
    import airflow_lakefence.spark as spark

    with pytest.warns(DeprecationWarning, match="use LakeFenceJob"):
        assert spark.LakefenceJob is LakeFenceJob
    with pytest.warns(DeprecationWarning, match="use AttemptLocations"):
        assert spark.LakefenceLocations is AttemptLocations
    with pytest.warns(DeprecationWarning, match="use LakeFenceRecord"):
        assert metadata.LakefenceRecord is metadata.LakeFenceRecord
    with pytest.raises(AttributeError):
        spark.LakefenceNothing  # noqa: B018


# -- hadoop-aws -----------------------------------------------------------------------------


def _spark_home(tmp_path: Path, *versions: str) -> Path:
    (tmp_path / "jars").mkdir()
    for version in versions:
        (tmp_path / "jars" / f"hadoop-client-api-{version}.jar").touch()
    return tmp_path


def test_hadoop_version_is_read_from_the_installed_pyspark() -> None:
    import pyspark

    jars = list((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    assert len(jars) == 1
    assert pyspark_hadoop_version() == jars[0].stem.removeprefix("hadoop-client-api-")
    assert hadoop_aws_coordinate() == f"org.apache.hadoop:hadoop-aws:{pyspark_hadoop_version()}"


def test_hadoop_version_from_a_spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = _spark_home(tmp_path, "3.4.1")
    assert pyspark_hadoop_version(home) == "3.4.1"
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert hadoop_aws_coordinate() == "org.apache.hadoop:hadoop-aws:3.4.1"


def test_no_or_several_hadoop_jars_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(S3AConfigError, match="found 2"):
        pyspark_hadoop_version(_spark_home(tmp_path, "3.4.1", "3.5.0"))


def test_packages_gain_the_matching_hadoop_aws() -> None:
    assert s3a_packages(None, hadoop_version="3.5.0") == "org.apache.hadoop:hadoop-aws:3.5.0"
    assert (
        s3a_packages("io.delta:delta-spark_2.13:4.0.0, ", hadoop_version="3.5.0")
        == "io.delta:delta-spark_2.13:4.0.0,org.apache.hadoop:hadoop-aws:3.5.0"
    )
    # Already there at the right version: unchanged, not doubled.
    assert s3a_packages("org.apache.hadoop:hadoop-aws:3.5.0", hadoop_version="3.5.0") == (
        "org.apache.hadoop:hadoop-aws:3.5.0"
    )


def test_a_pinned_hadoop_aws_of_another_version_is_refused() -> None:
    with pytest.raises(S3AConfigError, match=r"hadoop-aws:3\.3\.4.*Hadoop 3\.5\.0.*hadoop-aws:3\.5\.0") as err:
        s3a_packages("a:b:1,org.apache.hadoop:hadoop-aws:3.3.4", hadoop_version="3.5.0")
    assert isinstance(err.value, InvalidInputError)


def test_submit_options_keep_the_dag_conf_and_hold_no_secret() -> None:
    options = s3a_submit_options("a:b:1", {"spark.ui.enabled": False}, hadoop_version="3.5.0")
    assert options.packages == "a:b:1,org.apache.hadoop:hadoop-aws:3.5.0"
    assert options.conf == {"spark.ui.enabled": "False", "spark.lakefence.s3a": "true"}


# -- job side --------------------------------------------------------------------------------


class _HadoopConf:
    def __init__(self, values: dict[str, str] | None = None, loadable: bool = True) -> None:
        self.values = dict(values or {})
        self.loadable = loadable

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def get(self, key: str) -> str | None:
        return self.values.get(key)

    def getClassByNameOrNull(self, name: str) -> object | None:
        return object() if self.loadable else None


class _Spark:
    """Just enough of a SparkSession for the helper: Hadoop conf, Spark conf, JVM version."""

    def __init__(self, hadoop: _HadoopConf, conf: dict[str, str] | None = None, version: str = "3.5.0") -> None:
        spark_conf = dict(conf or {})
        self.stopped = False
        jvm = type("JVM", (), {})()
        jvm.org = type("O", (), {})()
        jvm.org.apache = type("A", (), {})()
        jvm.org.apache.hadoop = type("H", (), {})()
        jvm.org.apache.hadoop.util = type("U", (), {})()
        jvm.org.apache.hadoop.util.VersionInfo = type("V", (), {"getVersion": staticmethod(lambda: version)})
        self.sparkContext = type(
            "SC",
            (),
            {
                "_jsc": type("JSC", (), {"hadoopConfiguration": lambda _self: hadoop})(),
                "_jvm": jvm,
                "getConf": lambda _self: type("SparkConf", (), {"get": lambda _s, k, d=None: spark_conf.get(k, d)})(),
            },
        )()
        self.conf = type("RuntimeConf", (), {"get": lambda _s, k, d=None: spark_conf.get(k, d)})()

    def stop(self) -> None:
        self.stopped = True


def test_s3a_options_point_one_bucket_at_the_gateway() -> None:
    options = s3a_hadoop_options(lakefence_locations(ENV), "AKIAKEY", "s3cr3t")
    assert options["fs.s3a.bucket.repo.endpoint"] == "http://lakefs:8000"
    assert options["fs.s3a.bucket.repo.path.style.access"] == "true"
    assert options["fs.s3a.bucket.repo.endpoint.region"] == "us-east-1"
    assert options["fs.s3a.bucket.repo.access.key"] == "AKIAKEY"
    assert options["fs.s3a.bucket.repo.secret.key"] == "s3cr3t"
    # Nothing global about S3 except the committer, which must be the rename-based v1.
    assert {k for k in options if k.startswith("fs.s3a.") and ".bucket.repo." not in k} == {"fs.s3a.committer.name"}
    assert options["mapreduce.fileoutputcommitter.algorithm.version"] == "1"
    assert COMMITTER_SETTINGS.items() <= options.items()


def test_configure_s3a_takes_credentials_from_the_environment() -> None:
    hadoop = _HadoopConf()
    configure_s3a(_Spark(hadoop), lakefence_locations(ENV), CREDS)
    assert hadoop.values["fs.s3a.bucket.repo.secret.key"] == "s3cr3t/value"
    assert hadoop.values["fs.s3a.bucket.repo.aws.credentials.provider"].endswith("SimpleAWSCredentialsProvider")


def test_configure_s3a_leaves_credentials_to_the_cluster_when_it_has_them() -> None:
    hadoop = _HadoopConf({"hadoop.security.credential.provider.path": "jceks://hdfs@nn/lakefs.jceks"})
    configure_s3a(_Spark(hadoop), lakefence_locations(ENV), {})
    assert hadoop.values["fs.s3a.bucket.repo.endpoint"] == "http://lakefs:8000"
    assert "fs.s3a.bucket.repo.secret.key" not in hadoop.values
    assert "fs.s3a.bucket.repo.aws.credentials.provider" not in hadoop.values
    with pytest.raises(JobEnvironmentError, match="LAKEFS_SECRET_ACCESS_KEY"):
        configure_s3a(_Spark(_HadoopConf()), lakefence_locations(ENV), {})


def test_s3a_is_used_when_hadoop_aws_is_on_the_classpath_or_asked_for() -> None:
    assert s3a_enabled(_Spark(_HadoopConf()), {}) is True
    assert s3a_enabled(_Spark(_HadoopConf(loadable=False)), {}) is False
    assert s3a_enabled(_Spark(_HadoopConf()), {"LAKEFENCE_S3A": "0"}) is False
    assert s3a_enabled(_Spark(_HadoopConf(), {"spark.lakefence.s3a": "false"}), {}) is False
    with pytest.raises(S3AConfigError, match=r"packages='org\.apache\.hadoop:hadoop-aws:"):
        s3a_enabled(_Spark(_HadoopConf(loadable=False), {"spark.lakefence.s3a": "true"}), {})


def test_a_mismatched_hadoop_aws_on_the_classpath_is_a_clear_error() -> None:
    jars = {"spark.jars": "file:///ivy/jars/org.apache.hadoop_hadoop-aws-3.3.4.jar,file:///x/bundle.jar"}
    with pytest.raises(S3AConfigError, match=r"hadoop-aws 3\.3\.4 .* Hadoop 3\.5\.0"):
        s3a_enabled(_Spark(_HadoopConf(), jars), {})
    matching = {"spark.jars": "file:///ivy/jars/org.apache.hadoop_hadoop-aws-3.5.0.jar"}
    assert s3a_enabled(_Spark(_HadoopConf(), matching), {}) is True


def test_session_configures_s3a_and_refuses_direct_mode_without_it(monkeypatch: pytest.MonkeyPatch) -> None:
    class Builder:
        def __init__(self, spark: _Spark) -> None:
            self.spark, self.name = spark, None

        def appName(self, name: str) -> Builder:
            self.name = name
            return self

        def getOrCreate(self) -> _Spark:
            return self.spark

    cleaned: list[set[str]] = []
    monkeypatch.setattr(LakeFenceJob, "remove_directory_markers", lambda self: cleaned.append(set(self.written)))
    hadoop = _HadoopConf()
    direct = {**ENV, **CREDS, "LAKEFENCE_WRITE_MODE": "direct"}
    with lakefence_spark_session("app", builder=Builder(_Spark(hadoop)), environ=direct) as job:
        assert job.s3a and job.output_uri("t/").startswith("s3a://repo/lakefence-")
        assert hadoop.values["fs.s3a.bucket.repo.access.key"] == "AKIAKEY"
    assert job.spark.stopped
    assert cleaned == [{"t/"}]  # S3A's directory markers are removed after a successful job...
    with pytest.raises(ZeroDivisionError), lakefence_spark_session(builder=Builder(_Spark(hadoop)), environ=direct):
        1 / 0  # noqa: B018
    assert len(cleaned) == 1  # ...not after a failed one (nothing is staged then)

    plain = _Spark(_HadoopConf(loadable=False))
    job = lakefence_spark_session(builder=Builder(plain), environ=direct)
    assert isinstance(job, LakeFenceJob) and not job.s3a
    with pytest.raises(JobEnvironmentError, match="direct mode goes through the lakeFS S3 gateway"):
        job.output_uri("t/")
    with pytest.raises(JobEnvironmentError, match="s3a_submit_options"):
        job.input_uri("events/")


# -- cluster managers ------------------------------------------------------------------------


def test_kubernetes_secret_refs_and_the_generated_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from airflow.providers.apache.spark.hooks import spark_submit
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    conf = kubernetes_secret_conf("lakefs-creds")
    assert conf == {
        "spark.kubernetes.driver.secretKeyRef.LAKEFS_ACCESS_KEY_ID": "lakefs-creds:access_key_id",
        "spark.kubernetes.driver.secretKeyRef.LAKEFS_SECRET_ACCESS_KEY": "lakefs-creds:secret_access_key",
    }
    both = kubernetes_secret_conf("lakefs-creds", executors=True, secret_access_key_key="secret")
    assert both["spark.kubernetes.executor.secretKeyRef.LAKEFS_SECRET_ACCESS_KEY"] == "lakefs-creds:secret"

    # Building the command needs no cluster; the provider only insists on the cncf provider being importable.
    monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_K8S",
        json.dumps(
            {"conn_type": "spark", "host": "k8s://https://k8s.example:6443", "extra": {"deploy-mode": "cluster"}}
        ),
    )
    hook = SparkSubmitHook(conn_id="spark_k8s", conf={**conf, **s3a_submit_options(hadoop_version="3.5.0").conf})
    cmd = hook._build_spark_submit_command("job.py")
    assert cmd[cmd.index("--master") + 1] == "k8s://https://k8s.example:6443"
    confs = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--conf"]
    assert "spark.kubernetes.driver.secretKeyRef.LAKEFS_SECRET_ACCESS_KEY=lakefs-creds:secret_access_key" in confs
    assert "spark.kubernetes.driver.secretKeyRef.LAKEFS_ACCESS_KEY_ID=lakefs-creds:access_key_id" in confs
    # Only references travel: no conf but the secretKeyRef ones mentions the credentials at all.
    assert [c for c in confs if "LAKEFS_" in c] == [f"{k}={v}" for k, v in conf.items()]


@pytest.mark.parametrize("name", ["Lakefs", "lakefs_creds", "-x", "a" * 254, ""])
def test_kubernetes_secret_names_are_checked(name: str) -> None:
    with pytest.raises(InvalidInputError):
        kubernetes_secret_conf(name)
    with pytest.raises(InvalidInputError):
        kubernetes_secret_conf("ok", access_key_id_key="bad key")


def test_yarn_credential_provider_conf() -> None:
    assert yarn_credential_provider_conf("jceks://hdfs@nn:8020/user/airflow/lakefs.jceks") == {
        "spark.hadoop.hadoop.security.credential.provider.path": "jceks://hdfs@nn:8020/user/airflow/lakefs.jceks"
    }
    with pytest.raises(InvalidInputError):
        yarn_credential_provider_conf("/local/path.jceks")


def test_directory_marker_candidates_are_the_output_dirs_and_their_ancestors() -> None:
    assert directory_marker_candidates(["tables/daily/", "/tables/other/x.parquet", "top.csv"]) == {
        "tables/",
        "tables/daily/",
        "tables/other/",
    }
    assert directory_marker_candidates([]) == set()


def test_checksum_sidecars_are_removed_from_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    for name in ("part-0.parquet", ".part-0.parquet.crc", ".orphan.crc", ".hidden"):
        (tmp_path / "t" / name).write_text("x")
    env = {**ENV, "LAKEFENCE_WRITE_MODE": "workspace", "LAKEFENCE_WORKSPACE_DIR": str(tmp_path)}
    job = LakeFenceJob(_Spark(_HadoopConf()), lakefence_locations(env), s3a=True)
    assert job.remove_checksum_files() == [tmp_path / "t" / ".part-0.parquet.crc"]
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [".hidden", ".orphan.crc", "part-0.parquet"]
    assert LakeFenceJob(_Spark(_HadoopConf()), lakefence_locations(ENV), s3a=True).remove_checksum_files() == []
