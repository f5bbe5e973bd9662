"""A crash at every protocol boundary, then the retry.

Each test runs try 1 of the fenced task in its own process and kills it at one failpoint with
``os._exit`` (no ``except`` or ``finally`` runs: a dead worker). It then records what the crash
left visible, plays the scheduler (try 1 failed, try 2 minted with a new task-instance id), runs
try 2 to completion in another process and checks the invariants:

* the target's history is explainable: HEAD is the input, or one publication of this key on it;
* the published data is the retry's;
* no staging branch of the dead attempt is left (the retry removes earlier tries' branches);
* the XCom a downstream task would read is the retry's output ref;
* the secret appears in neither process's log.

Along the way it asks what ``AbandonedPublicationSensor`` reports (its probe, against the same
Airflow state) and runs ``LakeFSStagingCleanupOperator``'s cleanup. The expected observations are
the crash-window table of docs/reliability.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lakefs
import pytest

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_prefix
from airflow_lakefence.core.records.metadata import decode_metadata
from airflow_lakefence.failpoints import CRASH_EXIT_CODE, POINTS
from tests.reliability.harness import (
    DAG_ID,
    TARGET,
    TASK_ID,
    ForkServer,
    History,
    Lake,
    Outcome,
    check_invariants,
    judge_head,
    leftover_staging,
    new_repository,
    run_attempt,
    run_cleaner,
    visible_tries,
)
from tests.reliability.registry import AttemptRegistry

JOB = {"files": {"out/a.txt": "A", "out/b.txt": "B"}, "stamp_path": "out/stamp.txt"}


@dataclass(frozen=True)
class Window:
    """What a crash at one point leaves, and what the retry does.

    :param published: try 1's publication is the target's HEAD.
    :param staged: try 1's staging branch holds its staged commit.
    :param uncommitted: try 1's staging branch holds uncommitted objects (a partial upload).
    :param xcom: try 1's output ref is readable from XCom (until the retry starts).
    :param decision: the retry's publish decision.
    :param left_staging: try 1's staging branch survives the crash (the try deletes it while it
        reports its outcome, so a crash after the XCom push finds it gone).
    """

    published: bool = False
    staged: bool = False
    uncommitted: int = 0
    xcom: bool = False
    decision: str = "merge"
    left_staging: bool = True


#: Workspace mode, a job writing three files (two uploaded before ``mid_upload``... one, then two).
WINDOWS = {
    "after_staging_branch": Window(),
    "after_job": Window(),
    "after_fence_1": Window(),
    "mid_upload": Window(uncommitted=1),
    "after_stage": Window(staged=True),
    "after_fence_2": Window(staged=True),
    "after_publish_read": Window(staged=True),
    "after_publish_action": Window(published=True, staged=True, decision="replace"),
    "after_verify": Window(published=True, staged=True, decision="replace"),
    "after_xcom": Window(published=True, staged=True, xcom=True, decision="replace", left_staging=False),
}


def test_every_failpoint_has_a_window() -> None:
    assert tuple(WINDOWS) == POINTS


@dataclass
class Crash:
    """A crashed first try and everything needed to run the next ones."""

    repo: lakefs.Repository
    input_commit: str
    key: PublicationKey
    registry: AttemptRegistry
    operator: dict[str, object]
    workdir: Path


def _crash_first_try(
    launcher: ForkServer,
    lake: Lake,
    driver_env: dict[str, str],
    tmp_path: Path,
    point: str,
    *,
    write_mode: str = "workspace",
    allow_empty: bool = False,
    job: dict[str, object] = JOB,
) -> tuple[Crash, Outcome]:
    repo, input_commit = new_repository(lake)
    registry = AttemptRegistry(tmp_path / "registry.sqlite")
    key = PublicationKey(DAG_ID, f"crash-{point}", TASK_ID, -1)
    operator = {
        "repository": repo.id,
        "target_branch": TARGET,
        "input_ref": input_commit,
        "write_mode": write_mode,
        "output_prefixes": ["out/"],
        "allow_empty_workspace": allow_empty,
    }
    ti1 = registry.new_try(key.dag_id, key.run_id, key.task_id)
    first = run_attempt(launcher, tmp_path, driver_env, registry, operator, job, ti1, crash_at=point)
    assert first.returncode == CRASH_EXIT_CODE, first.log[-2000:]
    assert first.result == {}  # no outcome written: nothing after the failpoint ran
    return Crash(repo, input_commit, key, registry, operator, tmp_path), first


def _retry(launcher: ForkServer, crash: Crash, driver_env: dict[str, str], job: dict[str, object] = JOB) -> Outcome:
    # The scheduler finds the dead worker: the try fails and the next one gets a new ti id.
    previous = crash.registry.find_try(crash.key.dag_id, crash.key.run_id, crash.key.task_id, 1)
    assert previous is not None
    ti = crash.registry.new_try(crash.key.dag_id, crash.key.run_id, crash.key.task_id)
    return run_attempt(launcher, crash.workdir, driver_env, crash.registry, crash.operator, job, ti)


@pytest.mark.parametrize("point", POINTS)
def test_crash_at_boundary_then_retry(
    launcher: ForkServer, lake: Lake, driver_env: dict[str, str], tmp_path: Path, point: str
) -> None:
    window = WINDOWS[point]
    crash, first = _crash_first_try(launcher, lake, driver_env, tmp_path, point)
    repo, input_commit = crash.repo, crash.input_commit
    history = History(repo)

    # What the crash left visible.
    head = history.head()
    if window.published:
        record = decode_metadata(history.commit(head).metadata)
        assert record is not None and record.attempt.try_number == 1 and record.role == "publish"
        assert history.commit(head).parents[0] == input_commit
        assert visible_tries(repo, head, "out/stamp.txt", None) == {1}
    else:
        assert head == input_commit
    staging = leftover_staging(repo, crash.key)
    if window.left_staging:
        assert len(staging) == 1 and "-t1-" in staging[0]  # the dead attempt's branch: nothing ran its cleanup
        staged_head = repo.branch(staging[0]).get_commit()
        assert (staged_head.id != input_commit) is window.staged
        uncommitted = list(repo.branch(staging[0]).uncommitted())
        assert len(uncommitted) == window.uncommitted
    else:
        assert staging == []  # deleted while the outcome was reported, before the crash
    assert ("output_ref" in crash.registry.visible_xcoms()) is window.xcom
    if window.xcom:
        assert crash.registry.visible_xcoms()["output_ref"] == head

    # The sensor before the scheduler notices the dead worker (the try still shows running)...
    judged = judge_head(lake, repo.id, crash.registry)
    assert judged.verdict == ("in_flight" if window.published else "not_a_publication")
    # ... and once the try has failed with a retry pending.
    ti1 = crash.registry.find_try(crash.key.dag_id, crash.key.run_id, crash.key.task_id, 1)
    assert ti1 is not None
    crash.registry.set_state(ti1, "up_for_retry")
    judged = judge_head(lake, repo.id, crash.registry)
    # A try that died after pushing its output_ref XCom (after writing ``lakefence.published``) is, by
    # design, indistinguishable from a succeeded-then-cleared one: superseded, not abandoned
    # (docs/abandoned-publications.md, "Superseded is not abandoned").
    expected = "superseded" if window.xcom else ("abandoned" if window.published else "not_a_publication")
    assert judged.verdict == expected
    assert judged.retry_pending is (window.published and not window.xcom)

    second = _retry(launcher, crash, driver_env)
    assert second.succeeded, second.result
    assert crash.registry.visible_xcoms()["decision"] == window.decision
    verdict = check_invariants(
        repo,
        crash.key,
        input_commit,
        {"try1": first, "try2": second},
        crash.registry,
        current="try2",
        secret=lake.secret_access_key,
    )
    assert verdict.ok, verdict
    assert verdict.holes == []
    final = history.head()
    assert history.commit(final).parents[0] == input_commit
    assert visible_tries(repo, final, "out/stamp.txt", None) == {2}
    assert leftover_staging(repo, crash.key) == []
    assert judge_head(lake, repo.id, crash.registry).verdict == "settled"
    assert run_cleaner(lake, repo.id, crash.registry)["deleted"] == []  # the retry left nothing to clean


@pytest.mark.parametrize("point", POINTS)
def test_crash_without_retry_the_cleaner_removes_the_dead_branch(
    launcher: ForkServer, lake: Lake, driver_env: dict[str, str], tmp_path: Path, point: str
) -> None:
    """Retries exhausted: no next try removes the dead attempt's branch, the cleaner does."""
    window = WINDOWS[point]
    crash, _ = _crash_first_try(launcher, lake, driver_env, tmp_path, point)
    head = History(crash.repo).head()
    if not window.left_staging:  # nothing left for the cleaner
        assert leftover_staging(crash.repo, crash.key) == []
        assert run_cleaner(lake, crash.repo.id, crash.registry)["deleted"] == []
        return
    (dead,) = leftover_staging(crash.repo, crash.key)
    ti1 = crash.registry.find_try(crash.key.dag_id, crash.key.run_id, crash.key.task_id, 1)
    assert ti1 is not None
    crash.registry.set_state(ti1, "failed")
    judged = judge_head(lake, crash.repo.id, crash.registry)
    assert judged.verdict == ("abandoned" if window.published else "not_a_publication")
    report = run_cleaner(lake, crash.repo.id, crash.registry)
    if window.staged or window.uncommitted:
        # Staged but never marked (or unstaged holding uncommitted uploads), and its task instance did
        # not succeed: it may be the evidence of a fail-closed try whose marker could not be written,
        # so the cleaner keeps it until told (delete_evidence=True; docs/abandoned-publications.md).
        assert report["deleted"] == []
        assert [entry["branch"] for entry in report["kept"]] == [dead]
        assert leftover_staging(crash.repo, crash.key) == [dead]
        report = run_cleaner(lake, crash.repo.id, crash.registry, delete_evidence=True)
    assert [entry["branch"] for entry in report["deleted"]] == [dead]
    assert leftover_staging(crash.repo, crash.key) == []
    assert History(crash.repo).head() == head  # the cleaner never touches the target


