"""What the package asks Airflow about task instances, in one place.

* **Task states**: one Execution-API call, ``RuntimeTaskInstance.get_task_states`` (the Task SDK
  call that works in a running task and in a trigger, as Airflow's own ``WorkflowTrigger`` uses
  it), and the parsing of its answer ``{run_id: {name: state}}``, where Airflow names a mapped
  instance ``<task_id>_<map_index>`` (:func:`states_by_key` reads it back into keys).
* **XCom**: the keys the fenced operator writes and the monitors read (:data:`OUTPUT_REF_KEY`,
  :data:`SUPERSEDES_KEY`, :data:`EVIDENCE_KEY`), read back with ``XCom.get_one`` (by publication
  key) or ``XCom.get_value`` (by task-instance key, for the extra links).
* **Run state**: the task's ``task_state_store`` as the engine's
  :class:`~airflow_lakefence.core.run_state.RunStatePort` (:class:`TaskStateStoreRunState`).

The fence (:mod:`airflow_lakefence.attempt`), the fenced operators, the cleaner, the sensors and
the triggers go through this module. Airflow is imported inside the calls only, so importing this
module costs nothing in a triggerer or a test.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from airflow_lakefence.core.keys import PublicationKey
from airflow_lakefence.exceptions import LakeFenceError

__all__ = [
    "EVIDENCE_KEY",
    "OUTPUT_REF_KEY",
    "SUPERSEDES_KEY",
    "AirflowView",
    "TaskSdkView",
    "TaskStateStoreRunState",
    "normalise_state",
    "state_from_task_states",
    "states_by_key",
    "task_state",
    "xcom_value",
]

#: The XCom key under which the fenced operator reports the commit it stands behind.
OUTPUT_REF_KEY = "output_ref"
#: The XCom key under which a try names the successful publication it replaces (a cleared success).
SUPERSEDES_KEY = "supersedes"
#: The XCom key under which a try reports the run's evidence branches (``{branch: error class}``).
EVIDENCE_KEY = "evidence"


# -- the task-state answer ------------------------------------------------------------------


def normalise_state(state: object) -> str | None:
    """Turn an Airflow state (enum, string or ``None``) into the strings used here.

    :param state: what ``get_task_states`` answered for one task instance.
    :return: the state's value; ``"none"`` for a task instance without a state.
    """
    if state is None:
        return "none"
    value = getattr(state, "value", state)
    return str(value).lower()


def states_by_key(dag_id: str, task_ids: Collection[str], answer: object) -> dict[PublicationKey, str | None]:
    """Every task instance of ``task_ids`` in a ``get_task_states`` answer, by key: the one reader
    of Airflow's names (``<task_id>``, or ``<task_id>_<map_index>`` for a mapped instance).

    :param dag_id: the DAG the answer is about.
    :param task_ids: the task ids asked for (a name is only read as ``<task_id>_<map_index>`` when
        its ``task_id`` was asked for, so a task id that itself ends in ``_<digits>`` stays whole).
    :param answer: the answer.
    :return: ``{key: normalised state}``.
    """
    found: dict[PublicationKey, str | None] = {}
    wanted = set(task_ids)
    by_run = answer if isinstance(answer, Mapping) else {}
    for run_id, by_task in by_run.items():
        for name, state in (by_task if isinstance(by_task, Mapping) else {}).items():
            if name in wanted:
                found[PublicationKey(dag_id, run_id, name, -1)] = normalise_state(state)
                continue
            task_id, _, index = name.rpartition("_")
            if task_id in wanted and index.isdigit():
                found[PublicationKey(dag_id, run_id, task_id, int(index))] = normalise_state(state)
    return found


def state_from_task_states(answer: object, key: PublicationKey) -> str | None:
    """Pick one task instance's state out of ``get_task_states``' ``{run_id: {name: state}}``.

    :param answer: the answer.
    :param key: the publication key.
    :return: the normalised state, or ``None`` when the task instance is not in the answer.
    """
    return states_by_key(key.dag_id, [key.task_id], answer).get(key)


# -- asking Airflow -------------------------------------------------------------------------


class AirflowView(Protocol):
    """What the cleaner and the monitoring probes ask Airflow (tests answer it from a registry)."""

    def task_states(self, dag_id: str, task_ids: list[str], run_ids: list[str] | None = None) -> Any:
        """``{run_id: {task_id or task_id_mapindex: state}}`` for the given task instances."""

    def output_ref(self, key: PublicationKey) -> Any:
        """The ``output_ref`` XCom of the task instance of ``key``, or ``None``."""

    def supersedes(self, key: PublicationKey) -> Any:
        """The ``supersedes`` XCom of the task instance of ``key``, or ``None``."""

    def evidence(self, key: PublicationKey) -> Any:
        """The ``evidence`` XCom of the task instance of ``key`` (the cleaner), or ``None``."""


class TaskSdkView:
    """:class:`AirflowView` through the Task SDK: works in a running task and in a trigger.

    :param source: what answers ``get_task_states``: a running task's ``RuntimeTaskInstance``
        (the attempt fence passes its own), or ``None`` for the ``RuntimeTaskInstance`` class.
    """

    def __init__(self, source: Any = None) -> None:
        self._source = source

    def task_states(
        self, dag_id: str, task_ids: list[str], run_ids: list[str] | None = None, map_index: int | None = None
    ) -> Any:
        """Ask the Execution API for task-instance states (one call).

        :param dag_id: the DAG id.
        :param task_ids: the task ids.
        :param run_ids: the run ids; ``None`` for every run.
        :param map_index: only this map index; ``None`` for every one.
        """
        source = self._source
        if source is None:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            source = RuntimeTaskInstance
        return source.get_task_states(dag_id=dag_id, task_ids=task_ids, run_ids=run_ids, map_index=map_index)

    def task_state(self, key: PublicationKey) -> str | None:
        """The current state of the task instance of ``key`` (one call).

        :param key: the publication key.
        :return: the normalised state (``"none"`` for a task instance without state), or ``None``
            when Airflow has no such task instance.
        :raises Exception: whatever the Execution API call raises (callers fail closed).
        """
        answer = self.task_states(
            key.dag_id, [key.task_id], [key.run_id], map_index=None if key.map_index < 0 else key.map_index
        )
        return state_from_task_states(answer, key)

    def output_ref(self, key: PublicationKey) -> Any:
        """Read the ``output_ref`` XCom of one task instance (one call).

        :param key: the publication key.
        """
        return self._xcom(OUTPUT_REF_KEY, key)

    def supersedes(self, key: PublicationKey) -> Any:
        """Read the ``supersedes`` XCom of one task instance (one call).

        :param key: the publication key.
        """
        return self._xcom(SUPERSEDES_KEY, key)

    def evidence(self, key: PublicationKey) -> Any:
        """Read the ``evidence`` XCom of one task instance (one call).

        :param key: the publication key.
        """
        return self._xcom(EVIDENCE_KEY, key)

    @staticmethod
    def _xcom(name: str, key: PublicationKey) -> Any:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_one(
            key=name, dag_id=key.dag_id, task_id=key.task_id, run_id=key.run_id, map_index=key.map_index
        )


def xcom_value(ti_key: Any, name: str) -> Any:
    """One XCom of the task instance ``ti_key`` names (what the UI's extra links read; one call).

    :param ti_key: the task instance's key, as Airflow hands it to an operator link.
    :param name: the XCom key.
    """
    from airflow.sdk.execution_time.xcom import XCom

    return XCom.get_value(ti_key=ti_key, key=name)


def task_state(ti: Any, key: PublicationKey) -> str | None:
    """The current state of the task instance of ``key``, asked through ``ti`` (one call).

    :param ti: what answers ``get_task_states`` (a running task's ``RuntimeTaskInstance``, or the
        class itself outside a task).
    :param key: the publication key.
    :return: see :meth:`TaskSdkView.task_state`.
    :raises Exception: whatever the Execution API call raises (callers fail closed).
    """
    return TaskSdkView(ti).task_state(key)


# -- run state ------------------------------------------------------------------------------


class TaskStateStoreRunState:
    """The run state of one task instance, in ``context["task_state_store"]`` (Airflow 3.3): the
    :class:`~airflow_lakefence.core.run_state.RunStatePort` of the fenced operators.

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
