"""DAGs of tests/integration/operators/test_fenced_spark_scoped.py: what surrounds a scoped publication.

The sensors judge the latest publication touching conf ``watch`` (a write prefix) on ``main``, of
the publisher conf ``publisher_dag_id``; the publishers are those of scoped_dags.py, plus
``lf_scoped_outlets``: a scoped Python publication with two write prefixes (``tables/t/date=<day>/``
and ``tables/u/date=<day>/``), a read prefix ``dims/d/`` and a ``lakefs://`` outlet on ``tables/t``.
``lf_scoped_clean`` cleans the staging branches of ``lf_scoped_decorated``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from airflow.providers.common.compat.sdk import Asset

from airflow_lakefence.operators import FencedPythonPublishOperator, LakeFSStagingCleanupOperator
from airflow_lakefence.sensors import AbandonedPublicationSensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dag_factory import failure_recording_dag, manual_dag
from scoped_dags import CONF, write_files

#: (dag_id, try_number) -> the exception a failed try raised.
FAILURES: dict[tuple[str, int], BaseException] = {}

REPO = "{{ dag_run.conf['repository'] }}"
FAST = {"poke_interval": 0.2, "timeout": 20}


def _scoped_sensor(condition: str, **kwargs: object) -> AbandonedPublicationSensor:
    return AbandonedPublicationSensor(
        task_id="sense",
        repository=REPO,
        branch="main",
        condition=condition,
        publisher_dag_id="{{ dag_run.conf.get('publisher_dag_id') }}",
        output_prefixes=["{{ dag_run.conf['watch'] }}"],
        **{**FAST, **kwargs},  # type: ignore[arg-type]
    )


with manual_dag("lf_scoped_sense_detect") as detect_dag:
    _scoped_sensor("detect")

with manual_dag("lf_scoped_sense_detect_deferred") as detect_deferred_dag:
    _scoped_sensor("detect", deferrable=True, timeout=60)

with manual_dag("lf_scoped_sense_settled") as settled_dag:
    _scoped_sensor("settled", timeout=1)

#: A fixed repository: asset URIs cannot be templated.
OUTLET_REPOSITORY = "lakefence-scoped"
T_ASSET = Asset(f"lakefs://{OUTLET_REPOSITORY}/main/tables/t/")
with failure_recording_dag("lf_scoped_outlets", FAILURES) as outlets_dag:
    FencedPythonPublishOperator(
        task_id="publish",
        python_callable=write_files,
        fence_scope="prefixes",
        output_prefixes=["tables/t/date={{ dag_run.conf['day'] }}/", "tables/u/date={{ dag_run.conf['day'] }}/"],
        input_prefixes=["dims/d/"],
        outlets=[T_ASSET],
        **CONF,
    )

with manual_dag("lf_scoped_clean") as clean_dag:
    LakeFSStagingCleanupOperator(
        task_id="clean", repository=REPO, publishers=[{"dag_id": "lf_scoped_decorated", "task_id": "publish"}]
    )
