"""The stack scenarios every executor must pass, written once: a try cleared while it runs, tries
marked failed or success while they run, a try that dies right after publishing.

:class:`ExecutorScenarios` holds the tests; a tier runs them under its executor by subclassing it in
its own module (``class TestLocalExecutorScenarios(ExecutorScenarios)``), which gives the tests that
module's markers, and by providing an ``executor`` fixture: an :class:`Executor` that says how that
tier does what differs between executors (where a try's log is, how a try is cleared right after
its job, how a try dies after publishing). What only one executor can show (the Celery backfill
across two workers, lakeFS restarted during a publish, the grace-period control) stays in that
tier's module.

Each scenario uses the tier's own DAG and repository (:attr:`Executor.dags`): the DAG files
(tests/dags/scheduler_dags.py, tests/dags/celery_dags.py) fix the targets, because a pool's slot is
fixed at parse time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lakefs

from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, ROLE_STAGE, decode_metadata
from tests.stack.airflow_stack import AirflowAPI, AirflowStack, wait_for
from tests.stack.tier import (
    HeadRecorder,
    Scenario,
    Signals,
    gone,
    history,
    read_text,
    record_of,
    scenario,
    staging_branches,
    timestamp,
    wait_task_process_end,
    xcom,
)

#: How soon a cleared task's next try must start. Its retry_delay is 300 s: a later start means the
#: stale try pushed the restarting task instance into up_for_retry.
NEXT_TRY_WITHIN_S = 30.0


class Executor:
    """What differs between executors in the shared scenarios; a tier's ``executor`` fixture gives one.

    :param stack: the tier's running stack.
    :param figures: where the tier collects its measured figures (printed in the terminal summary).
    :param dags: ``{scenario: (dag_id, repository)}`` for ``"clear"``, ``"mark"`` and ``"retry"``.
    """

    #: Whether the tier's mark DAG has ``publish_mark_at_fence`` (marks itself at attempt fence #1).
    mark_at_fence = False
    #: Seconds try 2's job of the retry scenario sleeps (a window the tier may need to look in).
    retry_job_sleep = 0.0

    def __init__(self, stack: AirflowStack, figures: dict[str, Any], dags: Mapping[str, tuple[str, str]]) -> None:
        self.stack = stack
        self.figures = figures
        self.dags = dict(dags)

    @property
    def api(self) -> AirflowAPI:
        """The stack's REST client."""
        assert self.stack.api is not None
        return self.stack.api

    def repository(self, name: str) -> lakefs.Repository:
        """A repository on the tier's lakeFS."""
        raise NotImplementedError

    def scenario(self, name: str, tmp_path: Path) -> Scenario:
        """The scenario's API, DAG, repository, ``main``'s HEAD and the job's signals."""
        dag_id, repo = self.dags[name]
        return scenario(self.stack, dag_id, self.repository(repo), tmp_path)

    def check_worker(self, ti: Mapping[str, Any]) -> None:
        """Assert that a task instance ran where this executor runs tasks (nothing to say by default)."""

    def log(self, dag_id: str, run_id: str, task_id: str, try_number: int, ran_on: str | None = None) -> str:
        """One try's log (``ran_on``: the hostname the try ran on, if the log's place must match)."""
        return self.api.task_log(dag_id, run_id, task_id, try_number)

    def trigger_cleared_after_job(self, dag_id: str, conf: dict[str, Any], signals: Signals) -> str:
        """Trigger a run whose try 1 of ``publish`` is cleared after its job, before attempt fence #1.

        :returns: the run id, once the clear is done (or sure to happen before the fence).
        """
        raise NotImplementedError

    def kill_after_publishing(
        self, dag_id: str, conf: dict[str, Any], signals: Signals, heads: HeadRecorder
    ) -> tuple[str, dict[str, Any]]:
        """Trigger a run whose try 1 of ``publish`` dies right after its merge; wait for the retry to end.

        :returns: the run id, and the finished try 2's task instance.
        """
        raise NotImplementedError

    def check_replacement(self, run_id: str, tries: list[dict[str, Any]], merge_1: Any) -> None:
        """What this executor proves beyond the shared assertions after the retry replaced try 1's merge."""


