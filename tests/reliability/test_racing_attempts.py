"""Racing attempts across processes.

A zombie try 1 (its task instance cleared while its process keeps going), the new try 2 and a
foreign writer run the protocol at the same time, each in its own process, against one lakeFS.

* The chosen interleavings below pin one race each with barriers (a process blocks at a failpoint
  until the timeline shows another's event): what the fences stop, what verification reports, and
  the documented limits of the soft fence, observed and named by the invariant checker.
* The seeded interleavings run random delays at every boundary, a random clear time and a random
  foreign writer (a fixed set here; ``python -m tests.reliability.sweep --seeds 200`` for the long
  sweep, whose latest result docs/reliability.md records), with the soft fence and, on a few seeds,
  with the hard fence (``--fence both`` for the long sweep; docs/hard-fence.md).

The invariants (``check_invariants``): the target's history is explainable; no acknowledged foreign
commit is lost (except through the hard-reset window, reported as such); a stale attempt never ends
with its data visible unless the outcome was reported; every race verification detects is a
``PublishRaceError``; every attempt ends with a named outcome; no staging branch is left after the
cleaner; the secret is in no log.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lakefs
import pytest

from airflow_lakefence.core.names.keys import PublicationKey
from tests.reliability.harness import (
    DAG_ID,
    TARGET,
    TASK_ID,
    Attempt,
    ForkServer,
    History,
    Lake,
    Outcome,
    Proc,
    Verdict,
    check_cleaner,
    check_invariants,
    new_repository,
    spawn_attempt,
    spawn_foreign_writer,
    visible_tries,
)
from tests.reliability.registry import AttemptRegistry
from tests.reliability.sweep import run_sweep, violation_classes

#: The seeded interleavings CI runs (the sweep runs seeds 0..199).
CI_SEEDS = range(1000, 1012)
#: The seeds CI runs with the hard fence, picked from the sweep's seeds 0..59 (local server), each a
#: few seconds: in 46 the zombie's merge, in 31 try 2's optimistic merge meets a foreign commit and
#: lakeFS's hard fence refuses it (412: HardFenceRaceError); in 30 the zombie's late merge conflicts
#: with try 2's publication (the soft fence's PublishRaceError; a HardFenceRaceError once the target
#: is re-read); in 16 and 53 try 2 replaces try 1's publication by merges (a chain link).
CI_HARD_SEEDS = (30, 46, 31, 16, 53)


@dataclass
class Race:
    """One chosen interleaving being set up: a repository, the registry, the processes."""

    launcher: ForkServer
    lake: Lake
    env: dict[str, str]
    workdir: Path
    repo: lakefs.Repository
    input_commit: str
    key: PublicationKey
    registry: AttemptRegistry
    operator: dict[str, Any]
    job: dict[str, Any]
    attempts: dict[str, Attempt] = field(default_factory=dict)
    foreign: Proc | None = None

    def start(self, number: int, *, waits: Mapping[str, list[Any]] | None = None, crash_at: str | None = None) -> None:
        """Start try ``number``: try 1 at once, a later try when the scheduler mints it."""
        if number == 1:
            ti = self.registry.new_try(self.key.dag_id, self.key.run_id, self.key.task_id)
            attempt = spawn_attempt(
                self.launcher, self.workdir, self.env, self.registry, self.operator, self.job,
                ti_id=ti, waits=waits, crash_at=crash_at,
            )  # fmt: skip
        else:
            attempt = spawn_attempt(
                self.launcher, self.workdir, self.env, self.registry, self.operator, self.job,
                await_try=(self.key, number, 0.0), waits=waits, crash_at=crash_at,
            )  # fmt: skip
        self.attempts[f"try{number}"] = attempt

    def clear_when(self, who: str, what: str, point: str | None = None) -> None:
        """Play the UI: once the event happened, clear the task (try 1 becomes a zombie)."""
        self.registry.wait_for(who, what, point)
        self.registry.new_try(self.key.dag_id, self.key.run_id, self.key.task_id)

    def foreign_steps(self, *steps: tuple[list[Any], str]) -> None:
        """Start the foreign writer: each action once its event happened."""
        self.foreign = spawn_foreign_writer(
            self.launcher, self.workdir, self.env, self.lake, self.registry, self.repo.id,
            steps=[{"after": after, "action": action} for after, action in steps],
        )  # fmt: skip

    def finish(self, current: str, *, parts: bool = False) -> tuple[dict[str, Outcome], Verdict]:
        """Wait for every process, then check the invariants and run the cleaner."""
        outcomes = {name: attempt.wait() for name, attempt in self.attempts.items()}
        if self.foreign is not None:
            self.foreign.wait(120)
        verdict = check_invariants(
            self.repo,
            self.key,
            self.input_commit,
            outcomes,
            self.registry,
            current=current,
            stamp_path="out/stamp.txt" if "stamp_path" in self.job else None,
            part_prefix="out/parts/" if parts else None,
            secret=self.lake.secret_access_key,
        )
        check_cleaner(self.lake, self.repo, self.key, self.registry, verdict)
        return outcomes, verdict


@pytest.fixture
def race(launcher: ForkServer, lake: Lake, driver_env: dict[str, str], tmp_path: Path) -> Iterator[Race]:
    repo, input_commit = new_repository(lake)
    key = PublicationKey(DAG_ID, f"race-{tmp_path.name}", TASK_ID, -1)
    operator = {"repository": repo.id, "target_branch": TARGET, "input_ref": input_commit, "output_prefixes": ["out/"]}
    setup = Race(
        launcher, lake, driver_env, tmp_path, repo, input_commit, key,
        AttemptRegistry(tmp_path / "registry.sqlite"), operator, {"stamp_path": "out/stamp.txt"},
    )  # fmt: skip
    yield setup
    for attempt in setup.attempts.values():
        attempt.proc.kill()
    if setup.foreign is not None:
        setup.foreign.kill()


def _timeline(race: Race) -> list[dict[str, Any]]:
    """The events of the attempts and the scheduler (each with a detail mapping)."""
    return [e for e in race.registry.events() if isinstance(e["detail"], dict)]


def _decisions(registry: AttemptRegistry, who: str) -> list[str]:
    return [e["detail"]["action"] for e in registry.events() if e["who"] == who and e["what"] == "decision"]


# -- what the fences stop ---------------------------------------------------------------------


@pytest.mark.parametrize("point", ["after_staging_branch", "after_job", "after_stage"])
def test_zombie_is_stopped_by_the_attempt_fence(race: Race, point: str) -> None:
    """Cleared while running: the zombie stops at its next attempt-fence check, whatever try 2 did."""
    race.start(1, waits={point: ["try2", "end"]})
    race.start(2)
    race.clear_when("try1", "point", point)
    outcomes, verdict = race.finish("try2")
    assert verdict.ok and not verdict.holes, verdict
    assert outcomes["try1"].error_type == "StaleAttemptError"
    assert outcomes["try2"].succeeded
    assert visible_tries(race.repo, TARGET, "out/stamp.txt", None) == {2}


def test_zombie_whose_branch_was_removed_reports_staleness(race: Race) -> None:
    """Try 2 deletes try 1's staging branch; try 1's next call fails on it: a StaleAttemptError."""
    race.operator["write_mode"] = "direct"  # the job writes into the staging branch itself
    race.job = {"stamp_path": "out/stamp.txt", "sleep": 0}
    race.start(1, waits={"after_staging_branch": ["try2", "point", "after_staging_branch"]})
    race.start(2, waits={"after_job": ["try1", "end"]})
    race.clear_when("try1", "point", "after_staging_branch")
    outcomes, verdict = race.finish("try2")
    assert verdict.ok and not verdict.holes, verdict
    assert outcomes["try1"].error_type == "StaleAttemptError"
    assert "after the Spark job failed" in outcomes["try1"].result["message"]


def test_publication_by_a_zombie_before_the_new_try_publishes_is_replaced(race: Race) -> None:
    """The zombie passed fence #2 before the clear and merges after it; try 2 then replaces it."""
    # Held until the clear mints try 2 (a bare new_try would match try 1's own, the timeline's first).
    race.start(1, waits={"after_publish_read": ["scheduler", "new_try", {"try_number": 2}]})
    race.clear_when("try1", "point", "after_publish_read")
    # Try 2 starts once the zombie merged: its first writes delete earlier tries' staging branches,
    # which would otherwise race the zombie's merge (a real scheduler takes seconds to start it).
    race.registry.wait_for("try1", "point", "after_publish_action")
    race.start(2, waits={"after_fence_2": ["try1", "end"]})
    outcomes, verdict = race.finish("try2")
    assert verdict.ok and not verdict.holes, verdict
    # The interleaving named: the zombie merged after the clear, and before try 2 started.
    seen = [(e["who"], e["what"], e["detail"].get("point", e["detail"].get("try_number"))) for e in _timeline(race)]
    order = [seen.index(e) for e in (("scheduler", "new_try", 2), ("try1", "point", "after_publish_action"))]
    assert order[0] < order[1] < seen.index(("try2", "start", None)), seen
    # It was current when it passed its fences; cleared before it merged, it does not report.
    assert outcomes["try1"].error_type == "StaleAttemptError"
    assert _decisions(race.registry, "try2")[-1] == "replace"
    history = History(race.repo)
    assert history.commit(history.head()).parents == (race.input_commit,)
    assert visible_tries(race.repo, TARGET, "out/stamp.txt", None) == {2}


