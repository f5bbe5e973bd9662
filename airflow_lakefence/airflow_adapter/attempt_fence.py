"""The Airflow attempt adapter: "is this process still the current try of its task?".

The attempt fence (protocol: "Attempt fence") holds when

1. this attempt is still the live one: what Airflow gives a running task for that, per version
   (:func:`airflow_lakefence.airflow_adapter.task_instances.liveness_for`):

   * 3.3: a token written to ``task_state_store`` at arming time reads back (the store is
     addressed by the task-instance id; every retry and clear archives the id, and the server
     then answers 404);
   * 3.0 to 3.2: a token pushed as the task's own XCom reads back (a new try clears the task's
     XComs when it starts running, then pushes its own token);
   * 2.11: the task instance's row still names this attempt's try number, job, host and pid;

2. its state is still ``running`` (mark success / mark failed keep the id but change the state);
3. ``on_kill`` has not been received (the supervisor's SIGTERM).

Any error while answering counts as stale: the fence fails closed. Each check costs two
Execution-API calls on Airflow 3, one database query on 2.11. On staleness the fence waits a
bounded grace period for the supervisor to terminate the process before raising: raising first can
make the scheduler put the *new* try into ``up_for_retry`` with the retry delay.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, NoReturn

from airflow_lakefence.airflow_adapter.task_instances import RUNNING, TOKEN_KEY, Liveness, liveness_for
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.exceptions import StaleAttemptError

__all__ = ["RUNNING", "TOKEN_KEY", "AttemptFence", "attempt_from_context"]


def attempt_from_context(context: Any) -> AttemptId:
    """Build the attempt identity from a task's execution context.

    :param context: the Airflow context.
    """
    ti = context["ti"]
    key = PublicationKey(ti.dag_id, ti.run_id, ti.task_id, -1 if ti.map_index is None else int(ti.map_index))
    ti_id = getattr(ti, "id", None)
    if ti_id is None:  # Airflow 2: no task-instance id; the process that runs this try names it
        ti_id = f"af2:{ti.try_number}:{ti.job_id}:{ti.hostname}:{ti.pid}"
    return AttemptId(key, int(ti.try_number), str(ti_id))


class AttemptFence:
    """The attempt fence of one running task instance.

    :param context: the task's execution context.
    :param grace_period: seconds to wait for the supervisor's kill before raising on staleness.
    """

    def __init__(self, context: Any, *, grace_period: float = 15.0) -> None:
        self.attempt = attempt_from_context(context)
        self._liveness: Liveness | None = None
        self._context = context
        self.grace_period = max(0.0, grace_period)
        self.killed = threading.Event()
        self._token: str | None = None

    def arm(self) -> None:
        """Remember who we are (a token, or the task instance's row on Airflow 2).

        :raises StaleAttemptError: if that cannot be done (fail closed).
        """
        token = uuid.uuid4().hex
        try:
            liveness = liveness_for(self._context, self.attempt.key)
            liveness.arm(token)
        except StaleAttemptError:
            raise
        except Exception as exc:
            raise StaleAttemptError(f"could not arm the attempt fence: {type(exc).__name__}") from exc
        self._liveness, self._token = liveness, token

    def stale_reason(self) -> str | None:
        """Return why this attempt is stale, or ``None`` when it is still the current one.

        Any error answering the question is a reason (fail closed).
        """
        if self.killed.is_set():
            return "on_kill was received"
        if self._token is None or self._liveness is None:
            return "the attempt fence was never armed"
        try:
            return self._liveness.stale_reason(self._token)
        except Exception as exc:
            return f"the attempt's state could not be read ({type(exc).__name__})"

    def was_killed(self) -> bool:
        """Whether ``on_kill`` was received (the adapter sets :attr:`killed`)."""
        return self.killed.is_set()

    def fail(self, where: str, reason: str) -> NoReturn:
        """Wait up to the grace period for the supervisor's kill, then raise.

        :param where: the protocol point.
        :param reason: why the attempt is stale.
        :raises StaleAttemptError: always.
        """
        # The supervisor notices the state change on its next heartbeat and terminates us; raising
        # first could make the scheduler treat the *new* try as failed-to-start.
        self.killed.wait(self.grace_period)
        raise StaleAttemptError(f"stale attempt {where}: {reason}; nothing more is written")
