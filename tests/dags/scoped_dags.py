"""DAGs of the scoped-fence tests (tests/integration/core/test_engine_scoped.py), run under ``dag.test()``.

Everything per run comes from ``dag_run.conf``: repository, target, input_ref, ``day`` (the date
partition ``tables/t/date=<day>/`` the task writes, templated into ``output_prefixes``) and the job's
files. The Spark task runs the fake spark-submit (tests/fake_spark); the Python task and the
``@task.lakefs_publish`` task write conf ``files`` ({path: text}) into the workspace.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from airflow.providers.common.compat.sdk import task

from airflow_lakefence.operators import FencedPythonPublishOperator

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, fenced_spark

#: (dag_id, try_number) -> the exception a failed try raised.
FAILURES: dict[tuple[str, int], BaseException] = {}

PARTITION = "tables/t/date={{ dag_run.conf['day'] }}/"
SCOPE: dict[str, Any] = {
    "fence_scope": "prefixes",
    "output_prefixes": [PARTITION],
    "input_prefixes": ["{{ dag_run.conf.get('reads', 'dims/d/') }}"],
}
CONF = {
    "repository": "{{ dag_run.conf['repository'] }}",
    "target_branch": "{{ dag_run.conf['target'] }}",
    "input_ref": "{{ dag_run.conf['input_ref'] }}",
    "stale_grace_period": 0,
}


def write_files(lakefence: Any, dag_run: Any = None) -> int:
    """Write conf ``files`` into the workspace; return how many."""
    files = dict(dag_run.conf.get("files", {}))
    for path, text in files.items():
        target = lakefence.workspace / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return len(files)


with failure_recording_dag("lf_scoped_spark", FAILURES) as spark_dag:
    fenced_spark(**SCOPE)

with failure_recording_dag("lf_scoped_python", FAILURES, retries=1) as python_dag:
    FencedPythonPublishOperator(task_id="publish", python_callable=write_files, **CONF, **SCOPE)

with failure_recording_dag("lf_scoped_decorated", FAILURES) as decorated_dag:

    @task.lakefs_publish(task_id="publish", **CONF, **SCOPE)
    def publish(lakefence: Any = None, dag_run: Any = None) -> int:
        return write_files(lakefence, dag_run)

    publish()

# The write set is rendered per run: a conf whose partition nests in the other one is refused when
# rendered, before any write.
with failure_recording_dag("lf_scoped_nested", FAILURES) as nested_dag:
    FencedPythonPublishOperator(
        task_id="publish",
        python_callable=write_files,
        fence_scope="prefixes",
        output_prefixes=[PARTITION, "{{ dag_run.conf['also'] }}"],
        **CONF,
    )