def test_zombie_merge_after_the_new_publication_conflicts(race: Race) -> None:
    """Same output paths: the zombie's merge on top of try 2's conflicts (409), nothing stacks."""
    race.start(1, waits={"after_publish_read": ["try2", "end"]})
    race.start(2)
    race.clear_when("try1", "point", "after_publish_read")
    outcomes, verdict = race.finish("try2")
    assert verdict.ok and not verdict.holes, verdict
    assert outcomes["try1"].error_type == "PublishRaceError" and "conflicted" in outcomes["try1"].result["message"]
    assert outcomes["try2"].succeeded
    assert visible_tries(race.repo, TARGET, "out/stamp.txt", None) == {2}


# -- what verification reports ----------------------------------------------------------------


def test_foreign_commit_between_fence_read_and_merge_is_reported(race: Race) -> None:
    race.start(1, waits={"after_publish_read": ["foreign", "foreign_commit"]})
    race.foreign_steps((["try1", "point", "after_publish_read"], "merge"))
    outcomes, verdict = race.finish("try1")
    assert verdict.ok and not verdict.holes, verdict
    assert outcomes["try1"].error_type == "PublishRaceError"
    assert "first parent" in outcomes["try1"].result["message"]
    (foreign,) = [e["detail"]["id"] for e in race.registry.events() if e["what"] == "foreign_commit"]
    assert History(race.repo).reachable(History(race.repo).head(), foreign)  # nothing lost, nothing hidden


