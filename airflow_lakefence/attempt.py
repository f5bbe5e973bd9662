"""The Airflow attempt adapter: "is this process still the current try of its task?".

The attempt fence (protocol: "Attempt fence") holds when

1. the task-instance id this process started with is still live on the server: a token written to
   ``task_state_store`` at arming time reads back (the server answers 404 for an archived id,
   which happens on every retry and clear, because each try gets a new id);
2. its state is still ``running`` (mark success / mark failed keep the id but change the state);
3. ``on_kill`` has not been received (the supervisor's SIGTERM).

Any error while answering counts as stale: the fence fails closed. Each check costs two
Execution-API calls (the state is asked through :mod:`airflow_lakefence.task_instances`). On
staleness the fence waits a bounded grace period for the supervisor to terminate the process
before raising: raising first can make the scheduler put the *new* try into ``up_for_retry`` with
the retry delay.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, NoReturn

from airflow_lakefence.core.keys import AttemptId, PublicationKey
from airflow_lakefence.exceptions import StaleAttemptError
from airflow_lakefence.task_instances import task_state

TOKEN_KEY = "lakefence.attempt_token"
RUNNING = "running"


def attempt_from_context(context: Any) -> AttemptId:
    """Build the attempt identity from a task's execution context.

    :param context: the Airflow context.
    """
    ti = context["ti"]
    key = PublicationKey(ti.dag_id, ti.run_id, ti.task_id, -1 if ti.map_index is None else int(ti.map_index))
    return AttemptId(key, int(ti.try_number), str(ti.id))


class AttemptFence:
    """The attempt fence of one running task instance.

    :param context: the task's execution context.
    :param grace_period: seconds to wait for the supervisor's kill before raising on staleness.
    """

    def __init__(self, context: Any, *, grace_period: float = 15.0) -> None:
        self._ti = context["ti"]
        self._store = context.get("task_state_store")
        self.attempt = attempt_from_context(context)
        self.grace_period = max(0.0, grace_period)
        self.killed = threading.Event()
        self._token: str | None = None

    def arm(self) -> None:
        """Remember who we are: write this attempt's token under its task-instance id.

        :raises StaleAttemptError: if the token cannot be written (fail closed).
        """
        if self._store is None:
            raise StaleAttemptError("task_state_store is not available: cannot arm the attempt fence")
        token = uuid.uuid4().hex
        try:
            self._store.set(TOKEN_KEY, token)
        except Exception as exc:
            raise StaleAttemptError(f"could not arm the attempt fence: {type(exc).__name__}") from exc
        self._token = token

    def stale_reason(self) -> str | None:
        """Return why this attempt is stale, or ``None`` when it is still the current one.

        Any error answering the question is a reason (fail closed).
        """
        if self.killed.is_set():
            return "on_kill was received"
        if self._token is None:
            return "the attempt fence was never armed"
        try:
            if self._store.get(TOKEN_KEY) != self._token:
                return f"task instance {self.attempt.ti_id} is no longer live (cleared or retried)"
            state = task_state(self._ti, self.attempt.key)
        except Exception as exc:
            return f"the attempt's state could not be read ({type(exc).__name__})"
        if state != RUNNING:
            return f"task instance state is {state!r}, not running"
        return None

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
