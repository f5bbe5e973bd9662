"""DAGs the integration tests run under ``dag.test()``; everything per test comes from dag_run.conf.

conf keys: repository, target, input_ref, job (the write_job spec), output_prefixes.
The Spark engine is tests/fake_spark/spark-submit (the JVM skipped) via PATH; the protocol,
SparkSubmitHook, Airflow and lakeFS are all real.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import DAG, Asset, task

from airflow_lakefence.operators import FencedPythonPublishOperator, FencedSparkPublishOperator, PublishOptions

# The one shared factory (tests/dags/dag_factory.py), by path: the dags folder is not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, fenced_python, fenced_spark


def _fenced(task_id: str, **kwargs: Any) -> FencedSparkPublishOperator:
    return fenced_spark(task_id, **kwargs)


#: (dag_id, try_number) -> the exception a failed try raised; read by the tests.
FAILURES: dict[tuple[str, int], BaseException] = {}


def _dag(dag_id: str, retries: int = 0) -> DAG:
    return failure_recording_dag(dag_id, FAILURES, retries)


with _dag("lf_test_workspace") as workspace_dag:
    _fenced("publish", write_mode="workspace", output_prefixes="{{ dag_run.conf.get('output_prefixes') }}")

with _dag("lf_test_direct") as direct_dag:
    _fenced("publish", write_mode="direct", output_prefixes="{{ dag_run.conf.get('output_prefixes') }}")

with _dag("lf_test_empty_ok") as empty_ok_dag:
    _fenced("publish", write_mode="workspace", allow_empty_workspace=True)

with _dag("lf_test_read_only") as read_only_dag:
    _fenced("publish", read_only=True)

with _dag("lf_test_budget") as budget_dag:
    _fenced(
        "publish",
        write_mode="workspace",
        execution_timeout=timedelta(seconds=20),
        publish_budget=timedelta(seconds=19),
    )

with _dag("lf_test_retry", retries=1) as retry_dag:
    _fenced("publish", write_mode="workspace", allow_empty_workspace=True)

#: A fixed repository: asset URIs cannot be templated (tests/integration/operators/test_fenced_spark_assets.py).
ASSET_REPOSITORY = "lakefence-assets"
OUT_ASSET = Asset(f"lakefs://{ASSET_REPOSITORY}/main/out/")
with _dag("lf_test_assets", retries=1) as assets_dag:
    _fenced("publish", write_mode="workspace", allow_empty_workspace=True, outlets=[OUT_ASSET])


# -- the Python adapter: the same spec, written by a Python function ---------------------------


def write_spec(lakefence: Any, dag_run: Any = None) -> int:
    """The Python twin of tests/jobs/write_job.py: write the run's ``job`` spec for this attempt."""
    import tempfile

    spec = dict(dag_run.conf.get("job", {}))
    if spec.get("fail"):
        raise RuntimeError("function failing on purpose")
    files = dict(spec.get("files", {}))
    if lakefence.staging_branch and "-t1-" in lakefence.staging_branch:
        files.update(spec.get("first_try_files", {}))
    if spec.get("stamp_path"):
        files[spec["stamp_path"]] = lakefence.staging_branch or "read-only"
    if spec.get("read_input"):  # the input commit's object, copied: proves the function reads the pinned input
        files[spec["read_input"]["to"]] = lakefence.client.read_object(
            lakefence.repository, lakefence.input_commit, spec["read_input"]["from"]
        ).decode()
    for path, text in files.items():
        if lakefence.workspace is not None:
            target = lakefence.workspace / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        else:
            with tempfile.NamedTemporaryFile("w", delete=False) as fd:
                fd.write(text)
            lakefence.client.upload_file(lakefence.repository, lakefence.staging_branch, path, fd.name)
    return len(files)


def _fenced_python(task_id: str, **kwargs: Any) -> FencedPythonPublishOperator:
    return fenced_python(task_id, python_callable=write_spec, **kwargs)


with _dag("lf_py_workspace") as py_workspace_dag:
    _fenced_python("publish", output_prefixes="{{ dag_run.conf.get('output_prefixes') }}")

with _dag("lf_py_direct") as py_direct_dag:
    _fenced_python("publish", write_mode="direct", output_prefixes="{{ dag_run.conf.get('output_prefixes') }}")

with _dag("lf_py_retry", retries=1) as py_retry_dag:
    _fenced_python("publish", allow_empty_workspace=True)

with _dag("lf_py_taskflow", retries=1) as py_taskflow_dag:

    @task.lakefs_publish(
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="{{ dag_run.conf['target'] }}",
        input_ref="{{ dag_run.conf['input_ref'] }}",
        stale_grace_period=0,
        allow_empty_workspace=True,
    )
    def publish(lakefence: Any, dag_run: Any = None) -> int:
        return write_spec(lakefence, dag_run)

    publish()

with _dag("lf_py_message") as py_message_dag:
    # run_id, not ds: a run without a logical date (the REST API's default for manual runs) has no ds.
    _fenced_python("publish", commit_message="published by run {{ run_id }}")

with _dag("lf_test_openlineage") as openlineage_dag:
    _fenced("publish", write_mode="workspace", openlineage_inject_parent_job_info=True)


def another_writer_then_die(lakefence: Any, dag_run: Any = None) -> int:
    """With ``another_writer`` in the run's conf, the first try lets another writer publish into the
    target after the try pinned its input, then dies. Otherwise (and in later tries) it writes the spec."""
    import tempfile

    if dag_run.conf.get("another_writer") and lakefence.staging_branch and "-t1-" in lakefence.staging_branch:
        with tempfile.NamedTemporaryFile("w", delete=False) as fd:
            fd.write("x")
        lakefence.client.upload_file(lakefence.repository, lakefence.target_branch, "other/x.txt", fd.name)
        lakefence.client.commit(lakefence.repository, lakefence.target_branch, "another writer, after the pin", {})
        raise RuntimeError("the first try dies after another writer published")
    return write_spec(lakefence, dag_run)


with _dag("lf_py_default_input", retries=1) as py_default_input_dag:
    # No input_ref: the target branch, resolved by the run's first try and pinned for its retries.
    FencedPythonPublishOperator(
        task_id="publish",
        python_callable=another_writer_then_die,
        repository="{{ dag_run.conf['repository'] }}",
        target_branch="{{ dag_run.conf['target'] }}",
        output_prefixes=["out/"],
        options=PublishOptions(stale_grace_period=0),
    )
