"""The scoped sweep's invariant checker can fail: each broken promise, staged by hand, is reported.

The scoped race sweep passes only if ``check_scoped_invariants`` finds nothing; these tests build
each breach on a real repository (commits carrying the writers' publication records) and show that
it is found, and that the states the fence legitimately produces are not reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest

from airflow_lakefence.core.fences.scope import RACE_REVERT_KEY, RACE_TAKEN_BACK_KEY
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, LakeFenceRecord, encode_metadata
from tests.reliability.harness import DAG_ID, TASK_ID, Lake, Outcome, Verdict, new_repository
from tests.reliability.registry import AttemptRegistry
from tests.reliability.scoped_race import (
    DIMS,
    TABLE,
    ScopedScenario,
    WriterPlan,
    WriterRun,
    check_scoped_invariants,
    day,
    overlapping,
)

pytestmark = pytest.mark.scoped


class World:
    """A repository whose main holds the input, and writers whose publications are committed by hand."""

    def __init__(self, lake: Lake, tmp_path: Path) -> None:
        self.repo, self.input = new_repository(lake, {"in/data.txt": "input", f"{DIMS}v.txt": "dimension v1"})
        self.registry = AttemptRegistry(tmp_path / "registry.sqlite")
        self.writers: list[WriterRun] = []

    def writer(self, name: str, write: tuple[str, ...], read: tuple[str, ...] = (), *, tries: int = 1) -> WriterRun:
        plan = WriterPlan(name, write, read, "plain", None, 0.0, 0.0, 0.0, {}, "both", "workspace", False)
        key = PublicationKey(DAG_ID, f"checker-{name}", TASK_ID, -1)
        ti_ids = {n: self.registry.new_try(key.dag_id, key.run_id, key.task_id) for n in range(1, tries + 1)}
        run = WriterRun(plan, key, {}, ti_ids)
        self.writers.append(run)
        return run

    def publish(self, run: WriterRun, number: int, files: Mapping[str, str] | None = None) -> str:
        """Commit try ``number``'s output onto main as its publication (its ``publish`` record)."""
        main = self.repo.branch("main")
        for path, text in (files or run.plan.expected(number, run.staging(number))).items():
            main.object(path).upload(text.encode(), pre_sign=False)
        attempt = AttemptId(run.key, number, run.ti_ids[number])
        record = LakeFenceRecord(attempt, ROLE_PUBLISH, self.input, "0" * 64)
        message = f"publish {run.plan.name} try {number}"
        return str(main.commit(message, metadata=encode_metadata(record)).get_commit().id)

    def succeed(self, run: WriterRun, number: int, output_ref: str) -> None:
        ti = run.ti_ids[number]
        run.tries[number] = Outcome(
            f"{run.plan.name}.try{number}", ti, 0, {"status": "success", "output_ref": output_ref}, ""
        )
        self.registry.xcom_push(ti, "output_ref", output_ref)

    def fail(self, run: WriterRun, number: int, error: str) -> None:
        types = [error, "PublishFenceError", "LakeFenceError", "Exception"]
        if error == "StaleAttemptError":
            types = [error, "LakeFenceError", "Exception"]
        result = {"status": "error", "type": error, "types": types, "message": "x", "staging_branch": None}
        run.tries[number] = Outcome(f"{run.plan.name}.try{number}", run.ti_ids[number], 1, result, "")

    def foreign(self, path: str, n: int = 0) -> str:
        main = self.repo.branch("main")
        main.object(path).upload(f"foreign {n}".encode(), pre_sign=False)
        commit = main.commit(f"foreign commit {n}").get_commit()
        self.registry.record(
            "foreign", "foreign_commit", {"n": n, "id": commit.id, "parent": commit.parents[0], "path": path}
        )
        return str(commit.id)

    def check(self, fence: str = "soft") -> Verdict:
        return check_scoped_invariants(self.repo, self.input, self.writers, self.registry, fence=fence)


@pytest.fixture
def world(lake: Lake, tmp_path: Path) -> World:
    return World(lake, tmp_path)


def test_disjoint_writers_and_a_foreign_commit_pass(world: World) -> None:
    a, b = world.writer("w0", (day(1),)), world.writer("w1", (day(2),), (DIMS,))
    world.succeed(a, 1, world.publish(a, 1))
    world.foreign("foreign/0.txt")
    world.succeed(b, 1, world.publish(b, 1))
    verdict = world.check()
    assert verdict.ok and not verdict.holes, verdict
    assert verdict.notes["live"] == ["w0", "w1"]


