"""What keeps an attempt honest between its writes: the attempt fence, lost answers, the budget.

:class:`AttemptGuard` is asked by the flow (:mod:`airflow_lakefence.core.engine`) at the protocol's
checkpoints:

* :meth:`AttemptGuard.ensure_current`: the attempt fence (steps 6 and 8, and before reporting); a
  stale attempt's staging branch is dropped before the supervisor's kill is awaited;
* :meth:`AttemptGuard.staging_may_vanish` / :meth:`AttemptGuard.run_state_may_be_archived`: around
  work on the staging branch (which a newer try deletes) and on the run state (which a clear
  archives), a failure that a newer try explains is reported as staleness;
* :meth:`AttemptGuard.write_once`: the one place where a lakeFS write whose answer was lost is
  re-evaluated from fresh state, never repeated blindly;
* :meth:`AttemptGuard.ensure_publish_budget`: step 9.

Nothing here imports Airflow or lakeFS.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from airflow_lakefence.core.ports import AttemptFencePort, LakeFSPort
from airflow_lakefence.core.records.reporting import Log
from airflow_lakefence.exceptions import (
    JobError,
    LakeFenceError,
    LakeFSNotFoundError,
    LakeFSUnavailableError,
    PublishBudgetError,
)

T = TypeVar("T")

#: A write whose answer was lost is re-evaluated against fresh state, never repeated blindly: a
#: publish may need three rounds (refused with 503, then answered "no changes" because the first
#: request landed late, then recognised as this attempt's own publication).
PUBLISH_ROUNDS = 3


def in_background(fn: Callable[..., T], *args: object) -> Future[T]:
    """Run ``fn(*args)`` in a new thread (one lakeFS call beside the Airflow requests of the main one).

    :param fn: what to run.
    :param args: its arguments.
    :return: its outcome; ``result()`` returns it or raises what ``fn`` raised.
    """
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name="lakefence background call", daemon=True).start()
    return future


@dataclass
class AttemptGuard:
    """The attempt fence, lost answers and the publish budget of one attempt.

    :param lakefs: the lakeFS port (to drop a stale attempt's staging branch).
    :param attempt_fence: the attempt fence port.
    :param repository: the repository.
    :param log: where to log.
    :param clock: the monotonic clock the budget is measured with.
    :param publish_budget: seconds the publish needs, if declared.
    :param deadline: when the task will be killed (on ``clock``), if known.
    """

    lakefs: LakeFSPort
    attempt_fence: AttemptFencePort
    repository: str
    log: Log
    clock: Callable[[], float]
    publish_budget: float | None = None
    deadline: float | None = None
    #: Asked before a failing or stale attempt drops a branch: ``True`` keeps it (a durable job's
    #: staging branch that a later try adopted, or may adopt).
    keep: Callable[[str], bool] | None = None
    _deleted: set[str] = field(default_factory=set, init=False)

    def ensure_current(self, where: str, staging: str) -> None:
        """The attempt fence: return while this attempt is the current one.

        :param where: names the checkpoint in the error.
        :param staging: the attempt's staging branch (deleted when stale: it is worthless then).
        :raises StaleAttemptError: when stale (after the fence's grace period).
        """
        reason = self.attempt_fence.stale_reason()
        if reason is None:
            return
        self.delete_quietly(staging)
        self.attempt_fence.fail(where, reason)

    @contextmanager
    def staging_may_vanish(self, where: str, staging: str) -> Iterator[None]:
        """Report a failure on the staging branch as staleness when the attempt is stale.

        A newer try deletes the staging branches of earlier tries, so a stale attempt's job, upload
        or commit fails on its vanished branch: that is a StaleAttemptError, not a lakeFS error.

        :param where: names the checkpoint.
        :param staging: the staging branch.
        """
        try:
            yield
        except (JobError, LakeFSNotFoundError):
            self.ensure_current(where, staging)
            raise

    @contextmanager
    def run_state_may_be_archived(self, where: str, staging: str) -> Iterator[None]:
        """Run-state calls of a try that may have been cleared meanwhile.

        A cleared try loses its run state (the server archived its task-instance id, so the store
        refuses it): a failure is then staleness, raised as StaleAttemptError, not a failure of the
        store.

        :param where: names the checkpoint.
        :param staging: the staging branch.
        """
        try:
            yield
        except LakeFenceError:
            self.ensure_current(where, staging)
            raise

    def write_once(
        self,
        operation: str,
        write: Callable[[bool], T],
        reread: Callable[[LakeFSUnavailableError], T | None] | None = None,
        staging: str | None = None,
    ) -> T:
        """Do a lakeFS write whose answer may be lost, deciding from fresh state instead of repeating it.

        :param operation: names the write in logs and errors.
        :param write: does the write (given whether an earlier round's answer was lost) and returns
            its outcome; it may read and decide again first.
        :param reread: after a lost answer, the outcome if the state proves the write landed, else
            ``None`` to run another round; it may raise when the state rules out both. Without it,
            every lost answer runs another round (which itself reads the state first).
        :param staging: the attempt's staging branch: then every round after a lost answer first
            passes the attempt fence (the try may have been cleared meanwhile: never write for a stale try).
        :raises LakeFSUnavailableError: when no round's outcome could be confirmed.
        """
        last: LakeFSUnavailableError | None = None
        for _ in range(PUBLISH_ROUNDS):
            if last is not None and staging is not None:
                self.ensure_current(f"before another {operation} round", staging)
            try:
                return write(last is not None)
            except LakeFSUnavailableError as exc:
                last = exc
                self.log.warning("lakeFS %s: outcome unknown (%s); re-reading the state", operation, exc)
                landed = None if reread is None else reread(exc)
                if landed is not None:
                    return landed
        assert last is not None
        raise LakeFSUnavailableError(
            f"lakeFS {operation} could not be confirmed: {last}",
            status=last.status,
            operation=last.operation or operation,
        ) from last

    def ensure_publish_budget(self) -> None:
        """Step 9: refuse to start publishing when less than the budget remains.

        :raises PublishBudgetError: when too little time remains.
        """
        if self.publish_budget is None or self.deadline is None:
            return
        remaining = self.deadline - self.clock()
        if remaining < self.publish_budget:
            raise PublishBudgetError(
                f"{remaining:.1f}s of execution_timeout remain, less than publish_budget "
                f"{self.publish_budget:.1f}s: not publishing"
            )

    def delete_in_background(self, branch: str) -> Future[None]:
        """Start :meth:`delete_quietly` of ``branch`` in a thread; the caller waits for the result.

        The branch counts as deleted at once: a later :meth:`delete_quietly` of it does nothing.

        :param branch: the branch.
        :return: done when the delete is; its ``result()`` raises what the delete raised unexpectedly.
        """
        if branch in self._deleted:
            return in_background(lambda: None)
        self._deleted.add(branch)
        return in_background(self._delete, branch)

    def deleted(self, branch: str) -> bool:
        """Whether this attempt sent the delete of ``branch`` (it may have failed: see :meth:`delete_quietly`).

        :param branch: the branch.
        """
        return branch in self._deleted

    def delete_quietly(self, branch: str) -> None:
        """Delete a branch of this attempt once; a failure is logged (the cleaner will delete it).

        :param branch: the branch.
        """
        if branch in self._deleted:
            return
        self._deleted.add(branch)
        if self.keep is not None and self.keep(branch):
            return
        self._delete(branch)

    def _delete(self, branch: str) -> None:
        try:
            self.lakefs.delete_branch(self.repository, branch)
        except LakeFenceError as exc:
            self.log.warning("Could not delete staging branch %s: %s (the cleaner will)", branch, exc)