@pytest.mark.parametrize("point", ["after_publish_action", "after_verify", "after_xcom"])
def test_crash_after_publishing_then_retry_that_changes_nothing_relocates(
    launcher: ForkServer, lake: Lake, driver_env: dict[str, str], tmp_path: Path, point: str
) -> None:
    job: dict[str, object] = {"first_try_files": {"out/only-try-1.txt": "1"}}
    crash, _ = _crash_first_try(launcher, lake, driver_env, tmp_path, point, allow_empty=True, job=job)
    abandoned = History(crash.repo).head()
    assert abandoned != crash.input_commit
    second = _retry(launcher, crash, driver_env, job)
    assert second.succeeded, second.result
    assert crash.registry.visible_xcoms()["decision"] == "relocate"
    assert History(crash.repo).head() == crash.input_commit  # the abandoned publication is gone
    assert "out/only-try-1.txt" not in [o.path for o in crash.repo.ref(TARGET).objects()]
    assert leftover_staging(crash.repo, crash.key) == []


@pytest.mark.parametrize(
    ("point", "uncommitted", "decision"),
    [("after_job", 3, "merge"), ("after_stage", 0, "merge"), ("after_publish_action", 0, "replace")],
)
def test_crash_in_direct_mode_then_retry(
    launcher: ForkServer,
    lake: Lake,
    driver_env: dict[str, str],
    tmp_path: Path,
    point: str,
    uncommitted: int,
    decision: str,
) -> None:
    crash, first = _crash_first_try(launcher, lake, driver_env, tmp_path, point, write_mode="direct")
    staging = leftover_staging(crash.repo, crash.key)
    assert len(list(crash.repo.branch(staging[0]).uncommitted())) == uncommitted
    second = _retry(launcher, crash, driver_env)
    assert second.succeeded, second.result
    assert crash.registry.visible_xcoms()["decision"] == decision
    verdict = check_invariants(
        crash.repo,
        crash.key,
        crash.input_commit,
        {"try1": first, "try2": second},
        crash.registry,
        current="try2",
        secret=lake.secret_access_key,
    )
    assert verdict.ok and not verdict.holes, verdict
    assert visible_tries(crash.repo, History(crash.repo).head(), "out/stamp.txt", None) == {2}