def test_two_live_publications_of_one_partition(world: World) -> None:
    a, b = world.writer("w0", (day(1),)), world.writer("w1", (day(1),))
    world.succeed(a, 1, world.publish(a, 1))
    world.succeed(b, 1, world.publish(b, 1))  # nobody refused it: both tasks show success
    verdict = world.check()
    assert any("written by two live publications: w0 and w1" in v for v in verdict.violations), verdict
    assert any(v.startswith(f"w1's write set {day(1)} had changed") and "by w0 try 1" in v for v in verdict.violations)
    assert any("w0's output missing or wrong" in v for v in verdict.violations)  # w1's stamp overwrote w0's


def test_a_live_publication_over_another_with_different_file_names(world: World) -> None:
    """No path written twice (part files of distinct names), yet the second landed on a touched scope."""
    a, b = world.writer("w0", (day(1),)), world.writer("w1", (day(1),))
    world.succeed(a, 1, world.publish(a, 1, {f"{day(1)}part-{a.staging(1)}.txt": a.staging(1)}))
    world.succeed(b, 1, world.publish(b, 1, {f"{day(1)}part-{b.staging(1)}.txt": b.staging(1)}))
    verdict = world.check()
    assert any(v.startswith(f"w1's write set {day(1)} had changed") for v in verdict.violations), verdict


def test_the_serial_order_of_a_whole_table_writer_and_a_partition_passes(world: World) -> None:
    """A whole-table writer whose files lie outside a partition, then that partition's writer: serial, allowed."""
    whole, part = world.writer("w0", (TABLE,)), world.writer("w1", (day(1),))
    world.succeed(whole, 1, world.publish(whole, 1))
    world.succeed(part, 1, world.publish(part, 1))
    verdict = world.check()
    assert verdict.ok, verdict
    assert "w1>w0" in verdict.notes["later_live_inside_earlier_scope"]


def test_a_whole_table_writer_landing_over_a_partition_is_caught(world: World) -> None:
    part, whole = world.writer("w0", (day(1),)), world.writer("w1", (TABLE,))
    world.succeed(part, 1, world.publish(part, 1))
    world.succeed(whole, 1, world.publish(whole, 1))
    verdict = world.check()
    assert any(v.startswith(f"w1's write set {TABLE} had changed") for v in verdict.violations), verdict
    assert any("the write set of live w1 holds the output of w0 try 1" in v for v in verdict.violations)


def test_a_cleared_try_output_published(world: World) -> None:
    run = world.writer("w0", (day(1),), tries=2)
    world.publish(run, 1)  # the zombie's merge
    world.fail(run, 1, "StaleAttemptError")
    world.succeed(run, 2, world.publish(run, 2))  # stacked beside it: try 1's part file and try1-only stay
    verdict = world.check()
    assert any("output of a cleared or earlier try 1 of live w0" in v for v in verdict.violations), verdict


@pytest.mark.parametrize("fence", ["soft", "hard"])
def test_a_publication_that_raised_publish_race_error(world: World, fence: str) -> None:
    """Both merged inside the soft fence's window; the loser raised PublishRaceError naming it."""
    a, b = world.writer("w0", (day(1),)), world.writer("w1", (day(1),))
    world.succeed(a, 1, world.publish(a, 1))
    world.publish(b, 1, {f"{day(1)}part-{b.staging(1)}.txt": b.staging(1)})
    world.fail(b, 1, "PublishRaceError")
    verdict = world.check(fence)
    if fence == "soft":
        assert verdict.ok and verdict.holes == ["overlap_race_detected"], verdict
    else:
        assert any("landed although it raised PublishRaceError" in v for v in verdict.violations), verdict


@pytest.mark.parametrize("raised", ["ScopeOverlapError", "PublishFenceError"])
def test_a_publication_taken_back_after_a_lost_race(world: World, raised: str) -> None:
    """The loser's merge landed on the winner's and was reverted by its own try: accepted only when
    that try raised ScopeOverlapError; a revert of nobody's publication is unexplained."""
    a, b = world.writer("w0", (day(1),)), world.writer("w1", (day(1),))
    world.succeed(a, 1, world.publish(a, 1))
    path = f"{day(1)}part-{b.staging(1)}.txt"
    merge = world.publish(b, 1, {path: b.staging(1)})
    main = world.repo.branch("main")
    main.object(path).delete()
    main.commit("take back", metadata={RACE_REVERT_KEY: merge, RACE_TAKEN_BACK_KEY: "0" * 64})
    world.fail(b, 1, raised)
    verdict = world.check()
    if raised == "ScopeOverlapError":
        assert verdict.ok and not verdict.holes, verdict
        assert verdict.notes["race_taken_back"] == ["w1.t1"] and verdict.notes["live"] == ["w0"]
    else:
        assert any("taken back but the try did not raise ScopeOverlapError" in v for v in verdict.violations)


