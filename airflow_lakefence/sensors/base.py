"""The shared part of the lakeFS sensors: poke, reschedule and deferrable modes over one probe."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any, ClassVar

from airflow.providers.common.compat.sdk import AirflowSensorTimeout, BaseSensorOperator, PokeReturnValue

from airflow_lakefence import exceptions
from airflow_lakefence.exceptions import LakeFenceError
from airflow_lakefence.hooks.lakefs import LakeFSHook, LakeFSHookMixin
from airflow_lakefence.triggers.lakefs import LakeFSPollingTrigger


def _error_class(name: object) -> type[LakeFenceError]:
    cls = getattr(exceptions, str(name), None)
    if isinstance(cls, type) and issubclass(cls, LakeFenceError):
        return cls
    return LakeFenceError


class LakeFSBaseSensor(LakeFSHookMixin, BaseSensorOperator):
    """A sensor whose every poke is one bounded probe, in poke, reschedule or deferrable mode.

    With ``deferrable=True`` the sensor probes once in the worker and, unless already satisfied,
    defers to its trigger, which repeats the same probe in the triggerer every ``poke_interval``
    seconds until ``timeout``.

    :param lakefs_conn_id: the Airflow connection of type ``lakefs``.
    :param deferrable: wait in the triggerer instead of holding a worker slot.
    :param kwargs: everything :class:`BaseSensorOperator` takes (``poke_interval``, ``timeout``,
        ``mode``, ``soft_fail``...).
    """

    def __init__(self, *, lakefs_conn_id: str = LakeFSHook.default_conn_name, deferrable: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.lakefs_conn_id = lakefs_conn_id
        self.deferrable = deferrable


    #: The trigger that repeats :meth:`probe` in the triggerer, built from :meth:`probe_arguments`.
    trigger_class: ClassVar[type[LakeFSPollingTrigger]]

    def probe(self) -> tuple[bool, Any]:
        """One probe: ``(done, value)``; subclasses implement it."""
        raise NotImplementedError

    def probe_arguments(self) -> dict[str, Any]:
        """The probe's arguments besides the client, checked: the same in the worker and in the triggerer."""
        raise NotImplementedError

    def trigger(self, deadline: float) -> LakeFSPollingTrigger:
        """The trigger that repeats :meth:`probe` in the triggerer.

        :param deadline: epoch seconds after which it gives up.
        """
        return self.trigger_class(
            **self.probe_arguments(),
            lakefs_conn_id=self.lakefs_conn_id,
            poke_interval=float(self.poke_interval),
            deadline=deadline,
        )

    def poke(self, context: Any) -> PokeReturnValue:
        """Probe once.

        :param context: the Airflow context.
        :raises LakeFenceError: bad input or a lakeFS failure (after the adapter's read retries).
        """
        done, value = self.probe()
        return PokeReturnValue(is_done=done, xcom_value=value)

    def execute(self, context: Any) -> Any:
        """Wait for the condition; return the probe's value (XCom ``return_value``).

        :param context: the Airflow context.
        """
        if not self.deferrable:
            return super().execute(context)
        # One probe in the worker: no deferral round-trip when the answer is already there.
        done, value = self.probe()
        if done:
            return value
        self.defer(
            trigger=self.trigger(deadline=time.time() + self.timeout),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resume after the trigger fired.

        :param context: the Airflow context.
        :param event: the trigger's event payload.
        :raises AirflowSensorTimeout: when the trigger's deadline passed.
        :raises LakeFenceError: the (re-created) error the trigger's probe raised.
        """
        if not event:
            raise LakeFenceError("the trigger fired without an event")
        status = event.get("status")
        if status == "success":
            self.log.info("Condition met in the triggerer: %s", event.get("value"))
            return event.get("value")
        if status == "timeout":
            raise AirflowSensorTimeout(f"{self.task_id}: {event.get('message')}")
        raise _error_class(event.get("error"))(f"{event.get('error')}: {event.get('message')}")
