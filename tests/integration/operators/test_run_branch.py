"""A branch per run, published once (docs/howto/branch-per-run.md), end to end under ``dag.test()``:
real Airflow DB and task execution, real HTTP to lakeFS through the SDK, on both backends.

The DAG (tests/dags/run_branch_dags.py): ``run_branch`` (LakeFSRunBranchOperator) → ``write`` (a fenced
Python task publishing into the run branch) → ``publish`` (LakeFSPublishRunOperator into ``main``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence import failpoints
from airflow_lakefence.core.publication.run_branches import RUN_BRANCH_METADATA_KEY, run_hash
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.exceptions import OutputPrefixError, PublishFenceError
from tests.conftest import load_dag_module
from tests.integration.helpers import commit_files, publications_on_top_of, read_text, staging_branches
from tests.integration.operators.test_fenced_spark_output import clear_and_rerun

pytestmark = [pytest.mark.run_branch, pytest.mark.usefixtures("airflow_db", "lakefs_conn", "clean_failpoints")]


@pytest.fixture
def rdags() -> Any:
    """tests/dags/run_branch_dags.py, with the failures of earlier tests forgotten."""
    module = load_dag_module("testdags/run_branch_dags.py")
    module.FAILURES.clear()
    return module


def conf(repo: lakefs.Repository, files: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"repository": repo.id, "files": {"out/a.txt": "A"} if files is None else files, **extra}


def partition_conf(repo: lakefs.Repository, partition: str, input_commit: str) -> dict[str, Any]:
    """A scoped run writing one partition, ``tables/t/p=<partition>/``, built on ``input_commit``."""
    prefix = f"tables/t/p={partition}/"
    return conf(repo, {f"{prefix}part.txt": partition}, source=input_commit, output_prefixes=[prefix])


def run(dag: Any, run_conf: dict[str, Any]) -> Any:
    return dag.test(run_conf=run_conf)


def xcoms(dag_run: Any, task_id: str) -> dict[str, Any]:
    from tests.integration.helpers import xcoms as read

    return read(dag_run, task_id)


def tries(dag_run: Any) -> dict[str, tuple[str | None, int]]:
    from tests.integration.helpers import ti_state

    return {t: ti_state(dag_run, t) for t in ("run_branch", "write", "publish")}


def die_when_head_is(
    repo: lakefs.Repository, branch: Callable[[], str], task_id: str, try_number: int = 1
) -> list[str]:
    """Arm ``after_verify``: the try ``try_number`` of ``task_id`` dies right after its publication
    lands on ``branch()`` (recognised by the record on the branch's HEAD): a worker killed after it
    wrote. Returns the HEADs it died on."""
    died: list[str] = []

    def die() -> None:
        head = repo.branch(branch()).get_commit()
        record = decode_metadata(head.metadata)
        if record is not None and (record.attempt.key.task_id, record.attempt.try_number) == (task_id, try_number):
            died.append(head.id)
            raise RuntimeError(f"worker of {task_id} killed after publishing")

    failpoints.arm("after_verify", die)
    return died


def assert_published_once(repo: lakefs.Repository, input_commit: str, dr: Any) -> lakefs.Commit:
    """``main`` holds the run's publication once, on the run's input; returns main's HEAD.

    The staged commit is the run branch's HEAD squashed onto the input (one commit, this attempt's
    record); a merge leaves one commit on the input, a replacement points ``main`` at the staged commit.
    """
    head = repo.branch("main").get_commit()
    values = xcoms(dr, "publish")
    name = xcoms(dr, "run_branch")["return_value"]
    assert values["output_ref"] == head.id
    assert head.metadata[RUN_BRANCH_METADATA_KEY] == name
    assert publications_on_top_of(repo, input_commit) == [head.id]
    staged = repo.commit(values["staged_commit"]).get_commit()
    assert staged.parents == [input_commit]
    assert list(repo.ref(staged.id).diff(repo.ref(name))) == []  # the run branch's tree, whole
    if values["decision"] == "replace":
        assert head.id == staged.id
    else:
        assert head.parents == [input_commit, staged.id]
    return head


def test_a_run_publishes_its_branch_into_main_once(rdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run(rdags.run_dag, conf(repo))
    assert dr.state == "success"
    branch = xcoms(dr, "run_branch")
    name = branch["return_value"]
    assert name.startswith("run-lf_run_branch-manual__") and name.endswith(run_hash(dr.dag_id, dr.run_id))
    assert (branch["input_commit"], branch["decision"]) == (input_commit, "created")
    written = xcoms(dr, "write")
    assert written["decision"] == "merge" and written["input_ref"] == input_commit
    # The run's task published into the run branch, on the run's input.
    run_head = repo.branch(name).get_commit()
    assert run_head.id == written["output_ref"] and run_head.parents[0] == input_commit
    values = xcoms(dr, "publish")
    assert (values["decision"], values["input_ref"]) == ("merge", input_commit)
    head = assert_published_once(repo, input_commit, dr)
    record = decode_metadata(head.metadata)
    assert record is not None and (record.role, record.attempt.key.run_id) == ("publish", dr.run_id)
    assert read_text(repo, "main", "out/a.txt") == "A"
    assert [b.id for b in repo.branches(prefix=name)] == [name]  # kept (docs: the run's record)
    assert staging_branches(repo) == []


def test_a_run_without_changes_publishes_nothing(rdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run(rdags.run_dag, conf(repo, {"in/data.txt": "input"}))  # rewrites the input's own bytes
    assert dr.state == "success"
    assert xcoms(dr, "publish")["decision"] == "noop"
    assert repo.branch("main").get_commit().id == input_commit


def test_a_worker_killed_after_the_runs_merge_is_replaced_by_the_retry(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    died = die_when_head_is(repo, lambda: "main", "publish")
    dr = run(rdags.run_dag, conf(repo))
    assert dr.state == "success" and len(died) == 1
    assert tries(dr) == {"run_branch": ("success", 1), "write": ("success", 1), "publish": ("success", 2)}
    assert xcoms(dr, "publish")["decision"] == "replace"
    head = assert_published_once(repo, input_commit, dr)
    assert head.id != died[0] and read_text(repo, "main", "out/a.txt") == "A"


def test_the_publishing_steps_lost_answer_is_its_own_publication(
    rdags: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, input_commit = seeded
    lakefence_controls.reset_counts()
    # The run's third merge is the publication into main (the first: the task's into the run branch;
    # the second: the run branch squashed into the publishing attempt's staging branch).
    lakefence_controls.add_fault("mergeIntoBranch", nth=3, drop=True, when="after")
    dr = run(rdags.run_dag, conf(repo))
    assert dr.state == "success"
    assert lakefence_controls.counts()["mergeIntoBranch"] == 3
    assert xcoms(dr, "publish")["decision"] == "idempotent"
    assert tries(dr)["publish"] == ("success", 1)
    assert_published_once(repo, input_commit, dr)


def test_a_task_killed_after_writing_into_the_run_branch_leaves_its_output_once(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    names: list[str] = []
    died = die_when_head_is(repo, lambda: names[0], "write")
    original = rdags.write_files

    def remember(lakefence: Any, dag_run: Any = None) -> None:
        names[:] = [lakefence.target_branch]
        original(lakefence, dag_run)

    rdags.run_dag.task_dict["write"].python_callable = remember
    try:
        dr = run(rdags.run_dag, conf(repo))
    finally:
        rdags.run_dag.task_dict["write"].python_callable = original
    assert dr.state == "success" and len(died) == 1
    assert tries(dr)["write"] == ("success", 2)
    run_head = repo.branch(names[0]).get_commit()
    assert xcoms(dr, "write")["decision"] == "replace"
    assert run_head.parents == [input_commit]  # replaced in the run branch, not stacked on try 1's
    head = assert_published_once(repo, input_commit, dr)
    assert read_text(repo, head.id, "out/a.txt") == "A"


def test_two_runs_on_one_input_branch_wide_the_second_fails_closed(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    first = run(rdags.run_dag, conf(repo, {"out/a.txt": "A"}, source=input_commit))
    second = run(rdags.run_dag, conf(repo, {"out/b.txt": "B"}, source=input_commit))
    assert first.state == "success" and second.state == "failed"
    error = rdags.FAILURES[("lf_run_branch", 2)]
    assert type(error) is PublishFenceError and "nothing was run" in str(error)
    assert publications_on_top_of(repo, input_commit) == [xcoms(first, "publish")["output_ref"]]
    # The second run's output is still in its run branch.
    assert read_text(repo, xcoms(second, "run_branch")["return_value"], "out/b.txt") == "B"


def test_two_scoped_runs_of_disjoint_partitions_both_land(rdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    runs = [run(rdags.scoped_dag, partition_conf(repo, p, input_commit)) for p in ("a", "b")]
    assert [r.state for r in runs] == ["success", "success"]
    assert [xcoms(r, "publish")["decision"] for r in runs] == ["merge", "merge"]
    assert read_text(repo, "main", "tables/t/p=a/part.txt") == "a"
    assert read_text(repo, "main", "tables/t/p=b/part.txt") == "b"
    assert len(publications_on_top_of(repo, input_commit)) == 2


def test_a_run_writing_outside_its_prefixes_fails_closed_and_keeps_the_evidence(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    dr = run(rdags.run_dag, conf(repo, {"out/a.txt": "A", "other/x.txt": "X"}, output_prefixes=["out/"]))
    assert dr.state == "failed"
    error = rdags.FAILURES[("lf_run_branch", 2)]  # the DAG retries once: each try keeps its evidence
    assert isinstance(error, OutputPrefixError) and "other/x.txt" in str(error)
    assert repo.branch("main").get_commit().id == input_commit
    kept = staging_branches(repo)
    assert len(kept) == 2 and error.staging_branch in kept and "-t1-" in kept[0]
    for branch in kept:
        assert repo.branch(branch).get_commit().metadata["lakefence.evidence"] == "OutputPrefixError"
        assert read_text(repo, branch, "other/x.txt") == "X"


def test_a_run_cleared_and_rerun_after_publishing_replaces_its_publication(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = seeded
    dr = run(rdags.run_dag, conf(repo))
    first = xcoms(dr, "publish")["output_ref"]
    name = xcoms(dr, "run_branch")["return_value"]
    dr = clear_and_rerun(rdags.run_dag, dr, ["run_branch", "write", "publish"])
    assert dr.state == "success"
    assert tries(dr) == {"run_branch": ("success", 2), "write": ("success", 2), "publish": ("success", 2)}
    branch = xcoms(dr, "run_branch")
    assert (branch["return_value"], branch["decision"], branch["input_commit"]) == (name, "found", input_commit)
    assert xcoms(dr, "write")["decision"] == "replace"
    values = xcoms(dr, "publish")
    assert values["decision"] == "replace" and "supersedes" in values["reason"]
    head = assert_published_once(repo, input_commit, dr)
    assert head.id != first


def test_a_foreign_branch_of_the_runs_name_fails_closed(rdags: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = seeded
    dr = run(rdags.run_dag, conf(repo))
    name = xcoms(dr, "run_branch")["return_value"]
    # The run's branch is deleted and a branch of its name is made from elsewhere; the run is re-run.
    first = repo.branch("main").get_commit().id
    repo.branch(name).delete()
    other = commit_files(repo, "main", {"later.txt": "x"}, "later")
    repo.branch(name).create(other)
    dr = clear_and_rerun(rdags.run_dag, dr, ["run_branch", "write", "publish"])
    assert dr.state == "failed"
    assert tries(dr)["run_branch"][0] == "failed" and tries(dr)["write"][0] == "upstream_failed"
    assert repo.branch(name).get_commit().id == other  # nothing written into it
    assert publications_on_top_of(repo, input_commit)[1:] == [first]  # the run's publication stays


def test_a_scoped_run_killed_after_its_merge_is_replaced_by_the_retry(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, _input_commit = seeded
    died = die_when_head_is(repo, lambda: "main", "publish")
    dr = run(rdags.scoped_dag, conf(repo, {"tables/t/p=a/part.txt": "a"}, output_prefixes=["tables/t/p=a/"]))
    assert dr.state == "success" and len(died) == 1, rdags.FAILURES
    assert tries(dr)["publish"] == ("success", 2)
    assert read_text(repo, "main", "tables/t/p=a/part.txt") == "a"
    # Merges only (other writers may have published on top): the dead try's publication is reverted
    # and the retry's merged after it, with the same tree, so the retry's merge lands although it
    # changes nothing; it is what the run reports.
    published = xcoms(dr, "publish")
    assert published["decision"] == "replace"
    head = repo.branch("main").get_commit()
    assert published["output_ref"] == head.id != died[0]
    line = [c.id for c in repo.branch("main").log(first_parent=True, max_amount=4)]
    assert died[0] in line[1:]


def test_the_abandoned_sensor_recognises_an_abandoned_run_publication(
    rdags: Any, sensors: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    repo, _input_commit = seeded
    died = die_when_head_is(repo, lambda: "main", "publish")
    dr = run(rdags.once_dag, conf(repo))  # no retry: the publication stays abandoned
    assert dr.state == "failed" and len(died) == 1
    watch = {"repository": repo.id, "publisher_dag_id": "lf_run_branch_once", "publisher_task_id": "publish"}
    sensed = run(sensors.detect_dag, watch)
    assert sensed.state == "success"
    found = xcoms(sensed, "sense")["return_value"]
    assert (found["verdict"], found["head"]) == ("abandoned", died[0])
    assert (found["dag_id"], found["run_id"], found["task_id"], found["state"]) == (
        "lf_run_branch_once",
        dr.run_id,
        "publish",
        "failed",
    )
    head = repo.branch("main").get_commit()
    assert head.metadata[RUN_BRANCH_METADATA_KEY] == xcoms(dr, "run_branch")["return_value"]


def test_the_abandoned_sensor_and_the_cleaner_understand_run_branches(
    rdags: Any, sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    """Two runs whose task inside the run died, no retry: the abandoned-publication sensor watching a
    run branch names the dead task's publication there; the cleaner deletes the dead attempt's
    staging branch made from a run branch, keeps the one that may be evidence, and never touches a
    run branch."""
    repo, input_commit = seeded

    def die_leaving_the_staging_branch(point: str) -> None:
        def die() -> None:
            lakefence_controls.add_fault("deleteBranch", status=500)  # its own clean-up fails too
            raise RuntimeError(f"worker died at {point}")

        failpoints.arm(point, die)

    # Run A: the write dies during its job (nothing staged). Run B: right after publishing into its run branch.
    die_leaving_the_staging_branch("after_job")
    run_a = run(rdags.once_dag, conf(repo))
    failpoints.disarm_all()
    die_leaving_the_staging_branch("after_verify")
    run_b = run(rdags.once_dag, conf(repo))
    failpoints.disarm_all()
    assert run_a.state == run_b.state == "failed"
    assert tries(run_a)["write"] == tries(run_b)["write"] == ("failed", 1)
    assert tries(run_b)["publish"][0] == "upstream_failed"
    branch_a, branch_b = (xcoms(dr, "run_branch")["return_value"] for dr in (run_a, run_b))
    head_a, head_b = (repo.branch(b).get_commit() for b in (branch_a, branch_b))
    assert head_a.id == input_commit  # run A's write never published
    record_b = decode_metadata(head_b.metadata)
    assert record_b is not None and (record_b.role, record_b.attempt.key.run_id) == ("publish", run_b.run_id)
    assert repo.branch("main").get_commit().id == input_commit
    left = staging_branches(repo)
    assert len(left) == 2

    # The sensor watching run B's branch: its HEAD is the dead write's publication, abandoned.
    watch = {"repository": repo.id, "branch": branch_b, "publisher_dag_id": "lf_run_branch_once"}
    sensed = run(sensors.detect_dag, {**watch, "publisher_task_id": "write"})
    assert sensed.state == "success"
    found = xcoms(sensed, "sense")["return_value"]
    assert (found["verdict"], found["head"], found["run_id"], found["task_id"], found["state"]) == (
        "abandoned",
        head_b.id,
        run_b.run_id,
        "write",
        "failed",
    )

    # The cleaner: run A's dead unstaged branch (made from run A's branch) deleted; run B's staged one
    # kept (unmarked, its task failed: it may be evidence); the run branches are not staging branches.
    cleaned = run(rdags.clean_dag, {"repository": repo.id})
    assert cleaned.state == "success"
    result = xcoms(cleaned, "clean")["return_value"]
    deleted = {e["branch"]: e for e in result["deleted"]}
    kept = {e["branch"]: e for e in result["kept"]}
    assert sorted([*deleted, *kept]) == sorted(left)
    ((gone_branch, entry),) = deleted.items()
    assert (entry["run_id"], entry["task_id"], entry["head"]) == (run_a.run_id, "write", input_commit)
    ((kept_branch, kept_entry),) = kept.items()
    assert (kept_entry["run_id"], kept_entry["task_id"]) == (run_b.run_id, "write")
    assert "staged but not marked" in kept_entry["reason"]
    assert staging_branches(repo) == [kept_branch] and gone_branch not in staging_branches(repo)
    assert [repo.branch(b).get_commit().id for b in (branch_a, branch_b)] == [head_a.id, head_b.id]
    assert repo.branch("main").get_commit().id == input_commit


@pytest.fixture
def fenced_main(seeded: tuple[lakefs.Repository, str], lakefence_server: Any) -> tuple[lakefs.Repository, str]:
    """``seeded`` with the hard fence installed on ``main``; returns (repo, main's HEAD: the run's input)."""
    from airflow_lakefence.hardfence import install_hard_fence
    from airflow_lakefence.lakefs_adapter.client import LakeFSClient

    repo, _ = seeded
    client = LakeFSClient(lakefence_server.url, lakefence_server.access_key_id, lakefence_server.secret_access_key)
    return repo, install_hard_fence(client, repo.id, "main").head


@pytest.mark.hard_fence
def test_a_run_publishes_through_the_hard_fence(rdags: Any, fenced_main: tuple[lakefs.Repository, str]) -> None:
    repo, input_commit = fenced_main
    dr = run(rdags.hard_dag, conf(repo))
    assert dr.state == "success", rdags.FAILURES
    assert xcoms(dr, "publish")["decision"] == "merge"
    head = assert_published_once(repo, input_commit, dr)
    assert head.metadata["lakefence.expected_head"] == input_commit  # lakeFS's hook checked it


@pytest.mark.hard_fence
@pytest.mark.scoped
def test_scoped_runs_of_disjoint_partitions_both_land_through_the_hard_fence(
    rdags: Any, fenced_main: tuple[lakefs.Repository, str]
) -> None:
    repo, input_commit = fenced_main
    runs = [run(rdags.scoped_hard_dag, partition_conf(repo, p, input_commit)) for p in ("a", "b")]
    assert [r.state for r in runs] == ["success", "success"], rdags.FAILURES
    assert [xcoms(r, "publish")["decision"] for r in runs] == ["merge", "merge"]
    assert read_text(repo, "main", "tables/t/p=a/part.txt") == "a"
    assert read_text(repo, "main", "tables/t/p=b/part.txt") == "b"


def runs_at_once(attribute: str, confs: tuple[dict[str, Any], ...], tmp_path: Path) -> list[dict[str, Any]]:
    """Run one DAG of tests/dags/run_branch_dags.py once per conf, all at once, one process each."""
    from tests.conftest import DAGS_FOLDER
    from tests.examples.test_example_partitioned import run_dates_at_once

    dates = tuple(f"2026-01-0{n + 1}" for n in range(len(confs)))  # distinct runs: distinct run branches
    return run_dates_at_once(
        DAGS_FOLDER / "testdags" / "run_branch_dags.py", dates, tmp_path, attribute=attribute, confs=confs
    )


@pytest.mark.scoped
@pytest.mark.lakefs_reference_only  # processes at once: real lakeFS only under --lakefs-backend=both
def test_two_scoped_runs_publishing_at_once_both_land(seeded: tuple[lakefs.Repository, str], tmp_path: Path) -> None:
    repo, input_commit = seeded
    confs = tuple(partition_conf(repo, p, input_commit) for p in ("a", "b"))
    outcomes = runs_at_once("scoped_dag", confs, tmp_path)
    assert [o["state"] for o in outcomes] == ["success", "success"], outcomes
    assert read_text(repo, "main", "tables/t/p=a/part.txt") == "a"
    assert read_text(repo, "main", "tables/t/p=b/part.txt") == "b"
    published = {o["xcoms"]["publish"]["output_ref"] for o in outcomes}
    assert set(publications_on_top_of(repo, input_commit)) == published and len(published) == 2


@pytest.mark.hard_fence
@pytest.mark.lakefs_reference_only  # processes at once: real lakeFS only under --lakefs-backend=both
def test_two_runs_publishing_at_once_through_the_hard_fence_land_once(
    fenced_main: tuple[lakefs.Repository, str], tmp_path: Path
) -> None:
    repo, input_commit = fenced_main
    confs = tuple(conf(repo, {"out/a.txt": text}, source=input_commit) for text in ("A", "B"))
    outcomes = runs_at_once("hard_dag", confs, tmp_path)
    states = sorted(o["state"] for o in outcomes)
    assert states == ["failed", "success"], outcomes
    (winner,) = [o for o in outcomes if o["state"] == "success"]
    head = repo.branch("main").get_commit()
    assert publications_on_top_of(repo, input_commit) == [head.id] == [winner["xcoms"]["publish"]["output_ref"]]
    assert head.parents[0] == input_commit


def test_a_mapped_run_branch_step_makes_one_branch_per_map_index(
    rdags: Any, seeded: tuple[lakefs.Repository, str]
) -> None:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    repo, input_commit = seeded
    dr = run(rdags.mapped_dag, {"repository": repo.id})
    assert dr.state == "success"
    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dr.dag_id, run_id=dr.run_id, key="return_value").all()
        names = {row.map_index: XComModel.deserialize_value(row) for row in rows}
    assert sorted(names) == [0, 1] and names[0] != names[1]
    for index, name in names.items():
        assert name.startswith("part-manual__") and name.endswith(run_hash(dr.dag_id, dr.run_id, index))
        assert repo.branch(name).get_commit().id == input_commit
