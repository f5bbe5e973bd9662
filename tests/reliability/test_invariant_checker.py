"""The invariant checker can fail: each broken promise, staged by hand, is reported as a violation.

The crash, race and sweep tests pass only if ``check_invariants`` finds nothing; these tests show
that it does find each kind of breach when one is there.
"""

from __future__ import annotations

from pathlib import Path

import lakefs
import pytest

from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, encode_metadata
from tests.reliability.harness import DAG_ID, TASK_ID, Lake, Outcome, check_invariants, new_repository
from tests.reliability.registry import AttemptRegistry

KEY = PublicationKey(DAG_ID, "checker", TASK_ID, -1)


def outcome(
    name: str, ti_id: str, *, output_ref: str | None = None, error: str | None = None, log: str = ""
) -> Outcome:
    if error is not None:
        result = {"status": "error", "type": error, "types": [error, "LakeFenceError", "Exception"], "message": "x"}
        return Outcome(name, ti_id, 1, result, log)
    return Outcome(name, ti_id, 0, {"status": "success", "output_ref": output_ref}, log)


def publish(repo: lakefs.Repository, ti_id: str, try_number: int, input_commit: str) -> str:
    """A commit on main that looks like try ``try_number``'s publication, with its stamp."""
    attempt = AttemptId(KEY, try_number, ti_id)
    main = repo.branch("main")
    main.object("out/stamp.txt").upload(staging_branch_name(attempt).encode(), pre_sign=False)
    record = LakeFenceRecord(attempt, ROLE_PUBLISH, input_commit, "0" * 64)
    return str(main.commit("publish", metadata=encode_metadata(record)).get_commit().id)


@pytest.fixture
def setup(lake: Lake, tmp_path: Path) -> tuple[lakefs.Repository, str, AttemptRegistry, str, str]:
    repo, input_commit = new_repository(lake)
    registry = AttemptRegistry(tmp_path / "registry.sqlite")
    ti1 = registry.new_try(KEY.dag_id, KEY.run_id, KEY.task_id)
    ti2 = registry.new_try(KEY.dag_id, KEY.run_id, KEY.task_id)
    return repo, input_commit, registry, ti1, ti2


def test_a_clean_state_passes(setup: tuple[lakefs.Repository, str, AttemptRegistry, str, str]) -> None:
    repo, input_commit, registry, ti1, ti2 = setup
    head = publish(repo, ti2, 2, input_commit)
    registry.xcom_push(ti2, "output_ref", head)
    outcomes = {"try1": outcome("try1", ti1, error="StaleAttemptError"), "try2": outcome("try2", ti2, output_ref=head)}
    verdict = check_invariants(repo, KEY, input_commit, outcomes, registry, current="try2")
    assert verdict.ok and not verdict.holes, verdict


def test_stale_data_visible_without_a_report(setup: tuple[lakefs.Repository, str, AttemptRegistry, str, str]) -> None:
    repo, input_commit, registry, ti1, ti2 = setup
    head = publish(repo, ti1, 1, input_commit)  # try 1's data on the target, try 2 says success
    registry.xcom_push(ti2, "output_ref", head)
    outcomes = {"try1": outcome("try1", ti1, output_ref=head), "try2": outcome("try2", ti2, output_ref=head)}
    verdict = check_invariants(repo, KEY, input_commit, outcomes, registry, current="try2")
    assert "data of stale try 1 visible at HEAD" in verdict.violations


def test_double_publication_on_the_input(setup: tuple[lakefs.Repository, str, AttemptRegistry, str, str]) -> None:
    repo, input_commit, registry, ti1, ti2 = setup
    first = publish(repo, ti1, 1, input_commit)
    second = publish(repo, ti2, 2, input_commit)  # stacked on the first, nobody raised
    registry.xcom_push(ti2, "output_ref", second)
    outcomes = {"try1": outcome("try1", ti1, output_ref=first), "try2": outcome("try2", ti2, output_ref=second)}
    verdict = check_invariants(repo, KEY, input_commit, outcomes, registry, current="try2")
    assert any("did not raise PublishRaceError" in v for v in verdict.violations), verdict


def test_unexplained_and_lost_foreign_commits(setup: tuple[lakefs.Repository, str, AttemptRegistry, str, str]) -> None:
    repo, input_commit, registry, ti1, ti2 = setup
    side = repo.branch("side").create("main")
    side.object("f.txt").upload(b"f", pre_sign=False)
    lost = side.commit("acknowledged, then gone").get_commit()
    registry.record("foreign", "foreign_commit", {"n": 0, "id": lost.id, "parent": lost.parents[0]})
    main = repo.branch("main")
    main.object("x.txt").upload(b"x", pre_sign=False)
    stranger = main.commit("nobody said").get_commit().id
    outcomes = {
        "try1": outcome("try1", ti1, error="StaleAttemptError"),
        "try2": outcome("try2", ti2, error="PublishFenceError"),
    }
    verdict = check_invariants(repo, KEY, input_commit, outcomes, registry, current="try2")
    assert f"unexplained commit {stranger} on the target" in verdict.violations
    assert f"foreign commit {lost.id[:8]} was lost" in verdict.violations


def test_unnamed_errors_leftovers_and_secrets(setup: tuple[lakefs.Repository, str, AttemptRegistry, str, str]) -> None:
    repo, input_commit, registry, ti1, ti2 = setup
    leftover = staging_branch_name(AttemptId(KEY, 1, ti1))
    repo.branch(leftover).create("main", hidden=True)
    outcomes = {
        "try1": outcome("try1", ti1, error="KeyError", log="secret-in-the-log"),
        "try2": outcome("try2", ti2, error="LakeFSNotFoundError"),
    }
    verdict = check_invariants(repo, KEY, input_commit, outcomes, registry, current="try2", secret="secret-in-the-log")
    assert any(v.startswith("try1 ended with KeyError") for v in verdict.violations)
    assert any(v.startswith("try2 ended with LakeFSNotFoundError") for v in verdict.violations)
    assert f"staging branch {leftover} left behind" in verdict.violations
    assert "the lakeFS secret appears in try1's log or outcome" in verdict.violations