def test_a_stale_read(world: World) -> None:
    reader = world.writer("w0", (day(1),), (DIMS,))
    world.foreign(f"{DIMS}foreign-0.txt")  # changes the read set before the reader's output lands
    world.succeed(reader, 1, world.publish(reader, 1))
    verdict = world.check()
    assert any(
        v.startswith(f"w0's read set {DIMS} had changed") and "a foreign commit" in v for v in verdict.violations
    )


def test_lost_rewound_and_unexplained_commits(world: World) -> None:
    run = world.writer("w0", (day(1),))
    side = world.repo.branch("side").create("main")
    side.object("foreign/0.txt").upload(b"foreign 0", pre_sign=False)
    lost = side.commit("acknowledged, then gone").get_commit()
    world.registry.record("foreign", "foreign_commit", {"n": 0, "id": lost.id, "parent": lost.parents[0], "path": "x"})
    world.registry.record("w0.try1", "decision", {"head": lost.id, "action": "merge", "output_ref": None})
    main = world.repo.branch("main")
    main.object("x.txt").upload(b"x", pre_sign=False)
    stranger = main.commit("nobody said").get_commit().id
    world.fail(run, 1, "PublishFenceError")
    verdict = world.check()
    assert f"foreign commit {lost.id[:8]} was lost" in verdict.violations
    assert f"unexplained commit {stranger} on the target" in verdict.violations
    assert any(v.startswith(f"commit {lost.id[:8]} (w0.try1 saw") for v in verdict.violations), verdict


def test_an_unnamed_end_and_a_leftover_staging_branch(world: World) -> None:
    run = world.writer("w0", (day(1),))
    world.repo.branch(run.staging(1)).create("main", hidden=True)
    run.tries[1] = Outcome(
        "w0.try1", run.ti_ids[1], 1, {"status": "error", "type": "KeyError", "types": ["KeyError"]}, ""
    )
    verdict = world.check()
    assert any(v.startswith("w0.try1 ended with KeyError") for v in verdict.violations)
    assert f"staging branch {run.staging(1)} left behind" in verdict.violations


def test_seeds_mix_disjoint_and_overlapping_scopes_crashes_and_zombies() -> None:
    """The scenario family covers what the sweep claims (no lakeFS needed)."""
    scenarios = [ScopedScenario.from_seed(seed) for seed in range(200)]
    assert ScopedScenario.from_seed(7) == scenarios[7]  # deterministic
    assert all(len(s.writers) >= 3 for s in scenarios)
    overlapping = sum(bool(s.overlaps()) for s in scenarios)
    disjoint_pairs = sum(
        any(not any(a.name in o and b.name in o for o in s.overlaps()) for a in s.writers for b in s.writers if a != b)
        for s in scenarios
    )
    fates = Counter(w.fate for s in scenarios for w in s.writers)
    assert 40 < overlapping < 190 and disjoint_pairs > 100, (overlapping, disjoint_pairs)
    assert all(fates[f] > 50 for f in ("plain", "crash", "zombie", "lost")), fates
    assert sum(any(w.read for w in s.writers) for s in scenarios) > 100
    assert (
        sum(
            any(DIMS in w.read for w in s.writers) and any(p.startswith(DIMS) for p in s.foreign_paths)
            for s in scenarios
        )
        > 5
    )


def test_the_ci_seeds_cover_the_scenario_family() -> None:
    from tests.reliability.test_scoped_sweep import CI_SCOPED_SEEDS

    scenarios = [ScopedScenario.from_seed(seed) for seed in CI_SCOPED_SEEDS]
    fates = [w.fate for s in scenarios for w in s.writers]
    assert sum(len(s.writers) for s in scenarios) >= 30
    assert sum(bool(s.overlaps()) for s in scenarios) >= 6
    assert sum(not s.overlaps() for s in scenarios) >= 1  # and one whose writers are all disjoint
    post_publish = ("after_publish_action", "after_verify", "after_xcom")
    crashers = [
        w
        for s in scenarios
        for w in s.writers
        if w.crash_at in post_publish and not any(overlapping(w.write, v.write) for v in s.writers if v is not w)
    ]
    assert len(crashers) >= 5  # a crash after publishing in a partition nobody else writes
    assert sum(any(w.read for w in s.writers) for s in scenarios) >= 5
    assert all(fates.count(fate) >= 3 for fate in ("plain", "crash", "zombie", "lost")), fates
