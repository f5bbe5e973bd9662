"""What the package asks Airflow about task instances, in one place.

* **Task states**: one Execution-API call, ``RuntimeTaskInstance.get_task_states`` (the Task SDK
  call that works in a running task and in a trigger, as Airflow's own ``WorkflowTrigger`` uses
  it), and the parsing of its answer ``{run_id: {name: state}}``, where Airflow names a mapped
  instance ``<task_id>_<map_index>`` (:func:`states_by_key` reads it back into keys).
* **XCom**: the keys the fenced operator writes and the monitors read (:data:`OUTPUT_REF_KEY`,
  :data:`SUPERSEDES_KEY`, :data:`EVIDENCE_KEY`), read back with ``XCom.get_one`` (by publication
  key) or ``XCom.get_value`` (by task-instance key, for the extra links).
* **Liveness of the running attempt**: what each Airflow version gives the attempt fence
  (:func:`liveness_for`): ``task_state_store`` on 3.3, the task's XCom on 3.0 to 3.2, the task
  instance's row on 2.11.

The fence (:mod:`airflow_lakefence.airflow_adapter.attempt_fence`), the fenced operators, the cleaner, the sensors and
the triggers go through this module. Airflow is imported inside the calls only, so importing this
module costs nothing in a triggerer or a test.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol

from airflow_lakefence.core.names.keys import PublicationKey
from airflow_lakefence.exceptions import StaleAttemptError

__all__ = [
    "EVIDENCE_KEY",
    "OUTPUT_REF_KEY",
    "SUPERSEDES_KEY",
    "AirflowView",
    "Liveness",
    "TaskInstanceRowLiveness",
    "TaskSdkView",
    "TaskStateStoreLiveness",
    "XComLiveness",
    "liveness_for",
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
            try:
                from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
            except ImportError:  # Airflow 2: no Task SDK; task code and triggers read the database
                return database_task_states(dag_id, task_ids, run_ids, map_index)
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
        from airflow.providers.common.compat.sdk import XCom

        return XCom.get_one(
            key=name, dag_id=key.dag_id, task_id=key.task_id, run_id=key.run_id, map_index=key.map_index
        )


def database_task_states(
    dag_id: str, task_ids: list[str], run_ids: list[str] | None = None, map_index: int | None = None
) -> dict[str, dict[str, Any]]:
    """``get_task_states``' answer read from the metadata database (Airflow 2, where task code, the
    triggerer and the cleaner have database access): ``{run_id: {task_id or task_id_mapindex: state}}``.

    :param dag_id: the DAG id.
    :param task_ids: the task ids.
    :param run_ids: the run ids; ``None`` for every run.
    :param map_index: only this map index; ``None`` for every one.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    answer: dict[str, dict[str, Any]] = {}
    with create_session() as session:
        query = session.query(TaskInstance).filter(TaskInstance.dag_id == dag_id, TaskInstance.task_id.in_(task_ids))
        if run_ids is not None:
            query = query.filter(TaskInstance.run_id.in_(run_ids))
        if map_index is not None:
            query = query.filter(TaskInstance.map_index == map_index)
        for ti in query:
            name = ti.task_id if ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
            answer.setdefault(ti.run_id, {})[name] = ti.state
    return answer


def xcom_value(ti_key: Any, name: str) -> Any:
    """One XCom of the task instance ``ti_key`` names (what the UI's extra links read; one call).

    :param ti_key: the task instance's key, as Airflow hands it to an operator link.
    :param name: the XCom key.
    """
    from airflow.providers.common.compat.sdk import XCom

    return XCom.get_value(ti_key=ti_key, key=name)


def rendered_field(ti_key: Any, name: str) -> Any:
    """The value the try of ``ti_key`` rendered for its templated field ``name``, or None.

    Airflow 2's webserver asks an operator link with the task as the DAG file declares it (templates
    not rendered); the rendered values are in the try's rendered-fields record. Airflow 3 asks the
    links with the rendered task when the try ends, so nothing needs this there.

    :param ti_key: the task instance's key, as Airflow hands it to an operator link.
    :param name: the field.
    """
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = TaskInstance.get_task_instance(
            ti_key.dag_id, ti_key.run_id, ti_key.task_id, map_index=ti_key.map_index, session=session
        )
        fields = None if ti is None else RenderedTaskInstanceFields.get_templated_fields(ti, session=session)
    return (fields or {}).get(name)


def task_state(ti: Any, key: PublicationKey) -> str | None:
    """The current state of the task instance of ``key``, asked through ``ti`` (one call).

    :param ti: what answers ``get_task_states`` (a running task's ``RuntimeTaskInstance``, or the
        class itself outside a task).
    :param key: the publication key.
    :return: see :meth:`TaskSdkView.task_state`.
    :raises Exception: whatever the Execution API call raises (callers fail closed).
    """
    return TaskSdkView(ti).task_state(key)


# -- liveness of the running attempt ----------------------------------------------------------

#: The key of the attempt fence's liveness token (task_state_store on 3.3, the task's XCom on 3.0 to 3.2).
TOKEN_KEY = "lakefence.attempt_token"
#: The same token as an XCom key (what Airflow 3.0 to 3.2 give a running task that a new try clears).
TOKEN_XCOM_KEY = "lakefence_attempt_token"
RUNNING = "running"