def test_dirty_target_refuses_the_merge_as_a_race(race: Race) -> None:
    """A foreign writer has uncommitted changes on the target: lakeFS refuses the merge (dirty)."""
    race.start(1, waits={"after_publish_read": ["foreign", "foreign_upload"]})
    race.foreign_steps(
        (["try1", "point", "after_publish_read"], "upload"),
        (["try1", "end"], "commit_staged"),
    )
    outcomes, verdict = race.finish("try1")
    assert verdict.ok and not verdict.holes, verdict
    assert outcomes["try1"].error_type == "PublishRaceError" and "uncommitted" in outcomes["try1"].result["message"]
    head = History(race.repo).commit(History(race.repo).head())
    assert head.parents == (race.input_commit,) and head.metadata.get("writer") == "foreign"


def _replacement_with_a_foreign_commit_at(race: Race, point: str) -> tuple[dict[str, Outcome], Verdict]:
    """Try 1 dies after publishing; try 2 replaces it while a foreign writer commits at ``point``."""
    race.start(1, crash_at="after_verify")
    race.attempts["try1"].wait()
    race.start(2, waits={point: ["foreign", "foreign_commit"]})
    race.foreign_steps((["try2", "point", point], "commit"))
    race.registry.new_try(race.key.dag_id, race.key.run_id, race.key.task_id)
    return race.finish("try2")


def test_commit_on_top_of_a_replacement_is_not_a_race(race: Race) -> None:
    """A writer that commits right after the reset builds on the replacement: the publish stands."""
    outcomes, verdict = _replacement_with_a_foreign_commit_at(race, "after_publish_action")
    assert verdict.ok and not verdict.holes, verdict
    assert outcomes["try2"].succeeded and _decisions(race.registry, "try2")[-1] == "replace"
    head = History(race.repo).commit(History(race.repo).head())
    assert head.metadata.get("writer") == "foreign" and head.parents == (outcomes["try2"].result["output_ref"],)


# -- the soft fence's documented limits, observed and named -----------------------------------


def test_hole_hard_reset_drops_a_foreign_commit_in_its_window(race: Race) -> None:
    """Between the publish-fence read and a hard reset a foreign commit can land; the reset drops it.

    lakeFS offers no compare-and-swap on a branch: verification cannot see this (HEAD is what was
    set). The checker finds it from the foreign writer's acknowledgements and names it.
    """
    outcomes, verdict = _replacement_with_a_foreign_commit_at(race, "after_publish_read")
    assert verdict.ok, verdict
    assert verdict.holes == ["hard_reset_dropped_foreign_commit"]
    assert outcomes["try2"].succeeded


