"""Helpers of the sensor and cleaner integration tests."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_lakefence.sensors import AbandonedPublicationSensor


def judge_now(repository: str, condition: str = "detect", **kwargs: Any) -> tuple[bool, dict[str, Any]]:
    """Run one probe of an AbandonedPublicationSensor in the current task (e.g. a failpoint callback)."""
    sensor = AbandonedPublicationSensor(
        task_id=f"probe_{condition}", repository=repository, branch="main", condition=condition, **kwargs
    )
    done, value = sensor.probe()
    return done, value


@contextmanager
def after(
    delay: float, action: Callable[[], Any], *, once: Callable[[], bool] | None = None
) -> Iterator[list[BaseException]]:
    """Run ``action`` in a thread (while the caller blocks in dag.test()): ``delay`` seconds from now,
    or, with ``once``, as soon as ``once()`` is true (polled every ``delay`` seconds, 60 s at most).

    Yields the list that collects the action's exception, if any; joins the thread on exit.
    """
    errors: list[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        for _ in range(1 if once is None else int(60 / delay)):
            if stop.wait(delay):
                return
            try:
                if once is None or once():
                    action()
                    return
            except BaseException as exc:  # reported by the test
                errors.append(exc)
                return
        errors.append(TimeoutError("the condition to act on never came"))

    thread = threading.Thread(target=run, name="lakefence-test-later", daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join(timeout=30)


def _reschedules(session: Any, ti: Any) -> int:
    """How many reschedules ``ti`` recorded: Airflow 3 keys them by the task instance's id, Airflow 2
    (no such id) by its dag, task, run and map index."""
    from airflow.models.taskreschedule import TaskReschedule

    if hasattr(TaskReschedule, "ti_id"):
        return int(session.query(TaskReschedule).filter_by(ti_id=ti.id).count())
    return int(
        session.query(TaskReschedule)
        .filter_by(dag_id=ti.dag_id, task_id=ti.task_id, run_id=ti.run_id, map_index=ti.map_index)
        .count()
    )


def waited_how(dag_run: Any, task_id: str = "sense") -> dict[str, Any]:
    """How a sensor task instance waited: ``deferred`` (it went through a trigger) and the number of
    ``reschedules`` recorded."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id).one()
        # Airflow 2's dag.test() runs the trigger inline and keeps no trace of it in the database.
        deferred = ti.trigger_id is not None or (ti.dag_id, ti.run_id, ti.task_id) in _DEFERRED_TIS
        return {"deferred": deferred, "reschedules": _reschedules(session, ti)}


#: (Airflow 2) How many triggers ``dag.test()`` has run inline in this process, and for which task
#: instances (dag id, run id, task id): it records nothing of a deferral in the database, so the tests
#: note the triggers themselves.
_INLINE_TRIGGERS = [0]
_DEFERRED_TIS: set[tuple[str, str, str]] = set()


def _count_inline_triggers() -> bool:
    """Count the triggers Airflow 2's ``dag.test()`` runs inline; False on Airflow 3 (nothing to do)."""
    try:
        from airflow.models import dag as dag_module
    except ImportError:
        return False
    original = getattr(dag_module, "_run_inline_trigger", None)
    if original is None:
        return False
    if not getattr(original, "counted", False):

        def run_inline(trigger: Any) -> Any:
            _INLINE_TRIGGERS[0] += 1
            caller = inspect.currentframe()
            ti = None if caller is None or caller.f_back is None else caller.f_back.f_locals.get("ti")
            if ti is not None:  # dag.test()'s _run_task(ti=...) is the caller
                _DEFERRED_TIS.add((ti.dag_id, ti.run_id, ti.task_id))
            return original(trigger)

        run_inline.counted = True  # type: ignore[attr-defined]
        dag_module._run_inline_trigger = run_inline
    return True


def sensor_waits(dag_id: str, how: str, task_id: str = "sense") -> Callable[[], bool]:
    """A condition for :func:`after`: the latest run's sensor has ``deferred`` or ``rescheduled``."""
    if how == "deferred" and _count_inline_triggers():
        started = _INLINE_TRIGGERS[0]
        return lambda: _INLINE_TRIGGERS[0] > started

    def check() -> bool:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session

        with create_session() as session:
            ti = (
                session.query(TaskInstance)
                .filter_by(dag_id=dag_id, task_id=task_id)
                .order_by(TaskInstance.start_date.desc())
                .first()
            )
            if ti is None or ti.state in ("success", "failed"):
                return False
            if how == "deferred":
                return ti.trigger_id is not None
            return _reschedules(session, ti) > 0

    return check