class ExecutorScenarios:
    """The scenarios, run by a tier's subclass (its module's markers apply) with its ``executor`` fixture."""

    # -- 1. clear a running fenced task, after its job and mid-job ----------------------------

    def test_cleared_tries_never_publish_and_the_next_try_starts_promptly(
        self, executor: Executor, tmp_path: Path
    ) -> None:
        """Try 1 is cleared after its job, before attempt fence #1; try 2 is cleared mid-job; try 3 publishes.

        Try 1: the job has finished, so only the attempt fence stands between it and the target; it
        sees the clear and waits (``stale_grace_period``) for the supervisor's kill instead of failing
        at once, so the restarting task instance is not sent to up_for_retry (a 300 s retry delay):
        try 2 starts within 30 s. Try 2: the supervisor's kill reaches ``on_kill``, which kills its
        job; try 3 starts within 30 s of the clear and is the only try that publishes.
        """
        api, dag_id, repo, base, signals = executor.scenario("clear", tmp_path)
        figures = executor.figures
        job = signals.job_spec(
            files={"tables/clear/part-0.txt": "rows"}, stamp_path="tables/clear/stamp.txt", sleep_by_try={"2": 600}
        )
        api.unpause(dag_id)
        with HeadRecorder(repo, "main") as heads:
            run_id = executor.trigger_cleared_after_job(dag_id, {"job": job}, signals)
            (job_1,) = signals.done(**{"try": 1})
            ti2 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=90, try_number=2)
            # The job's end bounds the clear from below.
            start_delay = timestamp(ti2["start_date"]) - job_1["time"]
            figures["clear_at_fence_to_next_try_start_s"] = start_delay
            assert start_delay < NEXT_TRY_WITHIN_S, f"try 2 started {start_delay:.1f}s after try 1's job ended"

            second = signals.wait_started(timeout=120, **{"try": 2})
            ti2 = api.wait_ti(dag_id, run_id, "publish", {"running"}, timeout=30, try_number=2)
            executor.check_worker(ti2)
            cleared_at, cleared_mono = time.time(), time.monotonic()  # taken before: the delays err long
            api.clear(dag_id, run_id, "publish")
            # The supervisor's next heartbeat is refused; its SIGTERM reaches on_kill, which kills the job.
            wait_for("try 2's job to be killed", lambda: gone(second["pid"]), 30)
            figures["clear_to_stale_job_killed_s"] = time.monotonic() - cleared_mono
            wait_task_process_end(ti2["id"], "try 2")
            figures["clear_to_stale_task_process_end_s"] = time.monotonic() - cleared_mono

            ti3 = api.wait_ti(dag_id, run_id, "publish", {"running", "success", "failed"}, timeout=90, try_number=3)
            start_delay = timestamp(ti3["start_date"]) - cleared_at
            figures["clear_to_next_try_start_s"] = start_delay
            assert start_delay < NEXT_TRY_WITHIN_S, f"try 3 started {start_delay:.1f}s after the clear"
            done = api.wait_ti(dag_id, run_id, "publish", {"success", "failed"}, timeout=120, try_number=3)
            assert done["state"] == "success", executor.log(dag_id, run_id, "publish", 3)[-3000:]

        tries = api.tries(dag_id, run_id, "publish")
        assert [t["try_number"] for t in tries] == [1, 2, 3]
        assert [t["state"] == "success" for t in tries] == [False, False, True], tries
        for ti in tries:
            executor.check_worker(ti)
        figures["clear_hostnames_by_try"] = [t["hostname"] for t in tries]
        assert len({ti2["id"], done["id"]}) == 2  # a clear mints a new task-instance id

        assert not heads.errors
        head, record = record_of(repo, "main")
        # The only publication is try 3's merge of its own staged commit on top of the input.
        assert record is not None and record.role == ROLE_PUBLISH
        assert (record.attempt.try_number, record.attempt.ti_id, record.input_ref) == (3, done["id"], base)
        assert head.parents[0] == base
        _staged, staged_record = record_of(repo, head.parents[1])
        assert staged_record is not None and (staged_record.role, staged_record.attempt.try_number) == (ROLE_STAGE, 3)
        assert "-t3-" in read_text(repo, "main", "tables/clear/stamp.txt")
        assert read_text(repo, "main", "tables/clear/part-0.txt") == "rows"
        # The stale tries' output never reached the target: not as a HEAD at any moment, not in the history.
        assert heads.heads == [base, head.id]
        assert {r.attempt.try_number for c in history(repo, "main", False) if (r := decode_metadata(c.metadata))} == {3}
        assert not signals.done(**{"try": 2}), "try 2's job ran to completion"
        assert xcom(api, dag_id, run_id, "publish", "decision") == "merge"
        assert xcom(api, dag_id, run_id, "publish", "output_ref") == head.id
        assert staging_branches(repo) == []

        # Each try's own log: try 1 stopped by the fence, try 2 by the kill, neither reached the publish.
        log_1 = executor.log(dag_id, run_id, "publish", 1, tries[0]["hostname"])
        assert "stale attempt before stage" in log_1 and "Publish fence" not in log_1, log_1[-3000:]
        log_2 = executor.log(dag_id, run_id, "publish", 2, tries[1]["hostname"])
        assert "on_kill" in log_2 and "Publish fence" not in log_2, log_2[-3000:]
        log_3 = executor.log(dag_id, run_id, "publish", 3, tries[2]["hostname"])
        assert "Publish fence: merge" in log_3, log_3[-3000:]

    # -- 2. mark failed / mark success mid-run ------------------------------------------------

    def test_marked_failed_and_marked_success_mid_run_publish_nothing(
        self, executor: Executor, tmp_path: Path
    ) -> None:
        """Running tries marked failed or success stop without publishing, and the marks stand.

        ``publish_mark_failed`` and ``publish_mark_success`` are marked by the test while their jobs
        run: the supervisor's kill (on_kill) stops them. Where the tier's DAG has it,
        ``publish_mark_at_fence`` marks itself success through the API right after its job (conf
        ``after_job``), before the supervisor's next heartbeat: attempt fence #1 must see that the
        state is no longer ``running``.
        """
        api, figures = executor.api, executor.figures
        dag_id, repo_name = executor.dags["mark"]
        repo = executor.repository(repo_name)
        by_test = {"publish_mark_failed": "failed", "publish_mark_success": "success"}
        targets = {"publish_mark_failed": "mark-failed", "publish_mark_success": "mark-success"}
        conf: dict[str, Any] = {}
        if executor.mark_at_fence:
            targets["publish_mark_at_fence"] = "mark-at-fence"
            conf["after_job"] = {"publish_mark_at_fence": "success"}
        bases = {target: repo.branch(target).get_commit().id for target in targets.values()}
        signals = Signals(tmp_path)
        conf["job"] = signals.job_spec(
            files={"tables/mark/part-0.txt": "rows"},
            stamp_path="tables/mark/stamp.txt",
            sleep_by_try={"1": 600},
            sleep_by_target={"mark-at-fence": 0},
        )
        api.unpause(dag_id)
        with contextlib.ExitStack() as recorders:
            heads = {target: recorders.enter_context(HeadRecorder(repo, target)) for target in targets.values()}
            run_id = api.trigger(dag_id, conf)
            jobs = {task: signals.wait_started(timeout=120, target=targets[task]) for task in by_test}
            tis = {task: api.wait_ti(dag_id, run_id, task, {"running"}, timeout=30, try_number=1) for task in by_test}

            marked_mono = time.monotonic()
            for task, state in by_test.items():
                api.mark(dag_id, run_id, task, state)
            for task, state in by_test.items():
                wait_for(f"{task}'s job to be killed", lambda task=task: gone(jobs[task]["pid"]), 30)
                figures[f"mark_{state}_to_stale_job_killed_s"] = time.monotonic() - marked_mono
            for task in by_test:
                wait_task_process_end(tis[task]["id"], task)
            figures["mark_to_stale_task_processes_end_s"] = time.monotonic() - marked_mono

            if executor.mark_at_fence:
                at_fence = api.wait_ti(dag_id, run_id, "publish_mark_at_fence", {"success", "failed"}, timeout=120)
                wait_task_process_end(at_fence["id"], "publish_mark_at_fence")

        figures["mark_hostnames"] = {task: ti["hostname"] for task, ti in tis.items()}
        marks = {**by_test, **({"publish_mark_at_fence": "success"} if executor.mark_at_fence else {})}
        for task, state in marks.items():
            ti = api.task_instance(dag_id, run_id, task)
            # The stale process's own ending did not overwrite the mark, nor start a new try.
            assert (ti["state"], ti["try_number"]) == (state, 1), task
            executor.check_worker(ti)
            if task in tis:
                assert ti["hostname"] == tis[task]["hostname"], task
        for target, recorder in heads.items():
            assert not recorder.errors
            assert recorder.heads == [bases[target]], f"{target} moved: {recorder.heads}"
            assert repo.branch(target).get_commit().id == bases[target]
        finished = ["mark-at-fence"] if executor.mark_at_fence else []
        assert [d["target"] for d in signals.done()] == finished, "a try marked mid-job finished its job"
        # The stale attempts dropped their staging branches on the way out (nothing for the cleaner).
        wait_for("the stale attempts' staging branches to be removed", lambda: staging_branches(repo) == [], 30)
        for task in by_test:
            log = executor.log(dag_id, run_id, task, 1, tis[task]["hostname"])
            assert "StaleAttemptError" in log and "on_kill" in log, log[-3000:]
        if executor.mark_at_fence:
            log = executor.log(dag_id, run_id, "publish_mark_at_fence", 1)
            assert "stale attempt before stage" in log, log[-3000:]
            # The fence's own reason. (Should the supervisor's heartbeat fall into the few milliseconds
            # between the mark and the check, the reason would be on_kill instead: about 1 run in 100.)
            fence_saw_state = "task instance state is 'success', not running" in log
            figures["mark_at_fence_reason_was_state"] = float(fence_saw_state)
            assert fence_saw_state or "on_kill was received" in log, log[-3000:]

    # -- 3. a try dies right after publishing, the automatic retry replaces it ----------------

    def test_try_killed_after_publishing_the_retry_replaces_the_publication(
        self, executor: Executor, tmp_path: Path
    ) -> None:
        """Try 1 dies right after its merge, before Airflow recorded success; try 2 replaces the merge.

        The target shows the input, try 1's merge, then try 2's staged commit (decision ``replace``):
        HEAD's only parent is the input, and try 1's merge is gone from the history.
        """
        api, dag_id, repo, base, signals = executor.scenario("retry", tmp_path)
        sleep = {"sleep_by_try": {"2": executor.retry_job_sleep}} if executor.retry_job_sleep else {}
        job = signals.job_spec(files={"tables/retry/part-0.txt": "rows"}, stamp_path="tables/retry/stamp.txt", **sleep)
        api.unpause(dag_id)
        with HeadRecorder(repo, "main") as heads:
            run_id, done = executor.kill_after_publishing(dag_id, {"job": job}, signals, heads)
        assert done["state"] == "success", executor.log(dag_id, run_id, "publish", 2)[-3000:]

        tries = api.tries(dag_id, run_id, "publish")
        assert [(t["try_number"], t["state"]) for t in tries] == [(1, "failed"), (2, "success")]
        assert not heads.errors
        # What the target showed: the input, try 1's merge, then try 2's staged commit.
        assert len(heads.heads) == 3 and heads.heads[0] == base, heads.heads
        merge_1, record_1 = record_of(repo, heads.heads[1])
        assert record_1 is not None and (record_1.role, record_1.attempt.try_number) == (ROLE_PUBLISH, 1)
        assert merge_1.parents[0] == base
        head, record_2 = record_of(repo, "main")
        assert head.id == heads.heads[2]
        assert record_2 is not None and (record_2.role, record_2.attempt.try_number) == (ROLE_STAGE, 2)
        assert record_2.attempt.ti_id == done["id"] and list(head.parents) == [base]
        assert [c.id for c in history(repo, "main", True)] == [head.id, base]
        assert merge_1.id not in {c.id for c in history(repo, "main", False)}
        assert "-t2-" in read_text(repo, "main", "tables/retry/stamp.txt")
        assert xcom(api, dag_id, run_id, "publish", "decision") == "replace"
        assert xcom(api, dag_id, run_id, "publish", "output_ref") == head.id
        assert staging_branches(repo) == []
        executor.check_replacement(run_id, tries, merge_1)
