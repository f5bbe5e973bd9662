"""The Airflow adapter of :class:`~airflow_lakefence.core.run_state.RunStatePort`: the task's
``task_state_store`` (Airflow 3.3), shared by every try of the task instance in its DAG run."""

from __future__ import annotations

from typing import Any

from airflow_lakefence.exceptions import LakeFenceError


class TaskStateStoreRunState:
    """The run state of one task instance, in ``context["task_state_store"]``.

    A manual clear keeps the values (they belong to the run, not to a try); deleting the DAG run
    drops them; ``[state_store] clear_on_success`` drops them when the task succeeds.

    :param context: the task's execution context.
    """

    def __init__(self, context: Any) -> None:
        self._store = context.get("task_state_store")

    def get(self, key: str) -> Any:
        """The stored value, ``None`` when absent.

        :param key: the key.
        :raises LakeFenceError: when the store is unavailable or does not answer (fail closed).
        """
        if self._store is None:
            raise LakeFenceError("task_state_store is not available (Airflow 3.3 or later is needed)")
        try:
            return self._store.get(key)
        except Exception as exc:
            raise LakeFenceError(f"could not read {key!r} from task_state_store: {type(exc).__name__}") from exc

    def set(self, key: str, value: Any) -> None:
        """Store a JSON-serializable value.

        :param key: the key.
        :param value: the value.
        :raises LakeFenceError: when the store is unavailable or refuses the write (fail closed).
        """
        if self._store is None:
            raise LakeFenceError("task_state_store is not available (Airflow 3.3 or later is needed)")
        try:
            self._store.set(key, value)
        except Exception as exc:
            raise LakeFenceError(f"could not write {key!r} to task_state_store: {type(exc).__name__}") from exc
