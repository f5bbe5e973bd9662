"""The branch-per-run examples (dags_examples/example_branch_per_run.py) end to end under dag.test():
the wrapper with the existing DAG it triggers (run beside it, as the scheduler would), on both
backends; the Spark one with real PySpark. docs/howto/branch-per-run.md quotes the file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lakefs
import pytest

from airflow_lakefence.core.publication.run_branches import RUN_BRANCH_METADATA_KEY
from tests.conftest import DAGS_FOLDER, REPO, load_dag_module
from tests.examples.test_examples import _demo_module
from tests.integration.helpers import read_text, staging_branches, xcoms

pytestmark = [
    pytest.mark.run_branch,
    pytest.mark.usefixtures("airflow_db", "lakefs_conn"),
]


EXAMPLE = "examples/example_branch_per_run.py"
MARKER = "lakefence_branch_per_run_example"


def test_the_wrapper_publishes_what_the_triggered_dag_wrote_into_the_run_branch(
    lakefence_client: lakefs.Client, example_repository: str, tmp_path: Path
) -> None:
    input_commit = _demo_module().seed_events(lakefence_client, example_repository, 700, tmp_path)
    module = load_dag_module(EXAMPLE)
    runner = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.integration.triggered_runner"),
            *(str(DAGS_FOLDER / EXAMPLE), "lakefence_example_existing_etl", "1", "240"),
        ],
        cwd=REPO,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        dr = module.dag.test(logical_date=None)
    finally:
        out, _ = runner.communicate(timeout=300)
    (line,) = [json.loads(x.split(" ", 1)[1]) for x in out.splitlines() if x.startswith("LAKEFENCE-TRIGGERED ")]
    assert dr.state == "success"
    name = xcoms(dr, "run_branch")["return_value"]
    assert line["state"] == "success" and line["conf"] == {"run_branch": name}
    repo = lakefs.Repository(example_repository, client=lakefence_client)
    # The existing DAG's fenced task published into the run branch, on the run's input.
    run_head = repo.branch(name).get_commit()
    assert run_head.parents[0] == input_commit
    # The run's publication: one merge on the input, the run branch's tree.
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "publish")
    assert (values["decision"], values["input_ref"], values["output_ref"]) == ("merge", input_commit, head.id)
    assert head.parents == [input_commit, values["staged_commit"]]
    assert head.metadata[RUN_BRANCH_METADATA_KEY] == name and head.message == f"events per day, run {dr.run_id}"
    counts = dict(row.split(",") for row in read_text(repo, "main", "tables/events_per_day/counts.csv").split())
    assert sum(int(n) for n in counts.values()) == 700 and len(counts) == 7
    assert staging_branches(repo) == []


@pytest.mark.spark
def test_the_spark_job_on_a_run_branch_is_published_once(
    lakefence_client: lakefs.Client, example_repository: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    input_commit = _demo_module().seed_events(lakefence_client, example_repository, 2_000, tmp_path)
    dr = load_dag_module(EXAMPLE).spark_dag.test(logical_date=None)
    assert dr.state == "success"
    repo = lakefs.Repository(example_repository, client=lakefence_client)
    name = xcoms(dr, "run_branch")["return_value"]
    assert xcoms(dr, "daily_counts")["decision"] == "merge"
    assert repo.branch(name).get_commit().parents[0] == input_commit
    head = repo.branch("main").get_commit()
    assert xcoms(dr, "publish")["output_ref"] == head.id and head.parents[0] == input_commit
    outputs = [o.path for o in repo.ref(head.id).objects(prefix="tables/daily_counts/")]
    assert outputs and all(p.endswith(".parquet") for p in outputs)


def test_the_how_to_quotes_the_example() -> None:
    """docs/howto/branch-per-run.md includes the example between its markers (Sphinx -W fails on a missing one)."""
    source = (REPO / "dags_examples" / "example_branch_per_run.py").read_text()
    assert f"# [START {MARKER}]\n" in source and f"# [END {MARKER}]" in source
    docs = (REPO / "docs" / "howto" / "branch-per-run.md").read_text()
    assert "../../dags_examples/example_branch_per_run.py" in docs
    assert f'"[START {MARKER}]"' in docs and f'"[END {MARKER}]"' in docs
    # The snippets the page shows are the example's own lines.
    for snippet in (
        'run_branch = LakeFSRunBranchOperator(task_id="run_branch", repository=REPOSITORY, source_ref=TARGET)',
        "input_ref=run_branch.input_commit,",
        "    publish = LakeFSPublishRunOperator(".strip(),
    ):
        assert snippet in source and snippet in docs, snippet