def test_hole_zombie_merge_stacks_on_the_new_publication(race: Race) -> None:
    """Per-attempt file names (like Spark's part-<uuid> files) do not conflict.

    The zombie read HEAD = input before the clear and stalls; try 2 runs entirely and publishes;
    the zombie's merge then lands on top. Its verification raises PublishRaceError, but its task
    instance is archived: Airflow shows try 2's success. (A real supervisor kills the zombie within
    seconds of the clear; the stall must outlast that and the whole of try 2.)
    """
    race.job = {"part_prefix": "out/parts/"}
    race.start(1, waits={"after_publish_read": ["try2", "end"]})
    race.start(2)
    race.clear_when("try1", "point", "after_publish_read")
    outcomes, verdict = race.finish("try2", parts=True)
    assert verdict.ok, verdict
    assert verdict.holes == ["stale_merge_stacked"]
    assert outcomes["try1"].error_type == "PublishRaceError" and outcomes["try2"].succeeded
    assert visible_tries(race.repo, TARGET, None, "out/parts/") == {1, 2}


def test_zombie_that_published_before_the_clear_does_not_report(race: Race) -> None:
    """Airflow does not fence XCom writes; the fence check before reporting stops a zombie that
    published before the clear from overwriting the new try's XCom (formerly the L3 hole)."""
    race.start(1, waits={"after_verify": ["try2", "end"]})
    race.start(2)
    race.clear_when("try1", "point", "after_verify")
    outcomes, verdict = race.finish("try2")
    assert verdict.ok, verdict
    assert verdict.holes == []
    assert outcomes["try1"].error_type == "StaleAttemptError"
    assert race.registry.visible_xcoms()["output_ref"] == outcomes["try2"].result["output_ref"]
    assert visible_tries(race.repo, TARGET, "out/stamp.txt", None) == {2}


# -- seeded interleavings ---------------------------------------------------------------------


def test_seeded_interleavings(launcher: ForkServer, lake: Lake, airflow_home: Path, tmp_path: Path) -> None:
    """The fixed CI set, three scenarios at a time; a failure names its seed (rerun it with
    ``python -m tests.reliability.sweep --first SEED --seeds 1``)."""
    reports = run_sweep(launcher, lake, list(CI_SEEDS), 3, tmp_path, airflow_home)
    failed = {r.scenario.seed: r.summary() for r in reports if not r.verdict.ok}
    assert not failed, failed
    # Not vacuous: zombies were stopped (or their publication replaced) and foreign writers raced.
    outcomes = [o.get("type") or o["status"] for r in reports for o in (r.outcomes["try1"], r.outcomes["try2"])]
    replaced = any("try2:replace" in r.outcomes["decisions"] for r in reports)
    assert "StaleAttemptError" in outcomes or replaced
    assert "PublishFenceError" in outcomes and "success" in outcomes


def test_seeded_interleavings_with_the_hard_fence(
    launcher: ForkServer, lake: Lake, airflow_home: Path, tmp_path: Path
) -> None:
    """The hard fence's targets (docs/hard-fence.md) on the CI seeds: every invariant holds, and not one lost
    foreign commit, stale publication or stacked publication, not even as a documented soft-fence
    hole. Rerun one with ``python -m tests.reliability.sweep --fence hard --first SEED --seeds 1``."""
    reports = run_sweep(launcher, lake, list(CI_HARD_SEEDS), 3, tmp_path, airflow_home, fence="hard")
    failed = {r.scenario.seed: r.summary() for r in reports if not r.verdict.ok or r.verdict.holes}
    assert not failed, failed
    assert violation_classes(reports) == {
        "lost_foreign_commits": 0,
        "stacked_publications": 0,
        "stale_publications": 0,
        "other_violations": 0,
    }
    # Not vacuous: lakeFS's hard fence refused a stale merge, and a publication was replaced by merges.
    ended = [o for r in reports for o in (r.outcomes["try1"], r.outcomes["try2"])]
    refused = [o for o in ended if o.get("message", "").startswith("lakeFS's hard fence refused the merge")]
    assert refused and all(o["type"] == "HardFenceRaceError" for o in refused), ended
    assert any("try2:replace" in r.outcomes["decisions"] for r in reports), [r.outcomes for r in reports]
    assert all(r.verdict.notes["fence"] == "hard" for r in reports)