class Liveness(Protocol):
    """How one Airflow version tells a running attempt that it is still the current try."""

    def arm(self, token: str) -> None:
        """Remember this attempt (raises when it cannot: the fence then fails closed)."""

    def stale_reason(self, token: str) -> str | None:
        """Why this attempt is no longer current, or ``None`` (raises when it cannot tell)."""


class TaskStateStoreLiveness:
    """Airflow 3.3: a token in ``task_state_store``, addressed by the task-instance id, which every
    retry and clear archives (the server then answers 404, read back as the default); plus the state.

    :param store: ``context["task_state_store"]``.
    :param ti: the running ``RuntimeTaskInstance``.
    :param key: the publication key.
    """

    def __init__(self, store: Any, ti: Any, key: PublicationKey) -> None:
        self.store, self.ti, self.key = store, ti, key

    def arm(self, token: str) -> None:
        """Write the token (one Execution-API call).

        :param token: this attempt's token.
        """
        self.store.set(TOKEN_KEY, token)

    def stale_reason(self, token: str) -> str | None:
        """Read the token back, then the state (two Execution-API calls).

        :param token: this attempt's token.
        """
        if self.store.get(TOKEN_KEY) != token:
            return f"task instance {self.ti.id} is no longer live (cleared or retried)"
        return _not_running(task_state(self.ti, self.key))


class XComLiveness:
    """Airflow 3.0 to 3.2 (no ``task_state_store``): a token in the task's own XCom. A new try
    clears the task's XComs when it starts running and a clear moves the state away from
    ``running``, so either invalidates the token or the state; plus the state.

    :param ti: the running ``RuntimeTaskInstance``.
    :param key: the publication key.
    """

    def __init__(self, ti: Any, key: PublicationKey) -> None:
        self.ti, self.key = ti, key

    def arm(self, token: str) -> None:
        """Push the token (one Execution-API call).

        :param token: this attempt's token.
        """
        self.ti.xcom_push(key=TOKEN_XCOM_KEY, value=token)

    def stale_reason(self, token: str) -> str | None:
        """Read the token back, then the state (two Execution-API calls).

        :param token: this attempt's token.
        """
        if TaskSdkView._xcom(TOKEN_XCOM_KEY, self.key) != token:
            return f"task instance {self.ti.id} is no longer live (a newer try started, or the task was cleared)"
        return _not_running(task_state(self.ti, self.key))


class TaskInstanceRowLiveness:
    """Airflow 2.11: the task instance's own row (task code has database access there). The attempt
    is current while the row still holds what it held at arming: state, try number, job, host and
    pid. A retry or a clear changes the try number and the state (and the job and pid of the process
    that runs the new try), mark success / failed the state, the scheduler's zombie detection the state.

    A try normally arms on a ``running`` row. ``dag.test()`` runs tasks in test mode, where Airflow
    saves nothing of the running try (the row stays ``scheduled`` or ``queued``): any change of
    the row still makes the try stale.

    :param ti: the running ``TaskInstance``.
    """

    FIELDS = ("state", "try_number", "job_id", "hostname", "pid")
    ARMABLE = frozenset({RUNNING, "scheduled", "queued"})

    def __init__(self, ti: Any) -> None:
        self.ti = ti
        self._armed: tuple[Any, ...] | None = None

    def _row(self) -> tuple[Any, ...] | None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            row = (
                session.query(TaskInstance)
                .filter_by(
                    dag_id=self.ti.dag_id, task_id=self.ti.task_id, run_id=self.ti.run_id, map_index=self.ti.map_index
                )
                .one_or_none()
            )
            if row is None:
                return None
            return (normalise_state(row.state), *(getattr(row, name) for name in self.FIELDS[1:]))

    def arm(self, token: str) -> None:
        """Read the row this attempt runs as (one database query).

        :param token: unused (the row identifies the attempt).
        :raises StaleAttemptError: when the row is gone or in a state no running try has.
        """
        row = self._row()
        if row is None or row[0] not in self.ARMABLE:
            raise StaleAttemptError(f"task instance state is {None if row is None else row[0]!r}, not running")
        self._armed = row

    def stale_reason(self, token: str) -> str | None:
        """Read the row again (one database query).

        :param token: unused.
        """
        row = self._row()
        if row == self._armed:
            return None
        if row is None:
            return "the task instance row is gone"
        if self._armed is not None and row[1:] == self._armed[1:]:
            return _not_running(row[0])  # marked or cleared while this try runs
        armed = self._armed or (None,) * len(self.FIELDS)
        changed = ", ".join(
            f"{name} {old!r} -> {new!r}" for name, old, new in zip(self.FIELDS, armed, row, strict=True) if old != new
        )
        return f"the task instance changed since this try started ({changed}): cleared, marked or retried"


def _not_running(state: str | None) -> str | None:
    return None if state == RUNNING else f"task instance state is {state!r}, not running"


def liveness_for(context: Any, key: PublicationKey) -> Liveness:
    """The liveness check the running Airflow offers this task.

    :param context: the task's execution context.
    :param key: the publication key.
    """
    ti = context["ti"]
    store = context.get("task_state_store")
    if store is not None:
        return TaskStateStoreLiveness(store, ti, key)
    if hasattr(ti, "get_task_states"):
        return XComLiveness(ti, key)
    return TaskInstanceRowLiveness(ti)