@pytest.mark.parametrize("second_point", ["after_publish_action", "after_stage"])
def test_two_crashes_in_a_row_then_a_third_try(
    launcher: ForkServer, lake: Lake, driver_env: dict[str, str], tmp_path: Path, second_point: str
) -> None:
    """Try 1 dies after publishing, try 2 dies too; try 3 still ends with one publication: its own."""
    crash, first = _crash_first_try(launcher, lake, driver_env, tmp_path, "after_publish_action")
    ti2 = crash.registry.new_try(crash.key.dag_id, crash.key.run_id, crash.key.task_id)
    second = run_attempt(
        launcher, tmp_path, driver_env, crash.registry, crash.operator, JOB, ti2, crash_at=second_point
    )
    assert second.returncode == CRASH_EXIT_CODE
    if second_point == "after_publish_action":  # try 2 replaced try 1's publication, then died
        record = decode_metadata(History(crash.repo).commit(History(crash.repo).head()).metadata)
        assert record is not None and record.attempt.try_number == 2
    ti3 = crash.registry.new_try(crash.key.dag_id, crash.key.run_id, crash.key.task_id)
    third = run_attempt(launcher, tmp_path, driver_env, crash.registry, crash.operator, JOB, ti3)
    assert third.succeeded, third.result
    assert crash.registry.visible_xcoms()["decision"] == "replace"
    verdict = check_invariants(
        crash.repo,
        crash.key,
        crash.input_commit,
        {"try1": first, "try2": second, "try3": third},
        crash.registry,
        current="try3",
        secret=lake.secret_access_key,
    )
    assert verdict.ok and not verdict.holes, verdict
    history = History(crash.repo)
    assert history.commit(history.head()).parents[0] == crash.input_commit
    assert visible_tries(crash.repo, history.head(), "out/stamp.txt", None) == {3}
    assert [b.id for b in crash.repo.branches(prefix=staging_branch_prefix(crash.key), show_hidden=True)] == []
